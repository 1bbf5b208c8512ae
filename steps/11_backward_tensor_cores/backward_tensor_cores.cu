/* 11_backward_tensor_cores -- stage 10's four passes with every matrix product on tensor cores:
 * bf16 operands, fp32 sums.
 *
 * The idea (docs/11_backward_tensor_cores.md): 10_backward_chunked_cuda's passes, chunk C = 64,
 * unchanged in what they compute (pass 1 the solve, W, U and P^T dO; pass 2 the forward chain,
 * S0 and Vnew, eq. 13-15; pass 3 the backward chain, dS_C and dVnew, eq. 19a-19b; pass 4 o and
 * the gradients, eq. 14-15 and 19c-19d) and in what the workspace carries between them (gamma,
 * Tm, -W, U then Vnew, P^T dO then dVnew, S0 and dS_C; the decays and P are recomputed where
 * they are used), with each product, 27 a chunk, one warp's
 * mma.sync.m16n8k16 tiles (warp_tiles.cuh): a 16 x 16 bf16 tile times a 16 x 8 one into 16 x 8
 * fp32 sums in one instruction, where stage 10's GPU twin spends 256 fp32 multiply-adds of its
 * threads. Operands are staged in shared memory as bf16 and read by ldmatrix as they lie or
 * transposed, so the backward's transposed products (P^T dO, Tm^T dU, K^T Vnew, ...) need no
 * transposed copies. q, k and v are read in bf16 (the driver rounds them, the runner converts
 * them untimed); g, beta, h0, dht, the chains' states S and dS, the solve Tm = (I + M)^-1, every
 * sum and every output stay fp32, the gates' running sums gamma and dgamma double.
 *
 * Where bf16 rounding enters (each a relative 2^-9 on one operand, fp32 sums): do, where it enters
 * a product; Tm, once, after the fp32 solve; the operands beta V and -beta e^gamma K of U and W;
 * -W; P and Z = scale decay (dO Vnew^T); the states S0 and dS_C, and Vnew and dVnew, where they
 * enter a product (the workspace and the chains keep them in fp32); and dW, dTm, R = Tm^T dTm and
 * F + F^T, the intermediate operands of pass 4. The diagonal factors (decays, scale e^gamma,
 * beta) multiply fp32 sums where the algebra allows, so q and k enter every product as the exact
 * bf16 inputs they are. The rest is not a product and stays on CUDA cores in fp32: the solve
 * (C^3 / 6 multiply-adds a chunk, against 9 C K V + C^2 (10 K + 6 V) + 2 C^3 on tensor cores), the
 * elementwise factors, and dgamma and dbeta, which are row dot products and row less column
 * sums.
 *
 * Cost: stage 10's products (backward_chunked_flops at C = 64: 18 K V + 64 (22 K + 12 V) + 4.3 *
 * 64^2 flops a token), on tensor cores. Bytes a token, about: q and k in bf16 (k read by both
 * chains' V / 16 column blocks) 2 K (5 + V / 4), v 4 V, do (fp32) 12 V, U -> Vnew and P^T dO ->
 * dVnew (fp32, written, rewritten, read) 32 V, -W (bf16, read by every column block of both
 * chains) 2 K (1 + V / 8), the states (fp32, K V a chunk each, S0 read twice) 0.31 K V, the
 * outputs 8 V + 16 K (dk is written, read and rewritten): about 26 KB at K = V = 128, much of
 * it re-read from L2. Depth: 2 T / 64 chunk steps a head, each three products 64 or K deep on
 * one column block, which waits for its chunk's tiles from memory (no copy ring): with few heads
 * the chains are the bound. Limits: --chunk 64 only, K and V at most 128.
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

static_assert((int)CHUNK == (int)SOLVE_CHUNK, "pass 1's chunk is the solve's");

/* ---- host ---- */

/* what the kernels take: one line naming the value refused */
static int check_limits(size_t heads, size_t T, size_t K, size_t V, size_t C)
{
    if (C != CHUNK)
        return gdn_set_error("--chunk %zu: the tensor-core backward runs chunks of %d tokens only (its blocked solve's)", C,
                             (int)CHUNK);
    if (K > MAX_WIDTH)
        return gdn_set_error("K = %zu: the tensor-core backward keeps K-wide tiles in shared memory, K at most %d", K,
                             (int)MAX_WIDTH);
    if (V > MAX_WIDTH)
        return gdn_set_error("V = %zu: the tensor-core backward keeps V-wide tiles in shared memory, V at most %d", V,
                             (int)MAX_WIDTH);
    if (heads > INT32_MAX / ((T + CHUNK - 1) / CHUNK))
        return gdn_set_error("%zu heads of %zu chunks: more blocks than one launch takes", heads, chunks_of(T));
    return 0;
}

