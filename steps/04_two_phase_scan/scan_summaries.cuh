/* scan_summaries.cuh -- phase 2 of stage 04's GPU twin, which stage 07 runs too: the ordered
 * scan of the segments' maps into every segment's start state (eq. 7 of
 * docs/04_two_phase_scan.md),
 *     start_0 = h0,   start_{s+1} = A_s start_s + B_s,   s = 0 .. P-2,
 * per head, in fp32. summaries[head][s] is K x (K + V), row i = [A_s[i, :] | B_s[i, :]];
 * starts[head][s] is K x V. Cost per head: 2 K^2 V (P - 1) flops, P - 1 dependent steps.
 */
#ifndef GDN_SCAN_SUMMARIES_CUH
#define GDN_SCAN_SUMMARIES_CUH

#include <cuda_pipeline_primitives.h>
#include <stdint.h>

#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../01_naive_loop/naive_loop_step.cuh" /* naive_loop_max_k: 32, 64 or 128 rows */

enum { SCAN_COLUMNS = 8 };

/* Row stride of a map's A in shared memory, in floats: a multiple of 4 (16-byte rows for the
 * copies) and 4 more than K rounded up, so that the 4 rows a warp reads at once (threads
 * (i, j), i = 4 a warp) fall 4 banks apart, not in one bank. */
__host__ __device__ static inline size_t scan_map_stride(size_t K) { return (K + 3) / 4 * 4 + 4; }

/* A_s (K x K, row i at map + i W) into shared memory (stride lda) by cp.async: the copy goes
 * on while the block sums the step before. 16-byte pieces where K, W and the map are 16-byte
 * aligned, else 4-byte ones. The caller commits, waits and syncs. */
__device__ static void copy_map(float *to, const float *map, size_t K, size_t W, size_t lda)
{
    const bool whole = K % 4 == 0 && W % 4 == 0 && (uintptr_t)map % 16 == 0;
    const size_t per_row = whole ? K / 4 : K, pieces = K * per_row;
    for (size_t e = threadIdx.x; e < pieces; e += blockDim.x) {
        const size_t row = e / per_row, piece = e % per_row;
        if (whole)
            __pipeline_memcpy_async(to + row * lda + 4 * piece, map + row * W + 4 * piece, 16);
        else
            __pipeline_memcpy_async(to + row * lda + piece, map + row * W + piece, 4);
    }
}

/* Start states of every segment: block (head, SCAN_COLUMNS columns), thread (row i, column j)
 * computes start_{s+1}[i, j] = B_s[i, j] + sum_m A_s[i, m] start_s[m, j] (eq. 7). The maps do
 * not depend on the states, so the whole of A_{s+1} is copied into shared memory (two
 * buffers) while step s sums: a step waits on its K-long sums, not on memory. (The kernel
 * before read A_s 32 columns at a time, each slice's load covered by one slice's sums: 20 us
 * a step at K = 128 on the H200, docs/07.) starts[head][s] is K x V. */
template <int MAX_K>
__global__ void __launch_bounds__(MAX_K * SCAN_COLUMNS)
scan_summaries_kernel(gdn_device_problem p, size_t P, const float *summaries, float *starts)
{
    extern __shared__ float maps_shared[]; /* [2][K][scan_map_stride(K)]: A_s and A_{s+1} */
    __shared__ float S[2][MAX_K][SCAN_COLUMNS];
    const size_t head = blockIdx.x, K = p.K, V = p.V, W = K + V, lda = scan_map_stride(K);
    const unsigned i = threadIdx.x / SCAN_COLUMNS, j = threadIdx.x % SCAN_COLUMNS;
    const size_t column = (size_t)blockIdx.y * SCAN_COLUMNS + j;
    const bool inside = i < K && column < V;
    const float *maps = summaries + head * (P - 1) * K * W;
    S[0][i][j] = inside && p.h0 ? p.h0[(head * K + i) * V + column] : 0.0f;
    if (P > 1)
        copy_map(maps_shared, maps, K, W, lda);
    __pipeline_commit();
    int now = 0;
    for (size_t s = 0; s + 1 < P; s++) {
        const float *A = maps_shared + (s % 2) * K * lda;
        float next = inside ? maps[s * K * W + i * W + K + column] : 0.0f; /* B_s[i, j] */
        if (s + 2 < P) /* A_{s+1}, into the buffer step s - 1 used */
            copy_map(maps_shared + ((s + 1) % 2) * K * lda, maps + (s + 1) * K * W, K, W, lda);
        __pipeline_commit();
        __pipeline_wait_prior(1); /* A_s is here (A_{s+1} may still be coming) */
        __syncthreads();          /* A_s and S[now] complete */
        if (inside) {
            starts[((head * P + s) * K + i) * V + column] = S[now][i][j];
            const float *row = A + i * lda;
#pragma unroll 8
            for (size_t m = 0; m < K; m++)
                next += row[m] * S[now][m][j];
        }
        S[1 - now][i][j] = next;
        __syncthreads(); /* S[1 - now] complete; every read of A_s done before step s + 1 refills it */
        now = 1 - now;
    }
    if (inside)
        starts[((head * P + P - 1) * K + i) * V + column] = S[now][i][j];
}

/* The scan for every head: a block per (head, SCAN_COLUMNS columns), a thread per entry, and
 * two maps' A in shared memory (135 KB at K = 128: one block an SM). */
template <int MAX_K>
static inline int launch_scan_summaries_for(const gdn_device_problem *p, size_t P, const float *summaries, float *starts, dim3 grid)
{
    const size_t bytes = 2 * p->K * scan_map_stride(p->K) * sizeof(float);
    CUDA_LAUNCH_WITH_SHARED(scan_summaries_kernel<MAX_K>, grid, MAX_K * SCAN_COLUMNS, bytes, *p, P, summaries, starts);
    return 0;
}

static inline int launch_scan_summaries(const gdn_device_problem *p, size_t P, const float *summaries, float *starts)
{
    unsigned heads, tiles;
    if (gdn_blocks_for(p->B * p->H, 1, &heads) || gdn_blocks_for(p->V, SCAN_COLUMNS, &tiles))
        return -1;
    if (tiles > 65535)
        return gdn_set_error("V = %zu needs more than 65535 column tiles in one grid", p->V);
    const dim3 grid(heads, tiles);
    switch (naive_loop_max_k(p->K)) {
    case 32: return launch_scan_summaries_for<32>(p, P, summaries, starts, grid);
    case 64: return launch_scan_summaries_for<64>(p, P, summaries, starts, grid);
    case 128: return launch_scan_summaries_for<128>(p, P, summaries, starts, grid);
    default: return gdn_set_error("K = %zu: the summary scan holds K rows in one block, K at most 128", p->K);
    }
}

#endif
