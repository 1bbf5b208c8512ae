/* tensor_core_chunks.cuh -- the two parallel kernels of stage 06's first sub-stages, on tensor
 * cores: kernel 1 (prepare_chunks_kernel: the gates' sums, K K^T, the solve, W and U, the
 * decayed keys; eq. 9-12 and 15's keys) and kernel 3 (chunk_outputs_kernel: o by eq. 14), with
 * the warp's mma.sync products they share, and the workspace between them and the chain.
 * 06a_tensor_cores (tensor_cores.cu) and 06b_producer_consumer (producer_consumer.cu) include
 * it unchanged: they differ only in how the chain, kernel 2, is fed.
 *
 * Cost: stage 05's flops for these parts (wy_chunked_flops), on tensor cores; each kernel a
 * block per (head, chunk), parallel over every chunk, so bound by the GPU's throughput, not by
 * the sequence. Budget (nvcc -Xptxas -v): kernel 1 256 threads, three blocks an SM; kernel 3
 * 256 threads, a block per 64 columns of o.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <stdint.h>

#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
#include "../../common/mma_sync.cuh" /* mma_bf16_16x8x16: the instruction, written out */
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gate sums and the blocked solve, unchanged */
extern "C" { /* stage 05's flop count: the same algebra */
#include "../05_wy_chunked/wy_chunked.h"
}

typedef __nv_bfloat16 bf16;
enum { CHUNK = 64, MAX_K = 128, THREADS = 256, CHAIN_THREADS = 128, CHAIN_COLUMNS = 16, OUTPUT_COLUMNS = 64, CHAIN_STAGES = 3 };
static_assert((int)CHUNK == (int)SOLVE_CHUNK, "kernel 1's chunk is the solve's");
constexpr int TOKEN_STRIDE = CHUNK + 8; /* bf16 row stride of 64-token tiles */

__host__ __device__ static inline int round_up16(size_t x) { return (int)((x + 15) / 16 * 16); }
__host__ __device__ static inline int key_stride(size_t K) { return round_up16(K) + 8; } /* bf16 row stride of K-wide tiles */
__host__ __device__ static inline size_t chunks_of(size_t T) { return (T + CHUNK - 1) / CHUNK; }

/* ---- one warp's tensor-core products ---- */

__device__ __forceinline__ static uint32_t load_pair(const bf16 *p) { return *(const uint32_t *)p; }

/* acc[j] += A[row0 .. row0 + 16)[0 .. depth) B[0 .. depth)[col0 + 8 j .. + 8), j < TILES:
 * A row major (stride lda), B given transposed, Bt[n][k] (stride ldb). depth: a multiple of 16. */
template <int TILES>
__device__ __forceinline__ static void warp_product(float (&acc)[TILES][4], const bf16 *A, int lda, const bf16 *Bt, int ldb,
                                                    int row0, int col0, int depth)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const bf16 *a_row = A + (row0 + g) * lda + 2 * t, *b_row = Bt + (col0 + g) * ldb + 2 * t;
    for (int k0 = 0; k0 < depth; k0 += 16) {
        const uint32_t a[4] = {load_pair(a_row + k0), load_pair(a_row + 8 * lda + k0), load_pair(a_row + k0 + 8),
                               load_pair(a_row + 8 * lda + k0 + 8)};
#pragma unroll
        for (int j = 0; j < TILES; j++) {
            const uint32_t b[2] = {load_pair(b_row + 8 * j * ldb + k0), load_pair(b_row + 8 * j * ldb + k0 + 8)};
            mma_bf16_16x8x16(acc[j], a, b);
        }
    }
}

/* ---- the workspace ---- */

/* Kernel 2's input block per chunk, laid out as its shared-memory slot (16-byte multiples):
 *   W        bf16 [64][key_stride]       A of Vnew = U - W S0
 *   keys_t   bf16 [round_up16(K)][72]    the keys decayed to the chunk's end, transposed: A of
 *                                         the state update S += Kdec^T Vnew
 *   U_t      fp32 [round_up16(V)][64]    U transposed: a 16-column tile is 16 whole rows
 *   decay    fp32 [4]                    exp(gamma_C) and padding
 * Zeros past the chunk's tokens, past K and past V. */
