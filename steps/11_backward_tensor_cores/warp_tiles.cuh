/* warp_tiles.cuh -- what every kernel of the tensor-core backward shares: the sizes, one warp's
 * product of two bf16 tiles in shared memory on tensor cores, the tiles' staging, and the
 * workspace between the passes.
 *
 * A product here is C (64 x width) += A (64 x depth) B (depth x width), fp32 sums, every operand
 * a bf16 tile in shared memory, read as it lies or transposed (a `tile`): the backward reads
 * most of its matrices both ways (Tm in Tm X and in Tm^T dU, P in P Vnew and P^T dO, the keys
 * in K K^T, K dS and K^T Vnew), and ldmatrix (common/mma_sync.cuh) loads either fragment of
 * either orientation in one instruction, so no tile is copied transposed. Tiles are zero past
 * the chunk's tokens and past K and V, up to the next multiple of 16, so every product runs
 * whole 16 x 16 x 8 steps and the padding adds zeros. Rows are K + 8, V + 8 or 64 + 8 bf16
 * (an odd number of 16-byte units): ldmatrix's 8 rows of a phase fall in 8 different groups of
 * 4 banks.
 *
 * Included by backward_tensor_cores.cu, before the kernels.
 */
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include <cuda_pipeline_primitives.h> /* __pipeline_memcpy_async: cp.async */

#include "../../common/device.h"
#include "../../common/mma_sync.cuh" /* mma.sync, ldmatrix and the fragment layouts */

typedef __nv_bfloat16 bf16;
/* CHUNK is fixed: stage 05's blocked solve (wy_chunked_solve.cuh) is built for 64 tokens. K and V
 * at most MAX_WIDTH: a 64 x 128 bf16 tile is 17 KB, and pass 4's blocks hold five or six at once. */
enum { CHUNK = 64, MAX_WIDTH = 128, THREADS = 256, WARPS = THREADS / 32 };
constexpr int TOKEN_STRIDE = CHUNK + 8; /* bf16 row stride of a 64 x 64 tile */

__host__ __device__ constexpr static inline int round_up16(size_t x) { return (int)((x + 15) / 16 * 16); }
__host__ __device__ constexpr static inline int stride_of(size_t width) { return round_up16(width) + 8; }
__host__ __device__ static inline size_t chunks_of(size_t T) { return (T + CHUNK - 1) / CHUNK; }

/* ---- one warp's products ---- */

/* An operand in shared memory: element (r, c) at at[r * ld + c], or at at[c * ld + r] when
 * transposed (the tile holds the matrix's transpose by rows). */
struct tile {
    const bf16 *at;
    int ld;
    bool transposed;
};
__device__ __forceinline__ static tile rows_of(const bf16 *at, int ld) { return {at, ld, false}; }
__device__ __forceinline__ static tile transpose_of(const bf16 *at, int ld) { return {at, ld, true}; }

/* The A fragment (16 x 16) of A at (row0, k0): ldmatrix of A's four 8 x 8 quarters, or, from
 * A's transpose by rows, ldmatrix.trans of the same quarters (mma_sync.cuh). */
__device__ __forceinline__ static void load_a(uint32_t (&a)[4], const tile &A, int row0, int k0)
{
    if (A.transposed)
        load_a_fragment_transposed(a, A.at, A.ld, row0, k0);
    else
        load_a_fragment(a, A.at, A.ld, row0, k0);
}

/* The B fragments of n-tiles col0 and col0 + 8 at depth k0 (B's rows k0 .. k0 + 15): b[0], b[1]
 * the first, b[2], b[3] the second. B by rows (B[k][n]): ldmatrix.trans of its quarters (k +0,
 * n +0), (k +8, n +0), (k +0, n +8), (k +8, n +8), which gives lane 4 g + t rows 2 t, 2 t + 1 of
 * column g, the fragment's layout. B transposed (Bt[n][k]): plain ldmatrix of Bt's quarters
 * (n +0, k +0), (n +0, k +8), (n +8, k +0), (n +8, k +8), whose row g, columns 2 t, 2 t + 1 are
 * the same elements. */
