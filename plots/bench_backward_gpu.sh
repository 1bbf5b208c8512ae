#!/bin/sh
# bench_backward_gpu.sh BIN OUTDIR -- our GPU backward (bin/10_backward_chunked_cuda, fp32, and
# bin/11_backward_tensor_cores, the same passes on tensor cores with bf16 operands, and
# bin/12_backward_fused, 11's backward chain and pass 4 as one walk a head, and
# bin/13_backward_states, that walk on the states of 06's forward kernels) beside FLA's
# and FlashQLA's backward (bf16 inputs, plots/fla_backward_bench.py), and ours through the Python
# package (the forward stage it picks, then the backward stage it picks, 11 or 13, by autograd:
# ms_package_*; then stage 12: ms_package12_*), side by side in one run on the same problems
# and cotangents: the backward alone, and the forward plus the backward (ours: 06's or 07's
# forward, the stage picked for the shape, plus stage 10). Shapes: four at K = V =
# 128, (8, 4096, 16), (4, 4096, 64), (1, 8192, 96), (2, 16384, 16), and (1, 16384, 8, 64, 64).
#
#   PYTHONPATH=build/python sh plots/bench_backward_gpu.sh bin plots/data   (a CUDA device, PyTorch, FLA (+ tilelang on
#                                                   Hopper with Triton < 3.7.1), flash-qla)
#
# Writes OUTDIR/backward_gpu.dat, a row a shape. Times: medians (ours: of 10 after a warm-up,
# CUDA events, L2 flushed; the peers: of 30, eager, the same flush; *_graph: the same calls replayed
# from CUDA graphs, the forward in one and its backward in a second, graph_vs_eager the largest
# relative difference between a peer's gradients so replayed and its eager ones); ms_tc_backward is stage 11's
# backward, fla/tc FLA's backward over it, ms_11a_backward the step before it (11a_backward_mma_sync),
# ms_fused_backward stage 12's (12_backward_fused), fla_graph/fused and flashqla_graph/fused the
# peers' graph times over it; ms_package12_backward_graph the package's backward through stage 12
# (backward_stage="12": dO in bf16, o left to the forward, as the peers' backward), replayed from
# its graph, and fla_graph/package12, flashqla_graph/package12 the peers' graph times over it;
# ms_states_backward stage 13's (13_backward_states), fla_graph/states and flashqla_graph/states
# the peers' graph times over it. err_*: the peer's dq and dv against ours (stage 10, relative L2), proof of the same problem. nan: that code did not run the
# shape (its line in the log says why). The roofline: floor_ms is the least time the backward
# can take at the rates in plots/data/gpu_peak.dat (bin/gpu_peak on the card its header names,
# copies and the faster of mma.sync and wgmma bf16: rerun it on another card), the larger of its flops (stage 10's count, the same products for every
# method) over the tensor rate and its least bytes over the copy rate; the least bytes a token
# and head read q, k, v, do, g and beta and write dq, dk, dv, dg and dbeta once, in bf16 and fp32
# as FLA keeps them, 8 K + 6 V + 16 (the states, K V a head, are left out); roof_* is floor_ms
# over each time, the fraction of the roofline reached.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
# PEERS: the peers to time, comma-separated, of fla, flashqla, gdn_steps and gdn_steps_12 (all four
# unless given; one left out has nan in its columns), checked before anything is written
peers_asked=${PEERS:-fla,flashqla,gdn_steps,gdn_steps_12}
case ",$peers_asked," in
*[!a-z0-9_,]* | *,,*) echo "bench_backward_gpu.sh: PEERS='$peers_asked' is not a comma-separated list of fla, flashqla, gdn_steps, gdn_steps_12" >&2; exit 2 ;;
esac
for peer in $(printf '%s' "$peers_asked" | tr ',' ' '); do
    case $peer in fla | flashqla | gdn_steps | gdn_steps_12) ;; *) echo "bench_backward_gpu.sh: PEERS names '$peer', not one of fla, flashqla, gdn_steps, gdn_steps_12" >&2; exit 2 ;; esac