__host__ __device__ static inline size_t chain_keys_offset(size_t K) { return (size_t)CHUNK * key_stride(K) * sizeof(bf16); }
__host__ __device__ static inline size_t chain_u_offset(size_t K)
{
    return chain_keys_offset(K) + (size_t)round_up16(K) * TOKEN_STRIDE * sizeof(bf16);
}
__host__ __device__ static inline size_t chain_decay_offset(size_t K, size_t V) { return chain_u_offset(K) + (size_t)round_up16(V) * CHUNK * sizeof(float); }
__host__ __device__ static inline size_t chain_block_bytes(size_t K, size_t V) { return chain_decay_offset(K, V) + 4 * sizeof(float); }
/* what one chain block (16 columns) copies of it per chunk: W, keys_t, its 16 rows of U_t, the decay */
__host__ __device__ static inline size_t chain_slot_bytes(size_t K) { return chain_u_offset(K) + CHAIN_COLUMNS * CHUNK * sizeof(float) + 4 * sizeof(float); }

typedef struct {
    double *gamma;         /* [heads T] */
    unsigned char *chain;  /* [heads chunks] chain blocks */
    bf16 *states_t;        /* [heads chunks][round_up16(V)][round_up16(K)]: S0 transposed, for kernel 3 */
    bf16 *new_values_t;    /* [heads chunks][round_up16(V)][64]: Vnew transposed */
} chunk_workspace;

static size_t workspace_parts(const gdn_device_problem *p, size_t bytes[4])
{
    const size_t heads = p->B * p->H, chunks = heads * chunks_of(p->T), VP = round_up16(p->V);
    bytes[0] = (heads * p->T * sizeof(double) + 15) / 16 * 16;
    bytes[1] = chunks * chain_block_bytes(p->K, p->V);
    bytes[2] = chunks * VP * round_up16(p->K) * sizeof(bf16);
    bytes[3] = chunks * VP * CHUNK * sizeof(bf16);
    return bytes[0] + bytes[1] + bytes[2] + bytes[3];
}

static chunk_workspace workspace_at(void *base, const gdn_device_problem *p)
{
    size_t bytes[4];
    workspace_parts(p, bytes);
    chunk_workspace w;
    w.gamma = (double *)base;
    w.chain = (unsigned char *)base + bytes[0];
    w.states_t = (bf16 *)(w.chain + bytes[1]);
    w.new_values_t = w.states_t + bytes[2] / sizeof(bf16);
    return w;
}

/* ---- kernel 1: one block per (head, chunk), 8 warps; warp w owns output rows 16 (w % 4) and
 * columns 32 (w / 4) of each 64 x 64 product ---- */

