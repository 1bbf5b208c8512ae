#!/bin/sh
# bench_layouts.sh BIN OUTDIR -- our best stage against every public GDN forward in the layouts
# real models use, side by side in one run on the same bf16 inputs: FLA's Triton
# chunk_gated_delta_rule, FlashInfer's GDN prefill (CuTe DSL, exact; its context parallelism as
# users get it) and FlashQLA's TileLang kernels (its automatic context parallelism on, which
# starts a cut piece after warm-up chunks), each replayed from a CUDA graph
# (plots/fla_bench.py), beside our stage's binary and the same stage through the Python
# package (CUDA graph too). Shapes: the K = V = 128 ones of docs/06 and docs/07, grouped value
# heads as in FlashQLA's published H200 table (4096 x 8 with 4 key and 16 value heads, 1 x 32768
# with 2 and 8), a packed batch (28672 + 4096 tokens: ours as rows padded to the longest, 06 or 07 as for those rows; the package
# given cu_seqlens_cpu as well, so that its graph never waits for the GPU), and K = V = 64, where only FLA and we run.
#
#   sh plots/bench_layouts.sh bin plots/data   (a CUDA device, PyTorch, FLA, FlashInfer, flash-qla,
#                                               the package importable: pip install --target build/python .)
#
# Writes OUTDIR/layouts.dat, a row a shape. Times: medians (the binary: of 20 after a warm-up,
# CUDA events, L2 flushed; the package and the peers: of 30, the same way). nan: that code does
# not run the shape (its result line in the log says why). err_*: o against our binary's
# (relative L2), proof of the same inputs.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
bench_begin
rows=$out/layouts.dat
gpu_data_header "bench_layouts.sh $bin $out" "shape B T H HV K V stage ms_binary ms_package ms_fla ms_flashinfer ms_flashqla fla/ours flashinfer/ours flashqla/ours err_package err_fla err_flashinfer err_flashqla" > "$rows"
graph_of() { field median_ms "$(printf '%s\n' "$1" | grep "peer=$2 mode=graph" | head -1)"; }
err_of() { field err_o_vs_ours "$(printf '%s\n' "$1" | grep "peer=$2 mode=graph" | head -1)"; }
# name B T H HV K V [lengths]
for shape in "8x4096 8 4096 16 16 128 128" "4x4096 4 4096 64 64 128 128" "1x8192 1 8192 96 96 128 128" \
    "2x16384 2 16384 16 16 128 128" "1x65536 1 65536 8 8 128 128" "4096x8,gva 8 4096 4 16 128 128" \
    "1x32768,gva 1 32768 2 8 128 128" "28672+4096 1 32768 2 8 128 128 28672,4096" "1x16384,k64 1 16384 8 8 64 64"; do
    # shellcheck disable=SC2086 # the shape is seven or eight words
    set -- $shape
    if [ $# -eq 8 ]; then
        "$bin"/make_problem --lengths "$8" --H "$4" --HV "$5" --K "$6" --V "$7" --seed 7 "$work/p" > /dev/null
    else
        "$bin"/make_problem --B "$2" --T "$3" --H "$4" --HV "$5" --K "$6" --V "$7" --seed 7 "$work/p" > /dev/null
    fi
    rows_B=$2 rows_T=$3
    if [ $# -eq 8 ]; then # a packed batch runs as rows padded to its longest sequence: the stage for those rows
        rows_B=$(printf '%s\n' "$8" | tr ',' '\n' | wc -l) rows_T=$(printf '%s\n' "$8" | tr ',' '\n' | sort -n | tail -1)
    fi
    stage=$(python3 -c "import gdn_steps; print(gdn_steps.gpu_stage_for($rows_B, $rows_T, $4, $6, $7, HV=$5))")
    # ours: the binary (a shape it refuses: then FLA's o is the reference for the errors)
    binary=$("$bin/$stage" --in "$work/p" --reps 20 --out "$work/o" 2>&1 | grep '^result' || true)
    ms_binary=$(field median_ms "$binary")
    [ -n "$ms_binary" ] || { printf '%s: %s\n' "$1" "$("$bin/$stage" --in "$work/p" --reps 1 2>&1 | tail -1)" >&2; rm -rf "$work/o"; }
    reference=$work/p
    [ -d "$work/o" ] && reference="$work/p:$work/o"
    runs=$(python3 plots/fla_bench.py --reps 30 --dtypes bf16 --peers gdn_steps,fla,flashinfer,flashqla "$reference" 2>&1 || true)
    printf '%s\n' "$runs" | grep 'error=' >&2 || true
    package=$(graph_of "$runs" gdn_steps) fla=$(graph_of "$runs" fla_chunk) fi=$(graph_of "$runs" flashinfer) qla=$(graph_of "$runs" flashqla)
    ours=${ms_binary:-0}
    e_package=$(err_of "$runs" gdn_steps) e_fla=$(err_of "$runs" fla_chunk) e_fi=$(err_of "$runs" flashinfer) e_qla=$(err_of "$runs" flashqla)
    echo "$1 $2 $3 $4 $5 $6 $7 ${stage%%_*} ${ms_binary:-nan} ${package:-nan} ${fla:-nan} ${fi:-nan} ${qla:-nan}" \
        "$(ratio "${fla:-0}" "$ours") $(ratio "${fi:-0}" "$ours") $(ratio "${qla:-0}" "$ours")" \
        "${e_package:--} ${e_fla:--} ${e_fi:--} ${e_qla:--}" >> "$rows"
    rm -rf "$work/p" "$work/o"
done
cat "$rows"
