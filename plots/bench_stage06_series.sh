#!/bin/sh
# bench_stage06_series.sh BIN OUTDIR -- stage 06's series as a speed curve: 05_wy_chunked_cuda,
# then each sub-stage (06a_tensor_cores .. 06e_output_warps, then 06_warp_specialized), with FLA's Triton
# chunk_gated_delta_rule replayed from a CUDA graph beside them, on the same bf16 inputs, in one
# run, at two shapes: one of many heads at K = V = 128 and the seed shape at K = V = 64.
#
#   sh plots/bench_stage06_series.sh bin plots/data     (on a machine with a CUDA device and FLA)
#
# Writes OUTDIR/stage06_series.dat (K = V = 128) and OUTDIR/stage06_series_k64.dat, a row a stage. Times: medians of 20 after a
# warm-up, CUDA events, L2 flushed (FLA: of 30, plots/fla_bench.py); 05_cuda computes in fp32,
# the others take bf16 inputs.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
bench_begin
for shape in "8 4096 16 128 128" "1 16384 8 64 64"; do
    # shellcheck disable=SC2086 # the shape is five words
    set -- $shape
    rows=$out/stage06_series.dat
    [ "$4" = 128 ] || rows=$out/stage06_series_k$4.dat # an assignment from a failing $( ) would end a set -e script
    gpu_data_header "bench_stage06_series.sh $bin $out" "stage B T H K V median_ms fla_graph_ms fla_graph/stage" > "$rows"
    "$bin"/make_problem --B "$1" --T "$2" --H "$3" --K "$4" --V "$5" --seed 7 "$work/p" > /dev/null
    "$bin"/06_warp_specialized --in "$work/p" --reps 1 --out "$work/o" > /dev/null
    fla_times "$work/p" "$work/o" 30
    for stage in 05_wy_chunked_cuda 06a_tensor_cores 06b_producer_consumer 06c_bulk_copies 06d_warp_chain \
        06e_output_warps 06_warp_specialized; do
        [ -x "$bin/$stage" ] || continue
        t=$(field median_ms "$("$bin/$stage" --in "$work/p" --reps 20)")
        echo "$stage $shape ${t:-nan} ${fla_graph:-nan} $(ratio "${fla_graph:-0}" "${t:-0}")" >> "$rows"
    done
    rm -rf "$work/p" "$work/o"
    cat "$rows"
done
