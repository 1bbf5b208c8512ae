#!/bin/sh
# bench_gpu.sh BIN OUTDIR -- the GPU progression on one GPU: stages 01, 03, 04, 05 (CUDA), 06
# (bf16, tensor cores) and FLA's Triton chunk_gated_delta_rule on the same inputs, side by
# side in one run.
#
#   sh plots/bench_gpu.sh bin plots/data        (on a machine with a CUDA device)
#
# SHAPES (default "seed long sweep") picks the parts to run, FLA_DTYPES (default bf16,fp32)
# the input types FLA is timed with.
# Writes OUTDIR/gpu_shapes.dat (seed: B=1 T=16384 H=8 K=V=64; long: B=1 T=65536 H=8 K=V=128)
# and OUTDIR/gpu_vs_T.dat (a T sweep at B=1 H=8 K=V=64), each headed by the machine. Every
# stage is checked against stage 01_cuda's output on the same inputs (err_vs_01; stage 06
# rounds q, k, v to bf16 first, which its difference includes); FLA against 05_cuda's (its bf16
# inputs explain its larger difference). FLA is skipped with a note when it does not import.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
bench_begin
header="# machine: $gpu; $(nproc) CPU cores; made by: sh plots/bench_gpu.sh $bin $out on $(date -u +%Y-%m-%d)"
have_fla=0
python3 -c 'import fla.ops.gated_delta_rule' 2>/dev/null && have_fla=1



# measure NAME B T H K V REPS: one problem, every GPU stage, then FLA; appends rows to $rows
measure() {
    name=$1 B=$2 T=$3 H=$4 K=$5 V=$6 reps=$7
    dir=$work/$name
    "$bin"/make_problem --B "$B" --T "$T" --H "$H" --K "$K" --V "$V" --seed 7 "$dir"
    base=""
    for stage in 01_naive_loop_cuda 03_parallel_scan_cuda 04_two_phase_scan_cuda 05_wy_chunked_cuda 06_warp_specialized; do
        check=""
        [ -n "$base" ] && check="--check-against $work/${name}_01"
        short=${stage#??_}
        line=$("$bin/$stage" --in "$dir" --reps "$reps" --out "$work/${name}_${short%_cuda}" $check 2>&1 | grep '^result' || true)
        [ -z "$base" ] && base=$(field median_ms "$line") && mv "$work/${name}_naive_loop" "$work/${name}_01"
        ms=$(field median_ms "$line")
        option=$(field segments "$line")$(field chunk "$line")
        err=$(field err_ref "$line")
        printf '%s %s %s %s %s %s %s %s %s %s %s\n' "$name" "$stage" "$B" "$T" "$H" "$K" "$V" \
            "${option:--}" "${ms:-nan}" "$(ratio "$base" "${ms:-0}")" \
            "${err:--}" >> "$rows"
    done
    if [ "$have_fla" = 1 ]; then
        python3 plots/fla_bench.py --reps 30 --dtypes "${FLA_DTYPES:-bf16,fp32}" "$dir:$work/${name}_wy_chunked" | while read -r line; do
            mode=$(field mode "$line") dtype=$(field dtype "$line") ms=$(field median_ms "$line")
            err=$(field err_o_vs_ours "$line")
            printf '%s fla_%s_%s %s %s %s %s %s - %s %s %s\n' "$name" "$mode" "$dtype" "$B" "$T" "$H" "$K" "$V" \
                "${ms:-nan}" "$(ratio "$base" "${ms:-0}")" \
                "${err:--}" >> "$rows"
        done
    fi
}

columns="# name stage B T H K V option median_ms speedup_vs_01_cuda err_vs_01_cuda(stages)|err_o_vs_05_cuda(fla)"
shapes=${SHAPES:-seed long sweep}
rows=$out/gpu_shapes.dat
{ echo "$header"; echo "$columns"; } > "$rows"
[ "$have_fla" = 1 ] || echo "# FLA not importable here: its rows are missing" >> "$rows"
case " $shapes " in *" seed "*) measure seed 1 16384 8 64 64 20 ;; esac
case " $shapes " in *" long "*) measure long 1 65536 8 128 128 5 ;; esac
case " $shapes " in *" sweep "*)
    rows=$out/gpu_vs_T.dat
    { echo "$header"; echo "$columns"; } > "$rows"
    for T in 1024 4096 16384 65536; do
        measure "T$T" 1 "$T" 8 64 64 10
    done ;;
esac
cat "$out/gpu_shapes.dat"
