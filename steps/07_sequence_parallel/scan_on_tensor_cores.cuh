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
 * one ("3xTF32"). Against an fp64 scan the starts come out within 1e-6 relative (docs/07,
 * "Precision").
 *
 * The maps' reads: every block reads all of A_s (K x K fp32, 16 KB at K = 64) each step. Read
 * by the warps' own loads they take half the step: a warp's load touches 8 lines of the L1,
 * whose pipe the state's shared reads and its 4-way conflicted writes share. Here the TMA unit
 * copies each map into a shared-memory ring two stages deep, a step ahead, in a layout the
 * lanes read without conflicts, and the state is swizzled so that its writes have none either,
 * which shortens the step (docs/07, "The scan", and "Measured and not kept").
 *
 * Cost per head: 3 x 2 K^2 V (P - 1) tensor-core flops, P - 1 dependent steps; a block per
 * (head, 8 columns), K / 16 warps (a 16-row tile each), A_s and B_s copied into a shared ring
 * once a step, 2 x (K^2 + 8 K) floats of shared memory (140 KB at K = 128), start_s in shared
 * memory.
 *
 * Included after stage 06's kernels (sequence_parallel.cuh): it takes common/tensor_maps.cuh's tensor_map_encoder.
 */
#ifndef GDN_SCAN_ON_TENSOR_CORES_CUH
#define GDN_SCAN_ON_TENSOR_CORES_CUH

#include <stdint.h>

#include "../../common/bulk_copy.cuh"      /* mbarriers and tensor copies (the TMA unit) */
#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/kernel_overlap.cuh" /* wait_for_previous_kernel */
#include "../../common/mma_sync.cuh"       /* mma_tf32_16x8x8 (fragments: there) */
#include "../01_naive_loop/naive_loop_step.cuh" /* naive_loop_max_k: 32, 64 or 128 rows */
/* and, from stage 06's headers included before this one: chunks_of, row_tokens (chunk_workspace.cuh),
   segment_chunk (chain_ring.cuh) */

enum { TF32_SCAN_COLUMNS = 8 }; /* a block's columns of the state: the n of one m16n8k8 product */

/* x's tf32 part: the tensor cores read a tf32 operand's 19 high bits, so clearing the 13 low
 * ones is the split, one instruction (cvt.rna.tf32.f32 rounds instead, and is emulated by about
 * ten integer instructions on sm_90) */
__device__ __forceinline__ static uint32_t tf32_high(float x) { return __float_as_uint(x) & 0xffffe000u; }
__device__ __forceinline__ static uint32_t tf32_low(float x, uint32_t high) { return __float_as_uint(x - __uint_as_float(high)); }

/* Where a block keeps things in shared memory (docs/07, "The scan": the layouts as pictures).
 *
 * The maps: a ring of MAP_RING stages, each holding one step's map: A_s's MAX_K x MAX_K
 * entries, then the block's 8 columns of B_s (MAX_K x 8, row after row). A is kept as the TMA
 * unit writes a box of 32 floats x MAX_K rows with its 128-byte swizzle: box m / 32, row r at
 * r x 128 bytes, and the 16-byte piece c of the row (m % 32 = 4 c + e) at piece c ^ (r % 8).
 * A lane (group, t) reads, for u < MAX_K / 16, the 16 bytes of its rows at
 *     m = 32 (u / 2) + 8 t + 4 (u % 2) + e,   e < 4,
 * pieces 2t + u % 2: the 8 lanes of a quarter warp (group 2j and 2j + 1, four t) read pieces
 * of one parity from a row and of the other from the next (r % 8 differs in its lowest bit),
 * so 8 different pieces, 8 different groups of 4 banks: no conflict. The product's sum over m
 * may be taken in any order, so this is the m of the lane's k: product 2u + half takes k = t
 * as m + 2 half and k = t + 4 as m + 2 half + 1 (e = 2 half, 2 half + 1).
 *
 * The state: start_s transposed (column n's MAX_K entries in a row), as its tf32 hi and lo
 * parts, two buffers; column n's entry m at m ^ state_swizzle(n). The reads (lane (group, t):
 * column group, the 16 bytes at its m) and the writes (lane (group, t): columns 2t + c, rows
 * 16 w + group (+ 8)) both land in 32 different banks with
 *     state_swizzle(n) = 8 ((n / 2) % 4) + 4 (n % 2):
 * a read's quarter warp takes columns 2j and 2j + 1, whose swizzles differ in the 4's bit (the
 * pieces 8t ^ 8j, two parities); a write's t moves the 8's and 16's bits, group the rest. */
