#!/bin/sh
# bench_python.sh BIN OUTDIR -- our GPU stages called from PyTorch (the gdn_steps package) beside
# the same stage's binary and FLA's Triton chunk_gated_delta_rule, side by side in one run on the
# same bf16 inputs (plots/fla_bench.py times the package and FLA with one call, graph and flush
# code). The package's time over the binary's is what the Python call costs: its checks, the
# dtype conversions of g and beta, the workspace from PyTorch's allocator.
#
#   pip install --target build/python .  (or make test-python), then
#   PYTHONPATH=build/python sh plots/bench_python.sh bin plots/data   (a CUDA device, PyTorch, FLA)
#
# Writes OUTDIR/python_bench.dat. Times: medians (the binary: of 20 after a warm-up, CUDA events,
# L2 flushed; the package and FLA: of 30 the same way, eager and replayed from a CUDA graph).
# err_*: the package's and FLA's o against the binary's (relative L2), proof of the same inputs.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
bench_begin
rows=$out/python_bench.dat
gpu_data_header "bench_python.sh $bin $out" "stage B T H K V ms_binary ms_package_graph ms_package_eager ms_fla_graph ms_fla_eager package_graph/binary fla_graph/package_graph err_package err_fla" > "$rows"
line_of() { printf '%s\n' "$1" | grep "peer=$2 mode=$3" | head -1; }
for shape in "8 4096 16 128 128" "4 4096 64 128 128" "1 8192 96 128 128" "2 16384 16 128 128" "1 65536 8 128 128" \
    "1 16384 8 64 64"; do
    # shellcheck disable=SC2086 # the shape is five words
    set -- $shape
    "$bin"/make_problem --B "$1" --T "$2" --H "$3" --K "$4" --V "$5" --seed 7 "$work/p" > /dev/null
    stage=$(python3 -c "import gdn_steps; print(gdn_steps.gpu_stage_for($1, $2, $3, $4, $5))")
    binary=$(field median_ms "$("$bin/$stage" --in "$work/p" --reps 20 --out "$work/o")")
    runs=$(python3 plots/fla_bench.py --reps 30 --dtypes bf16 --peers gdn_steps,fla "$work/p:$work/o" 2>&1 || true)
    package_graph=$(field median_ms "$(line_of "$runs" gdn_steps graph)")
    package_eager=$(field median_ms "$(line_of "$runs" gdn_steps eager)")
    fla_graph=$(field median_ms "$(line_of "$runs" fla_chunk graph)")
    fla_eager=$(field median_ms "$(line_of "$runs" fla_chunk eager)")
    err_package=$(field err_o_vs_ours "$(line_of "$runs" gdn_steps graph)")
    err_fla=$(field err_o_vs_ours "$(line_of "$runs" fla_chunk graph)")
    echo "${stage%%_*} $shape ${binary:-nan} ${package_graph:-nan} ${package_eager:-nan} ${fla_graph:-nan} ${fla_eager:-nan}" \
        "$(ratio "${package_graph:-0}" "${binary:-0}") $(ratio "${fla_graph:-0}" "${package_graph:-0}") ${err_package:--} ${err_fla:--}" >> "$rows"
    printf '%s\n' "$runs" | grep -v '^result' | head -3 >&2 || true
    rm -rf "$work/p" "$work/o"
done
cat "$rows"