static __global__ void __launch_bounds__(THREADS, 3) prepare_chunks_kernel(gdn_device_problem p, chunk_workspace w)
{
    extern __shared__ double shared[];
    const int K = (int)p.K, KP = round_up16(p.K), LDK = key_stride(p.K);
    const size_t V = p.V, chunks = chunks_of(p.T), chunk = blockIdx.x % chunks, head = blockIdx.x / chunks;
    const size_t t0 = chunk * CHUNK, b = head / p.H, h = head % p.H, row0 = head * p.T + t0;
    const int n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tile_row = 16 * (warp % 4), tile_column = 32 * (warp / 4);
    unsigned char *chain = w.chain + (head * chunks + chunk) * chain_block_bytes(p.K, V);
    const bf16 *k16 = (const bf16 *)p.k_bf16, *v16 = (const bf16 *)p.v_bf16;
    double *gamma = shared;
    float *beta = (float *)(gamma + CHUNK), *scaled_beta = beta + CHUNK, *Tm = scaled_beta + CHUNK;
    bf16 *keys = (bf16 *)(Tm + CHUNK * (CHUNK + 1)), *Tm16 = keys + CHUNK * LDK, *right_t = Tm16 + CHUNK * TOKEN_STRIDE;

    for (int i = warp; i < CHUNK; i += THREADS / 32) { /* a row per warp: coalesced */
        const bf16 *from = k16 + gdn_device_token(&p, b, t0 + (i < n ? i : 0), h) * K;
        for (int c = lane; c < KP; c += 32)
            keys[i * LDK + c] = i < n && c < K ? from[c] : __float2bfloat16_rn(0.0f);
    }
    for (int i = threadIdx.x; i < CHUNK; i += THREADS) {
        size_t token = gdn_device_token(&p, b, t0 + (i < n ? i : 0), h);
        gamma[i] = i < n ? p.g[token] : 0.0;
        beta[i] = i < n ? p.beta[token] : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x < 32) /* eq. 9 */
        cumulative_gates(gamma, beta, scaled_beta, n, w.gamma + row0, (float *)(chain + chain_decay_offset(K, V)));
    __syncthreads();

    /* I + M, M[i, j] = beta_i (k_i . k_j) exp(gamma_i - gamma_j) for j < i (eq. 10): K K^T on
     * tensor cores, keys serving as both A and B^T */
    float acc[4][4];
    clear(acc);
    warp_product(acc, keys, LDK, keys, LDK, tile_row, tile_column, KP);
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(tile_row, r), l = fragment_column(tile_column, j, r);
            Tm[i * (CHUNK + 1) + l] =
                i == l ? 1.0f : l < i && i < n ? beta[i] * acc[j][r] * expf((float)(gamma[i] - gamma[l])) : 0.0f;
        }
    __syncthreads();
    invert_diagonal_blocks<CHUNK + 1>(Tm); /* Tm = (I + M)^-1 (eq. 11), in fp32 */
    __syncthreads();
    join_diagonal_blocks(Tm, CHUNK + 1, (float *)right_t);
    for (int e = threadIdx.x; e < CHUNK * CHUNK; e += THREADS)
        Tm16[e / CHUNK * TOKEN_STRIDE + e % CHUNK] = __float2bfloat16_rn(Tm[e / CHUNK * (CHUNK + 1) + e % CHUNK]);

    /* [W | U] = Tm [beta exp(gamma) K | beta V] (eq. 12), 64 columns at a time; B^T = right_t
     * holds the 64 columns as rows. Consecutive threads read consecutive columns (coalesced
     * global loads of v) and write a column of right_t each. */
    bf16 *W = (bf16 *)chain, *keys_t = (bf16 *)(chain + chain_keys_offset(K));
    float *U_t = (float *)(chain + chain_u_offset(K));
    for (size_t first = 0; first < (size_t)K + V; first += CHUNK) {
        __syncthreads(); /* Tm16 complete; right_t free (the solve's scratch, then the last pass) */
        for (int e = threadIdx.x; e < CHUNK * CHUNK; e += THREADS) {
            const int l = e / CHUNK, c = e % CHUNK;
            const size_t column = first + c;
            float value = 0.0f;
            if (l < n && column < (size_t)K)
                value = scaled_beta[l] * __bfloat162float(keys[l * LDK + column]);
            else if (l < n && column < K + V)
                value = beta[l] * __bfloat162float(v16[gdn_device_token(&p, b, t0 + l, h) * V + (column - K)]);
            right_t[c * TOKEN_STRIDE + l] = __float2bfloat16_rn(value);
        }
        __syncthreads();
        clear(acc);
        warp_product(acc, Tm16, TOKEN_STRIDE, right_t, TOKEN_STRIDE, tile_row, tile_column, CHUNK);
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) { /* rows past the chunk come out zero: right_t is zero there */
                const int i = fragment_row(tile_row, r);
                const size_t out = first + fragment_column(tile_column, j, r);
                if (out < (size_t)K)
                    W[i * LDK + out] = __float2bfloat16_rn(acc[j][r]);
                else if (out < K + V)
                    U_t[(out - K) * CHUNK + i] = acc[j][r];
            }
    }
    /* U_t's rows V .. round_up16(V), so that the last column tile computes with zeros */
    for (int e = threadIdx.x; e < (round_up16(V) - (int)V) * CHUNK; e += THREADS)
        U_t[V * CHUNK + e] = 0.0f;
    /* W's columns K .. KP, and the keys decayed to the chunk's end, transposed (eq. 15); zero
     * past the chunk and past K */
    for (int e = threadIdx.x; e < CHUNK * (KP - K); e += THREADS)
        W[e / (KP - K) * LDK + K + e % (KP - K)] = __float2bfloat16_rn(0.0f);
    for (int e = threadIdx.x; e < KP * CHUNK; e += THREADS) {
        const int c = e / CHUNK, j = e % CHUNK;
        const float value = j < n && c < K ? __bfloat162float(keys[j * LDK + c]) * expf((float)(gamma[n - 1] - gamma[j])) : 0.0f;
        keys_t[c * TOKEN_STRIDE + j] = __float2bfloat16_rn(value);
    }
}