enum { MAP_RING = 2 }; /* one stage read by the step (the next map), the other being filled (the one after) */
template <int MAX_K> struct tf32_scan_layout {
    static constexpr int PIECES = MAX_K / 16;                    /* a lane's 16-byte pieces of a row of A */
    static constexpr int A_BYTES = MAX_K * MAX_K * 4;           /* a stage's A: MAX_K / 32 boxes of MAX_K x 128 bytes */
    static constexpr int B_BYTES = MAX_K * TF32_SCAN_COLUMNS * 4; /* and its 8 columns of B */
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int SHARED_BYTES = 1024 + MAP_RING * STAGE_BYTES; /* the ring from a 1024-byte boundary (the swizzle's) */
};
/* byte offset of A's entry (r, m) in a stage: the TMA unit's 128-byte swizzle */
template <int MAX_K> __host__ __device__ constexpr unsigned map_entry_offset(unsigned r, unsigned m)
{
    return (m / 32) * MAX_K * 128 + r * 128 + ((((m % 32) / 4) ^ (r % 8)) * 16) + (m % 4) * 4;
}
__device__ __forceinline__ static unsigned state_swizzle(unsigned n) { return 8 * ((n / 2) % 4) + 4 * (n % 2); }

/* Step s's map into its stage, two ways that write the same bytes:
 * by the TMA unit: one thread, three to five tensor copies (A's boxes of 32 columns, B's box of
 * the block's 8 columns; rows and columns past the tensor's land as zeros), their arrival
 * counted by the stage's mbarrier; where the maps' rows are whole 16-byte pieces and K is
 * MAX_K (a box may not be larger than its tensor);
 * by the threads: each copies some entries with ordinary loads and stores (zeros outside K x K
 * and V), made visible by the next __syncthreads; every other K and V. Slower (the loads'
 * latency is the step's), and only the shapes the tensor copies cannot take use it. */
struct scan_maps_by_tensor {
    CUtensorMap A, B; /* A: [maps][K rows][K columns]; B: [maps][K rows][V columns], row stride K + V */
};
template <int MAX_K>
__device__ __forceinline__ static void copy_map_by_tensor(unsigned char *stage, const scan_maps_by_tensor &tensors, int map, int column0,
                                                          uint64_t *full)
{
    barrier_arrive_expecting(full, tf32_scan_layout<MAX_K>::STAGE_BYTES);
#pragma unroll
    for (int box = 0; box < MAX_K / 32; box++)
        tensor_copy_3d(stage + box * MAX_K * 128, &tensors.A, 32 * box, 0, map, full);
    tensor_copy_3d(stage + tf32_scan_layout<MAX_K>::A_BYTES, &tensors.B, column0, 0, map, full);
}
template <int MAX_K>
__device__ __forceinline__ static void copy_map_by_threads(unsigned char *stage, const float *map, size_t K, size_t V, size_t column0)
{
    const size_t W = K + V;
    for (unsigned i = threadIdx.x; i < MAX_K * MAX_K; i += blockDim.x) {
        const unsigned r = i / MAX_K, m = i % MAX_K;
        *(float *)(stage + map_entry_offset<MAX_K>(r, m)) = r < K && m < K ? map[r * W + m] : 0.0f;
    }
    for (unsigned i = threadIdx.x; i < MAX_K * TF32_SCAN_COLUMNS; i += blockDim.x) {
        const unsigned r = i / TF32_SCAN_COLUMNS, c = i % TF32_SCAN_COLUMNS;
        float *to = (float *)(stage + tf32_scan_layout<MAX_K>::A_BYTES) + i;
        *to = r < K && column0 + c < V ? map[r * W + K + column0 + c] : 0.0f;
    }
}