__device__ __forceinline__ static void load_b_pair(uint32_t (&b)[4], const tile &B, int k0, int col0)
{
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    if (B.transposed)
        load_matrices(b, B.at + (col0 + lane % 8 + 8 * (quarter / 2)) * B.ld + k0 + 8 * (quarter % 2));
    else
        load_matrices_transposed(b, quarter_row(B.at, B.ld, k0, col0));
}

/* acc[j] += A[row0 .. row0 + 16)[0 .. depth) B[0 .. depth)[col0 + 8 j .. + 8) for j < tiles:
 * depth a multiple of 16, tiles even and at most TILES. One A fragment serves every n-tile. */
template <int TILES>
__device__ __forceinline__ static void warp_product(float (&acc)[TILES][4], const tile &A, const tile &B, int row0, int col0,
                                                    int depth, int tiles)
{
    static_assert(TILES % 2 == 0, "n-tiles are loaded in pairs");
    /* eight n-tiles a warp (the 64-column chains' state updates, pass 4's K- or V-wide parts):
     * two steps unrolled, the next step's fragments loading while this one's mma run, and no
     * more, so that a 64-column chain block keeps to 128 registers (two blocks an SM,
     * chains.cuh); fewer n-tiles, four steps */
#pragma unroll(TILES >= 8 ? 2 : 4)
    for (int k0 = 0; k0 < depth; k0 += 16) {
        uint32_t a[4];
        load_a(a, A, row0, k0);
#pragma unroll
        for (int j = 0; j < TILES; j += 2) {
            if (j >= tiles)
                break;
            uint32_t b[4];
            load_b_pair(b, B, k0, col0 + 8 * j);
            const uint32_t first[2] = {b[0], b[1]}, second[2] = {b[2], b[3]};
            mma_bf16_16x8x16(acc[j], a, first);
            mma_bf16_16x8x16(acc[j + 1], a, second);
        }
    }
}

/* The part of a 64 x width product (width a multiple of 16, at most 128) that warp w of a
 * block of BLOCK_WARPS computes: rows 16 (w % 4) .. + 16, and share w / 4 of the 16-column
 * blocks cut into BLOCK_WARPS / 4 shares, the first ones full: with 8 warps two halves, at
 * most 8 n-tiles of 8 columns, with 16 four quarters, at most 4. A warp whose share is empty
 * (width 16) has tiles 0. */
struct warp_part {
    int row0, col0, tiles;
};
template <int BLOCK_WARPS = WARPS>
__device__ __forceinline__ static warp_part part_of(int width)
{
    constexpr int SHARES = BLOCK_WARPS / 4;
    const int warp = threadIdx.x / 32, blocks = width / 16, share = (blocks + SHARES - 1) / SHARES;
    const int first = warp / 4 * share, count = blocks - first < share ? blocks - first : share;
    return {16 * (warp % 4), 16 * first, count > 0 ? 2 * count : 0};
}
/* the most n-tiles part_of gives a warp of a product width wide: its accumulators' count */
template <int BLOCK_WARPS>
__host__ __device__ constexpr int part_tiles(int width)
{
    return 2 * ((width / 16 + BLOCK_WARPS / 4 - 1) / (BLOCK_WARPS / 4));
}

/* f(i, c, sum) for each sum of this lane's part of the product: row i, column c (mma_sync.cuh's
 * fragment_row and fragment_column), sum by reference, to read or scale in place */
template <int TILES, typename Element>
__device__ __forceinline__ static void for_each_sum(float (&acc)[TILES][4], const warp_part &w, Element f)
{
#pragma unroll
    for (int j = 0; j < TILES; j++) {
        if (j >= w.tiles)
            break;
#pragma unroll
        for (int r = 0; r < 4; r++)
            f(fragment_row(w.row0, r), fragment_column(w.col0, j, r), acc[j][r]);
    }
}

