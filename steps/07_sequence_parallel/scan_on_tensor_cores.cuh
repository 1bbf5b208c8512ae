/* scan_on_tensor_cores.cuh -- phase 2 of stage 07: stage 04's ordered scan of the segments'
 * maps (eq. 7 of docs/04_two_phase_scan.md),
 *     start_0 = h0,   start_{s+1} = A_s start_s + B_s,   s = 0 .. P-2,
 * with each step's product on the tensor cores, at fp32 accuracy (docs/07, "The scan").
 *
 * Why: the scan is P - 1 dependent steps, so its time is P - 1 times one step's latency. Stage
 * 04's kernel (scan_summaries.cuh) gives each thread four sums of K multiply-adds, about 600
 * instructions a warp a step with one warp a scheduler to issue them; here a warp's share of
 * a step is 3 K / 8 tensor-core products and a few dozen other instructions.
 *
 * Precision: the tensor cores multiply tf32 (8 exponent bits, 10 mantissa bits) and add in
 * fp32. A value x is split into hi = x with its 13 low mantissa bits cleared (a tf32 exactly)
 * and lo = x - hi (exact in fp32, of size at most 2^-10 |x|); a product is taken as
 * hi_a hi_b + hi_a lo_b + lo_a hi_b, the lo_a lo_b term (2^-20 of it) left out, and lo as the
 * tensor cores read it keeps 10 of its bits: each product is within about 2^-20 of the fp32
 * one ("3xTF32"). Measured against an fp64 scan: 6e-7 to 8e-7 relative, where stage 04's fp32
 * kernel is 2e-7 to 3e-7 (docs/07).
 *
 * Cost per head: 3 x 2 K^2 V (P - 1) tensor-core flops, P - 1 dependent steps; a block per
 * (head, 8 columns), K / 16 warps (a 16-row tile each), A_s and B_s read from global memory
 * into registers once a step, start_s in shared memory.
 */
#ifndef GDN_SCAN_ON_TENSOR_CORES_CUH
#define GDN_SCAN_ON_TENSOR_CORES_CUH

#include <stdint.h>

#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/kernel_overlap.cuh" /* wait_for_previous_kernel */
#include "../01_naive_loop/naive_loop_step.cuh" /* naive_loop_max_k: 32, 64 or 128 rows */

enum { TF32_SCAN_COLUMNS = 8 }; /* a block's columns of the state: the n of one m16n8k8 product */

/* x's tf32 part: the tensor cores read a tf32 operand's 19 high bits, so clearing the 13 low
 * ones is the split, one instruction (cvt.rna.tf32.f32 rounds instead, and is emulated by about
 * ten integer instructions on sm_90) */
__device__ __forceinline__ static uint32_t tf32_high(float x) { return __float_as_uint(x) & 0xffffe000u; }
__device__ __forceinline__ static uint32_t tf32_low(float x, uint32_t high) { return __float_as_uint(x - __uint_as_float(high)); }

/* c += a b for a 16 x 8 tile: a 16 x 8 (row-major fragments), b 8 x 8, tf32 in, fp32 out.
 * Fragments (PTX ISA, "mma.m16n8k8", .tf32), lane = 4 group + t: a = {(group, t), (group + 8,
 * t), (group, t + 4), (group + 8, t + 4)}, b = {(t, group), (t + 4, group)}, c = {(group, 2t),
 * (group, 2t + 1), (group + 8, 2t), (group + 8, 2t + 1)}. */