/* Start states of every segment: block (head, 8 columns), warp w the rows 16 w .. 16 w + 15,
 * lane (group, t) the entries (16 w + group (+ 8), column 2t (+ 1)) of start_{s+1} =
 * A_s start_s + B_s (eq. 7). A step: A_s's hi and lo parts already in registers; wait for
 * start_s (one barrier, after which every warp has read the stage A_s came from: it takes the
 * map of step s + 2); read A_{s+1} and B_{s+1} from the next stage (their latency runs beside
 * the products); read start_s's parts; 3 x 2 x MAX_K / 16 products, in three independent
 * chains (hi hi, hi lo, lo hi); add B_s; write start_{s+1}'s parts; split A_{s+1}.
 * BY_TENSOR: the maps come by tensor copies (and K is MAX_K); else by the threads' copies.
 * row_offsets: a packed batch's padded rows (NULL: every row T tokens). A short row's segments
 * past its last real chunk fold no chunk, so their maps are [I | 0]: its scan stops at its
 * last busy map and carries that start through to segment P - 1, whose replay writes ht. */
template <int MAX_K, bool BY_TENSOR>
__global__ void __launch_bounds__(MAX_K * 2) scan_on_tensor_cores_kernel(gdn_device_problem p, size_t P, const float *summaries, float *starts,
                                                                         const size_t *row_offsets, const __grid_constant__ scan_maps_by_tensor tensors)
{
    using layout = tf32_scan_layout<MAX_K>;
    constexpr int PIECES = layout::PIECES;
    extern __shared__ unsigned char shared_bytes[];
    unsigned char *ring = SHARED_AT_1024_BYTES(shared_bytes);
    __shared__ __align__(16) float start_high[2][TF32_SCAN_COLUMNS][MAX_K]; /* start_s transposed, tf32 parts, swizzled */
    __shared__ __align__(16) float start_low[2][TF32_SCAN_COLUMNS][MAX_K];
    __shared__ __align__(8) uint64_t full[MAP_RING]; /* a stage's tensor copies have landed */
    const size_t head = blockIdx.x, K = BY_TENSOR ? MAX_K : p.K, V = p.V, W = K + V, maps = P - 1; /* BY_TENSOR: K = MAX_K */
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, group = lane / 4, t = lane % 4;
    const unsigned row[2] = {16 * warp + group, 16 * warp + group + 8};
    const size_t column0 = (size_t)blockIdx.y * TF32_SCAN_COLUMNS, column = column0 + 2 * t; /* the lane's two: column, column + 1 */
    const float *head_maps = summaries + head * maps * K * W;
    size_t busy = maps; /* the maps that move the state: segments holding one of the row's chunks (segment_chunk) */
    if (row_offsets) {
        const size_t own = chunks_of(row_tokens(row_offsets, head / p.H, p.T)); /* the row's chunks */
        while (busy > 0 && segment_chunk(busy - 1, P, chunks_of(p.T)) >= own)
            busy--;
    }
    bool inside[2][2];
    float start[2][2], b_now[2][2], b_next[2][2];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int c = 0; c < 2; c++)
            inside[h][c] = row[h] < K && column + c < V;
    if (threadIdx.x == 0) {
        for (int i = 0; i < MAP_RING; i++)
            barrier_init(&full[i], 1);
        barrier_init_fence();
    }
    __syncthreads();
    wait_for_previous_kernel(); /* the fold's maps (the scan is launched overlapping the fold) */
    auto copy_map = [&](size_t s) { /* step s's map into stage s % MAP_RING */
        unsigned char *stage = ring + (s % MAP_RING) * layout::STAGE_BYTES;
        if (!BY_TENSOR)
            copy_map_by_threads<MAX_K>(stage, head_maps + s * K * W, K, V, column0);
        else if (threadIdx.x == 0)
            copy_map_by_tensor<MAX_K>(stage, tensors, (int)(head * maps + s), (int)column0, &full[s % MAP_RING]);
    };
    /* A_s's entries (row h, the lane's m) and B_s's, from stage s % MAP_RING */
    float a_read[2][PIECES][4];
    auto read_map = [&](size_t s) {
        if (BY_TENSOR)
            barrier_wait(&full[s % MAP_RING], (uint32_t)(s / MAP_RING % 2));
        const unsigned char *stage = ring + (s % MAP_RING) * layout::STAGE_BYTES;
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int u = 0; u < PIECES; u++) {
                const float4 piece = *(const float4 *)(stage + map_entry_offset<MAX_K>(row[h], 32 * (u / 2) + 8 * t + 4 * (u % 2)));
                a_read[h][u][0] = piece.x, a_read[h][u][1] = piece.y, a_read[h][u][2] = piece.z, a_read[h][u][3] = piece.w;
            }
            const float2 b = *(const float2 *)(stage + layout::A_BYTES + (row[h] * TF32_SCAN_COLUMNS + 2 * t) * 4);
            b_next[h][0] = b.x, b_next[h][1] = b.y;
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
                const unsigned n = 2 * t + c, m = row[h] ^ state_swizzle(n);
                const uint32_t high = tf32_high(start[h][c]);
                start_high[buffer][n][m] = __uint_as_float(high);
                start_low[buffer][n][m] = __uint_as_float(tf32_low(start[h][c], high));
            }
    };
    for (size_t s = 0; s < MAP_RING && s < busy; s++)
        copy_map(s);
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int c = 0; c < 2; c++)
            start[h][c] = inside[h][c] && p.h0 ? p.h0[(head * K + row[h]) * V + column + c] : 0.0f;
    write_start(0);
    __syncthreads(); /* the threads' copies of the first maps */
    if (busy > 0) {
        read_map(0);
        take_map();
    }
    int now = 0;
    for (size_t s = 0; s < busy; s++) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 2; c++)
                if (inside[h][c])
                    starts[((head * P + s) * K + row[h]) * V + column + c] = start[h][c];
        __syncthreads(); /* start_s complete in start_*[now]; stage s % MAP_RING read by every warp */
        if (s + MAP_RING < busy)
            copy_map(s + MAP_RING);
        if (s + 1 < busy)
            read_map(s + 1); /* taken at the step's end */
        float hi_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f}, hi_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f}, lo_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < PIECES; u++) {
            /* the state's entries (the lane's m, column group) for products 2u and 2u + 1 */
            const unsigned m = (32 * (u / 2) + 8 * t + 4 * (u % 2)) ^ state_swizzle(group);
            const float4 high4 = *(const float4 *)&start_high[now][group][m];
            const float4 low4 = *(const float4 *)&start_low[now][group][m];
            const uint32_t b_high[4] = {__float_as_uint(high4.x), __float_as_uint(high4.y), __float_as_uint(high4.z), __float_as_uint(high4.w)};
            const uint32_t b_low[4] = {__float_as_uint(low4.x), __float_as_uint(low4.y), __float_as_uint(low4.z), __float_as_uint(low4.w)};
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int e = 2 * half; /* k = t: the lane's m + e; k = t + 4: m + e + 1 */
                const uint32_t high[4] = {a_high[0][u][e], a_high[1][u][e], a_high[0][u][e + 1], a_high[1][u][e + 1]};
                const uint32_t low[4] = {a_low[0][u][e], a_low[1][u][e], a_low[0][u][e + 1], a_low[1][u][e + 1]};
                mma_tf32_16x8x8(hi_lo, high, {b_low[e], b_low[e + 1]});
                mma_tf32_16x8x8(lo_hi, low, {b_high[e], b_high[e + 1]});
                mma_tf32_16x8x8(hi_hi, high, {b_high[e], b_high[e + 1]});
            }
        }
        /* c[2h + c'] is (row h, column c'); the small terms summed first */
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 2; c++)
                start[h][c] = b_now[h][c] + (hi_hi[2 * h + c] + (hi_lo[2 * h + c] + lo_hi[2 * h + c]));
        write_start(1 - now); /* read after the next step's barrier; its other buffer is this step's */
        if (s + 1 < busy)
            take_map();
        now = 1 - now;
    }
    for (size_t s = busy; s < P; s++) /* segment P - 1, and a short row's idle segments before it */
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 2; c++)
                if (inside[h][c])
                    starts[((head * P + s) * K + row[h]) * V + column + c] = start[h][c];
}