/* ---- the chain's state in MMA accumulators: what kernel 2 of 06a and of 06b computes ----
 * A chain block holds 16 columns of one head's S (K x 16): warp w of its 4 owns rows 16 w ..
 * and 16 (w + 4) .. (two m-tiles at K = 128), both 8-column n-tiles, as S[q][j][r], for the
 * whole sequence (warp: threadIdx.x / 32, made once by the caller). Per chunk (eq. 13 and 15): S0^T out in bf16 (stage_state), Vnew = U - W S0
 * (make_new_values), S = exp(gamma_C) S + Kdec^T Vnew (update_state); each step reads what the
 * one before wrote to shared memory, so the caller puts a barrier between them. */
/* f(q, j, r, m, column) for each of this lane's elements of S[q][j][r], at row m and state column `column` */
template <typename Element>
__device__ __forceinline__ static void for_each_state_element(size_t column0, int warp, Element f)
{
#pragma unroll
    for (int q = 0; q < 2; q++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                f(q, j, r, fragment_row(16 * (warp + 4 * q), r), column0 + fragment_column(0, j, r));
}
__device__ __forceinline__ static void load_state(float (&S)[2][2][4], const gdn_device_problem &p, size_t head, size_t column0, int warp)
{
    const int K = (int)p.K;
    for_each_state_element(column0, warp, [&](int q, int j, int r, int m, size_t column) {
        S[q][j][r] = p.h0 && m < K && column < p.V ? p.h0[(head * K + m) * p.V + column] : 0.0f;
    });
}

/* S0^T in bf16: into S_t (row stride LDK) for Vnew, and into the workspace for kernel 3 */
__device__ __forceinline__ static void stage_state(const float (&S)[2][2][4], int warp, int KP, int LDK, bf16 *S_t, bf16 *states_t)
{
#pragma unroll
    for (int q = 0; q < 2; q++) {
        if (16 * (warp + 4 * q) >= KP)
            continue;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int m = fragment_row(16 * (warp + 4 * q), r), c = fragment_column(0, j, r);
                const bf16 value = __float2bfloat16_rn(S[q][j][r]);
                S_t[c * LDK + m] = value;
                states_t[c * KP + m] = value;
            }
    }
}

/* Vnew = U - W S0 (eq. 13), rows 16 warp .. of the chunk, in bf16: into Vnew_t for the update
 * and into the workspace for kernel 3 */
__device__ __forceinline__ static void make_new_values(int warp, const bf16 *W, const float *U_t, const bf16 *S_t, int LDK, int KP,
                                                       bf16 *Vnew_t, bf16 *new_values_t)
{
    float acc[2][4];
    clear(acc);
    warp_product(acc, W, LDK, S_t, LDK, 16 * warp, 0, KP);
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(16 * warp, r), c = fragment_column(0, j, r);
            const bf16 value = __float2bfloat16_rn(U_t[c * CHUNK + i] - acc[j][r]);
            Vnew_t[c * TOKEN_STRIDE + i] = value;
            new_values_t[c * CHUNK + i] = value;
        }
}

/* S = exp(gamma_C) S + Kdec^T Vnew (eq. 15), in the accumulators */
__device__ __forceinline__ static void update_state(float (&S)[2][2][4], int warp, float decay, const bf16 *keys_t, const bf16 *Vnew_t, int KP)
{
#pragma unroll
    for (int q = 0; q < 2; q++) {
        if (16 * (warp + 4 * q) >= KP)
            continue;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                S[q][j][r] *= decay;
        warp_product(S[q], keys_t, TOKEN_STRIDE, Vnew_t, TOKEN_STRIDE, 16 * (warp + 4 * q), 0, CHUNK);
    }
}