__device__ __forceinline__ static void mma_tf32_16x8x8(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Rows of the state in shared memory, transposed (column n's K entries in a row): MAX_K + 16
 * floats, so that the 8 lanes of a quarter warp, reading 16 bytes each at (n, 16 u + 4 t) for
 * n in {group, group + 1}, t < 4, land in 8 different groups of 4 banks. The writes, 8 floats a
 * lane a step at (2t + c, row), are 4-way conflicted in this layout (the four t of a group hit
 * one bank): some 32 shared-memory cycles a warp a step, beside a step of 1 500 (not measured
 * apart). */
template <int MAX_K> struct tf32_scan_layout {
    static constexpr int ROW = MAX_K + 16;
    static constexpr int PIECES = MAX_K / 16; /* a lane's 16-byte pieces of a row of A */
};

/* Which k a lane's fragments hold. The product's sum over m (K terms) may be taken in any
 * order, so the k of an m16n8k8 product need not be 8 consecutive m: a lane (group, t) holds
 * A's entries m = 16 u + 4 t + e (u < MAX_K / 16, e < 4), 16-byte pieces it reads whole, and
 * product 2 u + half takes k = t as m = 16 u + 4 t + 2 half and k = t + 4 as m + 1. The B
 * fragment of the state must use the same m for the same k. */

/* Start states of every segment: block (head, 8 columns), warp w the rows 16 w .. 16 w + 15,
 * lane (group, t) the entries (16 w + group (+ 8), column 2t (+ 1)) of start_{s+1} =
 * A_s start_s + B_s (eq. 7). A step: A_s's hi and lo parts already in registers; wait for
 * start_s (one barrier); read its hi and lo parts; 3 x 2 x MAX_K / 16 products, in three
 * independent chains (hi hi, hi lo, lo hi); add B_s; write start_{s+1}'s parts. A_{s+1} and
 * B_{s+1} are read from global memory at the step's start and split at its end, so their
 * latency runs beside the products. */
template <int MAX_K>
__global__ void __launch_bounds__(MAX_K * 2) scan_on_tensor_cores_kernel(gdn_device_problem p, size_t P, const float *summaries, float *starts)
{
    constexpr int ROW = tf32_scan_layout<MAX_K>::ROW, PIECES = tf32_scan_layout<MAX_K>::PIECES;
    __shared__ __align__(16) float start_high[2][TF32_SCAN_COLUMNS][ROW]; /* start_s transposed, tf32 parts */
    __shared__ __align__(16) float start_low[2][TF32_SCAN_COLUMNS][ROW];
    const size_t head = blockIdx.x, K = p.K, V = p.V, W = K + V;
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, group = lane / 4, t = lane % 4;
    const unsigned row[2] = {16 * warp + group, 16 * warp + group + 8};
    const size_t column = (size_t)blockIdx.y * TF32_SCAN_COLUMNS + 2 * t; /* the lane's two columns: column, column + 1 */
    const float *maps = summaries + head * (P - 1) * K * W;
    const bool whole = K % 4 == 0 && W % 4 == 0 && (uintptr_t)maps % 16 == 0; /* A's pieces as float4 */
    bool inside[2][2];
    float start[2][2], b_now[2][2], b_next[2][2];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int c = 0; c < 2; c++)
            inside[h][c] = row[h] < K && column + c < V;
    wait_for_previous_kernel(); /* the fold's maps (the scan is launched overlapping the fold) */
    /* A_s's entries (row h, m = 16 u + 4 t + e) as they come from memory; zero outside K x K */
    float a_read[2][PIECES][4];
    auto read_map = [&](size_t s) {
        const float *A = maps + s * K * W;
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int u = 0; u < PIECES; u++) {
                const size_t m = 16 * u + 4 * t;
                float4 piece = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (row[h] < K) {
                    const float *from = A + row[h] * W + m;
                    if (whole) {
                        if (m < K) /* K a multiple of 4: a piece is inside or outside */
                            piece = *(const float4 *)from;
                    } else {
                        piece.x = m < K ? from[0] : 0.0f;
                        piece.y = m + 1 < K ? from[1] : 0.0f;
                        piece.z = m + 2 < K ? from[2] : 0.0f;
                        piece.w = m + 3 < K ? from[3] : 0.0f;
                    }
                }
                a_read[h][u][0] = piece.x, a_read[h][u][1] = piece.y, a_read[h][u][2] = piece.z, a_read[h][u][3] = piece.w;
            }
#pragma unroll
            for (int c = 0; c < 2; c++)
                b_next[h][c] = inside[h][c] ? A[row[h] * W + K + column + c] : 0.0f;
        }
    };
    /* the map read last becomes the step's: A's entries split into their parts, B's kept */
    uint32_t a_high[2][PIECES][4], a_low[2][PIECES][4];
    auto take_map = [&]() {
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int u = 0; u < PIECES; u++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    a_high[h][u][e] = tf32_high(a_read[h][u][e]);
                    a_low[h][u][e] = tf32_low(a_read[h][u][e], a_high[h][u][e]);
                }