done
bench_begin
rows=$out/backward_gpu.dat
gpu_data_header "bench_backward_gpu.sh $bin $out${SHAPES:+ (SHAPES=$SHAPES)}${PEERS:+ (PEERS=$PEERS)}" "B T H K V ms_ours_backward ms_tc_backward ms_ours_forward ms_fla_backward ms_fla_fwd_bwd ms_flashqla_backward ms_flashqla_fwd_bwd fla/ours flashqla/ours fla/tc err_dq_fla err_dv_fla err_dq_flashqla err_dv_flashqla floor_ms roof_ours roof_tc roof_fla roof_flashqla ms_package_backward ms_package_fwd_bwd fla/package_fwd_bwd ms_11a_backward ms_fla_backward_graph ms_flashqla_backward_graph ms_package_backward_graph ms_fla_fwd_bwd_graph ms_flashqla_fwd_bwd_graph ms_package_fwd_bwd_graph fla_graph/tc graph_vs_eager ms_fused_backward fla_graph/fused flashqla_graph/fused ms_package12_backward_graph fla_graph/package12 flashqla_graph/package12 ms_states_backward fla_graph/states flashqla_graph/states" > "$rows"
peak_rates
# floor FLOPS B T H K V: the roofline's least time, ms (the least bytes: 8 K + 6 V + 16 a token and head)
floor_of() { roofline_ms "$1" "$(($2 * $3 * $4 * (8 * $5 + 6 * $6 + 16)))"; }
line_of() { printf '%s\n' "$1" | grep "peer=$2 mode=$3" | head -1; }
# SHAPES: "B T H K V" groups, comma-separated (a subset, for a run that must stay short: the peers'
# TileLang kernels compile on their first call at each shape, about two minutes)
shapes=${SHAPES:-8 4096 16 128 128,4 4096 64 128 128,1 8192 96 128 128,2 16384 16 128 128,1 16384 8 64 64}
old_ifs=$IFS
IFS=,
# shellcheck disable=SC2086 # split at the commas
set -- $shapes
IFS=$old_ifs
for shape in "$@"; do
    # shellcheck disable=SC2086 # the shape is five words
    set -- $shape
    "$bin"/make_problem --B "$1" --T "$2" --H "$3" --K "$4" --V "$5" --seed 7 "$work/p" > /dev/null
    result=$("$bin"/10_backward_chunked_cuda --in "$work/p" --reps 10 --out "$work/o" 2>&1 | grep '^result' || true)
    backward=$(field median_ms "$result")
    flops=$(awk -v g="$(field gflops "$result")" -v ms="${backward:-0}" 'BEGIN { printf "%.0f", g * ms * 1e6 }') # stage 10's count
    tc=$(field median_ms "$("$bin"/11_backward_tensor_cores --in "$work/p" --reps 10 2>&1 | grep '^result' || true)")
    narrow=$(field median_ms "$("$bin"/11a_backward_mma_sync --in "$work/p" --reps 10 2>&1 | grep '^result' || true)")
    fused=$(field median_ms "$("$bin"/12_backward_fused --in "$work/p" --reps 10 2>&1 | grep '^result' || true)")
    states=$(field median_ms "$("$bin"/13_backward_states --in "$work/p" --reps 10 2>&1 | grep '^result' || true)")
    stage=$(python3 -c "import gdn_steps; print(gdn_steps.gpu_stage_for($1, $2, $3, $4, $5))" 2>/dev/null || echo 06_warp_specialized)
    forward=$(field median_ms "$("$bin/$stage" --in "$work/p" --reps 20 2>&1 | grep '^result' || true)")
    peers=$(python3 plots/fla_backward_bench.py --reps 30 --peers "$peers_asked" "$work/p:$work/o" 2>&1 ||
        echo "plots/fla_backward_bench.py ended with status $?") # a crash (a signal) prints no line of its own
    printf '%s\n' "$peers" | grep -v 'median_ms=' >&2 || true # why a peer did not run: its line, or a traceback
    fla_b=$(field median_ms "$(line_of "$peers" fla backward)") fla_fb=$(field median_ms "$(line_of "$peers" fla forward_backward)")
    pkg_b=$(field median_ms "$(line_of "$peers" gdn_steps backward)") pkg_fb=$(field median_ms "$(line_of "$peers" gdn_steps forward_backward)")
    qla_b=$(field median_ms "$(line_of "$peers" flashqla backward)") qla_fb=$(field median_ms "$(line_of "$peers" flashqla forward_backward)")
    fla_bg=$(field median_ms "$(line_of "$peers" fla backward_graph)") fla_fbg=$(field median_ms "$(line_of "$peers" fla forward_backward_graph)")
    qla_bg=$(field median_ms "$(line_of "$peers" flashqla backward_graph)") qla_fbg=$(field median_ms "$(line_of "$peers" flashqla forward_backward_graph)")
    pkg_bg=$(field median_ms "$(line_of "$peers" gdn_steps backward_graph)") pkg_fbg=$(field median_ms "$(line_of "$peers" gdn_steps forward_backward_graph)")
    pkg12_bg=$(field median_ms "$(line_of "$peers" gdn_steps_12 backward_graph)")
    # the largest difference between a peer's gradients replayed from its graphs and its eager ones
    apart=$(printf '%s\n' "$peers" | sed -n 's/.*mode=backward_graph.*graph_vs_eager=\([^ ]*\).*/\1/p' |
        awk '/nan/ { worst = "nan"; exit } worst == "" || $1 + 0 > worst + 0 { worst = $1 } END { print worst }') # nan stays nan
    e_fq=$(field err_dq_vs_ours "$(line_of "$peers" fla backward)") e_fv=$(field err_dv_vs_ours "$(line_of "$peers" fla backward)")
    e_qq=$(field err_dq_vs_ours "$(line_of "$peers" flashqla backward)") e_qv=$(field err_dv_vs_ours "$(line_of "$peers" flashqla backward)")
    echo "$shape ${backward:-nan} ${tc:-nan} ${forward:-nan} ${fla_b:-nan} ${fla_fb:-nan} ${qla_b:-nan} ${qla_fb:-nan}" \
        "$(ratio "${fla_b:-0}" "${backward:-0}") $(ratio "${qla_b:-0}" "${backward:-0}") $(ratio "${fla_b:-0}" "${tc:-0}")" \
        "${e_fq:--} ${e_fv:--} ${e_qq:--} ${e_qv:--}" \
        "$(floor_of "$flops" "$@") $(fraction "$(floor_of "$flops" "$@")" "${backward:-nan}") $(fraction "$(floor_of "$flops" "$@")" "${tc:-nan}")" \
        "$(fraction "$(floor_of "$flops" "$@")" "${fla_b:-nan}") $(fraction "$(floor_of "$flops" "$@")" "${qla_b:-nan}")" \
        "${pkg_b:-nan} ${pkg_fb:-nan} $(ratio "${fla_fb:-0}" "${pkg_fb:-0}") ${narrow:-nan}" \
        "${fla_bg:-nan} ${qla_bg:-nan} ${pkg_bg:-nan} ${fla_fbg:-nan} ${qla_fbg:-nan} ${pkg_fbg:-nan} $(ratio "${fla_bg:-0}" "${tc:-0}") ${apart:--}" \
        "${fused:-nan} $(ratio "${fla_bg:-0}" "${fused:-0}") $(ratio "${qla_bg:-0}" "${fused:-0}")" \
        "${pkg12_bg:-nan} $(ratio "${fla_bg:-0}" "${pkg12_bg:-0}") $(ratio "${qla_bg:-0}" "${pkg12_bg:-0}")" \
        "${states:-nan} $(ratio "${fla_bg:-0}" "${states:-0}") $(ratio "${qla_bg:-0}" "${states:-0}")" >> "$rows"
    rm -rf "$work/p" "$work/o"
done
cat "$rows"
