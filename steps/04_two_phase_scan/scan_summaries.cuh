/* scan_summaries.cuh -- phase 2 of stage 04's GPU twin (stage 07 runs the same scan with its
 * steps on the tensor cores: steps/07_sequence_parallel/scan_on_tensor_cores.cuh): the ordered
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

#include "../../common/bulk_copy.cuh" /* the TMA unit's copies and their barriers (K = 128) */
#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/kernel_overlap.cuh" /* wait_for_previous_kernel */
#include "../01_naive_loop/naive_loop_step.cuh" /* naive_loop_max_k: 32, 64 or 128 rows */

enum { SCAN_COLUMNS = 8 };

/* Row stride of a map's A in shared memory, in floats: a multiple of 4 (16-byte rows for the
 * copies) and 4 more than K rounded up, so that the 4 rows whose 16-byte pieces a quarter of a
 * warp reads at once (two threads a row) fall 4 banks apart, not in one bank. */
__host__ __device__ static inline size_t scan_map_stride(size_t K) { return (K + 3) / 4 * 4 + 4; }

enum { SCAN_COLUMNS_A_THREAD = 4, SCAN_THREADS_A_ROW = SCAN_COLUMNS / SCAN_COLUMNS_A_THREAD };
static_assert(SCAN_COLUMNS_A_THREAD == 4, "a thread's columns travel as one float4");

/* Row i of A_s (at from, K floats) into shared memory (at to), by the SCAN_THREADS_A_ROW
 * threads that sum row i (this one is `part` of them). At K = 128 (MAX_K) with 16-byte rows
 * (K, W and the maps 16-byte aligned: by_tma) the TMA unit copies it, one bulk copy issued by
 * the row's first thread, counted on `landed`: there a row is 32 pieces, 16 cp.async a thread
 * a step. Else by cp.async, pieces part, part + SCAN_THREADS_A_ROW, ..., so no thread divides
 * to find its row: 16-byte pieces where rows are whole (whole), else 4-byte ones. The copy goes
 * on while the block sums the step before; the caller commits, waits (on `landed` too, where
 * the TMA unit copies: thread 0 has told it the map's bytes) and syncs. */
__device__ static void copy_map_row(float *to, const float *from, size_t K, bool whole, bool by_tma, unsigned part,
                                    uint64_t *landed)
{
    if (by_tma) {
        if (part == 0)
            bulk_copy(to, from, (uint32_t)(K * sizeof(float)), landed);
    } else if (whole) {
        for (size_t piece = part; piece < K / 4; piece += SCAN_THREADS_A_ROW)
            __pipeline_memcpy_async(to + 4 * piece, from + 4 * piece, 16);
    } else {
        for (size_t e = part; e < K; e += SCAN_THREADS_A_ROW)
            __pipeline_memcpy_async(to + e, from + e, 4);
    }
}

/* Start states of every segment: block (head, SCAN_COLUMNS columns), thread (row i, columns
 * j .. j + 3) computes start_{s+1}[i, j + c] = B_s[i, j + c] + sum_m A_s[i, m] start_s[m, j + c]
 * (eq. 7), each of its four sums over m in order, bit-equal to one thread a sum.
 * A step is a chain the next one waits for, so what it waits on is the time: its sums, and
 * what they wait for. The sums: a thread's four share every A_s[i, m] it reads, which it reads
 * four floats at a time, and start_s's four columns come in one read: 5 shared reads for 16
 * multiply-adds (a thread a sum takes 8 for 4). What they wait for: A_s, copied into shared
 * memory (two buffers) while step s - 1 summed, and B_s, read into registers at step s - 1, so
 * that no step starts with a read from global memory. The copy's own instructions are part of
 * a step too: at K = 128 the TMA unit makes them one a row (docs/07, "The scan": a step there
 * 20 % shorter; at K = 64 the bulk copies' issue costs more than the 8 cp.async it saves). */