#pragma unroll
            for (int c = 0; c < 2; c++)
                b_now[h][c] = b_next[h][c];
        }
    };
    /* start_s's entries of this lane into shared memory, as their parts, transposed */
    auto write_start = [&](int buffer) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const uint32_t high = tf32_high(start[h][c]);
                start_high[buffer][2 * t + c][row[h]] = __uint_as_float(high);
                start_low[buffer][2 * t + c][row[h]] = __uint_as_float(tf32_low(start[h][c], high));
            }
    };
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int c = 0; c < 2; c++)
            start[h][c] = inside[h][c] && p.h0 ? p.h0[(head * K + row[h]) * V + column + c] : 0.0f;
    write_start(0);
    if (P > 1) {
        read_map(0);
        take_map();
    }
    int now = 0;
    for (size_t s = 0; s + 1 < P; s++) {
        if (s + 2 < P)
            read_map(s + 1); /* A_{s+1}, B_{s+1}: taken at the step's end */
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 2; c++)
                if (inside[h][c])
                    starts[((head * P + s) * K + row[h]) * V + column + c] = start[h][c];
        __syncthreads(); /* start_s complete in start_*[now] */
        float hi_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f}, hi_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f}, lo_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < PIECES; u++) {
            /* the state's entries (m = 16 u + 4 t + e, column group) for products 2u and 2u + 1 */
            const float4 high4 = *(const float4 *)&start_high[now][group][16 * u + 4 * t];
            const float4 low4 = *(const float4 *)&start_low[now][group][16 * u + 4 * t];
            const uint32_t b_high[4] = {__float_as_uint(high4.x), __float_as_uint(high4.y), __float_as_uint(high4.z), __float_as_uint(high4.w)};
            const uint32_t b_low[4] = {__float_as_uint(low4.x), __float_as_uint(low4.y), __float_as_uint(low4.z), __float_as_uint(low4.w)};
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int e = 2 * half; /* k = t: m = 16 u + 4 t + e; k = t + 4: m + 1 */
                const uint32_t high[4] = {a_high[0][u][e], a_high[1][u][e], a_high[0][u][e + 1], a_high[1][u][e + 1]};
                const uint32_t low[4] = {a_low[0][u][e], a_low[1][u][e], a_low[0][u][e + 1], a_low[1][u][e + 1]};
                mma_tf32_16x8x8(hi_lo, high, b_low[e], b_low[e + 1]);
                mma_tf32_16x8x8(lo_hi, low, b_high[e], b_high[e + 1]);
                mma_tf32_16x8x8(hi_hi, high, b_high[e], b_high[e + 1]);
            }
        }
        /* c[2h + c'] is (row h, column c'); the small terms summed first */
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 2; c++)
                start[h][c] = b_now[h][c] + (hi_hi[2 * h + c] + (hi_lo[2 * h + c] + lo_hi[2 * h + c]));
        write_start(1 - now); /* read after the next step's barrier; its other buffer is this step's */
        if (s + 2 < P)
            take_map();
        now = 1 - now;
    }
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int c = 0; c < 2; c++)
            if (inside[h][c])
                starts[((head * P + P - 1) * K + row[h]) * V + column + c] = start[h][c];
}

/* The scan for every head: a block per (head, 8 columns), K / 16 warps rounded up (MAX_K). */
template <int MAX_K>
static inline int launch_scan_on_tensor_cores_for(const gdn_device_problem *p, size_t P, const float *summaries, float *starts, dim3 grid)
{
    CUDA_LAUNCH_AFTER_PREVIOUS(scan_on_tensor_cores_kernel<MAX_K>, grid, MAX_K * 2, 0, *p, P, summaries, starts);
    return 0;
}

static inline int launch_scan_on_tensor_cores(const gdn_device_problem *p, size_t P, const float *summaries, float *starts)
{
    unsigned heads, tiles;
    if (gdn_blocks_for(p->B * p->H, 1, &heads) || gdn_blocks_for(p->V, TF32_SCAN_COLUMNS, &tiles))
        return -1;
    if (tiles > 65535)
        return gdn_set_error("V = %zu needs more than 65535 column tiles in one grid", p->V);
    const dim3 grid(heads, tiles);
    switch (naive_loop_max_k(p->K)) {
    case 32: return launch_scan_on_tensor_cores_for<32>(p, P, summaries, starts, grid);
    case 64: return launch_scan_on_tensor_cores_for<64>(p, P, summaries, starts, grid);
    case 128: return launch_scan_on_tensor_cores_for<128>(p, P, summaries, starts, grid);
    default: return gdn_set_error("K = %zu: the summary scan holds K rows in one block, K at most 128", p->K);
    }
}

#endif
