/* 11a_backward_mma_sync -- stage 10's four passes with every matrix product on tensor cores:
 * bf16 operands, fp32 sums.
 *
 * The idea (docs/11_backward_tensor_cores.md): 10_backward_chunked_cuda's passes, chunk C = 64,
 * unchanged in what they compute (pass 1 the solve, W, U and P^T dO; pass 2 the forward chain,
 * S0 and Vnew, eq. 13-15; pass 3 the backward chain, dS_C and dVnew, eq. 19a-19b; pass 4 o and
 * the gradients, eq. 14-15 and 19c-19d; pass 1 also makes the backward chain's operand scale
 * e^gamma dO, which needs no state) and in what the workspace carries between them (gamma,
 * Tm, -W, U, P^T dO, scale e^gamma dO, Vnew, dVnew, S0 and dS_C; the decays and P are
 * recomputed where they are used), with each product, 27 a chunk, one warp's
 * mma.sync.m16n8k16 tiles (warp_tiles.cuh): a 16 x 16 bf16 tile times a 16 x 8 one into 16 x 8
 * fp32 sums in one instruction, where stage 10's GPU twin spends 256 fp32 multiply-adds of its
 * threads. Operands are staged in shared memory as bf16 and read by ldmatrix as they lie or
 * transposed, so the backward's transposed products (P^T dO, Tm^T dU, K^T Vnew, ...) need no
 * transposed copies. q, k and v are read in bf16 (the driver rounds them, the runner converts
 * them untimed); g, beta, h0, dht, the chains' states S and dS, the solve Tm = (I + M)^-1, every
 * sum and every output stay fp32, the gates' running sums gamma and dgamma double; Vnew, dVnew
 * and the states go to pass 4 in bf16, the only form its products read them in.
 *
 * Where bf16 rounding enters (each a relative 2^-9 on one operand, fp32 sums): do, where it enters
 * a product; Tm, once, after the fp32 solve; the operands beta V and -beta e^gamma K of U and W;
 * -W; P and Z = scale decay (dO Vnew^T); the states S0 and dS_C, and Vnew and dVnew, where they
 * enter a product (the chains' sums stay fp32); and dW, dTm, R = Tm^T dTm and
 * F + F^T, the intermediate operands of pass 4. The diagonal factors (decays, scale e^gamma,
 * beta) multiply fp32 sums where the algebra allows, so q and k enter every product as the exact
 * bf16 inputs they are. The rest is not a product and stays on CUDA cores in fp32: the solve
 * (C^3 / 6 multiply-adds a chunk, against 9 C K V + C^2 (10 K + 6 V) + 2 C^3 on tensor cores), the
 * elementwise factors, and dgamma and dbeta, which are row dot products and row less column
 * sums.
 *
 * Cost: stage 10's products (backward_chunked_flops at C = 64: 18 K V + 64 (22 K + 12 V) + 4.3 *
 * 64^2 flops a token), on tensor cores. Bytes a token, about: q and k in bf16 (k read by both
 * chains' V / 16 column blocks, q by the backward chain's) 2 K (5 + 3 V / 16), v 4 V, do (fp32,
 * read twice by pass 1, once by pass 4) 12 V, scale e^gamma dO (bf16, written and read) 4 V, U
 * and P^T dO (fp32, written and read) 16 V, Vnew and dVnew (bf16, written and read) 8 V,
 * -W (bf16, read by every column block of both chains) 2 K (1 + V / 8), the states (bf16, K V a
 * chunk each, S0 read twice) 0.16 K V, the outputs 8 V + 16 K (dk is written, read and
 * rewritten): about 23 KB at K = V = 128, much of it re-read from L2. Depth: 2 T / 64 chunk
 * steps a head, each three products 64 or K deep on one column block, which waits for its
 * chunk's tiles from memory (no copy ring): with few heads the chains are the bound. Limits:
 * --chunk 64 only, K and V at most 128.
 *
 * Measured: 5.48 ms at (8, 4096, 16, 128, 128), the mean of two runs in one job on an NVIDIA
 * H100 80GB HBM3 (plots/data/backward_scaled_dO.dat; the passes it shares with 11 are
 * measured step by step in docs/11, "Fitting the passes to an SM"); in the peers' run on the
 * same card model 11a takes 5.09 ms there and FLA's backward, replayed from a CUDA graph, 2.77
 * (plots/data/backward_gpu.dat). 1.69 ms at (1, 16384, 8, 64, 64)
 * (plots/data/backward_chain_copies.dat).
 *
 * Build and run:  make bin/11a_backward_mma_sync && bin/11a_backward_mma_sync --T 4096 --H 8 --K 128 --V 128 --check-against oracle
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

/* the chains on blocks of 16 columns, 4 warps each */
static int mma_sync_backward(const gdn_device_problem *p, const gdn_device_cotangents *c, const gdn_settings *s,
                             gdn_device_result *r, gdn_device_gradients *g)
{
    return run_backward_passes<16, false>(p, c, s, r, g);
}

extern "C" const gdn_backward_stage backward_mma_sync_stage = {
    .name = "11a_backward_mma_sync",
    .idea = "stage 10's four passes on tensor cores: bf16 operands, mma.sync products, fp32 sums, states and solve",
    .options = GDN_OPTION_CHUNK,
    .backward = NULL,
    .counted_flops = backward_chunked_flops,
    .resolve_options = backward_passes_resolve_options,
    .device_backward = mma_sync_backward,
    .device_workspace_bytes = backward_passes_workspace,
    .runner = &gdn_cuda_backward_runner,
    .bf16_inputs = 1,
};