template <int MAX_K>
__global__ void __launch_bounds__(MAX_K * SCAN_THREADS_A_ROW)
scan_summaries_kernel(gdn_device_problem p, size_t P, const float *summaries, float *starts)
{
    extern __shared__ float4 maps_shared4[]; /* [2][K][scan_map_stride(K)] floats: A_s and A_{s+1} */
    float *maps_shared = (float *)maps_shared4;
    __shared__ float4 S[2][MAX_K][SCAN_THREADS_A_ROW]; /* start_s's SCAN_COLUMNS columns, a row */
    const size_t head = blockIdx.x, K = p.K, V = p.V, W = K + V, lda = scan_map_stride(K);
    const unsigned i = threadIdx.x / SCAN_THREADS_A_ROW, quad = threadIdx.x % SCAN_THREADS_A_ROW;
    const size_t column = (size_t)blockIdx.y * SCAN_COLUMNS + SCAN_COLUMNS_A_THREAD * quad; /* the first of four */
    const float *maps = summaries + head * (P - 1) * K * W;
    const bool whole = K % 4 == 0 && W % 4 == 0 && (uintptr_t)maps % 16 == 0, by_tma = MAX_K == 128 && whole;
    __shared__ uint64_t map_landed[2]; /* by_tma: buffer b's map has landed (phases: maps b, b + 2, ...) */
    if (MAX_K == 128) {
        if (threadIdx.x == 0) {
            barrier_init(&map_landed[0], 1);
            barrier_init(&map_landed[1], 1);
            barrier_init_fence();
        }
        __syncthreads(); /* the barriers set up before any thread copies against them */
    }
    wait_for_previous_kernel(); /* the fold's maps (the scan is launched overlapping the fold) */
    bool inside[SCAN_COLUMNS_A_THREAD];
    float start[SCAN_COLUMNS_A_THREAD], b_now[SCAN_COLUMNS_A_THREAD], b_next[SCAN_COLUMNS_A_THREAD];
    for (int c = 0; c < SCAN_COLUMNS_A_THREAD; c++) {
        inside[c] = i < K && column + c < V;
        start[c] = inside[c] && p.h0 ? p.h0[(head * K + i) * V + column + c] : 0.0f;
        b_now[c] = inside[c] && P > 1 ? maps[i * W + K + column + c] : 0.0f; /* B_0[i, column + c] */
    }
    S[0][i][quad] = make_float4(start[0], start[1], start[2], start[3]);
    if (by_tma && P > 1 && threadIdx.x == 0) /* A_0's phase ends when its K rows' bytes have landed */
        barrier_arrive_expecting(&map_landed[0], (uint32_t)(K * K * sizeof(float)));
    if (P > 1 && i < K)
        copy_map_row(maps_shared + i * lda, maps + i * W, K, whole, by_tma, quad, &map_landed[0]);
    __pipeline_commit();
    int now = 0;
    const size_t whole_quads = K / 4; /* A's row in float4 pieces, then K % 4 floats alone */
    for (size_t s = 0; s + 1 < P; s++) {
        const float *A = maps_shared + (s % 2) * K * lda;
        for (int c = 0; c < SCAN_COLUMNS_A_THREAD; c++) /* B_{s+1}, for the next step */
            b_next[c] = inside[c] && s + 2 < P ? maps[(s + 1) * K * W + i * W + K + column + c] : 0.0f;
        if (by_tma && s + 2 < P && threadIdx.x == 0)
            barrier_arrive_expecting(&map_landed[(s + 1) % 2], (uint32_t)(K * K * sizeof(float)));
        if (s + 2 < P && i < K) /* A_{s+1}, into the buffer step s - 1 used */
            copy_map_row(maps_shared + ((s + 1) % 2) * K * lda + i * lda, maps + (s + 1) * K * W + i * W, K, whole, by_tma,
                         quad, &map_landed[(s + 1) % 2]);
        __pipeline_commit();
        __pipeline_wait_prior(1); /* A_s is here (A_{s+1} may still be coming) */
        if (by_tma)
            barrier_wait(&map_landed[s % 2], (uint32_t)(s / 2) % 2);
        __syncthreads(); /* A_s and S[now] complete */
        float next[SCAN_COLUMNS_A_THREAD] = {b_now[0], b_now[1], b_now[2], b_now[3]};
        if (i < K) {
            const float4 mine = S[now][i][quad];
            const float here[SCAN_COLUMNS_A_THREAD] = {mine.x, mine.y, mine.z, mine.w};
            for (int c = 0; c < SCAN_COLUMNS_A_THREAD; c++)
                if (inside[c])
                    starts[((head * P + s) * K + i) * V + column + c] = here[c];
            const float *row = A + i * lda;
#pragma unroll 4
            for (size_t m4 = 0; m4 < whole_quads; m4++) {
                const float4 a = *(const float4 *)(row + 4 * m4);
                const float4 s0 = S[now][4 * m4][quad], s1 = S[now][4 * m4 + 1][quad];
                const float4 s2 = S[now][4 * m4 + 2][quad], s3 = S[now][4 * m4 + 3][quad];
                next[0] += a.x * s0.x; next[1] += a.x * s0.y; next[2] += a.x * s0.z; next[3] += a.x * s0.w;
                next[0] += a.y * s1.x; next[1] += a.y * s1.y; next[2] += a.y * s1.z; next[3] += a.y * s1.w;
                next[0] += a.z * s2.x; next[1] += a.z * s2.y; next[2] += a.z * s2.z; next[3] += a.z * s2.w;
                next[0] += a.w * s3.x; next[1] += a.w * s3.y; next[2] += a.w * s3.z; next[3] += a.w * s3.w;
            }
            for (size_t m = 4 * whole_quads; m < K; m++) {
                const float4 sm = S[now][m][quad];
                next[0] += row[m] * sm.x; next[1] += row[m] * sm.y; next[2] += row[m] * sm.z; next[3] += row[m] * sm.w;
            }
        }
        S[1 - now][i][quad] = make_float4(next[0], next[1], next[2], next[3]);
        for (int c = 0; c < SCAN_COLUMNS_A_THREAD; c++)
            b_now[c] = b_next[c];
        __syncthreads(); /* S[1 - now] complete; every read of A_s done before step s + 1 refills it */
        now = 1 - now;
    }
    if (i < K) {
        const float4 mine = S[now][i][quad];
        const float here[SCAN_COLUMNS_A_THREAD] = {mine.x, mine.y, mine.z, mine.w};
        for (int c = 0; c < SCAN_COLUMNS_A_THREAD; c++)
            if (inside[c])
                starts[((head * P + P - 1) * K + i) * V + column + c] = here[c];
    }
}

/* The scan for every head: a block per (head, SCAN_COLUMNS columns), a thread per four entries
 * of a row, and two maps' A in shared memory (135 KB at K = 128: one block an SM). */
template <int MAX_K>
static inline int launch_scan_summaries_for(const gdn_device_problem *p, size_t P, const float *summaries, float *starts, dim3 grid)
{
    const size_t bytes = 2 * p->K * scan_map_stride(p->K) * sizeof(float);
    CUDA_LAUNCH_AFTER_PREVIOUS(scan_summaries_kernel<MAX_K>, grid, MAX_K * SCAN_THREADS_A_ROW, bytes, *p, P, summaries, starts);
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