/* the workspace's pieces at base (NULL: only their size, in *bytes), each 256-byte aligned */
static int workspace_layout(size_t heads, size_t T, size_t K, size_t V, void *base, backward_workspace *w, size_t *bytes)
{
    const size_t chunks = chunks_of(T), KP = (size_t)round_up16(K);
    const size_t factors[8][4] = {{heads, T, sizeof(double), 1},
                                  {heads, T, sizeof(double), 1},
                                  {heads, chunks, CHUNK * CHUNK, sizeof(bf16)},
                                  {heads, chunks, CHUNK * KP, sizeof(bf16)},
                                  {heads, T, V, sizeof(float)},
                                  {heads, T, V, sizeof(float)},
                                  {heads, chunks, K * V, sizeof(float)},
                                  {heads, chunks, K * V, sizeof(float)}};
    size_t offsets[8], offset = 0;
    for (int i = 0; i < 8; i++) {
        size_t size;
        if (gdn_multiply_sizes(&size, 4, factors[i]) || size > SIZE_MAX - 255 - offset)
            return gdn_set_error("the backward's workspace for %zu heads of %zu tokens overflows size_t", heads, T);
        offsets[i] = offset;
        offset += (size + 255) / 256 * 256;
    }
    *bytes = offset;
    if (base) {
        unsigned char *at = (unsigned char *)base;
        *w = (backward_workspace){chunks,
                                  (double *)(at + offsets[0]),
                                  (double *)(at + offsets[1]),
                                  (bf16 *)(at + offsets[2]),
                                  (bf16 *)(at + offsets[3]),
                                  (float *)(at + offsets[4]),
                                  (float *)(at + offsets[5]),
                                  (float *)(at + offsets[6]),
                                  (float *)(at + offsets[7])};
    }
    return 0;
}

static int backward_tensor_cores_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    const size_t heads = p->B * p->H;
    return check_limits(heads, p->T, p->K, p->V, s->chunk) || workspace_layout(heads, p->T, p->K, p->V, NULL, NULL, bytes) ? -1
                                                                                                                          : 0;
}

static int backward_tensor_cores_backward(const gdn_device_problem *p, const gdn_device_cotangents *c, const gdn_settings *s,
                                          gdn_device_result *r, gdn_device_gradients *g)
{
    const size_t heads = p->B * p->H, K = p->K, V = p->V;
    if (check_limits(heads, p->T, K, V, s->chunk))
        return -1;
    if (!p->q_bf16 || !p->k_bf16 || !p->v_bf16)
        return gdn_set_error("the tensor-core backward reads q, k and v in bf16, and none were given");
    backward_workspace w;
    size_t bytes = 0;
    if (workspace_layout(heads, p->T, K, V, r->workspace, &w, &bytes))
        return -1;
    if (bytes > r->workspace_bytes)
        return gdn_set_error("the backward's workspace needs %zu bytes, %zu were given", bytes, r->workspace_bytes);
    unsigned chunk_blocks, chain_blocks;
    if (gdn_blocks_for(heads * w.chunks, 1, &chunk_blocks) ||
        gdn_blocks_for(heads * (round_up16(V) / CHAIN_COLUMNS), 1, &chain_blocks))
        return -1;
    CUDA_LAUNCH_WITH_SHARED(prepare_chunks_kernel, chunk_blocks, THREADS, prepare_tiles_at(nullptr, K, V).bytes, *p, *c, w);
    CUDA_LAUNCH_WITH_SHARED(forward_chain_kernel, chain_blocks, CHAIN_THREADS, chain_tiles_at(nullptr, K, false).bytes, *p, w,
                            r->ht);
    CUDA_LAUNCH_WITH_SHARED(backward_chain_kernel, chain_blocks, CHAIN_THREADS, chain_tiles_at(nullptr, K, true).bytes, *p, *c,
                            w, g->dh0);
    CUDA_LAUNCH_WITH_SHARED(read_gradients_kernel, chunk_blocks, THREADS, read_tiles_at(nullptr, K, V).bytes, *p, *c, w, r->o,
                            *g);
    CUDA_LAUNCH_WITH_SHARED(wy_gradients_kernel, chunk_blocks, THREADS, wy_tiles_at(nullptr, K, V).bytes, *p, w, *g);
    return 0;
}

static void backward_tensor_cores_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    if (s->chunk == 0)
        s->chunk = CHUNK;
}

extern "C" const gdn_backward_stage backward_tensor_cores_stage = {
    .name = "11_backward_tensor_cores",
    .idea = "stage 10's four passes on tensor cores: bf16 operands, mma.sync products, fp32 sums, states and solve",
    .options = GDN_OPTION_CHUNK,
    .backward = NULL,
    .counted_flops = backward_chunked_flops,
    .resolve_options = backward_tensor_cores_resolve_options,
    .device_backward = backward_tensor_cores_backward,
    .device_workspace_bytes = backward_tensor_cores_workspace,
    .runner = &gdn_cuda_backward_runner,
    .bf16_inputs = 1,
};
