/* 06c_bulk_outputs -- 06b with kernel 3 fed by the TMA unit: the workspace laid out for bulk
 * copies and MMA fragments.
 *
 * The idea (docs/06_warp_specialized.md, "06c: kernel 3 by the TMA unit"): in 06b kernel 3's 256
 * threads copy q, k, S0^T and Vnew^T into shared memory element by element and gather their
 * fragments with 4-byte loads. Here each tile comes in one instruction: q and k by a tensor
 * copy (a tensor map, made on the host, describes a head's rows H K values apart), S0^T and
 * Vnew^T by one bulk copy each, because the chain now stores their rows padded exactly as
 * kernel 3's tiles are (key_stride, TOKEN_STRIDE). Fragments come by ldmatrix (eight rows of
 * 16 bytes a phase, tile_products.cuh), P first while S0^T and Vnew^T still land, the causal
 * products skip their zero blocks, and o leaves in bf16 in whole rows. U, kept in bf16 as FLA
 * keeps it, is stored by kernel 1 in the order the chain's lanes read it as fragments
 * (u_fragment_index), so the chain takes its four values of a tile in one 8-byte load.
 * Kernel 1 (simple_prepare.cuh) and the chain (producer_chain.cuh) compute what 06a's and 06b's
 * do; kernel 3 is stage 06's (chunk_outputs.cuh), run after the chain (its lines for a
 * kernel 3 placed beside the chain belong to 06's launch rules, the last section).
 *
 * Where bf16 rounding enters: 06a's places, and U before Vnew = U - W S0 (Vnew is rounded to
 * bf16 right after), and o, written in bf16 as FLA writes it.
 *
 * Cost: 06b's flops; per token kernel 1 writes U in half the bytes (bf16), kernel 3 reads its
 * tiles by a few copy instructions a block. Depth: T / 64 chunk steps of kernel 2, as in 06b.
 * Limits: K <= 128, chunk 64 (fixed), V and T any.
 *
 * Build and run:  make bin/06c_bulk_outputs && bin/06c_bulk_outputs --T 16384 --H 8 --check-against oracle
 * Measured: 2.13 ms at (8, 4096, 16, 128, 128), FLA's CUDA graph 1.03 ms, in one run on an NVIDIA
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
#include "../../common/sync.cuh"           /* named_barrier_sync: the consumers' own barrier */
#include "../../common/tensor_maps.cuh"    /* host: the tensor maps of q and k */
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gate sums and the blocked solve, unchanged */
extern "C" { /* stage 05's flop count: the same algebra */
#include "../05_wy_chunked/wy_chunked.h"
}

#include "tile_products.cuh"       /* the constants, a warp's products by ldmatrix, copy_tile */
#include "chunk_workspace.cuh"     /* the workspace and the chain block's layout */
#include "simple_prepare.cuh"      /* kernel 1 */
#include "producer_chain.cuh"      /* kernel 2 */
#include "chunk_outputs.cuh"       /* kernel 3: stage 06's, */
#include "outputs_after_chain.cuh" /* run after the chain */

/* kernel 1, the chain, kernel 3 with 128 columns of o a block where V is a multiple of 128 (no
   block half empty), else 64 */
static int bulk_outputs_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    (void)s;
    const size_t K = p->K, V = p->V, heads = p->B * p->H, chunks = chunks_of(p->T), LDK = key_stride(K);
    if (K > MAX_K)
        return gdn_set_error("K = %zu: stage 06c keeps K-wide tiles in shared memory, K at most %d", K, MAX_K);
    chunk_workspace w = workspace_at(r->workspace, p, false);
    unsigned prepare_blocks, state_blocks;
    if (gdn_blocks_for(heads * chunks, 1, &prepare_blocks) || gdn_blocks_for(heads * (round_up16(V) / CHAIN_COLUMNS), 1, &state_blocks))
        return -1;
    const size_t M = CHUNK, LDT = TOKEN_STRIDE;
    const size_t prepare_bytes = M * sizeof(double) + (2 * M + M * (M + 1)) * sizeof(float) + (M * LDK + 2 * M * LDT) * sizeof(bf16);
    const size_t chain_bytes = ring_barriers_offset(K) + 2 * CHAIN_STAGES * sizeof(uint64_t);
    CUDA_LAUNCH_WITH_SHARED(prepare_chunks_kernel, prepare_blocks, THREADS, prepare_bytes, *p, w);
    CUDA_LAUNCH_WITH_SHARED(chunk_states_kernel, state_blocks, PRODUCER_CHAIN_THREADS, chain_bytes, *p, w, r->ht);
    return launch_outputs_after_chain<false>(p, w, r);
}

extern "C" const gdn_stage bulk_outputs_stage = {
    .name = "06c_bulk_outputs",
    .idea = "06b with kernel 3 fed by the TMA unit: tensor and bulk copies, ldmatrix, o in bf16",
    .options = 0,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = chunk_resolve_options,
    .device_forward = bulk_outputs_forward,
    .device_workspace_bytes = chunk_workspace_bytes,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};