/* acc += earlier, element by element: an epilogue that adds values from memory (dk's first part
 * to dk) loaded into registers by for_each_sum before the products, all of them asked for at
 * once. Loaded inside the epilogue, each load would wait for the store before it (the compiler
 * cannot tell the addresses apart): one memory latency an element. The same bits: a + b is b + a. */
template <int TILES>
__device__ __forceinline__ static void add_sums(float (&acc)[TILES][4], const float (&earlier)[TILES][4])
{
#pragma unroll
    for (int j = 0; j < TILES; j++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            acc[j][r] += earlier[j][r];
}

/* this lane's part of a product, rounded to bf16, into rows of a bf16 array (row i at to + i ld):
 * rows below n, columns below limit (even); registers r and r + 1 are two columns side by side,
 * one 4-byte store */
template <int TILES>
__device__ __forceinline__ static void store_bf16_pairs(const float (&acc)[TILES][4], const warp_part &w, bf16 *to, size_t ld,
                                                        int n, int limit)
{
#pragma unroll
    for (int j = 0; j < TILES; j++) {
        if (j >= w.tiles)
            break;
#pragma unroll
        for (int r = 0; r < 4; r += 2) {
            const int i = fragment_row(w.row0, r), c = fragment_column(w.col0, j, r);
            if (i < n && c < limit)
                *(__nv_bfloat162 *)(to + i * ld + c) = __floats2bfloat162_rn(acc[j][r], acc[j][r + 1]);
        }
    }
}

/* sum[0] += term(i, c, value) over this lane's sums in rows g of the warp's 16, sum[1] over those
 * in rows g + 8 (the registers r >= 2: which one is known where the loops unroll) */
template <int TILES, typename Term>
__device__ __forceinline__ static void add_row_terms(float (&acc)[TILES][4], const warp_part &w, float (&sum)[2], Term term)
{
#pragma unroll
    for (int j = 0; j < TILES; j++) {
        if (j >= w.tiles)
            break;
#pragma unroll
        for (int r = 0; r < 4; r++)
            sum[r >= 2] += term(fragment_row(w.row0, r), fragment_column(w.col0, j, r), acc[j][r]);
    }
}

/* the four lanes of each of the warp's rows g and g + 8 add their terms (two shuffles each) */
__device__ __forceinline__ static void add_over_quads(float (&sum)[2])
{
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) {
        sum[0] += __shfl_xor_sync(0xffffffffu, sum[0], offset);
        sum[1] += __shfl_xor_sync(0xffffffffu, sum[1], offset);
    }
}
/* Row sums of a product's part: sum[0] and sum[1] hold this lane's terms of rows g and g + 8 of
 * the warp's 16 (g = lane / 4); the four lanes of a row add theirs (two shuffles), and the
 * warp's total for its columns goes to partial[CHUNK (w / 4) + row], a row of partial sums for
 * each share of the columns. Every lane of the warp calls it. The row's sum over all columns
 * is the shares' in their order (row_sum): no atomics, the same bits every run. */
__device__ __forceinline__ static void store_row_sums(float (&sum)[2], const warp_part &w, float *partial)
{
    const int lane = threadIdx.x % 32;
    add_over_quads(sum);
    if (lane % 4 == 0) {
        float *out = partial + CHUNK * (threadIdx.x / 32 / 4) + w.row0 + lane / 4;
        out[0] = sum[0];
        out[8] = sum[1];
    }
}
/* sum over the columns of a 64 x width product's row i, once every warp of the block's
 * BLOCK_WARPS stored its part */
template <int BLOCK_WARPS>
__device__ __forceinline__ static float row_sum(const float *partial, int i)
{
    float sum = partial[i];
#pragma unroll
    for (int share = 1; share < BLOCK_WARPS / 4; share++)
        sum += partial[CHUNK * share + i];
    return sum;
}

/* ---- staging tiles in shared memory ---- */