/* the last state into ht */
__device__ __forceinline__ static void store_state(const float (&S)[2][2][4], const gdn_device_problem &p, size_t head, size_t column0,
                                                   int warp, float *ht)
{
    const int K = (int)p.K;
    for_each_state_element(column0, warp, [&](int q, int j, int r, int m, size_t column) {
        if (m < K && column < p.V)
            ht[(head * K + m) * p.V + column] = S[q][j][r];
    });
}

/* ---- kernel 3: one block per (head, chunk, 64 columns of o), 8 warps as in kernel 1 ----
 *     P = lower(Q K^T exp(gamma_i - gamma_j))                       (eq. 14)
 *     o = scale (exp(gamma) Q S0 + P Vnew)                          (eq. 14)
 * B^T operands: k as stored, S0^T and Vnew^T as kernel 2 saved them. */
static __global__ void __launch_bounds__(THREADS) chunk_outputs_kernel(gdn_device_problem p, chunk_workspace w, float *o)
{
    extern __shared__ double shared[];
    const int K = (int)p.K, KP = round_up16(p.K), LDK = key_stride(p.K), VP = round_up16(p.V);
    const size_t V = p.V, chunks = chunks_of(p.T), tiles_per_chunk = (V + OUTPUT_COLUMNS - 1) / OUTPUT_COLUMNS;
    const size_t column0 = blockIdx.x % tiles_per_chunk * OUTPUT_COLUMNS, head_chunk = blockIdx.x / tiles_per_chunk;
    const size_t head = head_chunk / chunks, chunk = head_chunk % chunks, t0 = chunk * CHUNK;
    const size_t b = head / p.H, h = head % p.H, row0 = head * p.T + t0;
    const int n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tile_row = 16 * (warp % 4), tile_column = 32 * (warp / 4);
    const bf16 *q16 = (const bf16 *)p.q_bf16, *k16 = (const bf16 *)p.k_bf16, zero = __float2bfloat16_rn(0.0f);
    const bf16 *S0_t = w.states_t + head_chunk * VP * KP, *new_values_t = w.new_values_t + head_chunk * VP * CHUNK;
    double *gamma = shared;
    bf16 *q = (bf16 *)(gamma + CHUNK), *k = q + CHUNK * LDK, *S = k + CHUNK * LDK, *Vnew = S + OUTPUT_COLUMNS * LDK;
    bf16 *P = Vnew + OUTPUT_COLUMNS * TOKEN_STRIDE;

    for (int i = warp; i < CHUNK; i += THREADS / 32) { /* a row per warp */
        const size_t token = gdn_device_token(&p, b, t0 + (i < n ? i : 0), h);
        for (int c = lane; c < KP; c += 32) {
            q[i * LDK + c] = i < n && c < K ? q16[token * K + c] : zero;
            k[i * LDK + c] = i < n && c < K ? k16[token * K + c] : zero;
        }
    }
    for (int c = warp; c < OUTPUT_COLUMNS; c += THREADS / 32) { /* S0^T and Vnew^T rows; zero past V */
        const bool real = column0 + c < (size_t)VP;
        for (int m = lane; m < KP; m += 32)
            S[c * LDK + m] = real ? S0_t[(column0 + c) * KP + m] : zero;
        for (int j = lane; j < CHUNK; j += 32)
            Vnew[c * TOKEN_STRIDE + j] = real ? new_values_t[(column0 + c) * CHUNK + j] : zero;
    }
    for (int i = threadIdx.x; i < CHUNK; i += THREADS)
        gamma[i] = i < n ? w.gamma[row0 + i] : 0.0;
    __syncthreads();

    float acc[4][4];
    clear(acc);
    warp_product(acc, q, LDK, k, LDK, tile_row, tile_column, KP); /* Q K^T */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) { /* only j <= i: exponents <= 0 */
            const int i = fragment_row(tile_row, r), l = fragment_column(tile_column, j, r);
            P[i * TOKEN_STRIDE + l] = __float2bfloat16_rn(l <= i && i < n ? acc[j][r] * expf((float)(gamma[i] - gamma[l])) : 0.0f);
        }
    clear(acc);
    warp_product(acc, q, LDK, S, LDK, tile_row, tile_column, KP); /* Q S0 */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(tile_row, r);
            acc[j][r] *= i < n ? expf((float)gamma[i]) : 0.0f;
        }
    __syncthreads(); /* P complete */
    warp_product(acc, P, TOKEN_STRIDE, Vnew, TOKEN_STRIDE, tile_row, tile_column, CHUNK); /* + P Vnew */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(tile_row, r);
            const size_t out = column0 + fragment_column(tile_column, j, r);
            if (i < n && out < V)
                o[gdn_device_token(&p, b, t0 + i, h) * V + out] = p.scale * acc[j][r];
        }
}

