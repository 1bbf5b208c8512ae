#!/bin/sh
# bench_peers.sh BIN OUTDIR -- stages 06 and 07 against the public GDN kernels, side by side in
# one run on the same bf16 inputs: FLA's Triton chunk_gated_delta_rule and FlashQLA's fused
# TileLang kernels for Hopper (the flash-qla package: K = V = 128 only), each replayed from a
# CUDA graph (plots/fla_bench.py). FlashQLA twice: as users get it (its automatic intra-card
# context parallelism, which starts a cut piece after warm-up chunks, exact only as far as the
# gates have forgotten, e^-10) and with that off (one exact chain a head). At stage 06's
# benchmark shapes 06 runs, at stage 07's 07.
#
#   sh plots/bench_peers.sh bin plots/data    (on a machine with a CUDA device, FLA and flash-qla)
#
# TileLang compiles FlashQLA's kernels when it meets a new shape (20 to 40 s a shape on an H200
# machine), so the run takes about ten minutes. Writes OUTDIR/peers.dat. Times: medians (ours:
# of 20 after a warm-up, CUDA events, L2 flushed; the peers: of 30). err_*: the peer's o against
# ours (relative L2), proof of the same inputs.
set -eu
# shellcheck source=plots/bench_lib.sh
. "$(dirname "$0")/bench_lib.sh"
bin=${1:-bin}
out=${2:-plots/data}
bench_begin
rows=$out/peers.dat
gpu_data_header "bench_peers.sh $bin $out" "stage B T H K V ms_ours ms_fla ms_flashqla ms_flashqla_exact fla/ours flashqla/ours flashqla_exact/ours err_fla err_flashqla err_flashqla_exact" > "$rows"
# the graph-replayed median and the error against ours of one peer's result lines
peer_graph() { field median_ms "$(printf '%s\n' "$1" | grep "peer=$2 mode=graph")"; }
peer_err() { field err_o_vs_ours "$(printf '%s\n' "$1" | grep "peer=$2 mode=graph")"; }
for shape in "06 8 4096 16 128 128" "06 1 8192 96 128 128" "06 4 4096 64 128 128" "06 2 16384 16 128 128" \
    "07 1 65536 8 128 128" "07 1 65536 16 128 128"; do
    # shellcheck disable=SC2086 # the shape is six words
    set -- $shape
    stage=06_warp_specialized
    [ "$1" = 07 ] && stage=07_sequence_parallel
    "$bin"/make_problem --B "$2" --T "$3" --H "$4" --K "$5" --V "$6" --seed 7 "$work/p" > /dev/null
    ours=$(field median_ms "$("$bin/$stage" --in "$work/p" --reps 20 --out "$work/o")")
    peers=$(python3 plots/fla_bench.py --reps 30 --dtypes bf16 --peers fla,flashqla,flashqla_exact "$work/p:$work/o" 2>&1 || true)
    fla=$(peer_graph "$peers" fla_chunk) qla=$(peer_graph "$peers" flashqla) exact=$(peer_graph "$peers" flashqla_exact)
    fla_err=$(peer_err "$peers" fla_chunk) qla_err=$(peer_err "$peers" flashqla) exact_err=$(peer_err "$peers" flashqla_exact)
    echo "$shape ${ours:-nan} ${fla:-nan} ${qla:-nan} ${exact:-nan} $(ratio "${fla:-0}" "${ours:-0}") $(ratio "${qla:-0}" "${ours:-0}")" \
        "$(ratio "${exact:-0}" "${ours:-0}") ${fla_err:--} ${qla_err:--} ${exact_err:--}" >> "$rows"
    rm -rf "$work/p" "$work/o"
done
cat "$rows"