/* sixteen bytes of a bf16 tile as one load or store, as four pairs to compute on, and as eight
 * values to scatter one by one */
union bf16_pairs16 {
    uint4 bytes;
    __nv_bfloat162 pair[4];
    bf16 value[8];
};

__device__ __forceinline__ static float to_float(float x) { return x; }
__device__ __forceinline__ static float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ static float to_float(unsigned short bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }

/* a gradient's element, in bf16 where the caller asked for it so (rounded once from the fp32
 * sum, as a cast of the fp32 gradient would round it), else in fp32 */
__device__ __forceinline__ static void store_gradient(float *fp32, unsigned short *bf16_bits, size_t index, float value)
{
    if (bf16_bits)
        bf16_bits[index] = __bfloat16_as_ushort(__float2bfloat16_rn(value));
    else
        fp32[index] = value;
}

/* tile[i][c] = bf16(scale_i * from[i * stride + c]) for i < rows, c < columns; zero elsewhere in
 * the tile_rows x tile_columns tile (row stride ld, a multiple of 8: stride_of). scale NULL: 1
 * (a bf16 source then copies exactly). Consecutive threads take consecutive columns, so the
 * global reads coalesce. Where the rows start on 16-byte boundaries and the columns come in
 * whole 16-byte pieces (K, V multiples of 8 in bf16, of 4 in fp32), a thread moves 16 bytes at
 * once, and never waits for one piece before it asks for the next: a bf16 source copied as it
 * is goes by cp.async (the copy skips the registers, every piece in flight at once), any other
 * is loaded LOADS_IN_FLIGHT pieces at a time before the first is rounded and stored. A loop
 * that stores each piece before it loads the next waits one memory latency a piece, and the
 * chains stage their tiles every chunk, on their serial path. Each element is rounded as in
 * the scalar loop: the same bits either way. The tile is complete in this thread's view when
 * it returns (complete = false: a bf16 copy may still be on its way, until this thread's next
 * __pipeline_wait_prior(0), so that several tiles wait once); the caller's barrier makes it
 * the block's. Returns whether the tile went by cp.async, as one copy group of its own (so that
 * a caller can wait for the groups before it alone: wait_all_but). */
constexpr int LOADS_IN_FLIGHT = 4;
/* piece(i, u) for this thread's places (row i, piece u) of a rows x pieces tile, consecutive
 * threads taking consecutive places (e = threadIdx.x, + blockDim.x, ...: row e / pieces, piece
 * e % pieces). Where pieces is a power of two that divides the block's threads (K and V powers
 * of two) a thread keeps one piece and steps over the rows, its row and piece found by a shift
 * and a mask: a division by a number known only at run time is about 20 instructions, and a
 * backward chain step stages five tiles on its serial path. */
