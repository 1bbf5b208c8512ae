/* scan_summaries.cuh -- phase 2 of stage 04's GPU twin, which stage 07 runs too: the ordered
 * scan of the segments' maps into every segment's start state (eq. 7 of
 * docs/04_two_phase_scan.md),
 *     start_0 = h0,   start_{s+1} = A_s start_s + B_s,   s = 0 .. P-2,
 * per head, in fp32. summaries[head][s] is K x (K + V), row i = [A_s[i, :] | B_s[i, :]];
 * starts[head][s] is K x V. Cost per head: 2 K^2 V (P - 1) flops, P - 1 dependent steps.
 */
#ifndef GDN_SCAN_SUMMARIES_CUH
#define GDN_SCAN_SUMMARIES_CUH

#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../01_naive_loop/naive_loop_step.cuh" /* naive_loop_max_k: 32, 64 or 128 rows */

enum { SCAN_COLUMNS = 8 };

/* Start states of every segment: block (head, SCAN_COLUMNS columns), thread (row i, column j).
 * starts[head][s] is K x V. */
/* SLICE columns of map A_s, rows 0 .. K, into registers: PER_THREAD entries per thread,
 * consecutive threads on consecutive columns of a row (coalesced). */
template <int MAX_K, int SLICE, int PER_THREAD>
__device__ __forceinline__ static void load_slice(const float *map, size_t K, size_t W, size_t m0, float (&staged)[PER_THREAD])
{
#pragma unroll
    for (int t = 0; t < PER_THREAD; t++) {
        const size_t e = threadIdx.x + (size_t)t * MAX_K * SCAN_COLUMNS, row = e / SLICE, column = m0 + e % SLICE;
        staged[t] = row < K && column < K ? map[row * W + column] : 0.0f;
    }
}

/* Thread (i, j) computes start_{s+1}[i, j] = B_s[i, j] + sum_m A_s[i, m] start_s[m, j] (eq. 7).
 * A_s goes through shared memory SLICE columns at a time, and the next slice (of this map or
 * the next) is loaded into registers while this one is used: the loads do not depend on
 * the states, so only the K-long sums are on the chain, not K memory latencies. */
template <int MAX_K>
__global__ void __launch_bounds__(MAX_K * SCAN_COLUMNS)
scan_summaries_kernel(gdn_device_problem p, size_t P, const float *summaries, float *starts)
{
    enum { SLICE = 32, PER_THREAD = MAX_K * SLICE / (MAX_K * SCAN_COLUMNS) };
    __shared__ float S[2][MAX_K][SCAN_COLUMNS];
    __shared__ float A[MAX_K][SLICE + 1]; /* +1: the threads of a warp read 4 rows, 4 banks apart */
    const size_t head = blockIdx.x, K = p.K, V = p.V, W = K + V;
    const unsigned i = threadIdx.x / SCAN_COLUMNS, j = threadIdx.x % SCAN_COLUMNS;
    const size_t column = (size_t)blockIdx.y * SCAN_COLUMNS + j, slices = (K + SLICE - 1) / SLICE, items = (P - 1) * slices;
    const bool inside = i < K && column < V;
    const float *maps = summaries + head * (P - 1) * K * W;
    S[0][i][j] = inside && p.h0 ? p.h0[(head * K + i) * V + column] : 0.0f;
    float staged[PER_THREAD], next = 0.0f;
    if (items > 0)
        load_slice<MAX_K, SLICE>(maps, K, W, 0, staged);
    int now = 0;
    for (size_t item = 0; item < items; item++) { /* (segment s, slice m0) */
        const size_t s = item / slices, m0 = item % slices * SLICE;
        __syncthreads(); /* S[now] complete; A free */
        if (m0 == 0) {
            if (inside)
                starts[((head * P + s) * K + i) * V + column] = S[now][i][j];
            next = inside ? maps[s * K * W + i * W + K + column] : 0.0f; /* B_s[i, j] */
        }
#pragma unroll
        for (int t = 0; t < PER_THREAD; t++) {
            const unsigned e = threadIdx.x + t * MAX_K * SCAN_COLUMNS;
            A[e / SLICE][e % SLICE] = staged[t];
        }
        __syncthreads();
        if (item + 1 < items) /* the next slice, under this one's sums */
            load_slice<MAX_K, SLICE>(maps + (item + 1) / slices * K * W, K, W, (item + 1) % slices * SLICE, staged);
        if (inside)
#pragma unroll 8
            for (int c = 0; c < SLICE; c++) /* A is zero past K */
                next += A[i][c] * S[now][m0 + c < MAX_K ? m0 + c : 0][j];
        if (m0 + SLICE >= K) { /* the sum is complete: start_{s+1} */
            S[1 - now][i][j] = next;
            now = 1 - now;
        }
    }
    __syncthreads();
    if (inside)
        starts[((head * P + P - 1) * K + i) * V + column] = S[now][i][j];
}

/* The scan for every head: a block per (head, SCAN_COLUMNS columns), a thread per entry. */
static inline int launch_scan_summaries(const gdn_device_problem *p, size_t P, const float *summaries, float *starts)
{
    unsigned heads, tiles;
    if (gdn_blocks_for(p->B * p->H, 1, &heads) || gdn_blocks_for(p->V, SCAN_COLUMNS, &tiles))
        return -1;
    if (tiles > 65535)
        return gdn_set_error("V = %zu needs more than 65535 column tiles in one grid", p->V);
    const dim3 grid(heads, tiles);
    switch (naive_loop_max_k(p->K)) {
    case 32: scan_summaries_kernel<32><<<grid, 32 * SCAN_COLUMNS>>>(*p, P, summaries, starts); break;
    case 64: scan_summaries_kernel<64><<<grid, 64 * SCAN_COLUMNS>>>(*p, P, summaries, starts); break;
    case 128: scan_summaries_kernel<128><<<grid, 128 * SCAN_COLUMNS>>>(*p, P, summaries, starts); break;
    default: return gdn_set_error("K = %zu: the summary scan holds K rows in one block, K at most 128", p->K);
    }
    CUDA_CHECK_LAUNCH("scan_summaries_kernel");
    return 0;
}

#endif
