/* 12_backward_fused -- stage 11's backward chain and pass 4 as one walk a (sequence, head): a
 * chunk's dVnew, dS_C and dk's first part never leave the block.
 *
 * The idea (docs/12_backward_fused.md): pass 4 of stage 11 runs per chunk once the chains have
 * left S0, Vnew, dVnew and dS_C in memory, and at (8, 4096, 16, 128, 128) the four passes move
 * 7.3 GB through DRAM, most of it what they hand each other (docs/11, "What bounds the stage").
 * Here the backward chain's block does pass 4's work as it walks: dS in its registers, each
 * chunk's gradients made from the dVnew and dS_C it has just made (fused_walk.cuh). With the
 * value gradient as the chain's operand (-W^T dVnew = K^T (-e^gamma dv)) the walk never reads -W.
 * Pass 1 and the forward chain are stage 11's: they leave Tm, S0 and Vnew; pass 1 without P^T dO
 * and scale e^gamma dO (prepare_chunks_kernel<false>), which the walk makes itself.
 *
 * Cost: stage 10's products. Bytes between launches: gamma, Tm, -W and U from pass 1, S0 and
 * Vnew from the forward chain; the walk reads q, k, v, dO, Tm, S0 and Vnew once a chunk and writes the gradients.
 * Depth: T / 64 chunk steps a head, each the whole chunk's work: one block a head (about 207 KB
 * of shared memory), so B H blocks, and with fewer heads than SMs the card idles.
 * Limits: stage 11's.
 * Measured in one job on an NVIDIA H100 80GB HBM3 (plots/data/backward_fused_steps.dat): 3.98 ms
 * at (8, 4096, 16, 128, 128), 1.11x stage 11; 7.32 ms at (1, 16384, 8, 64, 64), eight blocks.
 *
 * Build and run:  make bin/12_backward_fused && bin/12_backward_fused --B 8 --T 1024 --H 16 --K 128 --V 128 --check-against oracle
 */
#include <stdint.h>

#include "../../common/backward_stage.h"
#include "../../common/cuda_check.h"
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gates' sums and the blocked solve, unchanged */
extern "C" {                                      /* stage 10's flop count: the same products */
#include "../10_backward_chunked/backward_chunked.h"
}
#include "../11_backward_tensor_cores/warp_tiles.cuh"
#include "../11_backward_tensor_cores/prepare_chunks.cuh"
#include "../11_backward_tensor_cores/chains.cuh"
#include "../11_backward_tensor_cores/chunk_gradients.cuh" /* pass 4's pieces, which the walk calls */
#include "../11_backward_tensor_cores/backward_passes.cuh"
#include "fused_walk.cuh"

static_assert((int)CHUNK == (int)SOLVE_CHUNK, "pass 1's chunk is the solve's");

/* pass 1 and the forward chain (stage 11's: blocks of 64 columns where they give every SM one,
 * else 16), then the walk */
template <int COLUMNS>
static int fused_passes(const gdn_device_problem *p, const gdn_device_cotangents *c, const backward_workspace &w,
                        gdn_device_result *r, gdn_device_gradients *g)
{
    const size_t heads = p->B * p->H, K = p->K, V = p->V;
    unsigned chunk_blocks, chain_blocks, walk_blocks;
    if (gdn_blocks_for(heads * w.chunks, 1, &chunk_blocks) ||
        gdn_blocks_for(heads * ((round_up16(V) + COLUMNS - 1) / COLUMNS), 1, &chain_blocks) ||
        gdn_blocks_for(heads, 1, &walk_blocks))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(prepare_chunks_kernel<false>, chunk_blocks, THREADS, prepare_tiles_at(nullptr, K, V).bytes, *p, *c, w);
    CUDA_LAUNCH_WITH_SHARED(forward_chain_kernel<COLUMNS>, chain_blocks, chain_shape<COLUMNS>::THREADS,
                            chain_tiles_at<COLUMNS>(nullptr, K, false).bytes, *p, w, r->ht);
    CUDA_LAUNCH_WITH_SHARED(fused_walk_kernel<walk_arrays>, walk_blocks, GRADIENT_THREADS, walk_tiles_at(nullptr).bytes, *p, *c, w, r->o, *g,
                            walk_arrays{});
    return 0;
}

static int backward_fused_backward(const gdn_device_problem *p, const gdn_device_cotangents *c, const gdn_settings *s,
                                   gdn_device_result *r, gdn_device_gradients *g)
{
    const size_t heads = p->B * p->H;
    backward_workspace w;
    if (backward_passes_workspace_of(p, s, r, &w))
        return -1;
    if (heads * ((round_up16(p->V) + 63) / 64) >= (size_t)gdn_sm_count())
        return fused_passes<64>(p, c, w, r, g);
    return fused_passes<16>(p, c, w, r, g);
}

extern "C" const gdn_backward_stage backward_fused_stage = {
    .name = "12_backward_fused",
    .idea = "11's backward chain and pass 4 as one walk a (sequence, head): dVnew, dS_C and dk's first part stay in the block",
    .options = GDN_OPTION_CHUNK,
    .backward = NULL,
    .counted_flops = backward_chunked_flops,
    .resolve_options = backward_passes_resolve_options,
    .device_backward = backward_fused_backward,
    .device_workspace_bytes = backward_passes_workspace,
    .runner = &gdn_cuda_backward_runner,
    .bf16_inputs = 1,
};