template <typename Piece>
__device__ __forceinline__ static void for_each_piece(int rows, int pieces, Piece piece)
{
    const unsigned mask = (unsigned)pieces - 1u;
    if ((pieces & mask) == 0 && (blockDim.x & mask) == 0) {
        const int shift = __ffs(pieces) - 1, u = (int)(threadIdx.x & mask), row_step = (int)(blockDim.x >> shift);
        for (int i = (int)(threadIdx.x >> shift); i < rows; i += row_step)
            piece(i, u);
    } else {
        for (int e = threadIdx.x; e < rows * pieces; e += blockDim.x)
            piece(e / pieces, e % pieces);
    }
}
template <typename Source>
__device__ static bool stage_tile(bf16 *tile, int ld, int tile_rows, int tile_columns, const Source *from, size_t stride, int rows,
                                  int columns, const float *scale, bool complete = true)
{
    constexpr int PIECE = 16 / sizeof(Source); /* elements in 16 bytes: 8 bf16 or 4 fp32 */
    if (((uintptr_t)from | (stride * sizeof(Source))) % 16 == 0 && columns % PIECE == 0 && tile_columns % PIECE == 0 &&
        ld % 8 == 0) {
        const int pieces = tile_columns / PIECE, count = tile_rows * pieces;
        if (sizeof(Source) == 2 && !scale) { /* bf16 as it is: asynchronous copies */
            for_each_piece(tile_rows, pieces, [&](int i, int u) {
                const int c = u * PIECE;
                if (i < rows && c < columns) /* a piece lies wholly inside or wholly outside: columns % PIECE == 0 */
                    __pipeline_memcpy_async(tile + i * ld + c, from + i * stride + c, 16);
                else
                    *(uint4 *)(tile + i * ld + c) = make_uint4(0u, 0u, 0u, 0u);
            });
            __pipeline_commit();
            if (complete)
                __pipeline_wait_prior(0);
            return true;
        }
        union piece {
            uint4 bytes;
            Source element[PIECE];
        };
        for (int e0 = threadIdx.x; e0 < count; e0 += LOADS_IN_FLIGHT * blockDim.x) {
            piece in[LOADS_IN_FLIGHT];
#pragma unroll
            for (int b = 0; b < LOADS_IN_FLIGHT; b++) { /* every load asked for first */
                const int e = e0 + b * blockDim.x, i = e / pieces, c = (e % pieces) * PIECE;
                in[b].bytes = make_uint4(0u, 0u, 0u, 0u);
                if (e < count && i < rows && c < columns)
                    in[b].bytes = *(const uint4 *)(from + i * stride + c);
            }
#pragma unroll
            for (int b = 0; b < LOADS_IN_FLIGHT; b++) { /* then rounded and stored */
                const int e = e0 + b * blockDim.x, i = e / pieces, c = (e % pieces) * PIECE;
                if (e >= count)
                    break;
                union {
                    bf16 element[PIECE];
                    uint2 half;
                    uint4 whole;
                } out;
                out.whole = make_uint4(0u, 0u, 0u, 0u); /* +0 outside the rows and columns, as the scalar loop writes */
                if (i < rows && c < columns) {
                    const float factor = scale ? scale[i] : 1.0f;
#pragma unroll
                    for (int k = 0; k < PIECE; k++)
                        out.element[k] = __float2bfloat16_rn(factor * to_float(in[b].element[k]));
                }
                if constexpr (PIECE == 8)
                    *(uint4 *)(tile + i * ld + c) = out.whole;
                else
                    *(uint2 *)(tile + i * ld + c) = out.half;
            }
        }
        return false;
    }
    for (int e = threadIdx.x; e < tile_rows * tile_columns; e += blockDim.x) {
        const int i = e / tile_columns, c = e % tile_columns;
        float value = 0.0f;
        if (i < rows && c < columns)
            value = (scale ? scale[i] : 1.0f) * to_float(from[i * stride + c]);
        tile[i * ld + c] = __float2bfloat16_rn(value);
    }
    return false;
}

/* rows of row_bytes bytes (a multiple of 16) from global to shared memory, as they are: by
 * cp.async, every piece in flight at once; complete in this thread's view when it returns
 * (complete = false: at this thread's next __pipeline_wait_prior(0), as stage_tile's) */
__device__ static void copy_rows16(void *to, int to_stride, const void *from, int from_stride, int rows, int row_bytes,
                                   bool complete = true)
{
    for_each_piece(rows, row_bytes / 16, [&](int i, int u) {
        const uint4 *row = (const uint4 *)((const unsigned char *)from + (size_t)i * from_stride);
        __pipeline_memcpy_async((uint4 *)((unsigned char *)to + (size_t)i * to_stride) + u, row + u, 16);
    });
    __pipeline_commit();
    if (complete)
        __pipeline_wait_prior(0);
}

/* this thread's copy groups complete but the latest `later` (0 to 3; cp.async.wait_group takes
 * its count as an immediate, hence the cases) */
__device__ static void wait_all_but(int later)
{
    if (later >= 3)
        __pipeline_wait_prior(3);
    else if (later == 2)
        __pipeline_wait_prior(2);
    else if (later == 1)
        __pipeline_wait_prior(1);
    else
        __pipeline_wait_prior(0);
}

