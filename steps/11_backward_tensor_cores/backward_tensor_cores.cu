/* 11_backward_tensor_cores -- 11a with the chains on blocks of 64 columns: each chunk's tiles
 * read once for 64 columns of the state instead of 16.
 *
 * The idea (docs/11_backward_tensor_cores.md, "11: wider chain blocks"): a column of S depends
 * only on the same column of Vnew (and a column of dS only on the same column of dVnew), so a
 * chain block may carry any number of columns; what every block reads each chunk does not
 * depend on that number: the keys, -W (and the queries going backwards), 2 x 64 x K bf16, 32 KB
 * at K = 128. With 16 columns the V / 16 blocks of a head each read them: at K = V = 128 eight
 * times, about 36 KB a block-step forward and 52 KB backward, from L2, and each block waits
 * for them every chunk. With 64 columns a head's chunk is read twice, by blocks of 8 warps (each
 * warp one 16-row tile of the state and all 64 columns, 32 fp32 accumulators); a chunk's step
 * does four times the products for the same wait. And the two chains need nothing of each
 * other (only pass 1's outputs and the inputs), so one launch runs both (both_chains_kernel):
 * where one chain's blocks leave SMs idle, the other's fill them. The other passes are 11a's.
 *
 * Cost: 11a's products and bytes, less the chains' repeated reads: a chunk's keys and -W (and
 * queries) read by the V / 64 blocks of its head instead of V / 16. Depth: T / 64 chunk steps a
 * head where the chains' blocks all fit on the GPU at once, 2 T / 64 (11a's) where they take
 * two waves. Where the two chains' (head, 64 columns) blocks are fewer than the SMs, the
 * chains take 11a's blocks of 16 columns: four times as many. Limits: 11a's.
 *
 * Measured, the mean of two runs in one job on an NVIDIA H100 80GB HBM3
 * (plots/data/backward_chain_copies.dat): 4.43 ms at (8, 4096, 16, 128, 128), 1.17 ms at
 * (1, 16384, 8, 64, 64). In the code of plots/data/backward_chains_together.dat, the chains
 * launched one after the other take 1.43x the joint launch's time at the second shape (2.52
 * against 1.76 ms). Beside FLA's backward replayed from a CUDA graph, in one run on that card
 * model (plots/data/backward_gpu.dat), FLA takes 0.76x our time at the second shape and 0.62x
 * at the first.
 *
 * Build and run:  make bin/11_backward_tensor_cores && bin/11_backward_tensor_cores --T 4096 --H 8 --K 128 --V 128 --check-against oracle
 */
#include <stdint.h>

#include "../../common/backward_stage.h"
#include "../../common/cuda_check.h"
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gates' sums and the blocked solve, unchanged */
extern "C" {                                      /* stage 10's flop count: the same products */
#include "../10_backward_chunked/backward_chunked.h"
}
#include "warp_tiles.cuh"
#include "prepare_chunks.cuh"
#include "chains.cuh"
#include "chunk_gradients.cuh"
#include "backward_passes.cuh"

static_assert((int)CHUNK == (int)SOLVE_CHUNK, "pass 1's chunk is the solve's");

/* the chains on blocks of 64 columns, 8 warps each, where the two chains' blocks together give
 * every SM one; with fewer (few heads, a narrow V) 11a's blocks of 16 columns, four times as
 * many, so that the SMs are not left idle for the whole sequence. Either way the same bits. */
static int backward_tensor_cores_backward(const gdn_device_problem *p, const gdn_device_cotangents *c, const gdn_settings *s,
                                          gdn_device_result *r, gdn_device_gradients *g)
{
    const size_t wide_blocks = p->B * p->H * ((round_up16(p->V) + 63) / 64);
    if (2 * wide_blocks >= (size_t)gdn_sm_count())
        return run_backward_passes<64, true>(p, c, s, r, g);
    return run_backward_passes<16, true>(p, c, s, r, g);
}

extern "C" const gdn_backward_stage backward_tensor_cores_stage = {
    .name = "11_backward_tensor_cores",
    .idea = "11a with the chains on blocks of 64 columns, both at once: each chunk's tiles read once for 64 columns of the state",
    .options = GDN_OPTION_CHUNK,
    .backward = NULL,
    .counted_flops = backward_chunked_flops,
    .resolve_options = backward_passes_resolve_options,
    .device_backward = backward_tensor_cores_backward,
    .device_workspace_bytes = backward_passes_workspace,
    .runner = &gdn_cuda_backward_runner,
    .bf16_inputs = 1,
};
