/* 06c_bulk_copies -- 06b with the kernels around the chain fed by the TMA unit: kernel 3 takes its
 * tiles by tensor and bulk copies, kernel 1 takes k and v by tensor copies, joins its solve on
 * tensor cores and stores W and U by bulk copies.
 *
 * The idea (docs/06_warp_specialized.md, "06c: kernels 1 and 3 by the TMA unit"): in 06b the
 * chain is fed by the TMA unit, but the two kernels around it, which hold most of the pass's
 * work, copy their tiles element by element and leave tensor cores idle.
 *   Kernel 3 (chunk_outputs.cuh): q and k come by a tensor copy each (a tensor map, made on the
 *   host, describes a head's rows H K values apart), S0^T and Vnew^T by one bulk copy each,
 *   because the chain (producer_chain.cuh) stores their rows padded exactly as kernel 3's tiles
 *   are; fragments come by ldmatrix, P first while S0^T and Vnew^T still land, the causal
 *   products skip their zero blocks, and o leaves in bf16 in whole rows.
 *   Kernel 1 (prepare_w_and_u.cuh): k and v come by one tensor copy each, v only after the
 *   solve, into the place of the solve's scratch; the diagonal blocks' inverses are joined by
 *   doubling on tensor cores (tf32); the scales go into Tm's columns, so that
 *   W = (Tm diag(beta e^gamma)) K and U = (Tm diag(beta)) V take K and V as they lie, through
 *   ldmatrix.trans; U is kept in bf16, in the order the chain's lanes read it as fragments;
 *   W and U leave through staging tiles by bulk stores. The tiles share places, so four
 *   blocks fit an SM at K = V = 128, with K = V compiled known.
 *
 * Where bf16 rounding enters: 06a's places, with Tm diag(beta e^gamma) and Tm diag(beta)
 * (strictly lower parts) in place of Tm and the scaled keys and values, U before
 * Vnew = U - W S0, and o, written in bf16 as FLA writes it; the joins in tf32.
 *
 * Cost: 06b's flops; kernel 1 reads k and v once by tensor copies and writes whole lines in
 * half the bytes for U, kernel 3 reads its tiles by a few copy instructions a block.
 * Depth: T / 64 chunk steps of kernel 2, as in 06b.
 * Limits: K <= 128, chunk 64 (fixed), V and T any.
 *
 * Build and run:  make bin/06c_bulk_copies && bin/06c_bulk_copies --T 16384 --H 8 --check-against oracle
 * Measured: 1.36 ms at (8, 4096, 16, 128, 128), FLA's CUDA graph 1.02 ms, in one run on an NVIDIA
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
#include "prepare_w_and_u.cuh"     /* kernel 1 and its launch */
#include "producer_chain.cuh"      /* kernel 2 */
#include "chunk_outputs.cuh"       /* kernel 3: stage 06's, */
#include "outputs_after_chain.cuh" /* run after the chain */

/* kernel 1, the chain, kernel 3 with 128 columns of o a block where V is a multiple of 128 (no
   block half empty), else 64 */
static int bulk_copies_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    (void)s;
    const size_t K = p->K, V = p->V, heads = p->B * p->H;
    if (K > MAX_K)
        return gdn_set_error("K = %zu: stage 06c keeps K-wide tiles in shared memory, K at most %d", K, MAX_K);
    chunk_workspace w = workspace_at(r->workspace, p, false);
    unsigned state_blocks;
    if (gdn_blocks_for(heads * (round_up16(V) / CHAIN_COLUMNS), 1, &state_blocks))
        return -1;
    const size_t chain_bytes = ring_barriers_offset(K) + 2 * CHAIN_STAGES * sizeof(uint64_t);
    if (launch_prepare_chunks<false>(p, w))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(chunk_states_kernel, state_blocks, PRODUCER_CHAIN_THREADS, chain_bytes, *p, w, r->ht);
    return launch_outputs_after_chain<false>(p, w, r);
}

extern "C" const gdn_stage bulk_copies_stage = {
    .name = "06c_bulk_copies",
    .idea = "06b with kernels 1 and 3 fed by the TMA unit: tensor and bulk copies, tf32 joins, scales in Tm",
    .options = 0,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = chunk_resolve_options,
    .device_forward = bulk_copies_forward,
    .device_workspace_bytes = chunk_workspace_bytes,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};
