/* outputs_after_chain.cuh -- the launch of kernel 3 (chunk_outputs.cuh) after the chain, as the
 * sub-stages 06c-06e run it; 06's launch rules (launch_rules.cuh) also place it beside the chain.
 *
 * A block per (head, chunk, 128 columns of o) where V is a multiple of 128 and not --precise
 * (no block half empty; the low terms would double its shared memory), else 64; K = V = the
 * columns compiled with them known. Launched as a programmatic dependent of the chain: its
 * blocks wait for the chain's S0^T and Vnew^T (wait_for_previous_kernel). o in bf16, in fp32
 * with --precise. Host code only.
 *
 * Included by bulk_copies.cu, warp_chain.cu and output_warps.cu.
 */
#pragma once
template <bool PRECISE, int COLUMNS>
static int launch_outputs_after_chain_by(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    const size_t M = CHUNK, LDK = key_stride(p->K), LDT = TOKEN_STRIDE, terms = PRECISE ? 2 : 1;
    const size_t bytes = 128 + M * sizeof(double) + (2 * M * LDK + terms * (COLUMNS * LDK + COLUMNS * LDT + M * LDT)) * sizeof(bf16);
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * chunks_of(p->T) * ((p->V + COLUMNS - 1) / COLUMNS), 1, &blocks))
        return -1;
    if (!PRECISE && !r->o_bf16)
        return gdn_set_error("kernel 3 writes o in bf16: the runner made no room for it");
    CUtensorMap q_map = {}, k_map = {}; /* unused (zero) where the threads copy q and k */
    if (keys_by_tensor_map(p->K, p->H, p->T) &&
        (make_token_tile_map(&q_map, p->q_bf16, p, p->K, key_stride(p->K)) || make_token_tile_map(&k_map, p->k_bf16, p, p->K, key_stride(p->K))))
        return -1;
    constexpr int SIZE = PRECISE ? 0 : COLUMNS;
    auto chunk_outputs = SIZE && p->K == SIZE && p->V == SIZE ? chunk_outputs_kernel<PRECISE, COLUMNS, SIZE> : chunk_outputs_kernel<PRECISE, COLUMNS, 0>;
    CUDA_LAUNCH_AFTER_PREVIOUS(chunk_outputs, blocks, THREADS, bytes, *p, w, r->o, (bf16 *)r->o_bf16, q_map, k_map,
                               false /* after the chain, not beside it */);
    r->o_in_bf16 = !PRECISE;
    return 0;
}
template <bool PRECISE>
static int launch_outputs_after_chain(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    if constexpr (!PRECISE) /* (no 128-column kernel is compiled for --precise) */
        if (p->V % 128 == 0)
            return launch_outputs_after_chain_by<false, 128>(p, w, r);
    return launch_outputs_after_chain_by<PRECISE, 64>(p, w, r);
}
