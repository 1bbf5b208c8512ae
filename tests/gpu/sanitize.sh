#!/bin/sh
# sanitize.sh BIN [PATTERN] -- compute-sanitizer's memcheck, racecheck and synccheck on every
# GPU binary (or those whose name matches the grep PATTERN), on small problems that still
# reach every code path (partial tiles and chunks, K = 128 with two threads per column, h0;
# 05's GPU twin in two slices and with 8-column chain tiles;
# for 06 and 07 both modes, one-, two- and four-tile chain blocks, a fold and a replay, chains
# with plain stores (fewer blocks than SMs) and with staged bulk stores (more); 08's GPU
# twin under mpirun, 2 ranks). Run on a machine with a CUDA device; exits non-zero on any report.
set -u
bin=${1:-bin}
pattern=${2:-.}
status=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# sanitize BINARY SHAPE [LAUNCHER [CHECK]]: the three tools on one run
sanitize() {
    echo "$1" | grep -q -- "$pattern" || return 0
    for tool in memcheck racecheck synccheck; do
        # shellcheck disable=SC2086 # the launcher and the shape are several words
        log=$(${3:-} compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/$1" $2 --reps 1 ${4:---check-against oracle} 2>&1)
        rc=$?
        summary=$(printf '%s\n' "$log" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tail -1)
        printf '%-24s %-10s %-56s rc=%d %s\n' "$1" "$tool" "$2" "$rc" "$summary"
        [ "$rc" = 0 ] || status=1
    done
}
for stage in 01_naive_loop 03_parallel_scan 04_two_phase_scan 05_wy_chunked; do
    for shape in "--B 2 --T 77 --H 2 --K 32 --V 40 --h0" "--B 1 --T 70 --H 1 --K 128 --V 72"; do
        sanitize "${stage}_cuda" "$shape"
    done
done
sanitize 05_wy_chunked_cuda "--B 1 --T 4100 --H 1 --K 16 --V 8 --h0" # 65 chunks: two slices, three streams
sanitize 10_backward_chunked_cuda "--B 2 --T 77 --H 2 --K 32 --V 40 --h0" # a partial chunk, three column tiles
sanitize 10_backward_chunked_cuda "--B 1 --T 300 --H 1 --K 128 --V 72 --chunk 128" # the largest chunk, a partial tile
sanitize 11_backward_tensor_cores "--B 2 --T 77 --H 2 --K 32 --V 40 --h0" # a partial chunk, three column tiles, padded V tiles
sanitize 11_backward_tensor_cores "--B 1 --T 130 --H 1 --K 128 --V 72" # K = 128: both m-tiles of a chain warp; a last chunk of two tokens
sanitize 11_backward_tensor_cores "--B 1 --T 130 --H 132 --K 100 --V 64 --h0" # 132 blocks of 64 columns (the wide chains, at least one an SM); K not a multiple of 8
sanitize 12_backward_fused "--B 2 --T 77 --H 2 --K 32 --V 40 --h0" # a partial chunk, warps past KP and VP holding no state
sanitize 12_backward_fused "--B 1 --T 200 --H 3 --K 128 --V 128" # K = V = 128: every warp a 16 x 64 part of dS; a last chunk of eight tokens
sanitize 13_backward_states "--B 1 --T 300 --H 2 --K 128 --V 128 --h0" # 06's chain from v at K = V = 128, then the walk reading its layouts
sanitize 13_backward_states "--B 1 --T 200 --H 2 --K 100 --V 64 --h0" # 06's chain from W and U; padding columns past K zeroed by arrange
sanitize 13_backward_states "--B 2 --T 130 --H 12 --K 64 --V 64" # 24 heads at K = V = 64: 06's chain from v, a partial last chunk
sanitize 05_wy_chunked_cuda "--B 4 --T 300 --H 40 --K 32 --V 16" # 160 heads: 8-column chain tiles; 5 chunks, so the ring of three slots wraps
sanitize 06a_tensor_cores "--B 2 --T 300 --H 2 --K 40 --V 40 --h0" # partial tiles, a ring that wraps
sanitize 06a_tensor_cores "--B 1 --T 130 --H 3 --K 128 --V 72"    # K = 128, V not a multiple of 64
sanitize 06b_producer_consumer "--B 2 --T 300 --H 2 --K 40 --V 40 --h0" # the ring wraps: full and empty phases of both parities
sanitize 06b_producer_consumer "--B 1 --T 130 --H 3 --K 128 --V 72"
sanitize 06c_bulk_copies "--B 2 --T 300 --H 2 --K 40 --V 40 --h0" # K not a multiple of 16: the threads copy k and v (kernel 1), q and k (kernel 3)
sanitize 06c_bulk_copies "--B 1 --T 130 --H 2 --K 128 --V 128" # tensor copies in kernels 1 and 3; four kernel-1 blocks an SM; 128-column kernel 3
sanitize 06c_bulk_copies "--B 1 --T 70 --H 2 --K 64 --V 256" # two slices of v
for mode in "" "--precise"; do
    sanitize 06d_warp_chain "--B 2 --T 300 --H 2 --K 40 --V 40 --h0 $mode" # 48 columns: one-tile blocks, plain stores
    sanitize 06d_warp_chain "--B 4 --T 200 --H 40 --K 128 --V 64 $mode" # two-tile blocks, staged (blocks >= SMs)
done
sanitize 06e_output_warps "--B 1 --T 300 --H 100 --K 128 --V 128" # output warps in the chain's block; kernel 1 writes the transform block
sanitize 06e_output_warps "--B 2 --T 300 --H 2 --K 128 --V 128 --h0" # few heads: 06d's pass
for mode in "" "--precise"; do
    sanitize 06_warp_specialized "--B 2 --T 300 --H 2 --K 40 --V 40 --h0 $mode" # plain stores
    sanitize 06_warp_specialized "--B 8 --T 130 --H 40 --K 128 --V 64 $mode" # four-tile chain blocks: two n-tiles a warp; staged
    sanitize 06_warp_specialized "--B 4 --T 130 --H 40 --K 64 --V 32 $mode" # two-tile chain blocks; staged
    sanitize 06_warp_specialized "--B 8 --T 130 --H 40 --K 128 --V 72 $mode" # 5 tiles: one-tile blocks; staged
    sanitize 06_warp_specialized "--B 2 --T 150 --H 3 --K 64 --V 128 $mode" # kernel 3: 128-column blocks (default mode); plain stores
    sanitize 06_warp_specialized "--B 2 --T 200 --H 16 --K 64 --V 64 $mode" # K = V = 64 from v (default mode): one-tile blocks, plain stores
    sanitize 06_warp_specialized "--B 4 --T 200 --H 16 --K 64 --V 64 $mode" # the same, two-tile blocks, staged
    sanitize 06_warp_specialized "--B 1 --T 300 --H 100 --K 128 --V 128 $mode" # K = V = 128: the chain with output warps and kernel 1 for the transform block alone (default mode)
    sanitize 06_warp_specialized "--lengths 300,1,129 --H 2 --HV 4 --K 64 --V 64 --h0 $mode" # a packed batch read and written in place by tensor maps
    sanitize 06_warp_specialized "--lengths 65,200,1,63 --H 3 --K 100 --V 72 --h0 $mode" # the same by the threads' copies (K = 100), the last chunk short of the batch's end
    sanitize 06_warp_specialized "--lengths 130,64,70,5 --H 8 --HV 32 --K 128 --V 128 --h0 $mode" # the same with output warps (default mode: 128 chains), a partial last tile stored by a warp
    sanitize 07_sequence_parallel "--lengths 900,1,129 --H 2 --HV 4 --K 64 --V 64 --h0 --segments 3 $mode" # a packed batch's rows, read in place, cut
    sanitize 07_sequence_parallel "--B 2 --T 300 --H 2 --K 40 --V 40 --h0 --segments 3 $mode"
    sanitize 07_sequence_parallel "--B 1 --T 200 --H 1 --K 128 --V 72 --h0 $mode"
    sanitize 07_sequence_parallel "--B 4 --T 300 --H 40 --K 64 --V 64 --segments 3 $mode" # four-tile fold and replay; staged replay; K = V = 64 from v (default mode)
    sanitize 08_context_parallel_cuda "--B 2 --T 300 --H 2 --K 40 --V 40 --h0 --segments 2 $mode" \
        "mpirun -q -np 2 --oversubscribe --mca btl_vader_single_copy_mechanism none" " "
done
exit $status
