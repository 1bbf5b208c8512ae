#!/bin/sh
# bench_stage06.sh BIN OUTDIR -- stage 06 against FLA's Triton chunk_gated_delta_rule (eager and
# replayed from a CUDA graph) on the same bf16 inputs, in one run, at stage 06's five benchmark
# shapes; FLA's o is compared with ours (err_fla_vs_06: proof of the same inputs).
#
#   sh plots/bench_stage06.sh bin plots/data        (on a machine with a CUDA device and FLA)
#
# Writes OUTDIR/stage06_vs_fla.dat. Times: medians (06: of 20 after a warm-up, CUDA events,
# L2 flushed; FLA: of 30, plots/fla_bench.py).
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
bench_begin
rows=$out/stage06_vs_fla.dat
gpu_data_header "bench_stage06.sh $bin $out" "B T H K V ms_06 ms_fla_eager ms_fla_graph fla_graph/06 err_fla_vs_06" > "$rows"
for shape in "8 4096 16 128 128" "1 8192 96 128 128" "4 4096 64 128 128" "2 16384 16 128 128" "1 16384 8 64 64"; do
    # shellcheck disable=SC2086 # the shape is five words
    set -- $shape
    "$bin"/make_problem --B "$1" --T "$2" --H "$3" --K "$4" --V "$5" --seed 7 "$work/p" > /dev/null
    t6=$(field median_ms "$("$bin"/06_warp_specialized --in "$work/p" --reps 20 --out "$work/o")")
    fla_times "$work/p" "$work/o" 30
    echo "$shape ${t6:-nan} ${fla_eager:-nan} ${fla_graph:-nan} $(ratio "${fla_graph:-0}" "${t6:-0}") ${fla_err:--}" >> "$rows"
    rm -rf "$work/p" "$work/o"
done
cat "$rows"