/* Shared memory cut into pieces, each 16-byte aligned, in the order taken; from a null base
 * only the bytes are counted (the host's launch uses the same function as the kernel). */
struct shared_cut {
    unsigned char *base;
    size_t used;
    template <typename T>
    __host__ __device__ constexpr T *take(size_t count)
    {
        T *at = base ? (T *)(base + used) : nullptr;
        used += (count * sizeof(T) + 15) / 16 * 16;
        return at;
    }
};

/* ---- the workspace between the passes ---- */

/* Rows of Vnew, dVnew, gamma and dgamma are head * T + t (Vnew's and dVnew's VP wide); Tm, -W,
 * U, P^T dO, scale e^gamma dO and the states are a block a (head, chunk). Every element a pass
 * reads was written by a pass before it (the runner fills the workspace with NaN bytes before
 * each checked run). */
typedef struct {
    size_t chunks;
    double *gamma, *dgamma; /* [heads T]: the gates' running sums in each chunk; pass 4's dL/dgamma */
    bf16 *Tm;               /* [heads chunks][64][64]: (I + M)^-1, as the products read it */
    bf16 *minus_W;          /* [heads chunks][64][round_up16(K)]: -W, zero past the chunk and past K */
    float *U, *PtdO;        /* [heads chunks][64][VP]: U and P^T dO (pass 1), the chains' fp32 addends, zero past the
                               chunk and past V */
    bf16 *scaled_dO;        /* [heads chunks][64][VP]: scale e^gamma_i dO_i (pass 1), the backward chain's B operand
                               of Q^T, zero past the chunk and past V */
    bf16 *Vnew, *dVnew;     /* [heads T][VP]: Vnew (pass 2) and dVnew (pass 3) in bf16, the only form pass 4 reads
                               them in, zero past V */
    bf16 *S0, *dS_end;      /* [heads chunks][KP][VP]: the state at each chunk's start; dL/dS at its end; in bf16,
                               the only form pass 4 reads them in, zero past K and V */
} backward_workspace;

/* One chunk: n tokens from t0 of head (b, h) (head = b H + h); row = head T + t0, its first row in
 * the workspace's per-token arrays; index = head chunks + chunk; token0, its first token's index
 * in the inputs (gdn_device_token). */
typedef struct {
    size_t head, t0, row, index, token0;
    int n;
} chunk_at;

/* chunk `chunk` of head `head`: a chain's loop over its head's chunks divides by no chunk count
 * (a 64-bit division is a call of about 80 instructions), and b and h come from a 32-bit one
 * (the B H heads are fewer than a grid's 2^32 blocks: gdn_blocks_for) */
__device__ static chunk_at chunk_of_head(const gdn_device_problem &p, const backward_workspace &w, size_t head, size_t chunk)
{
    chunk_at x;
    const size_t b = (unsigned)head / (unsigned)p.H, h = (unsigned)head % (unsigned)p.H;
    x.head = head;
    x.index = head * w.chunks + chunk;
    x.t0 = chunk * CHUNK;
    x.row = head * p.T + x.t0;
    x.n = (int)(p.T - x.t0 < CHUNK ? p.T - x.t0 : CHUNK);
    x.token0 = gdn_device_token(&p, b, x.t0, h);
    return x;
}
__device__ static chunk_at chunk_of(const gdn_device_problem &p, const backward_workspace &w, size_t index)
{
    return chunk_of_head(p, w, index / w.chunks, index % w.chunks);
}
/* the token index (gdn_device_token) of the chunk's token i: token0 and the step of i tokens
 * (gdn_device_token of token i of sequence 0, head 0), one multiply-add, so that b, t0 and h need
 * not stay in registers */
__device__ __forceinline__ static size_t token_of(const gdn_device_problem &p, const chunk_at &x, int i)
{
    return x.token0 + gdn_device_token(&p, 0, (size_t)i, 0);
}
