/* 06d_warp_chain -- 06c with the chain warp-specialized: each consumer warp owns its columns
 * of S, and nothing but the ring's mbarriers is waited for.
 *
 * The idea (docs/06_warp_specialized.md, "06d: consumer warps that own their columns"): 06b's
 * chain splits each chunk's products over its four warps by rows, so S0^T and Vnew^T pass
 * through shared memory between them and two barriers of the four sit on every step of the
 * serial chain. Here a consumer warp owns 8 columns of S, all K rows, for the whole sequence:
 * its Vnew's columns need only its own S0, so S0 (and then Vnew) becomes B fragments inside
 * the warp's registers (movmatrix.trans, to_b_fragment) and no warp waits for another. U is
 * read in its fragment order, S0^T and Vnew^T leave by the pairs the fragments hold, straight
 * to global memory or, where the blocks fill the GPU, through the warp's staging tiles by bulk
 * stores. The step is compiled with K's tiles known at K = 64 and 128. Blocks of 16 or 32
 * columns (two warps a 16-column tile and the producer), 3 ring slots. --precise is offered
 * from here: every kernel has the low terms (x = bf16(x) + bf16(x - bf16(x))).
 *
 * Where bf16 rounding enters: 06c's places.
 *
 * Cost: 06c's flops; per chunk a warp runs two dependent MMA chains (depth K, then 64) with no
 * barrier between them. Depth: T / 64 chunk steps of kernel 2.
 * Limits: K <= 128, chunk 64 (fixed), V and T any.
 *
 * Build and run:  make bin/06d_warp_chain && bin/06d_warp_chain --T 16384 --H 8 --check-against oracle
 * Measured: 0.99 ms at (8, 4096, 16, 128, 128), FLA's CUDA graph 1.02 ms, in one run on an NVIDIA
 * H100 80GB HBM3 (plots/data/stage06_series.dat).
 */
#include <cuda_bf16.h>
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled: the driver's tensor map maker, found at run time */
#include <cuda_pipeline_primitives.h>
#include <stdint.h>
#include <type_traits>

#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
#include "../../common/bulk_copy.cuh"      /* mbarriers, bulk and tensor copies (the TMA unit) */
#include "../../common/mma_sync.cuh"       /* ldmatrix and mma.sync */
#include "../../common/fast_exp.cuh"       /* exp_approx: the gate factors of P */
#include "../../common/kernel_overlap.cuh" /* wait_for_previous_kernel: kernel 3 after the chain */
#include "../../common/wgmma.cuh"          /* swizzled_offset (chain_ring.cuh's swizzled fragments) */
#include "../../common/tensor_maps.cuh"    /* host: the tensor maps of q and k */
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gate sums and the blocked solve, unchanged */
extern "C" { /* stage 05's flop count: the same algebra */
#include "../05_wy_chunked/wy_chunked.h"
}

#include "tile_products.cuh"       /* the constants, a warp's products by ldmatrix, copy_tile */
#include "chunk_workspace.cuh"     /* the workspace and the chain block's layout */
#include "prepare_w_and_u.cuh"     /* kernel 1 and its launch */
#include "chain_ring.cuh"          /* kernel 2's ring, segments and fragment helpers */
#include "chain_w_and_u.cuh"       /* kernel 2 */
#include "chunk_outputs.cuh"       /* kernel 3: stage 06's, */
#include "outputs_after_chain.cuh" /* run after the chain */

/* Kernel 2: a block per (head, 32 state columns) where V's tiles pair up, else 16; two
 * consumer warps a 16-column tile and the producer; 3 ring slots; S0^T and Vnew^T through
 * staging tiles where the blocks fill the GPU */
template <bool PRECISE>
static int launch_chunk_states(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    const chain_segments whole = {1, 1, p->h0, r->ht}; /* one segment: the whole sequence from h0 */
    const int VP = round_up16(p->V), tiles = VP % 32 == 0 ? 2 : 1, stages = 3;
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * (VP / (16 * tiles)), 1, &blocks))
        return -1;
    const bool staged = blocks >= (unsigned)gdn_sm_count();
    const size_t bytes = stages * (chain_slot_bytes(p->K, PRECISE, tiles) + 2 * sizeof(uint64_t)) +
                         (staged ? chain_staging_bytes(p->K, PRECISE, tiles) : 0);
    static_assert(chain_ntiles(1) == 1 && chain_ntiles(2) == 1, "one n-tile a consumer warp");
    auto chunk_states = staged ? chunk_states_kernel<PRECISE, true, state_columns, 1> : chunk_states_kernel<PRECISE, false, state_columns, 1>;
    CUDA_LAUNCH_WITH_SHARED(chunk_states, blocks, chain_block_threads(tiles), bytes, *p, w, whole, stages);
    return 0;
}

/* kernel 1, the chain, kernel 3 with 128 columns of o a block where V is a multiple of 128 (no
   block half empty) and not --precise, else 64 */
template <bool PRECISE>
static int warp_chain_passes(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    if (launch_prepare_chunks<PRECISE>(p, w) || launch_chunk_states<PRECISE>(p, w, r))
        return -1;
    return launch_outputs_after_chain<PRECISE>(p, w, r);
}

static int warp_chain_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    if (p->K > MAX_K)
        return gdn_set_error("K = %zu: stage 06d keeps K-wide tiles in shared memory, K at most %d", p->K, MAX_K);
    chunk_workspace w = workspace_at(r->workspace, p, s->precise);
    return s->precise ? warp_chain_passes<true>(p, w, r) : warp_chain_passes<false>(p, w, r);
}

extern "C" const gdn_stage warp_chain_stage = {
    .name = "06d_warp_chain",
    .idea = "06c with consumer warps that own their columns of S: fragments by movmatrix, no barrier",
    .options = GDN_OPTION_PRECISE,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = chunk_resolve_options,
    .device_forward = warp_chain_forward,
    .device_workspace_bytes = chunk_workspace_bytes,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};