/* The tensor maps of the segments' maps, where the TMA unit can take them (copy_map_by_tensor):
 * K = MAX_K, V at least 8 and rows whole 16-byte pieces; 0 with *usable false elsewhere, -1 on
 * an error. The maps of all heads are one 3-D tensor of heads (P - 1) maps. */
template <int MAX_K>
static int scan_tensor_maps(const gdn_device_problem *p, size_t P, const float *summaries, scan_maps_by_tensor *tensors, bool *usable)
{
    const size_t K = p->K, V = p->V, W = K + V, maps = p->B * p->H * (P - 1);
    *usable = K == MAX_K && V >= TF32_SCAN_COLUMNS && V % 4 == 0 && (uintptr_t)summaries % 16 == 0 && maps > 0 && maps <= 0x7fffffff;
    if (!*usable)
        return 0;
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder(); /* common/tensor_maps.cuh */
    if (!encode)
        return -1;
    const cuuint64_t strides[2] = {W * sizeof(float), K * W * sizeof(float)};
    const cuuint64_t a_sizes[3] = {K, K, maps}, b_sizes[3] = {V, K, maps};
    const cuuint32_t a_box[3] = {32, MAX_K, 1}, b_box[3] = {TF32_SCAN_COLUMNS, MAX_K, 1}, steps[3] = {1, 1, 1};
    CUresult result = encode(&tensors->A, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)summaries, a_sizes, strides, a_box, steps,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result == CUDA_SUCCESS)
        result = encode(&tensors->B, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)(summaries + K), b_sizes, strides, b_box, steps,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return result == CUDA_SUCCESS ? 0 : gdn_set_error("stage 07: cuTensorMapEncodeTiled refused a map of the segments' maps (CUresult %d)", (int)result);
}

