/* 06e_output_warps -- 06d with kernel 3's work inside the chain's block at K = V = 128: output
 * warps, and every product of that block by wgmma.
 *
 * The idea (docs/06_warp_specialized.md, "06e: output warps in the chain's block"): at K = V =
 * 128 one chain block of 128 columns holds a head's whole state, so each chunk's S0^T and Vnew^T
 * are already on its SM, in its staging tiles; 06d sends them to global memory (52 KB each
 * way a chunk) for kernel 3 to read back. Here eight more warps in the block make o there
 * (fused_outputs.cuh: two warpgroups, wgmma from shared memory, q and k brought swizzled by the
 * TMA unit, o out by tensor stores), and kernel 3 does not run. The chain's own warps use
 * wgmma too, S^T one m64n128 accumulator a warpgroup, and make Vnew from v,
 *     Vnew = U - W S0 = Tm Z,   Z = diag(beta) V - diag(beta e^gamma) K S0   (eq. 13 regrouped)
 * so kernel 1 writes only Tm and its factors, the transform block (prepare_chunks.cuh),
 * about a quarter of W and U's bytes. setmaxnreg gives each warpgroup the registers its role
 * needs. These blocks run where the heads give 70 % of the SMs a block; elsewhere, and at
 * other K and V or with --precise, 06d's pass runs.
 *
 * Where bf16 rounding enters, in these blocks: the strictly lower part of Tm and Z in place
 * of W and U, and diag(d) Vnew where it enters the update.
 *
 * Cost: 06d's flops less W's product; per chunk the chain's K S0, Tm Z and K^T (diag(d) Vnew),
 * the output warps' Q K^T, Q S0 and P Vnew, all wgmma. Depth: T / 64 chunk steps.
 * Limits: K <= 128, chunk 64 (fixed), V and T any; the output warps at K = V = 128.
 *
 * Build and run:  make bin/06e_output_warps && bin/06e_output_warps --T 16384 --H 132 --K 128 --V 128 --check-against oracle
 * Measured: 0.319 ms at (8, 4096, 16, 128, 128), FLA's CUDA graph 1.02 ms, in one run on an NVIDIA
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
#include "../../common/wgmma.cuh"          /* the output warps' wgmma, from swizzled tiles */
#include "../../common/sync.cuh"           /* named barriers, setmaxnreg */
#include "../../common/tensor_maps.cuh"    /* host: the tensor maps of q and k */
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gate sums and the blocked solve, unchanged */
extern "C" { /* stage 05's flop count: the same algebra */
#include "../05_wy_chunked/wy_chunked.h"
}

#include "tile_products.cuh"       /* the constants, a warp's products by ldmatrix, copy_tile */
#include "chunk_workspace.cuh"     /* the workspace and the chain block's layout */
#include "prepare_chunks.cuh"      /* kernel 1: W, U and the decayed keys, or the transform block */
#include "chain_ring.cuh"          /* kernel 2's ring, segments and fragment helpers */
#include "fused_outputs.cuh"       /* kernel 2 with output warps at K = V = 128 */
#include "chain_w_and_u.cuh"       /* kernel 2 */
#include "chunk_outputs.cuh"       /* kernel 3: stage 06's, */
#include "outputs_after_chain.cuh" /* run after the chain */

/* Kernel 1 for every chunk, writing `parts`: four blocks an SM where the occupancy query says
 * their shared memory fits (and V is one slice, as that instance assumes), K = V = 64 or 128
 * compiled known; else three (two with --precise) */
template <bool PRECISE>
static int launch_prepare_chunks(const gdn_device_problem *p, chunk_workspace w, int parts)
{
    const size_t M = CHUNK, LDK = key_stride(p->K);
    /* the gates, Tm's place, the keys, then the values' place (the solve's scratch, then v) */
    const size_t bytes = 128 + M * sizeof(double) + 2 * M * sizeof(float) + tm_place_bytes(PRECISE) + M * LDK * sizeof(bf16) +
                         values_place_bytes((size_t)value_stride(p->V));
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * chunks_of(p->T), 1, &blocks))
        return -1;
    CUtensorMap k_map = {}, v_map = {}; /* unused (zero) where the threads copy k and v */
    if (tiles_by_tensor_map(p->K, p->V, p->H, p->T) && (make_token_tile_map(&k_map, p->k_bf16, p, p->K, key_stride(p->K)) ||
                                                        make_token_tile_map(&v_map, p->v_bf16, p, p->V, value_stride(p->V))))
        return -1;
    auto prepare_chunks = prepare_chunks_kernel<PRECISE ? PREPARE_PRECISE : PREPARE_SLICES, 0>;
    if (!PRECISE && p->V <= VALUE_SLICE && kernel_blocks_per_sm(prepare_chunks_kernel<PREPARE_ONE_SLICE, 0>, THREADS, bytes) >= 4) {
        const bool square = p->K == p->V;
        prepare_chunks = square && p->K == 64    ? prepare_chunks_kernel<PREPARE_ONE_SLICE, 64>
                         : square && p->K == 128 ? prepare_chunks_kernel<PREPARE_ONE_SLICE, 128>
                                                 : prepare_chunks_kernel<PREPARE_ONE_SLICE, 0>;
    }
    CUDA_LAUNCH_WITH_SHARED(prepare_chunks, blocks, THREADS, bytes, *p, w, k_map, v_map, parts, 0u);
    return 0;
}

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

