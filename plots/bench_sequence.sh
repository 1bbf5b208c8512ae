#!/bin/sh
# bench_sequence.sh BIN OUTDIR -- stage 07 (sequence parallel) against stage 06 and FLA's Triton
# chunk_gated_delta_rule (eager and CUDA-graph-captured), on the same bf16 inputs, in one run.
#
#   sh plots/bench_sequence.sh bin plots/data        (on a machine with a CUDA device)
#
# Writes OUTDIR/stage07_shapes.dat: stage 07's benchmark shapes, with 07's automatic P and the
# time of each of its kernels (ncu's gpu__time_duration, one pass: ncu runs kernels one at a
# time at its own clocks, so the parts add up to a little more than the timed pass); and
# OUTDIR/stage07_vs_T.dat: time against T at B = 1, K = V = 64, H = 1 and 8.
# Every row is checked: 06 and 07 against each other (err_07_vs_06), FLA against 07
# (err_fla_vs_07). Set SHAPES to "shapes" or "sweep" for one part, ALL06=1 to add stage
# 06's other three benchmark shapes (B H large: P = 1), SWEEP_HEADS to sweep other H than 1 8.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
bench_begin
header="# machine: $gpu, $(nproc) CPU cores
# made by: sh plots/bench_sequence.sh $bin $out on $(date -u +%Y-%m-%d)"
have_fla=0
python3 -c 'import fla.ops.gated_delta_rule' 2>/dev/null && have_fla=1

# kernel_times BIN ARGS...: "prepare fold scan chain outputs" in microseconds (ncu, one pass)
kernel_times() {
    ncu --csv --metrics gpu__time_duration.sum "$@" --reps 1 2>/dev/null | python3 plots/kernel_times.py || echo "- - - - -"
}

# measure NAME B T H K V REPS PHASES: 06, 07 (automatic P), FLA; one row to $rows
measure() {
    name=$1 B=$2 T=$3 H=$4 K=$5 V=$6 reps=$7 phases=$8
    dir=$work/$name
    "$bin"/make_problem --B "$B" --T "$T" --H "$H" --K "$K" --V "$V" --seed 7 "$dir" > /dev/null
    l6=$("$bin"/06_warp_specialized --in "$dir" --reps "$reps" --out "$work/${name}_06" 2>&1 | grep '^result' || true)
    l7=$("$bin"/07_sequence_parallel --in "$dir" --reps "$reps" --out "$work/${name}_07" --check-against "$work/${name}_06" 2>&1 | grep '^result' || true)
    t6=$(field median_ms "$l6") t7=$(field median_ms "$l7") P=$(field segments "$l7") err=$(field err_ref "$l7")
    eager=nan graph=nan fla_err=-
    if [ "$have_fla" = 1 ]; then
        fla_times "$dir" "$work/${name}_07" 30
        eager=$fla_eager graph=$fla_graph
    fi
    parts="- - - - -"
    [ "$phases" = 1 ] && parts=$(kernel_times "$bin"/07_sequence_parallel --in "$dir")
    printf '%s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s\n' "$name" "$B" "$T" "$H" "$K" "$V" "${P:--}" "${t6:-nan}" \
        "${t7:-nan}" "${eager:-nan}" "${graph:-nan}" "$(ratio "${graph:-0}" "${t7:-0}")" "$(ratio "${t6:-0}" "${t7:-0}")" \
        "$parts" "${err:--}" "${fla_err:--}" >> "$rows"
    rm -rf "$dir" "$work/${name}_06" "$work/${name}_07"
}

columns="name B T H K V P ms_06 ms_07 ms_fla_eager ms_fla_graph fla_graph/07 06/07 us_prepare us_fold us_scan us_chain us_outputs err_07_vs_06 err_fla_vs_07"
shapes=${SHAPES:-shapes sweep}
case " $shapes " in *" shapes "*)
    rows=$out/stage07_shapes.dat
    { echo "$header"; echo "$columns"; } > "$rows"
    [ "$have_fla" = 1 ] || echo "# FLA not importable here: its columns are nan" >> "$rows"
    measure seed 1 16384 8 64 64 20 1
    measure long64 1 131072 8 64 64 10 1
    measure long128 1 65536 8 128 128 10 1
    measure one_head 1 16384 1 64 64 20 1
    measure heads16 1 65536 16 128 128 10 1
    measure full 8 4096 16 128 128 10 1
    if [ "${ALL06:-0}" = 1 ]; then # stage 06's other benchmark shapes, where B H fills the GPU and P = 1
        measure b1h96 1 8192 96 128 128 10 0
        measure b4h64 4 4096 64 128 128 10 0
        measure b2h16 2 16384 16 128 128 10 0
    fi
    cat "$rows" ;;
esac
case " $shapes " in *" sweep "*)
    rows=$out/stage07_vs_T.dat
    { echo "$header"; echo "$columns"; } > "$rows"
    for H in ${SWEEP_HEADS:-1 8}; do
        for T in 1024 4096 16384 65536; do
            measure "H${H}_T$T" 1 "$T" "$H" 64 64 20 0
        done
    done
    cat "$rows" ;;
esac
