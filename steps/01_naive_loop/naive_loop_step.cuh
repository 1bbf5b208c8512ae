/* naive_loop_step.cuh -- stage 01's token loop on the GPU, as device code stage 04 reuses.
 *
 * One thread owns one column j of the K x V state: S[:, j] lives in its registers for the
 * whole loop (state[MAX_K], K <= MAX_K; the rows past K stay zero because the keys and
 * queries are padded with zeros). Per token, with the token's k and q in shared memory
 * (every thread reads the same element: a broadcast, no bank conflicts), eq. 1a-1d of
 * docs/01_naive_loop.md become, for this column,
 *     predicted = sum_i S_ij k_i            (a dot product over the column: no other thread needed)
 *     u_j       = beta (v_j - alpha predicted)
 *     S_ij      = alpha S_ij + k_i u_j
 *     o_j       = scale sum_i q_i S_ij
 * so a column never talks to another column: no reductions across threads. At K = 128 a
 * column of 128 registers leaves too few for the rest (ptxas spills), so there two threads
 * share a column, 64 rows each, and add their two halves of each dot product with one
 * warp shuffle (threads_per_column below).
 * A block of COLUMNS_PER_BLOCK threads shares one tile of TOKENS_PER_TILE tokens, loaded
 * cooperatively (coalesced) into shared memory between two __syncthreads.
 *
 * Stage 04 runs the same loop on the augmented state [A | B] (K + V columns): its first K
 * columns carry no value (value_offset = K makes v read as zero there).
 */
#ifndef GDN_NAIVE_LOOP_STEP_CUH
#define GDN_NAIVE_LOOP_STEP_CUH

#include "../../common/device.h"

enum { COLUMNS_PER_BLOCK = 64, TOKENS_PER_TILE = 32 };

/* Threads sharing one state column, and the rows each holds, for a column padded to MAX_K. */
__host__ __device__ constexpr int threads_per_column(int max_k) { return max_k > 64 ? 2 : 1; }
__host__ __device__ constexpr int rows_per_thread(int max_k) { return max_k / threads_per_column(max_k); }

/* One tile of tokens in shared memory; k and q rows padded with zeros to MAX_K. */
template <int MAX_K> struct token_tile {
    float4 k[TOKENS_PER_TILE][MAX_K / 4], q[TOKENS_PER_TILE][MAX_K / 4];
    float v[TOKENS_PER_TILE][COLUMNS_PER_BLOCK];
    float alpha[TOKENS_PER_TILE], beta[TOKENS_PER_TILE];
};

/* Where a run of tokens lies: token i's q and k are row first_key + i key_stride (rows of K
 * numbers), its v, o, g and beta row first_value + i value_stride (rows of V numbers, or one).
 * A head's tokens are H rows apart, and HV value rows apart with grouped value heads. */
struct token_rows {
    size_t first_key, key_stride, first_value, value_stride;
};

/* The `tokens` tokens at `rows`, for the block's columns first_column + 0 .. 63;
 * the block has 64 threads_per_column(MAX_K) threads, thread x holding rows
 * (x % threads_per_column) rows_per_thread + 0 .. rows_per_thread - 1 of column x / threads_per_column.
 * state: those rows, updated in place. A column c reads value column c - value_offset
 * (zero outside 0 .. V - 1). o: NULL, or where the outputs of value columns go. All threads of
 * the block must call this (they share the tile loads and barriers). */