/* Whether the chain carries output warps: K = V = 128, q and k by tensor maps, the block's
 * shared memory there, not --precise, and heads that give 70 % of the SMs a block (one a head) */
static bool output_warps_run(const gdn_device_problem *p, bool precise)
{
    int per_block = 0;
    if (cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) != cudaSuccess)
        cudaGetLastError();
    return !precise && output_warps_shape(p->K, p->V) && keys_by_tensor_map(p->K, p->H, p->T) &&
           output_block_bytes() <= (size_t)per_block && p->B * p->H * 100 >= 70 * (size_t)gdn_sm_count();
}

/* Kernel 1 (the transform block alone), then the chain with output warps: one block a head */
static int output_warps_pass(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    const chain_segments whole = {1, 1, p->h0, r->ht}; /* one segment: the whole sequence from h0 */
    if (!r->o_bf16)
        return gdn_set_error("the chain's output warps write o in bf16: the runner made no room for it");
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H, 1, &blocks))
        return -1;
    CUtensorMap o_map, q_map, k_map, v_map;
    /* boxes of 64 keys (128 bytes) with the 128-byte swizzle: the output warps' and the chain's wgmma operands,
       and o, which leaves from the q tile in the same layout */
    if (make_token_tile_map(&q_map, p->q_bf16, p, p->K, 64, true) || make_token_tile_map(&k_map, p->k_bf16, p, p->K, 64, true) ||
        make_token_tile_map(&o_map, r->o_bf16, p, p->V, 64, true) || make_token_tile_map(&v_map, p->v_bf16, p, p->V, 64, true))
        return -1;
    if (launch_prepare_chunks<false>(p, w, WRITE_TRANSFORM))
        return -1;
    CUDA_LAUNCH_AFTER_PREVIOUS(chunk_states_outputs_kernel<false>, blocks, OUTPUT_BLOCK_THREADS, output_block_bytes(), *p, w, whole,
                               OUTPUT_STAGES, o_map, q_map, k_map, v_map, (bf16 *)r->o_bf16); /* o16: a packed batch's partial tiles, none here */
    r->o_in_bf16 = 1;
    return 0;
}

/* kernel 1, the chain, kernel 3 with 128 columns of o a block where V is a multiple of 128 (no
   block half empty) and not --precise, else 64; or the chain with output warps */
template <bool PRECISE>
static int output_warps_passes(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    if (output_warps_run(p, PRECISE))
        return output_warps_pass(p, w, r);
    if (launch_prepare_chunks<PRECISE>(p, w, WRITE_KEYS_T | WRITE_W_AND_U) || launch_chunk_states<PRECISE>(p, w, r))
        return -1;
    return launch_outputs_after_chain<PRECISE>(p, w, r);
}

static int output_warps_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    if (p->K > MAX_K)
        return gdn_set_error("K = %zu: stage 06e keeps K-wide tiles in shared memory, K at most %d", p->K, MAX_K);
    chunk_workspace w = workspace_at(r->workspace, p, s->precise);
    return s->precise ? output_warps_passes<true>(p, w, r) : output_warps_passes<false>(p, w, r);
}

extern "C" const gdn_stage output_warps_stage = {
    .name = "06e_output_warps",
    .idea = "06d with output warps in the chain's block at K = V = 128: o by wgmma, no kernel 3",
    .options = GDN_OPTION_PRECISE,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = chunk_resolve_options,
    .device_forward = output_warps_forward,
    .device_workspace_bytes = chunk_workspace_bytes,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};