/* The scan for every head: a block per (head, 8 columns), K / 16 warps rounded up (MAX_K). */
template <int MAX_K>
static inline int launch_scan_on_tensor_cores_for(const gdn_device_problem *p, size_t P, const float *summaries, float *starts,
                                                   const size_t *row_offsets, dim3 grid)
{
    scan_maps_by_tensor tensors = {};
    bool by_tensor = false;
    if (scan_tensor_maps<MAX_K>(p, P, summaries, &tensors, &by_tensor))
        return -1;
    const auto scan = by_tensor ? scan_on_tensor_cores_kernel<MAX_K, true> : scan_on_tensor_cores_kernel<MAX_K, false>;
    CUDA_LAUNCH_AFTER_PREVIOUS(scan, grid, MAX_K * 2, tf32_scan_layout<MAX_K>::SHARED_BYTES, *p, P, summaries, starts, row_offsets, tensors);
    return 0;
}

static inline int launch_scan_on_tensor_cores(const gdn_device_problem *p, size_t P, const float *summaries, float *starts,
                                              const size_t *row_offsets = NULL)
{
    unsigned heads, tiles;
    if (gdn_blocks_for(p->B * p->H, 1, &heads) || gdn_blocks_for(p->V, TF32_SCAN_COLUMNS, &tiles))
        return -1;
    if (tiles > 65535)
        return gdn_set_error("V = %zu needs more than 65535 column tiles in one grid", p->V);
    const dim3 grid(heads, tiles);
    switch (naive_loop_max_k(p->K)) {
    case 32: return launch_scan_on_tensor_cores_for<32>(p, P, summaries, starts, row_offsets, grid);
    case 64: return launch_scan_on_tensor_cores_for<64>(p, P, summaries, starts, row_offsets, grid);
    case 128: return launch_scan_on_tensor_cores_for<128>(p, P, summaries, starts, row_offsets, grid);
    default: return gdn_set_error("K = %zu: the summary scan holds K rows in one block, K at most 128", p->K);
    }
}

#endif