template <int MAX_K>
__device__ void naive_loop_run_tokens(const gdn_device_problem &p, token_rows rows, size_t tokens,
                                      float (&state)[rows_per_thread(MAX_K)], size_t first_column,
                                      size_t value_offset, float *o, token_tile<MAX_K> &tile)
{
    constexpr int SPLIT = threads_per_column(MAX_K), ROWS = rows_per_thread(MAX_K);
    constexpr unsigned BLOCK_THREADS = COLUMNS_PER_BLOCK * SPLIT;
    const unsigned local_column = threadIdx.x / SPLIT, first_row4 = threadIdx.x % SPLIT * ROWS / 4;
    const long long value_column = (long long)(first_column + local_column) - (long long)value_offset;
    const bool has_value = value_column >= 0 && value_column < (long long)p.V && threadIdx.x % SPLIT == 0;
    const size_t K = p.K, V = p.V, key_stride = rows.key_stride, value_stride = rows.value_stride;
    for (size_t tile_start = 0; tile_start < tokens; tile_start += TOKENS_PER_TILE) {
        const unsigned count = tokens - tile_start < TOKENS_PER_TILE ? (unsigned)(tokens - tile_start) : TOKENS_PER_TILE;
        const size_t first_key = rows.first_key + tile_start * key_stride,
                     first_token = rows.first_value + tile_start * value_stride;
        __syncthreads(); /* the previous tile is no longer read */
        /* Loops with a trip count known at compile time, unrolled: every thread issues all its
         * loads of the tile before the first one returns, instead of one load's latency per
         * iteration (which, measured, made this loop about 3x slower per token). */
        float *k_tile = (float *)tile.k, *q_tile = (float *)tile.q;
#pragma unroll
        for (unsigned r = 0; r < TOKENS_PER_TILE * MAX_K / BLOCK_THREADS; r++) {
            unsigned n = threadIdx.x + r * BLOCK_THREADS, t = n / MAX_K, i = n % MAX_K;
            bool real = t < count && i < K;
            size_t at = (first_key + t * key_stride) * K + i;
            k_tile[n] = real ? p.k[at] : 0.0f;
            q_tile[n] = real && o ? p.q[at] : 0.0f;
        }
#pragma unroll
        for (unsigned r = 0; r < TOKENS_PER_TILE * COLUMNS_PER_BLOCK / BLOCK_THREADS; r++) {
            unsigned n = threadIdx.x + r * BLOCK_THREADS, t = n / COLUMNS_PER_BLOCK, j = n % COLUMNS_PER_BLOCK;
            long long c = (long long)(first_column + j) - (long long)value_offset;
            tile.v[t][j] = t < count && c >= 0 && c < (long long)V ? p.v[(first_token + t * value_stride) * V + c] : 0.0f;
        }
        if (threadIdx.x < count) {
            size_t token = first_token + threadIdx.x * value_stride;
            tile.alpha[threadIdx.x] = expf(p.g[token]);
            tile.beta[threadIdx.x] = p.beta[token];
        }
        __syncthreads();

        for (unsigned t = 0; t < count; t++) {
            const float alpha = tile.alpha[t], beta = tile.beta[t];
            const float4 *k = tile.k[t] + first_row4, *q = tile.q[t] + first_row4;
            /* predicted = S^T k on the undecayed column, four partial sums (four independent chains) */
            float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < ROWS / 4; i++) {
                partial[0] += k[i].x * state[4 * i];
                partial[1] += k[i].y * state[4 * i + 1];
                partial[2] += k[i].z * state[4 * i + 2];
                partial[3] += k[i].w * state[4 * i + 3];
            }
            float predicted = (partial[0] + partial[1]) + (partial[2] + partial[3]);
            if (SPLIT == 2) /* the other half of the column sits in the neighbouring lane */
                predicted += __shfl_xor_sync(0xffffffffu, predicted, 1);
            /* eq. 1a and 1b: decaying S first and then reading it equals reading, then scaling by alpha */
            const float u = beta * (tile.v[t][local_column] - alpha * predicted);
            /* eq. 1c */
#pragma unroll
            for (int i = 0; i < ROWS / 4; i++) {
                state[4 * i] = alpha * state[4 * i] + k[i].x * u;
                state[4 * i + 1] = alpha * state[4 * i + 1] + k[i].y * u;
                state[4 * i + 2] = alpha * state[4 * i + 2] + k[i].z * u;
                state[4 * i + 3] = alpha * state[4 * i + 3] + k[i].w * u;
            }
            if (!o) /* stage 04's fold: update only */
                continue;
            /* eq. 1d on the updated column */
            float read[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < ROWS / 4; i++) {
                read[0] += q[i].x * state[4 * i];
                read[1] += q[i].y * state[4 * i + 1];
                read[2] += q[i].z * state[4 * i + 2];
                read[3] += q[i].w * state[4 * i + 3];
            }
            float out = (read[0] + read[1]) + (read[2] + read[3]);
            if (SPLIT == 2)
                out += __shfl_xor_sync(0xffffffffu, out, 1);
            if (has_value)
                o[(first_token + t * value_stride) * V + (size_t)value_column] = p.scale * out;
        }
    }
}

/* The smallest padded column that holds K rows, or 0 when K is too large for registers. */
static inline int naive_loop_max_k(size_t K) { return K <= 32 ? 32 : K <= 64 ? 64 : K <= 128 ? 128 : 0; }

#endif