/* The pass of 06a and 06b: kernel 1, the sub-stage's chain (chain_kernel: chain_threads threads
 * and chain_bytes of shared memory a block, one block per 16 columns of a head), kernel 3. */
typedef void (*tensor_core_chain_kernel)(gdn_device_problem, chunk_workspace, float *);
static int tensor_core_chunks_pass(const gdn_device_problem *p, gdn_device_result *r, const char *stage,
                                   tensor_core_chain_kernel chain_kernel, int chain_threads, size_t chain_bytes)
{
    const size_t K = p->K, V = p->V, heads = p->B * p->H, chunks = chunks_of(p->T), LDK = key_stride(K);
    if (K > MAX_K)
        return gdn_set_error("K = %zu: stage %s keeps K-wide tiles in shared memory, K at most %d", K, stage, MAX_K);
    chunk_workspace w = workspace_at(r->workspace, p);
    unsigned prepare_blocks, state_blocks, output_blocks;
    if (gdn_blocks_for(heads * chunks, 1, &prepare_blocks) ||
        gdn_blocks_for(heads * (round_up16(V) / CHAIN_COLUMNS), 1, &state_blocks) ||
        gdn_blocks_for(heads * chunks * ((V + OUTPUT_COLUMNS - 1) / OUTPUT_COLUMNS), 1, &output_blocks))
        return -1;
    const size_t M = CHUNK, LDT = TOKEN_STRIDE;
    size_t prepare_bytes = M * sizeof(double) + (2 * M + M * (M + 1)) * sizeof(float) + (M * LDK + 2 * M * LDT) * sizeof(bf16);
    size_t output_bytes = M * sizeof(double) + (2 * M * LDK + OUTPUT_COLUMNS * LDK + OUTPUT_COLUMNS * LDT + M * LDT) * sizeof(bf16);
    CUDA_LAUNCH_WITH_SHARED(prepare_chunks_kernel, prepare_blocks, THREADS, prepare_bytes, *p, w);
    CUDA_LAUNCH_WITH_SHARED(chain_kernel, state_blocks, chain_threads, chain_bytes, *p, w, r->ht);
    CUDA_LAUNCH_WITH_SHARED(chunk_outputs_kernel, output_blocks, THREADS, output_bytes, *p, w, r->o);
    return 0;
}

/* the workspace's bytes and the fixed chunk, for the stage descriptors of 06a and 06b */
static int tensor_core_chunks_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    (void)s;
    const size_t heads = p->B * p->H;
    /* the four parts, each a product that could overflow: checked like every size here */
    size_t factors_gamma[3] = {heads, p->T, sizeof(double)}, gamma, chain, states, values;
    size_t factors_chain[3] = {heads, chunks_of(p->T), chain_block_bytes(p->K, p->V)};
    size_t factors_states[4] = {heads * chunks_of(p->T), (size_t)round_up16(p->V), (size_t)round_up16(p->K), sizeof(bf16)};
    size_t factors_values[4] = {heads * chunks_of(p->T), (size_t)round_up16(p->V), CHUNK, sizeof(bf16)};
    if (gdn_multiply_sizes(&gamma, 3, factors_gamma) || gdn_multiply_sizes(&chain, 3, factors_chain) ||
        gdn_multiply_sizes(&states, 4, factors_states) || gdn_multiply_sizes(&values, 4, factors_values))
        return -1;
    *bytes = gamma + 16 + chain + states + values; /* + the alignment gap after gamma */
    return 0;
}

static void tensor_core_chunks_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    s->chunk = CHUNK; /* fixed here; stage 05's flop count reads it */
}
