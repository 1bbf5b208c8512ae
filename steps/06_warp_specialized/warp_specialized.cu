/* 06_warp_specialized -- stage 05's GPU kernels on tensor cores: bf16 inputs, fp32 sums.
 *
 * The idea (docs/06_warp_specialized.md): keep 05_wy_chunked_cuda's split of eq. 9-15 (the
 * state-independent work of every chunk in parallel, only Vnew = U - W S0 and the state update
 * on the serial chain), and do every matrix product with mma.sync.m16n8k16: a warp multiplies
 * a 16 x 16 bf16 tile by a 16 x 8 one into 16 x 8 fp32 sums in one instruction, where stage 05
 * spent 256 FMAs of its 32 lanes' time (the output warps, last, use wgmma: four warps
 * multiply 64 x 16 by 16 x N from shared memory in one). Inputs q, k, v are bf16 (the
 * driver rounds them, the runner converts them untimed); gates, betas, h0, ht, the
 * triangular solve and every sum stay fp32 (gamma in double, as in 05).
 *
 * This is the stage's forty-sixth step; what the steps built, by kernel (the numbers are
 * steps: docs/06, "The steps at a glance", has a row and a section for each):
 *   every kernel   the products on tensor cores (the solve's joins in tf32), fragments by
 *                  ldmatrix; the chain's and kernel 3's blocks placed as the kernel before
 *                  them ends (programmatic dependent launch: 14)
 *   kernel 1       (the state-independent work) k and v by tensor copies where their boxes
 *                  fit (6), four blocks an SM (7, 8), fewer instructions (9, 11), K = V = 64
 *                  or 128 compiled known (12), the keys decayed by idle warps while two
 *                  invert the diagonal blocks (13), U stored in the chain's fragment order
 *                  (15) by 8-byte stores (28), gate factors by one 2^x (27), the causal
 *                  products' zero blocks skipped (29), W and U out by bulk stores (30), the
 *                  join's scratch without bank conflicts (31); compiled for the transform
 *                  block alone, five blocks an SM (34), and run beside the chain on the SMs
 *                  its blocks leave idle (35: kernel1_beside_chain); that instance six
 *                  blocks an SM, its join's scratch in the keys' place (42); the gates
 *                  summed by the warp with no K K^T block while the others make K K^T (43);
 *                  the joins by whole columns, the transform block's reads and the
 *                  inversion's without bank conflicts or with fewer loads (44); the
 *                  split beside the chain from rates re-measured after that (45)
 *   kernel 2       (the chain) warp-specialized: a producer warp fills a ring of 2 to 4
 *                  shared-memory slots by bulk copies (TMA) and mbarriers, consumer warps
 *                  keep S in their MMA accumulators for the whole sequence; S0^T and Vnew^T
 *                  out through staging tiles by bulk stores where its blocks fill the GPU;
 *                  the step compiled with its key tiles known (10) and its strides (37:
 *                  LDK_STEP, LDV_STEP); a head's 128 columns in one block where that still
 *                  gives nearly every SM a block (16); at K = V = 128 Vnew made from v, Vnew =
 *                  Tm (diag(beta) V - diag(beta e^gamma) K S0), from the k tile in W's place,
 *                  so kernel 1 writes the transform block alone (36: FROM_VALUES,
 *                  chain_from_values; stage 07's folds and replays too); the ring's slot and
 *                  pass counted, not divided from a 64-bit step index (38); at K = V = 64
 *                  Vnew from v too where heads x chunks outweigh the chain's depth (39:
 *                  chain_from_values_pays), and a fold's two-n-tile step there compiled
 *                  with its tiles and strides known (40)
 *   fused          (the 128-column chain with output warps, K = V = 128) output warps make o
 *                  from the staging tiles, so S0^T and Vnew^T never leave the SM and kernel 3
 *                  does not run (17; 18: eight warps sharing P through the k tile; 19: from
 *                  70 % of the SMs); the keys as given, S += K^T (diag(d) Vnew) (20); P's zero
 *                  blocks skipped (21); each slot's parts freed by their last readers (22); o
 *                  by wgmma from 128-byte-swizzled tiles (23), and the chain too, S^T one
 *                  m64n128 accumulator a warpgroup (24); swizzled stores by 32-bit addresses
 *                  (25); P's factors by one 2^x (26); o out by tensor stores from the q tile
 *                  (32); Vnew made from the v tile, so kernel 1 writes Tm (8 KB a chunk), not
 *                  W and U (33 KB), and reads no v (33); the output warps' factors made while
 *                  their products run, the next chunk's gamma loaded a chunk's work ahead (46)
 *   kernel 3       (o, where the fused kernel does not run) q and k by tensor copies, o
 *                  through a staging tile in whole rows (6), K = V = 64 or 128 compiled known
 *                  (12), gate factors by one 2^x (27), the causal products' zero blocks
 *                  skipped (29); where all its blocks fit on the GPU at once, placed while
 *                  the chain runs, its gates summed from g, waiting only for S0^T and Vnew^T
 *                  (41: outputs_beside_chain)
 * The chain kernel also runs a sequence as segments (one here; stage 07 includes this file and
 * cuts it).
 *
 * Where bf16 rounding enters (each a relative 2^-9 on one operand of a product, with fp32 sums):
 * the inputs; the strictly lower part of Tm diag(beta e^gamma) and Tm diag(beta), the A of W =
 * Tm (beta e^gamma K) and U = Tm (beta V) (the diagonal's term is added in fp32; FLA rounds
 * Tm and the scaled keys and values instead); W; U, kept in bf16 between kernel 1 and the
 * chain as FLA keeps it (fp32 with --precise); where the chain makes Vnew = Tm Z itself (with
 * output warps, at K = V = 128, and at 64 where it pays: chain_from_values), the strictly
 * lower part of Tm and Z = diag(beta) V - diag(beta e^gamma) K S0 instead of those four (Z's
 * diagonal term in fp32), and d Vnew where it enters the update; the joins of the triangular solve on tensor
 * cores, in tf32 (2^-11); the state S where it enters Vnew = U - W S, and Vnew where it
 * enters the state update (d Vnew with output warps) and the output (the fp32 state itself
 * is never rounded; FLA stores it in bf16 between chunks); P = Q K^T e^(gamma_i - gamma_j)
 * before P Vnew; and o itself, written in bf16 as FLA writes it (the runner widens it for
 * the checks and --out).
 * --precise splits the computed operands W, S, Vnew, S0 and P into two bf16 terms each, x =
 * bf16(x) + bf16(x - bf16(x)), and adds the cross products: 1.6 times the time at K = V = 128.
 * Measured errors against the fp64 oracle on the same bf16 inputs: docs/06_warp_specialized.md.
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 g + t. A (16 x 16, row
 * major) gives each lane rows g and g + 8, columns 2t, 2t+1 and 2t+8, 2t+9, as four 32-bit
 * pairs; B (16 x 8) gives it column g, rows 2t, 2t+1 and 2t+8, 2t+9, as two pairs, so B is kept
 * transposed (N x K, K contiguous) in shared memory, or row major and loaded with
 * ldmatrix.trans; the sums D (16 x 8) sit at rows g and g + 8, columns 2t and 2t+1. ldmatrix
 * loads the fragments, 8 rows of 16 bytes a phase: row strides of K + 8 and 64 + 8 bf16 (K a
 * multiple of 16), an odd number of 16-byte units, put those 8 rows in 8 different groups of
 * 4 banks, no conflict.
 *
 * Cost: the flops of stage 05 (wy_chunked_flops), now on tensor cores (where the chain makes
 * Vnew from v one 64 x 64 x V product a chunk fewer: W's product goes, U's becomes the chain's
 * Tm Z, and K S0 takes W S0's place); workspace per token: gamma (double) and, per chunk, W,
 * the decayed keys and U (bf16; U fp32 with --precise), the transform block, S0 and Vnew
 * (bf16).
 * Depth: T / 64 chunk steps of kernel 2, each two 64-deep MMA chains per warp.
 * Limits: K <= 128, chunk 64 (fixed), V and T any.
 *
 * Budget at K = V = 128, default mode (nvcc -Xptxas -v: no spills; shared memory from the
 * launchers' formulas), and what it allows on an H200 SM (64 K registers, 227 KB shared):
 *   kernel 1: a block per (head, chunk), 256 threads, 53 KB at K = V = 128 (its tiles
 *             reuse each other's places: tm_place_bytes): 4 blocks an SM where V is one
 *             slice, at most 64 registers (__launch_bounds__(256, 4)); else 3, 76 registers;
 *             --precise, whose W low terms need more, 96 and 2 blocks; for the transform
 *             block alone (the chain makes Vnew from v) 40 registers and 36 KB, 6 blocks
 *   kernel 2: a block per (head, segment, 128 state columns) where such blocks give 95 % of
 *             the SMs a block, 70 % with output warps (not --precise; widest_blocks_percent),
 *             else 64 where they fill the GPU, else 32 or
 *             16; a producer warp and consumer warps: at 128 and 64 columns eight and four,
 *             16 columns (two MMA n-tiles) each, 155 registers (160 with plain stores); at 32
 *             or 16 columns two per 16 columns, 143 registers (172 with plain stores; the
 *             chunk step compiled for the 4 or 8 key tiles of K = 64 or 128, chunk_step); so
 *             288, 160, 160 or 96 threads;
 *             at 128 columns 3 ring slots and the staging tiles take 205 KB: 1 block an SM;
 *             with output warps (K = V = 128: OUTPUTS) 640 threads, two slots with the
 *             transform block, q, k and v, the staging tiles, 177 KB, and registers set by warpgroup with setmaxnreg
 *             from 96: the chain 152, the output warps 72, the producer's warpgroup 32;
 *             at 64 columns 4 slots and the staging tiles 198 KB: 1 block an SM (two slots,
 *             112 KB, 2 blocks an SM, where that saves a wave: chain_launch_shape);
 *             making Vnew from v (K = V = 128 or 64: chain_from_values) the same blocks
 *             with slots of the k tile, the transform block and the block's v tile (43 KB at 128 columns,
 *             29 KB at 16: values_slot_bytes), 168 registers at two n-tiles a warp, 164 and
 *             144 (staged) at one
 *   kernel 3: (not run where the chain's output warps make o) a block per (head, chunk,
 *             128 columns of o), 256 threads, 59 registers (62
 *             compiled for K = V = 128), 96 KB: 2 blocks an SM (64 columns where V is not a
 *             multiple of 128: 46 registers, 40 for K = V = 64)
 *
 * Build and run:  make bin/06_warp_specialized && bin/06_warp_specialized --T 16384 --H 8 --check-against oracle
 */
#include <cuda_bf16.h>
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled: the driver's tensor map maker, found at run time */
#include <cuda_pipeline_primitives.h>
#include <stdint.h>
#include <type_traits>

#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
#include "../../common/bulk_copy.cuh" /* the TMA ring's PTX: mbarriers and bulk copies */
#include "../../common/wgmma.cuh"      /* the output warps' wgmma, from swizzled tiles */
#include "../../common/kernel_overlap.cuh" /* wait_for_previous_kernel, let_next_kernel_start */
#include "warp_specialized.h" /* warp_specialized_kernel1_split, warp_specialized_values_pay */
#include "../05_wy_chunked/wy_chunked_solve.cuh" /* the gate sums and the blocked solve, unchanged */
extern "C" { /* stage 05's flop count: the same algebra */
#include "../05_wy_chunked/wy_chunked.h"
}

typedef __nv_bfloat16 bf16;
/* kernel 2: 1, 2, 4 or MAX_CHAIN_TILES = 8 tiles of 16 state columns per block, a producer
 * warp and consumer warps of 8 columns, two a tile (of 16 columns, one a tile, in blocks of 4
 * or 8 tiles: chain_ntiles); a ring of 2 to 4 slots */
enum { CHUNK = 64, MAX_K = 128, THREADS = 256, MAX_CHAIN_TILES = 8, CONSUMER_WARPS_PER_TILE = 2 };
static_assert((int)CHUNK == (int)SOLVE_CHUNK, "kernel 1's chunk is the solve's");
constexpr int TOKEN_STRIDE = CHUNK + 8; /* bf16 row stride of 64-token tiles */

__host__ __device__ static inline int round_up16(size_t x) { return (int)((x + 15) / 16 * 16); }
constexpr int KEY_STRIDE_PADDING = 8; /* bf16 past a K-wide tile's row: 16 bytes */
__host__ __device__ static inline int key_stride(size_t K) { return round_up16(K) + KEY_STRIDE_PADDING; } /* bf16 row stride of K-wide tiles */
/* Kernel 3 takes q and k by tensor copies (make_token_tile_map) where the box fits: K a
 * multiple of 16, so that the box's columns past K are padding, never read, and the input's
 * strides are whole 16 bytes; at least two heads, so that a row of all heads (H K) is at least
 * one padded tile wide (K + 8); at least one chunk of tokens. Otherwise the threads copy. */
__host__ __device__ static inline bool keys_by_tensor_map(size_t K, size_t H, size_t T) { return K % 16 == 0 && H >= 2 && T >= 64; }
/* kernel 1 takes its k and first slice of v the same way where both boxes fit (V a multiple of 16 as well) */
__host__ __device__ static inline bool tiles_by_tensor_map(size_t K, size_t V, size_t H, size_t T)
{
    return keys_by_tensor_map(K, H, T) && V % 16 == 0;
}
/* kernel 1 keeps at most VALUE_SLICE columns of v in shared memory (row stride value_stride) */
constexpr int VALUE_SLICE = 128;
__host__ __device__ static inline int value_stride(size_t V) { return key_stride(V < VALUE_SLICE ? V : VALUE_SLICE); }
__host__ __device__ static inline size_t chunks_of(size_t T) { return (T + CHUNK - 1) / CHUNK; }

/* ---- one warp's tensor-core products ---- */

/* Four 8 x 8 bf16 matrices from shared memory into fragments, one instruction (ldmatrix): lane
 * l gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned), and gets back,
 * in register m, the pair of row g, columns 2t, 2t + 1 of matrix m: the layout of an MMA
 * fragment. Where lanes gathered their pairs with four 4-byte loads, a warp now issues one. */
__device__ __forceinline__ static void load_matrices(uint32_t (&r)[4], const bf16 *row)
{
    const uint32_t address = shared_address(row); /* common/bulk_copy.cuh */
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

/* The row this lane gives ldmatrix.x4 for the 16 x 16 block at (row0, col0) of a row-major
 * tile: matrices 0-3 are its quarters (rows +0, +8, +0, +8; columns +0, +0, +8, +8), which is
 * the order of an A fragment's registers, and, read with .trans, of two B fragments' (k rows
 * +0/+8 of n-tile j, then of n-tile j + 1). */
__device__ __forceinline__ static const bf16 *quarter_row(const bf16 *tile, int ld, int row0, int col0)
{
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    return tile + (row0 + lane % 8 + 8 * (quarter % 2)) * ld + col0 + 8 * (quarter / 2);
}

/* d += a b for one 16 x 8 tile: the instruction itself, written out. */
__device__ __forceinline__ static void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* acc[j] += A[row0 .. row0 + 16)[0 .. depth) B[0 .. depth)[col0 + 8 j .. + 8), j < tiles (TILES
 * unless told fewer; the others are left as they are): A row major (stride lda), B given
 * transposed, Bt[n][k] (stride ldb). depth: a multiple of 16; TILES and tiles even; rows
 * 16-byte aligned. A's four 8 x 8 quarters (rows +0/+8, columns +0/+8) are its fragment's four
 * registers; two n-tiles of B^T (rows +0/+8 of Bt, columns +0/+8) are the two registers of
 * each of two B fragments. */
template <int TILES>
__device__ __forceinline__ static void warp_product(float (&acc)[TILES][4], const bf16 *A, int lda, const bf16 *Bt, int ldb,
                                                    int row0, int col0, int depth, int tiles = TILES)
{
    static_assert(TILES % 2 == 0, "n-tiles are loaded in pairs");
    if (tiles <= 0)
        return;
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    const bf16 *a_row = quarter_row(A, lda, row0, 0);
    /* B^T's rows are n: matrices 0-3 are (n +0, k +0), (n +0, k +8), (n +8, k +0), (n +8, k +8) */
    const bf16 *b_row = Bt + (col0 + lane % 8 + 8 * (quarter / 2)) * ldb + 8 * (quarter % 2);
    for (int k0 = 0; k0 < depth; k0 += 16) {
        uint32_t a[4];
        load_matrices(a, a_row + k0);
#pragma unroll
        for (int j = 0; j < TILES; j += 2) {
            if (j >= tiles)
                break;
            uint32_t b[4];
            load_matrices(b, b_row + 8 * j * ldb + k0);
            const uint32_t first[2] = {b[0], b[1]}, second[2] = {b[2], b[3]};
            mma_bf16_16x8x16(acc[j], a, first);
            mma_bf16_16x8x16(acc[j + 1], a, second);
        }
    }
}

/* The same product with B row major, B[k][n] (stride ldb), for the n-tiles left of column
 * `columns` (a multiple of 16): ldmatrix.trans hands each lane the pair (rows 2t, 2t + 1,
 * column g) of an 8 x 8 matrix stored by rows, which is a B fragment, so B needs no
 * transposed copy. */
__device__ __forceinline__ static void load_matrices_transposed(uint32_t (&r)[4], const bf16 *row)
{
    const uint32_t address = shared_address(row); /* common/bulk_copy.cuh */
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
template <int TILES>
__device__ __forceinline__ static void warp_product_rows(float (&acc)[TILES][4], const bf16 *A, int lda, const bf16 *B, int ldb,
                                                         int row0, int col0, int columns, int depth)
{
    static_assert(TILES % 2 == 0, "n-tiles are loaded in pairs");
    const bf16 *a_row = quarter_row(A, lda, row0, 0), *b_row = quarter_row(B, ldb, 0, col0);
    for (int k0 = 0; k0 < depth; k0 += 16) {
        uint32_t a[4];
        load_matrices(a, a_row + k0);
#pragma unroll
        for (int j = 0; j < TILES; j += 2) {
            if (col0 + 8 * j >= columns)
                break;
            uint32_t b[4];
            load_matrices_transposed(b, b_row + k0 * ldb + 8 * j);
            const uint32_t first[2] = {b[0], b[1]}, second[2] = {b[2], b[3]};
            mma_bf16_16x8x16(acc[j], a, first);
            mma_bf16_16x8x16(acc[j + 1], a, second);
        }
    }
}

/* The causal products (M and P are zero where l > i, Tm's strictly lower part where l >= i:
 * eq. 10, 12 and 14): a warp's rows row0 .. row0 + 15 hold entries only in columns l < row0 +
 * 16. So of its n-tiles col0 + 8 j only those left of that column need a product (4, 2 or 0
 * of the 4 of a 16 x 32 part of 64 x 64: 20 of the 32 n-tiles of the 8 warps), and a product
 * with such a factor on the left needs depth row0 + 16 only, not the chunk's 64 (the output
 * warps skipped the same blocks from the twenty-first step until their products became
 * 64-row wgmma, which has none to skip: the twenty-third) */
__device__ __forceinline__ static int causal_tiles(int row0, int col0)
{
    const int tiles = (row0 + 16 - col0) / 8;
    return tiles < 0 ? 0 : tiles > 4 ? 4 : tiles;
}
__device__ __forceinline__ static int causal_depth(int row0) { return row0 + 16; }

/* The tf32 instruction, m16n8k8: fp32 operands rounded to tf32 (10 mantissa bits, cvt.rna),
 * fp32 sums. Fragments: A (16 x 8) gives lane 4 g + t rows g, g + 8 of columns t and t + 4,
 * one value a register; B (8 x 8) rows t and t + 4 of column g; D as in the bf16 shape. */
__device__ __forceinline__ static uint32_t to_tf32(float x)
{
    uint32_t y;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ static void mma_tf32_16x8x8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Where sum r of tile j sits: row row0 + g (+ 8 for r >= 2), column col0 + 8 j + 2 t (+ 1 for odd r). */
__device__ __forceinline__ static int fragment_row(int row0, int r) { return row0 + (threadIdx.x % 32) / 4 + (r >= 2 ? 8 : 0); }
__device__ __forceinline__ static int fragment_column(int col0, int j, int r) { return col0 + 8 * j + 2 * (threadIdx.x % 4) + (r & 1); }

template <int TILES>
__device__ __forceinline__ static void clear(float (&acc)[TILES][4])
{
#pragma unroll
    for (int j = 0; j < TILES; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

/* A tile of tile_rows rows of bf16 into shared memory (row stride ld, in bf16): row i is the
 * `width` values at first_row + i row_stride, zero for rows i >= rows and for columns width ..
 * padded. Where width is a multiple of 8 (and so the rows 16-byte aligned), by cp.async:
 * 16-byte pieces go from global to shared memory without passing through registers, and the
 * thread goes on at once (the previous step staged them in registers, every load issued
 * before the first store); the zeros are stored directly. Else 2-byte copies, synchronous.
 * The caller commits the copies (__pipeline_commit), waits for them (__pipeline_wait_prior)
 * and then syncs the block. Piece e = i per_row + c of thread e % THREADS: (i, c) advance by
 * a fixed step, one division at the start, not two per piece. ld, padded: multiples of 8. */
__device__ static void copy_tile(bf16 *tile, int ld, int tile_rows, int rows, int width, int padded, const bf16 *first_row,
                                 size_t row_stride)
{
    if (width % 8 == 0) {
        const int per_row = padded / 8, rows_step = THREADS / per_row, pieces_step = THREADS % per_row;
        for (int i = threadIdx.x / per_row, c = threadIdx.x % per_row; i < tile_rows;) {
            bf16 *to = tile + i * ld + 8 * c;
            if (i < rows && 8 * c < width)
                __pipeline_memcpy_async(to, first_row + i * row_stride + 8 * c, 16);
            else
                *(uint4 *)to = make_uint4(0, 0, 0, 0);
            i += rows_step, c += pieces_step;
            if (c >= per_row)
                c -= per_row, i++;
        }
    } else {
        for (int e = threadIdx.x; e < tile_rows * padded; e += THREADS) {
            const int i = e / padded, c = e % padded;
            tile[i * ld + c] = i < rows && c < width ? first_row[i * row_stride + c] : __float2bfloat16_rn(0.0f);
        }
    }
}

/* ---- the workspace ---- */

/* Kernel 2's input block per chunk, laid out as its shared-memory slot (16-byte multiples):
 *   W        bf16 [64][key_stride]       A of Vnew = U - W S0
 *   W_low    bf16 [64][key_stride]       --precise only: W less its bf16 rounding
 *   keys_t   bf16 [round_up16(K)][72]    the keys decayed to the chunk's end, transposed: A of
 *                                         the state update S += Kdec^T Vnew
 *   U_t      bf16 [round_up16(V)][64]    U transposed: a 16-column tile is 16 whole rows,
 *                                         each 8 rows in the chain's fragment order
 *                                         (u_fragment_index; fp32 with --precise: chain_u_type)
 *   decay    fp32 [4]                    exp(gamma_C) and padding
 * Kernel 1 writes the parts its launch asks for (chunk_parts_for; the chain with output warps
 * reads only the decay, and the chunk's transform block, below). Zeros past the chunk's
 * tokens, past K and past V. */
/* U in bf16, as FLA stores it: it is rounded to bf16 as Vnew = U - W S0 anyway before the
 * state update and the output use it, and bf16 halves what kernel 1 writes of it and the
 * chain reads. --precise keeps it fp32. */
template <bool PRECISE> using chain_u_type = std::conditional_t<PRECISE, float, bf16>;
__host__ __device__ static inline size_t chain_u_size(bool precise) /* the same, chosen at run time */
{
    return precise ? sizeof(chain_u_type<true>) : sizeof(chain_u_type<false>);
}
/* U_t in the order the chain reads it (the fifteenth step). The chain's consumer warp reads an
 * n-tile of U_t (8 columns of U: 8 rows of 64 tokens, 512 values) as MMA fragments: lane 4g + t
 * takes, for each token tile i, the four values at tokens 16 i + g, 16 i + g + 8 of columns 2t,
 * 2t + 1 (r = 0 .. 3, the accumulator's order). Stored row by row, those were 16 reads of 2
 * bytes a lane, the 4 lanes of a g 128 bytes apart: 4-way bank conflicts. Stored in fragment
 * order, a lane's 16 values lie together, [i][r], in 16-byte pieces (2 token tiles a piece in
 * bf16, 1 in fp32), piece p of lane l at piece 32 p + l of the n-tile: 2 (or 4) loads of 16
 * bytes a lane, consecutive lanes on consecutive bytes. Kernel 1 writes each value there;
 * nothing else reads U. The index in its n-tile of the first of lane's four values of tile i: */
template <typename T> __host__ __device__ constexpr int u_tiles_a_piece(void) { return 16 / (4 * (int)sizeof(T)); }
template <typename T> __host__ __device__ constexpr int u_fragment_index(int lane, int i)
{
    return (i / u_tiles_a_piece<T>() * 32 + lane) * 4 * u_tiles_a_piece<T>() + i % u_tiles_a_piece<T>() * 4;
}
__device__ __forceinline__ static float to_float(float x) { return x; }
__device__ __forceinline__ static float to_float(bf16 x) { return __bfloat162float(x); }
/* two floats as the bf16 pair of one 32-bit register, the first in the low half */
__device__ __forceinline__ static uint32_t pack_bf16(float low_column, float high_column)
{
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low_column, high_column);
    return *(const uint32_t *)&pair;
}
/* four values of U into their place in U_t (u_fragment_index): one 8- or 16-byte store (the bf16
   four as one 64-bit integer: a uint2 is a struct, and its assignment was split into two 4-byte
   stores, each with a four-way bank conflict at the fragment order's 16-byte stride) */
__device__ __forceinline__ static void store_four(bf16 *to, const float (&four)[4])
{
    *(uint64_t *)to = (uint64_t)pack_bf16(four[2], four[3]) << 32 | pack_bf16(four[0], four[1]);
}
__device__ __forceinline__ static void store_four(float *to, const float (&four)[4])
{
    *(float4 *)to = make_float4(four[0], four[1], four[2], four[3]);
}
__host__ __device__ static inline size_t chain_w_bytes(size_t K) { return (size_t)CHUNK * key_stride(K) * sizeof(bf16); }
__host__ __device__ static inline size_t chain_keys_offset(size_t K, bool precise) { return chain_w_bytes(K) * (precise ? 2 : 1); }
__host__ __device__ static inline size_t chain_u_offset(size_t K, bool precise)
{
    return chain_keys_offset(K, precise) + (size_t)round_up16(K) * TOKEN_STRIDE * sizeof(bf16);
}
__host__ __device__ static inline size_t chain_decay_offset(size_t K, size_t V, bool precise)
{
    return chain_u_offset(K, precise) + (size_t)round_up16(V) * CHUNK * chain_u_size(precise);
}
/* A chunk's transform block: what the chain with output warps reads of it instead of W and U,
 * since it makes Vnew from v itself (docs/06, the thirty-third step):
 *   Tm     bf16 [64][64]   Tm's strictly lower part, in wgmma's 128-byte-swizzled layout
 *                          (one panel: swizzled_offset), its rows the tokens i of Vnew
 *   beta, scaled_beta, d   fp32 [64] each: beta_i, beta_i e^gamma_i, e^(gamma_C - gamma_i)
 * 8,960 bytes where W and U are 33 KB at K = V = 128. The transform blocks follow the chain
 * blocks in the workspace, one after another (chunk_workspace). */
constexpr size_t TRANSFORM_TM_BYTES = (size_t)CHUNK * CHUNK * sizeof(bf16), TRANSFORM_BYTES = TRANSFORM_TM_BYTES + 3 * CHUNK * sizeof(float);
__host__ __device__ static inline size_t chain_block_bytes(size_t K, size_t V, bool precise) { return chain_decay_offset(K, V, precise) + 4 * sizeof(float); }
/* what one chain block of `tiles` 16-column tiles copies of it per chunk: W (and W_low),
 * keys_t, its 16 tiles rows of U_t, the decay */
__host__ __device__ static inline size_t chain_slot_bytes(size_t K, bool precise, int tiles)
{
    return chain_u_offset(K, precise) + (size_t)tiles * 16 * CHUNK * chain_u_size(precise) + 4 * sizeof(float);
}
/* A ring slot of the chain that makes Vnew from v itself (FROM_VALUES: chain_from_values), as
 * the chain with output warps does: the chunk's k tile in W's place and layout (a tensor copy,
 * its row padded by the next 8 keys, never read), the transform block, the decay, and the v
 * tile: the block's columns of v (in a fold's block, those right of the identity's, at most
 * V: values_tile_columns) and the 8 after them, so that a row is an odd multiple of 8 bytes
 * and the lanes' 4-byte loads of a fragment's pairs fall in 32 different banks (and the box
 * is never wider than a row of all heads, which H >= 2 gives: a wider box faults). Each part
 * from a 128-byte boundary, as tensor copies want. */
__host__ __device__ static inline size_t values_slot_transform_offset(size_t K) { return chain_w_bytes(K); }
__host__ __device__ static inline size_t values_slot_decay_offset(size_t K) { return chain_w_bytes(K) + TRANSFORM_BYTES; }
__host__ __device__ static inline size_t values_slot_values_offset(size_t K) { return values_slot_decay_offset(K) + 128; }
__host__ __device__ constexpr int values_tile_columns(int tiles, size_t V) /* (round_up16, written out: constexpr) */
{
    return 16 * tiles < (int)((V + 15) / 16 * 16) ? 16 * tiles : (int)((V + 15) / 16 * 16);
}
__host__ __device__ constexpr int values_tile_stride(int columns) { return columns + 8; }
__host__ __device__ static inline size_t values_slot_bytes(size_t K, int tiles) /* (room for 16 tiles columns) */
{
    return values_slot_values_offset(K) + (size_t)CHUNK * values_tile_stride(16 * tiles) * sizeof(bf16);
}
static_assert(TRANSFORM_BYTES % 128 == 0 && CHUNK * sizeof(bf16) % 128 == 0, "a values slot's parts from 128-byte boundaries");

typedef struct {
    double *gamma;         /* [heads T] */
    unsigned char *chain;  /* [heads chunks] chain blocks */
    unsigned char *transforms; /* [heads chunks] transform blocks (TRANSFORM_BYTES), after the chain blocks */
    /* [heads chunks] a flag a chunk, after the transform blocks: where kernel 1 runs beside the
       chain (kernel1_beside_chain), 1 once the chunk's transform block, gamma and decay are
       written, for chunks ready_from on; ready NULL elsewhere (nothing waits) */
    unsigned *ready;
    size_t ready_from;
    bf16 *states_t;        /* [heads chunks][round_up16(V)][key_stride(K)]: S0 transposed, for kernel 3 */
    bf16 *new_values_t;    /* [heads chunks][round_up16(V)][TOKEN_STRIDE]: Vnew transposed */
    /* (rows padded as kernel 3's tiles are, so that a tile comes in by one bulk copy; the
       padding holds whatever a staged chain left there, and is never read) */
    bf16 *states_low_t, *new_values_low_t; /* --precise only, same shapes: what bf16 rounded away */
} chunk_workspace;

/* The bytes of the workspace's four parts, in order: gamma (rounded up to 16 bytes, so the
 * chain blocks after it are aligned for 16-byte copies), the chain blocks and the transform
 * blocks and the ready flags, S0^T and Vnew^T
 * (twice each with --precise: the low terms follow). One function for the size the runner
 * allocates and for the pointers into it, so the two cannot disagree. -1 on overflow. */
static int workspace_parts(size_t heads, size_t T, size_t K, size_t V, bool precise, size_t bytes[4])
{
    const size_t terms = precise ? 2 : 1, chunks = chunks_of(T);
    size_t gamma[3] = {heads, T, sizeof(double)}, chain[3] = {heads, chunks, chain_block_bytes(K, V, precise) + TRANSFORM_BYTES + sizeof(unsigned)};
    size_t states[5] = {heads, chunks, (size_t)round_up16(V), (size_t)key_stride(K), terms * sizeof(bf16)};
    size_t values[5] = {heads, chunks, (size_t)round_up16(V), TOKEN_STRIDE, terms * sizeof(bf16)};
    if (gdn_multiply_sizes(&bytes[0], 3, gamma) || gdn_multiply_sizes(&bytes[1], 3, chain) ||
        gdn_multiply_sizes(&bytes[2], 5, states) || gdn_multiply_sizes(&bytes[3], 5, values))
        return -1;
    bytes[0] = (bytes[0] + 15) / 16 * 16;
    bytes[1] = (bytes[1] + 15) / 16 * 16; /* (the ready flags' 4 bytes a chunk): S0^T after them from 16 bytes on, for bulk copies */
    return 0;
}

static chunk_workspace workspace_at(void *base, const gdn_device_problem *p, bool precise)
{
    size_t bytes[4];
    workspace_parts(p->B * p->H, p->T, p->K, p->V, precise, bytes); /* sizes the runner has already checked */
    chunk_workspace w;
    w.gamma = (double *)base;
    w.chain = (unsigned char *)base + bytes[0];
    w.transforms = w.chain + p->B * p->H * chunks_of(p->T) * chain_block_bytes(p->K, p->V, precise);
    w.ready = NULL; /* the flags' place: w.transforms + heads chunks TRANSFORM_BYTES (kernel1_beside_chain) */
    w.ready_from = 0;
    w.states_t = (bf16 *)(w.chain + bytes[1]);
    w.new_values_t = w.states_t + bytes[2] / sizeof(bf16);
    w.states_low_t = precise ? w.states_t + bytes[2] / 2 / sizeof(bf16) : NULL;
    w.new_values_low_t = precise ? w.new_values_t + bytes[3] / 2 / sizeof(bf16) : NULL;
    return w;
}

/* ---- the triangular solve's joins on tensor cores ---- */

/* Row strides of the solve's fp32 tiles, in floats. Tm's is 4 mod 32, so that both tf32
 * fragment loads (rows g, columns t: 4g + t; rows t, columns g) fall in 32 different banks
 * (05's 65 gave two-way conflicts). The join's scratch Y is only ever a B operand (rows t,
 * t + 4 of column g) and the target of float2 stores (rows g, columns 2t): at 4 mod 32 both
 * were two-way conflicted (rows t and t + 1 four banks apart; ncu, run195: 128 excessive
 * wavefronts a chunk); at 8 mod 32 they fall in 32 banks (8t + g; 8g + 2t). */
constexpr int SOLVE_STRIDE = CHUNK + 4, JOIN_STRIDE = 32 + 8;
/* Kernel 1's shared memory is reused as the work goes on, so that four blocks fit on an SM at
 * K = V = 128 (53 KB a block; 70 KB when each tile had its own place):
 *   Tm's place: Tm (fp32) until the solve is done; then Tm_values and Tm_keys (bf16, Tm's
 *               strictly lower part scaled), and once W is made, U's staging tile where
 *               Tm_keys was;
 *   the keys:   k's tile, and W's staging tile in its place, a 64-column pass at a time;
 *   the values: the solve's scratch (32 x JOIN_STRIDE floats), then v's tile, which is loaded
 *               only after the solve. */
/* kernel 1's staging tile for U_t: 64 of its rows, laid out as in the chain block */
__host__ __device__ constexpr size_t u_stage_bytes(bool precise) { return (size_t)CHUNK * CHUNK * (precise ? sizeof(float) : sizeof(bf16)); }
/* Tm's place holds Tm, then Tm_values and, after them, Tm_keys or (once W is made) U's
 * staging tile: room for the larger of each */
__host__ __device__ constexpr size_t tm_place_bytes(bool precise)
{
    constexpr size_t tm = CHUNK * SOLVE_STRIDE * sizeof(float), scaled_tile = CHUNK * TOKEN_STRIDE * sizeof(bf16);
    const size_t after_solve = scaled_tile + (scaled_tile > u_stage_bytes(precise) ? scaled_tile : u_stage_bytes(precise));
    return tm > after_solve ? tm : after_solve;
}
__host__ __device__ constexpr size_t values_place_bytes(size_t ldv)
{
    return CHUNK * ldv * sizeof(bf16) > 32 * JOIN_STRIDE * sizeof(float) ? CHUNK * ldv * sizeof(bf16) : 32 * JOIN_STRIDE * sizeof(float);
}

/* The fragments of one m16n8k8 tf32 product from fp32 tiles in shared memory, row major,
 * each element rounded to tf32 on its way in: A's rows row0 .. row0 + 16 and columns k0 .. k0
 * + 8; B's rows k0 .. k0 + 8 and columns col0 .. col0 + 8. */
__device__ __forceinline__ static void load_a_tf32(uint32_t (&a)[4], const float *A, int lda, int row0, int k0)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const float *row = A + (row0 + g) * lda + k0 + t;
    a[0] = to_tf32(row[0]), a[1] = to_tf32(row[8 * lda]), a[2] = to_tf32(row[4]), a[3] = to_tf32(row[8 * lda + 4]);
}
__device__ __forceinline__ static void load_b_tf32(uint32_t (&b)[2], const float *B, int ldb, int k0, int col0)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const float *column = B + (k0 + t) * ldb + col0 + g;
    b[0] = to_tf32(column[0]), b[1] = to_tf32(column[4 * ldb]);
}
/* a 16 x 8 tile of sums into rows row0 .. row0 + 16, columns col0 .. col0 + 8 of a row-major
   fp32 tile, each by `sign` (two 8-byte stores a lane) */
__device__ __forceinline__ static void store_tile_fp32(float *D, int ldd, int row0, int col0, const float (&acc)[4], float sign)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    *(float2 *)&D[(row0 + g) * ldd + col0 + 2 * t] = make_float2(sign * acc[0], sign * acc[1]);
    *(float2 *)&D[(row0 + g + 8) * ldd + col0 + 2 * t] = make_float2(sign * acc[2], sign * acc[3]);
}
constexpr int JOIN_COLUMN_WARPS = 4; /* the warps that make the second level's X_ab, a column of 8 each */

/* Tm = (I + M)^-1 from the inverses of its 16 x 16 diagonal blocks (eq. 11), by doubling: a
 * unit lower triangular [[L_bb, 0], [L_ab, L_aa]] has the inverse [[X_bb, 0], [X_ab, X_aa]]
 * with X_ab = -X_aa L_ab X_bb. Level 1 joins the 16 x 16 pairs (0, 1) and (2, 3) into the two
 * 32 x 32 diagonal inverses, level 2 joins those into the whole; each level is two products
 * on tensor cores (tf32), Y = L_ab X_bb and X_ab = -X_aa Y. Stage 05 joined the blocks one
 * block row at a time with scalar loops: six barriers, and a third of this kernel's
 * instructions. The zeros above the diagonal are in Tm, so no product needs a mask; the k-steps
 * that meet a known zero block of X_bb or X_aa (lower triangular) are skipped, exactly, as the
 * twenty-ninth step skips K K^T's.
 * A warp makes whole columns of X_ab: Y's same columns are then its own, so it keeps them in
 * its own columns of scratch (32 x JOIN_STRIDE floats) and goes on after a __syncwarp, where
 * one tile a warp needed a block barrier between the two products; and each A fragment it
 * loads serves both its tiles. Level 1: warp p < 2 joins pair p alone (both 8-column tiles of
 * its 16 x 16 X_ab), so the only warp that reads its L_ab is the one that overwrites it. Level
 * 2: warp c < 4 makes columns 8c .. 8c + 8 of the 32 x 32 X_ab (both 16-row tiles); L_ab is
 * read by all four, so the block meets before any writes X_ab over it. (A named barrier among
 * the four alone measured the same, within 1 %, and compute-sanitizer's racecheck then reported
 * hazards between accesses that a later block barrier separates, a false alarm to our reading;
 * a block barrier needs no such argument.) */
__device__ static void join_diagonal_blocks_tf32(float *Tm, float *scratch)
{
    const int warp = threadIdx.x / 32;
    uint32_t a[4], b[2];
    if (warp < 2) { /* level 1, pair `warp`: rows and columns top .. top + 32 */
        const int top = 32 * warp;
        float *X_ab = Tm + (top + 16) * SOLVE_STRIDE + top, *Y = scratch + warp * 16 * JOIN_STRIDE; /* L_ab, then X_ab */
        const float *X_bb = Tm + top * SOLVE_STRIDE + top, *X_aa = X_ab + 16;
        float y[2][4] = {}, x[2][4] = {};
#pragma unroll
        for (int k0 = 0; k0 < 16; k0 += 8) {
            load_a_tf32(a, X_ab, SOLVE_STRIDE, 0, k0);
#pragma unroll
            for (int n = 0; n < 2; n++)
                if (k0 >= 8 * n) { /* X_bb's rows above column 8 n are zero there */
                    load_b_tf32(b, X_bb, SOLVE_STRIDE, k0, 8 * n);
                    mma_tf32_16x8x8(y[n], a, b);
                }
        }
#pragma unroll
        for (int n = 0; n < 2; n++)
            store_tile_fp32(Y, JOIN_STRIDE, 0, 8 * n, y[n], 1.0f);
        __syncwarp(); /* Y's columns are the warp's own: its lanes' stores before their loads */
#pragma unroll
        for (int k0 = 0; k0 < 16; k0 += 8) {
            load_a_tf32(a, X_aa, SOLVE_STRIDE, 0, k0);
#pragma unroll
            for (int n = 0; n < 2; n++) {
                load_b_tf32(b, Y, JOIN_STRIDE, k0, 8 * n);
                mma_tf32_16x8x8(x[n], a, b);
            }
        }
#pragma unroll
        for (int n = 0; n < 2; n++) /* over L_ab, which only this warp read (before the __syncwarp) */
            store_tile_fp32(X_ab, SOLVE_STRIDE, 0, 8 * n, x[n], -1.0f);
    }
    __syncthreads(); /* the two 32 x 32 diagonal inverses are whole */
    const int col0 = 8 * warp;
    float *X_ab = Tm + 32 * SOLVE_STRIDE; /* L_ab, then X_ab */
    float x[2][4] = {};
    if (warp < JOIN_COLUMN_WARPS) { /* level 2: rows 32 .. 64, columns col0 .. col0 + 8 */
        const float *X_bb = Tm, *X_aa = X_ab + 32;
        float y[2][4] = {};
#pragma unroll
        for (int k0 = 0; k0 < 32; k0 += 8)
            if (k0 >= col0) { /* X_bb's rows above column col0 are zero in these columns */
                load_b_tf32(b, X_bb, SOLVE_STRIDE, k0, col0);
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    load_a_tf32(a, X_ab, SOLVE_STRIDE, 16 * m, k0);
                    mma_tf32_16x8x8(y[m], a, b);
                }
            }
#pragma unroll
        for (int m = 0; m < 2; m++)
            store_tile_fp32(scratch, JOIN_STRIDE, 16 * m, col0, y[m], 1.0f);
        __syncwarp();
#pragma unroll
        for (int k0 = 0; k0 < 32; k0 += 8) {
            load_b_tf32(b, scratch, JOIN_STRIDE, k0, col0);
#pragma unroll
            for (int m = 0; m < 2; m++)
                if (k0 < 16 * m + 16) { /* X_aa's columns right of row 16 m + 16 are zero in these rows */
                    load_a_tf32(a, X_aa, SOLVE_STRIDE, 16 * m, k0);
                    mma_tf32_16x8x8(x[m], a, b);
                }
        }
    }
    __syncthreads(); /* every read of L_ab done */
    if (warp < JOIN_COLUMN_WARPS)
#pragma unroll
        for (int m = 0; m < 2; m++)
            store_tile_fp32(X_ab, SOLVE_STRIDE, 16 * m, col0, x[m], -1.0f);
    __syncthreads();
}

/* ---- the kernels' overlap (programmatic dependent launch, docs/06 the fourteenth step): the
 * chain and kernel 3 are launched by CUDA_LAUNCH_AFTER_PREVIOUS (common/cuda_check.h), so the
 * GPU places their blocks as the last blocks of the kernel before them exit, without waiting
 * for that kernel's memory to be flushed and the next launch to be processed. A block sets up
 * what needs nothing from that kernel (barriers, tensor-map prefetches, loads of the inputs)
 * and then waits for it to end, its writes visible, before it reads anything it wrote
 * (wait_for_previous_kernel). The wait covers the kernels before the one before too: that one
 * ended after its own wait. A kernel lets the next one start earlier (let_next_kernel_start)
 * only where the next one's blocks take no room from its own: the chain, where all of kernel
 * 3's blocks fit beside it (docs/06, the forty-first step); elsewhere the early blocks took
 * room from the last waves of the kernel before (1-2 % slower at the large shapes, 11 % at
 * (2, 1000, 3, 40, 72), docs/06, the fourteenth step). ---- */
constexpr double LOG2_E = 1.4426950408889634; /* log2(e): e^x = 2^(x log2 e) */
/* 2^x by the special-function unit, one instruction (PTX ex2.approx.ftz: relative error about
   2^-22; a result under 2^-126 is flushed to 0, where exp2f spends four more instructions a call
   to keep such values, which neither P nor Tm could use) */
__device__ __forceinline__ static float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* e^x as 2^(x log2 e): a multiply and one 2^x, where expf takes about 18 instructions with its
   branch. The gates' factors e^(gamma_i - gamma_l) are made so in kernels 1 and 3 (x <= 0, the
   difference taken in double and rounded to float first, as expf's argument was) */
__device__ __forceinline__ static float exp_approx(float x) { return exp2_approx(x * (float)LOG2_E); }

/* ---- kernel 1: one block per (head, chunk), 8 warps; warp w owns output rows 16 (w % 4) and
 * columns 32 (w / 4) of each 64 x 64 product ---- */

/* What kernel 1 writes of a chunk's chain block (its `parts`, chunk_parts_for): the decayed
 * keys (keys_t) and W and U, which every chain but the output warps' reads (and stage 07's
 * fold), and the transform block, which the chain with output warps reads instead (the
 * thirty-third step) */
enum { WRITE_KEYS_T = 1, WRITE_W_AND_U = 2, WRITE_TRANSFORM = 4 };
/* d_j = e^(gamma_C - gamma_j), token j's decay to the chunk's end (eq. 15); 0 past the chunk */
__device__ __forceinline__ static float decay_to_chunk_end(const double *gamma, int n, int token)
{
    return token < n ? expf((float)(gamma[n - 1] - gamma[token])) : 0.0f;
}

/* BLOCKS: the blocks an SM should hold, which caps the registers (__launch_bounds__): 3 (at
 * most 85 registers), or 4 where four blocks' shared memory fits too (53 KB a block at K = V =
 * 128: tm_place_bytes; at most 64 registers); 2 with --precise. At 4, V is one slice (VALUE_SLICE): the
 * loop over later slices and their copies go, and with them the registers that made 64 too
 * few (20 bytes spilled). At TRANSFORM_BLOCKS (6) the kernel writes the transform block alone,
 * the one part the chains that make Vnew from v read: without the code of W, U and the
 * decayed keys it needs at most 40 registers (65,536 / (6 x 256) = 42), and without the
 * values' tile, its join's scratch in the keys' place (the keys are read by then), 36 KB
 * (transform_only_bytes), so six blocks fit an SM (seven would need 32 registers) */
constexpr int TRANSFORM_BLOCKS = 6;
/* (that instance returns after the transform block: the code after it is unreachable there,
   as it is meant to be, and nvcc would say so of its loops) */
#pragma nv_diag_suppress 128
template <bool PRECISE, int BLOCKS, int SIZE>
__global__ void __launch_bounds__(THREADS, BLOCKS) prepare_chunks_kernel(gdn_device_problem p, chunk_workspace w,
                                                                                   const __grid_constant__ CUtensorMap k_map,
                                                                                   const __grid_constant__ CUtensorMap v_map, int parts,
                                                                                   unsigned first_chunk)
{
    extern __shared__ double shared[];
    /* SIZE: K = V = SIZE known to the compiler (64 or 128, where the launch sees them), so
     * the strides, the passes and the loops' bounds are constants; 0: as the problem says */
    constexpr bool TRANSFORM_ONLY = BLOCKS == TRANSFORM_BLOCKS;
    const size_t key_count = SIZE ? (size_t)SIZE : p.K, V = SIZE ? (size_t)SIZE : p.V;
    const int K = (int)key_count, KP = round_up16(key_count), LDK = key_stride(key_count);
    /* the block's (head, chunk), 32-bit as blockIdx.x is: registers are few at four blocks an SM.
       Beside the chain (w.ready: kernel1_beside_chain) chunk by chunk from first_chunk, every
       head's chunk c before any head's c + 1, so that the chain finds them in its order */
    const unsigned chunks = (unsigned)chunks_of(p.T), heads = (unsigned)(p.B * p.H);
    const bool beside_chain = TRANSFORM_ONLY && w.ready;
    const unsigned chunk = beside_chain ? first_chunk + blockIdx.x / heads : blockIdx.x % chunks;
    const unsigned head = beside_chain ? blockIdx.x % heads : blockIdx.x / chunks;
    const unsigned b = head / (unsigned)p.H, h = head % (unsigned)p.H;
    const size_t t0 = (size_t)chunk * CHUNK;
    const size_t row0 = (size_t)head * p.T + t0;
    const int n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK), warp = threadIdx.x / 32;
    const int tile_row = 16 * (warp % 4), tile_column = 32 * (warp / 4);
    unsigned char *chain = w.chain + (head * chunks + chunk) * chain_block_bytes(key_count, V, PRECISE);
    const bf16 *k16 = (const bf16 *)p.k_bf16, *v16 = (const bf16 *)p.v_bf16;
    const int VP = round_up16(V), LDV = value_stride(V);
    /* from a 128-byte boundary, as tensor copies want (the keys land 128-byte aligned past the
     * gates and Tm); the launch adds 128 bytes for the shift */
    double *gamma = (double *)SHARED_AT_128_BYTES(shared); /* common/bulk_copy.cuh */
    float *beta = (float *)(gamma + CHUNK), *scaled_beta = beta + CHUNK, *Tm = scaled_beta + CHUNK;
    bf16 *keys = (bf16 *)((unsigned char *)Tm + tm_place_bytes(PRECISE)), *values = keys + CHUNK * LDK;
    bf16 *Tm_values = (bf16 *)Tm, *Tm_keys = Tm_values + CHUNK * TOKEN_STRIDE; /* in Tm's place, once Tm is read */

    /* k and v in, asynchronously: the keys now, waited for before K K^T; the values once the
     * solve is done with their place (its scratch), waited for only before U = Tm (beta V),
     * so their copy runs under the rounding of Tm, the decayed keys and W. Where the boxes fit
     * (tiles_by_tensor_map), one tensor copy each, on an mbarrier each, as kernel 3 takes q
     * and k (the values' box is the first slice's tile: columns past it are padding, never
     * read); else the threads copy them. */
    const size_t first_token = gdn_device_token(&p, b, t0, h), token_stride = p.H; /* token t0 + i: first + i H */
    const bool by_map = tiles_by_tensor_map(key_count, V, p.H, p.T);
    static_assert((CHUNK * sizeof(double) + 2 * CHUNK * sizeof(float) + tm_place_bytes(PRECISE)) % 128 == 0,
                  "the keys' tile starts 128-byte aligned (the values' then does too: 64 rows of LDK bf16 are 128 LDK bytes)");
    __shared__ uint64_t keys_landed, values_landed;
    if (by_map && threadIdx.x == 0) {
        barrier_init(&keys_landed, 1);
        barrier_init(&values_landed, 1);
        barrier_init_fence();
        barrier_arrive_expecting(&keys_landed, (uint32_t)(CHUNK * LDK * sizeof(bf16)));
        tensor_copy_3d(keys, &k_map, (int)(h * K), (int)t0, (int)b, &keys_landed);
    }
    if (!by_map) {
        copy_tile(keys, LDK, CHUNK, n, K, KP, k16 + first_token * K, token_stride * K);
        __pipeline_commit();
    }
    /* The gates' sums (eq. 9) by warp 4 alone, from its own loads (tokens 2 lane and 2 lane +
     * 1), while the other warps make K K^T, in which warp 4 has no block below the diagonal
     * (its rows 0-15, its columns 32-63); the block meets after the products, where I + M
     * needs the sums. (Loaded by 64 threads and scanned by warp 0 between two block barriers
     * before K K^T, the gates kept the seven other warps waiting: 19 % of kernel 1's samples,
     * the fifty-third session's profile.) The block barrier here only publishes the mbarriers'
     * initialization; warp 4's loads are in flight across it. */
    constexpr int GATES_WARP = 4;
    static_assert(GATES_WARP / 4 * 32 >= 16 * (GATES_WARP % 4) + 16, "the gates' warp has no K K^T block on or below the diagonal");
    double gate_first = 0.0, gate_second = 0.0;
    float beta_first = 0.0f, beta_second = 0.0f;
    const int pair = 2 * (threadIdx.x % 32);
    if (warp == GATES_WARP) {
        if (pair < n)
            gate_first = p.g[first_token + pair * token_stride], beta_first = p.beta[first_token + pair * token_stride];
        if (pair + 1 < n)
            gate_second = p.g[first_token + (pair + 1) * token_stride], beta_second = p.beta[first_token + (pair + 1) * token_stride];
    }
    __syncthreads(); /* the barriers' initialization is seen before any thread waits on them */
    if (warp == GATES_WARP) {
        const double total = warp_gate_sums(&gate_first, &gate_second);
        write_gate_sums(gate_first, gate_second, total, beta_first, beta_second, n, gamma, beta, scaled_beta, w.gamma + row0,
                        (float *)(chain + chain_decay_offset(K, V, PRECISE)));
    }
    if (by_map)
        barrier_wait(&keys_landed, 0);
    else {
        __pipeline_wait_prior(0); /* the keys, */
        __syncthreads();          /* every thread's */
    }

    /* I + M, M[i, j] = beta_i (k_i . k_j) exp(gamma_i - gamma_j) for j < i (eq. 10): K K^T on
     * tensor cores, keys serving as both A and B^T */
    float acc[4][4];
    clear(acc);
    warp_product(acc, keys, LDK, keys, LDK, tile_row, tile_column, KP, causal_tiles(tile_row, tile_column)); /* its l < i blocks */
    __syncthreads(); /* the gates' sums are here */
    /* the gates of the thread's two rows, read once, and of its two columns in each 16 x 8
     * tile, read before the tile's stores: the stores into Tm between them would otherwise make
     * the compiler read them again for every element (the rows' betas serve U's diagonal term
     * too, below). All eight columns' gates at once held 16 registers more, which six blocks
     * an SM (40 registers) do not have. */
    double row_gamma[2];
    float row_beta[2];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int i = fragment_row(tile_row, 2 * half);
        row_gamma[half] = gamma[i], row_beta[half] = beta[i];
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const double column_gamma[2] = {gamma[fragment_column(tile_column, j, 0)], gamma[fragment_column(tile_column, j, 1)]};
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = fragment_row(tile_row, r), l = fragment_column(tile_column, j, r);
            Tm[i * SOLVE_STRIDE + l] = i == l                 ? 1.0f
                                       : l < i && i < n ? row_beta[r / 2] * acc[j][r] * exp_approx((float)(row_gamma[r / 2] - column_gamma[r % 2]))
                                                        : 0.0f;
        }
    }
    __syncthreads();
    /* The keys decayed to the chunk's end, transposed (eq. 15), by warps 2-7 while warps 0 and
     * 1 invert the diagonal blocks (64 threads, 15 dependent rows, with the other six warps
     * waiting at its barrier until now); the keys' place is theirs until W's staging tile
     * takes it. Zero past the chunk (decay 0) and past K (the keys' tile is zero there:
     * copy_tile's zeros; a tensor copy's K is KP). Worker: token worker % 64 (its one
     * exponential), key columns c0 .. c0 + 8 for c0 = 8 (worker / 64), + 24, ...: one 16-byte
     * read of its keys each; consecutive threads write consecutive tokens of each keys_t row
     * (coalesced). */
    static_assert(SOLVE_BLOCKS * SOLVE_BLOCK == CHUNK && (THREADS - CHUNK) % CHUNK == 0, "the inversion takes the first 64 threads");
    if (!TRANSFORM_ONLY && threadIdx.x >= CHUNK && (parts & WRITE_KEYS_T)) {
        constexpr int KEY_WORKERS = THREADS - CHUNK, COLUMN_STEP = KEY_WORKERS / CHUNK * 8;
        const int worker = threadIdx.x - CHUNK, token = worker % CHUNK;
        bf16 *keys_t = (bf16 *)(chain + chain_keys_offset(K, PRECISE));
        const float decay = decay_to_chunk_end(gamma, n, token);
        for (int c0 = worker / CHUNK * 8; c0 < KP; c0 += COLUMN_STEP) {
            const uint4 raw = *(const uint4 *)(keys + token * LDK + c0);
            const bf16 *pieces = (const bf16 *)&raw;
            bf16 *token_column = keys_t + c0 * TOKEN_STRIDE + token; /* keys_t[c0][token] */
#pragma unroll
            for (int q = 0; q < 8; q++)
                token_column[q * TOKEN_STRIDE] = __float2bfloat16_rn(__bfloat162float(pieces[q]) * decay);
        }
    }
    invert_diagonal_blocks<SOLVE_STRIDE>(Tm); /* Tm = (I + M)^-1 (eq. 11): the diagonal blocks in fp32, */
    __syncthreads();
    /* the rest on tensor cores; its scratch in the values' place, or where kernel 1 writes the
       transform block alone (no values) in the keys', which K K^T has read before the last barrier */
    static_assert(!TRANSFORM_ONLY || CHUNK * (SIZE + KEY_STRIDE_PADDING) * sizeof(bf16) >= 32 * JOIN_STRIDE * sizeof(float),
                  "the join's scratch fits in the keys' place (that instance is compiled for K = 64 or 128)");
    join_diagonal_blocks_tf32(Tm, TRANSFORM_ONLY ? (float *)keys : (float *)values);
    fence_shared_for_bulk_store(); /* the scratch's accesses before the values' tensor copy (common/bulk_copy.cuh) */
    /* W = Tm (beta e^gamma K) and U = Tm (beta V) (eq. 12) as (Tm diag(beta e^gamma)) K and
     * (Tm diag(beta)) V: the scaling goes into Tm's columns, so K and V enter the products as
     * they are, row major, and ldmatrix.trans makes their B fragments (stage 05 wrote scaled,
     * transposed copies; that copy was a fifth of this kernel's time). Past the chunk both
     * scales are zero, so W's and U's rows there come out zero. Tm's diagonal is 1, so row i
     * of W is beta_i e^gamma_i k_i plus the rest; that term is added in fp32 below and the
     * products take Tm's strictly lower part: in bf16 the diagonal would round beta_i once for
     * the whole row, an error no sum averages away (at T = 1 it is the whole of U). */
    /* into Tm's own place, so each thread reads its 16 elements first, and writes them after
     * a barrier: the bf16 pair (keys' scale, values' scale) of each in one register. Thread:
     * column l of rows first_row, first_row + 4, ..., so its column's two scales are read once
     * and its elements lie at fixed offsets from one address (no index arithmetic per element) */
    static_assert(THREADS % CHUNK == 0, "each thread keeps one column of Tm (and one token of keys_t below)");
    constexpr int PER_THREAD = CHUNK * CHUNK / THREADS, ROW_STEP = THREADS / CHUNK;
    const int l = threadIdx.x % CHUNK, first_row = threadIdx.x / CHUNK;
    const float keys_scale = scaled_beta[l], values_scale = beta[l];
    if (TRANSFORM_ONLY || (parts & WRITE_TRANSFORM)) { /* the transform block (for the chain with output warps) */
        bf16 *const transform = (bf16 *)(w.transforms + ((size_t)head * chunks + chunk) * TRANSFORM_BYTES);
        /* Tm's strictly lower part in bf16, eight columns of a row a thread, one 16-byte store
           each (in the swizzled layout a row's eight stores fill its 128-byte line). A warp takes
           four whole rows; within each eight lanes (one shared-memory wavefront of 16-byte reads)
           the first four read the first half of one row and the last four the second half of
           the next (the row's low bit flipped by the piece's bit 2): rows 68 floats apart start
           4 banks apart, so the eight reads fall in 32 different banks, where eight pieces of
           one row met two by two (columns c0 and c0 + 32) */
        for (int piece = threadIdx.x; piece < CHUNK * CHUNK / 8; piece += THREADS) {
            static_assert(SOLVE_STRIDE % 32 == 4 && THREADS % 32 == 0, "a row's reads 4 banks from the row before");
            const int i = (piece / 8) ^ (piece / 4 % 2), c0 = piece % 8 * 8;
            const float4 left = *(const float4 *)&Tm[i * SOLVE_STRIDE + c0], right = *(const float4 *)&Tm[i * SOLVE_STRIDE + c0 + 4];
            const float row[8] = {left.x, left.y, left.z, left.w, right.x, right.y, right.z, right.w};
            uint32_t pairs[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                pairs[e] = pack_bf16(c0 + 2 * e < i ? row[2 * e] : 0.0f, c0 + 2 * e + 1 < i ? row[2 * e + 1] : 0.0f);
            *(uint4 *)&transform[swizzled_offset(CHUNK, i, c0)] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
        }
        if (threadIdx.x < CHUNK) { /* the factors */
            float *const factors = (float *)(transform + CHUNK * CHUNK);
            const int token = threadIdx.x;
            factors[token] = beta[token];
            factors[CHUNK + token] = scaled_beta[token];
            factors[2 * CHUNK + token] = decay_to_chunk_end(gamma, n, token);
        }
        if (beside_chain && chunk >= w.ready_from) { /* the chain may take the chunk: its flag, after every write */
            __syncthreads();
            if (threadIdx.x == 0) {
                __threadfence(); /* the block's writes (seen through the barrier) before the flag, at GPU scope */
                asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(w.ready + (size_t)head * chunks + chunk), "r"(1u) : "memory");
            }
        }
        if (TRANSFORM_ONLY || !(parts & WRITE_W_AND_U)) /* that chain makes Vnew from v itself */
            return;
    }
    uint32_t scaled[PER_THREAD];
#pragma unroll
    for (int a = 0; a < PER_THREAD; a++) {
        const int i = first_row + a * ROW_STEP;
        const float lower = l < i ? Tm[i * SOLVE_STRIDE + l] : 0.0f;
        scaled[a] = pack_bf16(lower * keys_scale, lower * values_scale);
    }
    __syncthreads(); /* every read of Tm done (and of the solve's scratch: the values may come) */
    if (by_map && threadIdx.x == 0) {
        barrier_arrive_expecting(&values_landed, (uint32_t)(CHUNK * LDV * sizeof(bf16)));
        tensor_copy_3d(values, &v_map, (int)(h * V), (int)t0, (int)b, &values_landed);
    }
    if (!by_map) {
        copy_tile(values, LDV, CHUNK, n, (int)(V < VALUE_SLICE ? V : VALUE_SLICE), VP < VALUE_SLICE ? VP : VALUE_SLICE,
                  v16 + first_token * V, token_stride * V);
        __pipeline_commit();
    }
#pragma unroll
    for (int a = 0; a < PER_THREAD; a++) {
        const int i = first_row + a * ROW_STEP;
        const __nv_bfloat162 pair = *(const __nv_bfloat162 *)&scaled[a];
        Tm_keys[i * TOKEN_STRIDE + l] = __low2bfloat16(pair);
        Tm_values[i * TOKEN_STRIDE + l] = __high2bfloat16(pair);
    }
    __syncthreads();

    /* each warp 16 rows and 32 of every 64 columns of [W | U]; K and V are zero past K and
     * V in shared memory, so W's columns K .. KP and U's V .. VP come out zero, as kernel 2
     * needs them (W is its A, U_t rows its 16-column tiles). Both leave through a staging
     * tile: a lane's fragment is a few 4-byte pieces in 8 rows, half of each 32-byte sector of
     * a direct store; from the staging tile one bulk store (the TMA unit) writes it out in
     * whole lines (U's staging tile is laid out as U_t, in the chain's fragment order:
     * u_fragment_index). W's staging tile is the keys' own place: a
     * pass of 64 columns reads only its own columns of the keys, so after a barrier its W
     * columns can take their place (the diagonal's term, a key, is read before it). */
    bf16 *W = (bf16 *)chain, *W_low = (bf16 *)(chain + chain_w_bytes(K));
    bf16 *W_stage = keys; /* [64][LDK]: W as it is in the chain block */
    chain_u_type<PRECISE> *U_stage = (chain_u_type<PRECISE> *)Tm_keys; /* 64 rows of U_t at a time, in fragment order */
    for (int pass = 0; pass < KP; pass += 64) { /* W, every warp in every pass (the barrier) */
        const int column0 = pass + tile_column;
        uint32_t sums[4][2]; /* the warp's W, rounded, as bf16 pairs */
        if (column0 < KP) {
            clear(acc);
            warp_product_rows(acc, Tm_keys, TOKEN_STRIDE, keys, LDK, tile_row, column0, KP, causal_depth(tile_row));
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int r = 0; r < 4; r += 2) { /* sums r and r + 1 are neighbours in a row: one 4-byte store */
                    const int i = fragment_row(tile_row, r), out = fragment_column(column0, j, r);
                    if (out >= KP)
                        continue;
                    const __nv_bfloat162 key = *(const __nv_bfloat162 *)&keys[i * LDK + out]; /* the diagonal's term */
                    const float first = acc[j][r] + scaled_beta[i] * __low2float(key), second = acc[j][r + 1] + scaled_beta[i] * __high2float(key);
                    sums[j][r / 2] = pack_bf16(first, second);
                    if (PRECISE) { /* the low terms go straight out: --precise is the slow mode anyway */
                        const __nv_bfloat162 high = *(const __nv_bfloat162 *)&sums[j][r / 2];
                        *(__nv_bfloat162 *)&W_low[i * LDK + out] = __floats2bfloat162_rn(first - __low2float(high), second - __high2float(high));
                    }
                }
        }
        __syncthreads(); /* every read of this pass's keys done */
        if (column0 < KP)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int r = 0; r < 4; r += 2) {
                    const int i = fragment_row(tile_row, r), out = fragment_column(column0, j, r);
                    if (out < KP)
                        *(uint32_t *)&W_stage[i * LDK + out] = sums[j][r / 2];
                }
    }
    /* W out by one bulk store (the TMA unit: whole lines, and no thread spends its loads and
       stores on the copy; W's rows are contiguous in the chain block as in the staging tile).
       Every writer fences its stores for the async proxy, then the barrier (common/bulk_copy.cuh).
       The keys' place is not written again, so nothing waits for the store until the end. */
    fence_shared_for_bulk_store();
    __syncthreads();
    if (threadIdx.x == 0) {
        bulk_store(W, W_stage, (uint32_t)(CHUNK * LDK * sizeof(bf16)));
        bulk_store_commit();
    }
    if (by_map)
        barrier_wait(&values_landed, 0);
    else
        __pipeline_wait_prior(0); /* the values */
    /* U, VALUE_SLICE columns of v at a time (one slice, already here, for V <= VALUE_SLICE),
     * 64 columns a pass: each warp's 32 into the staging tile, then the block's 64 rows of
     * U_t out */
    constexpr bool ONE_SLICE = BLOCKS == 4; /* the launch makes four only for V <= VALUE_SLICE */
    for (int slice = 0; slice < (ONE_SLICE ? 1 : VP); slice += VALUE_SLICE) {
        const int width = VP - slice < VALUE_SLICE ? VP - slice : VALUE_SLICE;
        if (!ONE_SLICE && slice > 0) {
            __syncthreads(); /* the last slice is no longer read */
            copy_tile(values, LDV, CHUNK, n, (int)(V - slice < VALUE_SLICE ? V - slice : VALUE_SLICE), width,
                      v16 + first_token * V + slice, token_stride * V);
            __pipeline_commit();
            __pipeline_wait_prior(0);
        }
        for (int pass = 0; pass < width; pass += 64) {
            const int column0 = pass + tile_column;
            if (threadIdx.x == 0)
                bulk_store_wait_read(); /* the staging tile's last rows are out (W's too: one wait for all) */
            __syncthreads(); /* (and the slice is here) */
            if (column0 < width) {
                clear(acc);
                warp_product_rows(acc, Tm_values, TOKEN_STRIDE, values, LDV, tile_row, column0, width, causal_depth(tile_row));
#pragma unroll
                for (int j = 0; j < 4; j++) { /* + the diagonal's term, beta_i v_i */
                    const int out = fragment_column(column0, j, 0), row = fragment_row(tile_row, 0);
                    if (out >= width) /* width is a multiple of 16: the whole n-tile is past it */
                        continue;
                    /* this lane's fragment of n-tile j holds U at tokens row, row + 8 of columns out,
                     * out + 1: the four values lane (4g + t) of the chain reads for token tile
                     * tile_row / 16 of that n-tile, one store (u_fragment_index) */
                    const __nv_bfloat162 top = *(const __nv_bfloat162 *)&values[row * LDV + out];
                    const __nv_bfloat162 bottom = *(const __nv_bfloat162 *)&values[(row + 8) * LDV + out];
                    const float four[4] = {acc[j][0] + row_beta[0] * __low2float(top), acc[j][1] + row_beta[0] * __high2float(top),
                                           acc[j][2] + row_beta[1] * __low2float(bottom), acc[j][3] + row_beta[1] * __high2float(bottom)};
                    const int n_tile = (out - pass) / 8;
                    store_four(U_stage + n_tile * 8 * CHUNK + u_fragment_index<chain_u_type<PRECISE>>(threadIdx.x % 32, tile_row / 16), four);
                }
            }
            fence_shared_for_bulk_store();
            __syncthreads();
            const int rows = width - pass < 64 ? width - pass : 64; /* rows of U_t: columns of U */
            if (threadIdx.x == 0) { /* the staging tile is laid out as U_t: one bulk store, as W (the
                                       address made here: kept from above, it took a register, and 8
                                       bytes spilled at K = V = 128) */
                chain_u_type<PRECISE> *U_t = (chain_u_type<PRECISE> *)(chain + chain_u_offset(K, PRECISE));
                bulk_store(U_t + (size_t)(slice + pass) * CHUNK, U_stage, (uint32_t)(rows * CHUNK * sizeof(chain_u_type<PRECISE>)));
                bulk_store_commit();
            }
        }
    }
    if (threadIdx.x == 0)
        bulk_store_wait(); /* the block's shared memory stays until its stores have read it */
}
#pragma nv_diag_default 128

/* ---- kernel 2: the chain, warp-specialized: a producer warp and chains in registers ----
 * One block per (head, segment, 16 x tiles columns of S), serial over chunks. The block has
 * 2 x tiles consumer warps (tiles of them in the widest blocks: chain_ntiles) and one
 * producer warp:
 *   the producer (its lane 0) brings each chunk's W, decayed keys, the block's rows of U and
 *     the decay into a ring of `stages` slots with three bulk copies (cp.async.bulk, the TMA
 *     unit: one instruction per contiguous piece, no thread copies 16 bytes at a time), and
 *     runs ahead of the consumers as far as the ring allows;
 *   consumer warp c owns 8 NTILES columns of the state, column0 .. column0 + 8 NTILES - 1,
 *     all K rows, in its MMA accumulators (NTILES n-tiles of K / 16 m-tiles of 16 x 8), for
 *     the whole run, and does every step of its columns alone: no warp waits for another,
 *     only for data. With two n-tiles, each A fragment it loads serves two MMAs.
 * Per chunk, per consumer warp (eq. 13-15):
 *   S0 in bf16 as B fragments: the accumulators hold S by rows (lane: rows g, g + 8, columns
 *     2t, 2t + 1), a B fragment wants it by columns (rows 2t, 2t + 1 of column g): the 8 x 8
 *     transpose within the warp's registers is one instruction, movmatrix.trans; the same
 *     fragments, stored as 4-byte pairs, are S0^T for kernel 3
 *   Vnew = U - W S0                     64 tokens x 8 NTILES columns, depth K (A: W from the slot)
 *   Vnew in bf16 as B fragments, by movmatrix again (and Vnew^T for kernel 3)
 *   S = exp(gamma_C) S + Kdec^T Vnew    K x 8 NTILES, depth 64 (A: the decayed keys from the slot;
 *                                       with output warps K^T (diag(d) Vnew), A: the slot's k tile)
 * S0^T and Vnew^T leave one of two ways (chain_launch_shape picks):
 *   where blocks are few (fewer than SMs), the chain's step latency is the time: the pairs go
 *     from the registers straight to global memory;
 *   where the blocks fill the GPU, memory traffic is the time, and each 4-byte pair was half
 *     of a 32-byte sector, the other half written by the next instruction: with STAGED the
 *     pairs go into the warp's staging tiles, and each tile leaves by one bulk store (its rows
 *     are contiguous in the workspace), whole lines, while the update runs. Through the TMA
 *     unit, which also brings the ring's slots in, these stores slowed the few-block chain
 *     (docs/06), so that it keeps the plain stores.
 * Nothing of S or Vnew goes through shared memory but on its way out, and there is no block
 * barrier in the loop:
 * the ring's two mbarriers per slot are the only waits. "full": the producer's arrival
 * with the slot's byte count, completed by the bulk copies' bytes; "empty": one arrival per
 * consumer thread when it has read the slot, which the producer waits for before refilling it
 * (every reader arrives itself, rather than one lane per warp after a __syncwarp, so that each
 * read is ordered before the refill by the reader's own release: compute-sanitizer's racecheck
 * follows that, and reported the one-lane form as a race with the refill).
 * (The previous step had four warps share a 16-column tile, rows split between them, so that
 * S0^T and Vnew^T went through shared memory and each chunk took two block barriers, a group
 * barrier and a cp.async wait: 4.3 us a step at (8, 4096, 16, 128, 128).)
 *
 * Segments: here one per head, chunks 0 .. chunks from h0, writing ht. Stage 07 cuts the
 * sequence into P segments and runs this kernel twice: with FOLD, on the state [A | B] of
 * KP + V columns from [I | 0], with U's columns [0 | U], so that each segment's map comes out
 * (eq. 6 of stage 04, a chunk at a time), and nothing is saved for kernel 3; then without,
 * every segment from its true start state. */
typedef struct {
    size_t count;          /* P: segments per head; 1 in this stage */
    size_t runs;           /* the segments 0 .. runs-1 this launch runs: P, or with FOLD P - 1
                              (stage 07: the last map is never needed) or P (stage 08: it is) */
    const float *starts;   /* [head][segment] K x V start states (h0 here); NULL: zero */
    float *ends;           /* without FOLD: ht, written by the last segment; with FOLD: the maps
                              [head][segment] K x (K + V), row i = [A_i | B_i], runs per head */
    int outputs_early = 0; /* kernel 3 follows and may start beside this launch (its blocks take
                              SMs these leave idle): set by launch_chunk_states */
} chain_segments;

/* First chunk of segment s of P (s = P gives the end): whole chunks, as equal as they come. */
__host__ __device__ static inline size_t segment_chunk(size_t s, size_t P, size_t chunks) { return s * chunks / P; }

/* With STAGED, a consumer warp's staging tiles for its rows of S0^T and Vnew^T (and their
 * low terms with --precise): the workspace's rows, key_stride(K) and TOKEN_STRIDE bf16, in
 * which the lanes' 4-byte writes fall in 32 different banks; 16 rows for each 16-column tile
 * of the block. */
__host__ __device__ static inline size_t chain_staging_bytes(size_t K, bool precise, int tiles)
{
    return (size_t)16 * tiles * (key_stride(K) + TOKEN_STRIDE) * sizeof(bf16) * (precise ? 2 : 1);
}
/* The ring: `stages` slots, then a "full" and an "empty" mbarrier (8 bytes each) per slot,
 * then (staged) the consumers' staging tiles; from_values: values slots, from a 128-byte
 * boundary (128 bytes more, for the shift) */
__host__ __device__ static inline size_t chain_shared_bytes(size_t K, bool precise, int tiles, int stages, bool staged,
                                                            bool from_values = false)
{
    return (from_values ? 128 + stages * values_slot_bytes(K, tiles) : stages * chain_slot_bytes(K, precise, tiles)) +
           2 * (size_t)stages * sizeof(uint64_t) + (staged ? chain_staging_bytes(K, precise, tiles) : 0);
}
/* n-tiles (8 state columns each, the n of m16n8k16) a consumer warp carries. One, so two
 * warps a 16-column tile, where blocks are few and the chain's latency is the time: more
 * warps, shorter steps. Two in blocks of 4 and 8 tiles, made only where the blocks (about)
 * fill the GPU (chain_tiles): there throughput is the time, and a warp that carries both
 * halves of a tile loads each A fragment of W and of the decayed keys once for two MMAs,
 * where two warps loaded it twice (measured in docs/06: 5-12% less time a pass). */
__host__ __device__ constexpr int chain_ntiles(int tiles) { return tiles >= 4 ? 2 : 1; }
/* threads of a chain block of `tiles` 16-column tiles: its consumer warps and one producer */
__host__ __device__ constexpr int chain_block_threads(int tiles) { return 32 * (CONSUMER_WARPS_PER_TILE * tiles / chain_ntiles(tiles) + 1); }
/* The widest chain block: MAX_CHAIN_TILES tiles, or 4 with --precise, whose ring slots and
 * staging tiles hold two terms: 8 staged tiles at K = 128 would take 278 KB of an SM's 227. */
__host__ __device__ constexpr int widest_chain_tiles(bool precise) { return precise ? MAX_CHAIN_TILES / 2 : MAX_CHAIN_TILES; }

/* the 8 x 8 bf16 matrix whose row g, columns 2t, 2t + 1 this lane holds, transposed: the lane
 * gets row g, columns 2t, 2t + 1 of the transpose, that is column g, rows 2t, 2t + 1 */
__device__ __forceinline__ static uint32_t transpose8x8(uint32_t pair)
{
    uint32_t out;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(out) : "r"(pair));
    return out;
}
/* x - bf16(x), rounded: the low term of the two-term split (--precise) */
__device__ __forceinline__ static uint32_t pack_bf16_low(float low_column, float high_column)
{
    const __nv_bfloat162 high = __floats2bfloat162_rn(low_column, high_column);
    return pack_bf16(low_column - __low2float(high), high_column - __high2float(high));
}

/* One 16 x 8 accumulator tile (rows of S or of Vnew) as the two registers of a B fragment
 * (k = its 16 rows, n = its 8 columns): rows 0-7 and 8-15, each transposed. */
template <bool LOW>
__device__ __forceinline__ static void to_b_fragment(uint32_t (&b)[2], const float (&d)[4])
{
    b[0] = transpose8x8(LOW ? pack_bf16_low(d[0], d[1]) : pack_bf16(d[0], d[1]));
    b[1] = transpose8x8(LOW ? pack_bf16_low(d[2], d[3]) : pack_bf16(d[2], d[3]));
}

/* A fragment of a row-major bf16 tile at (row0, k0), by ldmatrix */
__device__ __forceinline__ static void load_a_fragment(uint32_t (&a)[4], const bf16 *tile, int ld, int row0, int k0)
{
    load_matrices(a, quarter_row(tile, ld, row0, k0));
}
/* The A fragment at (row0, k0) of the transpose of a row-major bf16 tile B (A[m][k] = B[k][m],
 * stride ld), by ldmatrix.trans: matrix q of the load is B's 8 x 8 block at rows k0 + 8 (q / 2),
 * columns row0 + 8 (q % 2), which transposed is the A quarter at rows + 8 (q % 2), depth + 8 (q
 * / 2): the order of an A fragment's registers */
__device__ __forceinline__ static void load_a_fragment_transposed(uint32_t (&a)[4], const bf16 *tile, int ld, int row0, int k0)
{
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    load_matrices_transposed(a, tile + (k0 + lane % 8 + 8 * (quarter / 2)) * ld + row0 + 8 * (quarter % 2));
}
/* The A fragment at (row0, k0) of a 64-column bf16 tile in wgmma's 128-byte-swizzled layout
 * (swizzled_offset): a quarter's 8 rows have their 16 bytes in 8 different places of their
 * 128-byte lines, so the load has no bank conflict */
__device__ __forceinline__ static void load_a_fragment_swizzled(uint32_t (&a)[4], const bf16 *tile, int row0, int k0)
{
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    load_matrices(a, tile + swizzled_offset(CHUNK, row0 + lane % 8 + 8 * (quarter % 2), k0 + 8 * (quarter / 2)));
}

/* ---- output warps in the chain's block (OUTPUTS): kernel 3's work where S0^T and Vnew^T are ----
 * A chain block of MAX_CHAIN_TILES tiles holds a whole head's state at K = V = 128, so its
 * staging tiles hold all of S0^T and Vnew^T for a chunk: eight more warps can form the chunk's
 * o from them there, and neither goes to global memory and back (52 KB each way a chunk).
 * Eight, as two warpgroups that make o by wgmma (chunk_outputs_role), 64 columns each: S0^T
 * and Vnew^T are staged in wgmma's swizzled layout, and q and k come swizzled by the TMA unit.
 * The block: warps 0 .. 7 the chain (two warpgroups, by wgmma too: chain_states_role), 8 ..
 * 15 the output warps (two), 16 and 17 the producer's (a lane of 16 brings the transform block
 * and the decay, a lane of 17 q, k and v and o out, each slot's two parts on barriers of their
 * own; the warpgroup's other two warps leave at once). Registers by warpgroup (setmaxnreg; every thread starts with
 * 65,536 / 640, 96 in whole units of 8): the chain 152 a thread, the output warps 72 (with
 * every address made where it is used: made_here), the producer's warpgroup 32: 61,440 of
 * the block's 61,440. ptxas gives each role the budget set where it begins only if no role's
 * code is reached from another's: each returns where it ends. Shared memory: the chain's ring
 * of two slots (the transform blocks, each from a 1024-byte boundary: output_slot_bytes), the
 * output warps' P tile, the staging tiles, and for each slot the chunk's q, k and v (the
 * layout: output_block_bytes); 177 KB. The chain takes the keys as given, from the slot's k
 * tile, as S += K^T (diag(d) Vnew), not the decayed keys (the twentieth step), and makes Vnew
 * from the v tile and the transform block (the thirty-third). */
enum { OUTPUT_WARPS = 8, OUTPUT_PRODUCER_WARP = 16, OUTPUT_BLOCK_THREADS = 640, OUTPUT_CHAIN_REGISTERS = 152, OUTPUT_ROLE_REGISTERS = 72,
       OUTPUT_PRODUCER_REGISTERS = 32, OUTPUT_STAGES = 2 /* the ring's slots: two fit */ };
/* the states output warps make o for: a whole head's in one block of MAX_CHAIN_TILES tiles,
   K = V = 128 (chunk_outputs_role's SIZE); stage 07's model asks the same */
__host__ __device__ constexpr bool output_warps_shape(size_t K, size_t V) { return K == 16 * MAX_CHAIN_TILES && V == 16 * MAX_CHAIN_TILES; }
/* every thread's registers at launch: 65,536 / 640, in whole units of 8 */
constexpr int OUTPUT_START_REGISTERS = 65536 / OUTPUT_BLOCK_THREADS / 8 * 8;
static_assert((int)OUTPUT_PRODUCER_WARP == (int)MAX_CHAIN_TILES + (int)OUTPUT_WARPS, "warps: the chain's, the output warps, the producer");
/* setmaxnreg.inc waits for registers the block's other warpgroups gave back: a block never has
   more than it was launched with (65,536 / 640, 96 a thread), so the roles' budgets must fit
   that, not merely the SM's 65,536 (docs/06, Pitfalls) */
static_assert(OUTPUT_CHAIN_REGISTERS * 256 + OUTPUT_ROLE_REGISTERS * 32 * OUTPUT_WARPS + OUTPUT_PRODUCER_REGISTERS * 128
                  <= OUTPUT_START_REGISTERS * OUTPUT_BLOCK_THREADS,
              "the warpgroups' registers fit the block's");

/* setmaxnreg is sm_90a's, not sm_90's: nvcc -arch=sm_90a also compiles a compute_90 PTX, in
   which the OUTPUTS kernel is a trap (an H200 runs the sm_90a code) */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
constexpr bool HAVE_SETMAXNREG = true;
#else
constexpr bool HAVE_SETMAXNREG = false;
#endif
/* the register budget of this thread's warpgroup (PTX "setmaxnreg"), from the launch's
   OUTPUT_START_REGISTERS: .inc to raise it, .dec to lower it, picked here from the two counts,
   since an .inc to fewer registers than the warps hold is undefined (docs/06, the eighteenth
   step). Every warp of the warpgroup executes it; an increase waits until the registers are free */
template <int REGISTERS> __device__ __forceinline__ static void set_max_registers(void)
{
    if constexpr (HAVE_SETMAXNREG && REGISTERS > OUTPUT_START_REGISTERS)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGISTERS));
    else if constexpr (HAVE_SETMAXNREG && REGISTERS < OUTPUT_START_REGISTERS)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGISTERS));
}
/* Where kernel 1 runs beside the chain (kernel1_beside_chain), its chunks from w.ready_from on
   may not be written yet when the chain reaches them: wait for the chunk's flag (an acquire at
   GPU scope, so that its transform block, gamma and decay, written before the flag's release,
   are seen); elsewhere (w.ready NULL) kernel 1 ended before this kernel began */
__device__ __forceinline__ static void wait_until_prepared(const chunk_workspace &w, size_t head, size_t chunks, size_t chunk)
{
    if (!w.ready || chunk < w.ready_from)
        return;
    const unsigned *flag = w.ready + head * chunks + chunk;
    for (unsigned value = 0;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
        if (value)
            return;
        __nanosleep(64);
    }
}
/* the output warps' own barrier (barrier 1; __syncthreads is barrier 0) */
__device__ __forceinline__ static void output_warps_sync(void) { asm volatile("bar.sync 1, %0;" ::"n"(32 * OUTPUT_WARPS) : "memory"); }

/* ---- the output warps' wgmma: common/wgmma.cuh (the swizzle, the descriptors, the instructions) ---- */
constexpr int OUTPUT_TILE = CHUNK * 16 * MAX_CHAIN_TILES; /* bf16 of a q or k tile, 64 tokens x 128 keys */
/* The block's shared memory with OUTPUTS, from a 1024-byte boundary (each part on one, for
 * wgmma's swizzled tiles): the ring of OUTPUT_STAGES slots, each a chunk's transform block and
 * its decay, then their full and empty barriers; the output warps' P tile (64 x 64 bf16,
 * swizzled); the staging tiles, where the chain leaves S0^T and Vnew^T for the output warps
 * (swizzled); for each slot the chunk's q, k and v tiles (OUTPUT_TILE bf16 each, swizzled by
 * the TMA unit), then their full and empty barriers (one each a slot), three more barriers,
 * and two chunks' gamma. */
constexpr int OUTPUT_TILES_PER_SLOT = 3; /* q, k, v */
__host__ __device__ static inline size_t output_slot_bytes(void) { return (TRANSFORM_BYTES + 4 * sizeof(float) + 1023) / 1024 * 1024; }
__host__ __device__ static inline size_t output_ring_bytes(void)
{
    return OUTPUT_STAGES * output_slot_bytes() + 2 * (size_t)OUTPUT_STAGES * sizeof(uint64_t);
}
__host__ __device__ static inline size_t output_p_tile_offset(void) { return (output_ring_bytes() + 1023) / 1024 * 1024; }
__host__ __device__ static inline size_t output_staging_offset(void) { return output_p_tile_offset() + (size_t)CHUNK * CHUNK * sizeof(bf16); }
__host__ __device__ static inline size_t output_tiles_offset(void)
{
    return (output_staging_offset() + chain_staging_bytes(16 * MAX_CHAIN_TILES, false, MAX_CHAIN_TILES) + 1023) / 1024 * 1024;
}
__host__ __device__ static inline size_t output_block_bytes(void)
{
    return 1024 + output_tiles_offset() + OUTPUT_TILES_PER_SLOT * (size_t)OUTPUT_STAGES * OUTPUT_TILE * sizeof(bf16) +
           (3 + 2 * (size_t)OUTPUT_STAGES) * sizeof(uint64_t) + 2 * CHUNK * sizeof(double);
}
/* the swizzled S0^T (128 x 128) and Vnew^T (128 x 64) fit the staging tiles from a 1024-byte boundary */
static_assert((16 * MAX_CHAIN_TILES) * (16 * MAX_CHAIN_TILES + CHUNK) * 2 <=
                  MAX_CHAIN_TILES * 16 * (16 * MAX_CHAIN_TILES + KEY_STRIDE_PADDING + TOKEN_STRIDE) * 2,
              "the output warps' operands fit the staging tiles");
/* The barriers after the slots' q, k and v tiles (output_block_bytes): tiles_full[OUTPUT_STAGES],
 * tiles_empty[OUTPUT_STAGES], staged_full, states_free, values_free; at a constant from the
 * tiles, so that the output warps hold no register for each */
__device__ __forceinline__ static uint64_t *output_barriers(bf16 *output_tiles)
{
    return (uint64_t *)(output_tiles + OUTPUT_TILES_PER_SLOT * OUTPUT_STAGES * OUTPUT_TILE);
}

/* The output warps' loop over the block's chunks, by wgmma. Output warpgroup h (warps 8 .. 11,
 * 12 .. 15) takes columns 64 h .. + 63 of the chunk's o, all 64 rows (warp r of it rows 16 r
 * .. + 15, as wgmma's accumulators), K = V = 128 (the only shape that runs this):
 *     P = lower(Q K^T exp(gamma_i - gamma_j)), o = scale (exp(gamma) Q S0 + P Vnew)    (eq. 14)
 * Warpgroup h makes tokens 32 h .. + 31 of P for all 64 rows (8 m64n32k16 products from the
 * swizzled q and k tiles), masks and scales them and writes them in bf16 into the P tile
 * (swizzled, a place of its own: output_p_tile_offset); after one barrier each warpgroup reads all of P there
 * as P Vnew's A, so P is made once. Q S0 reads q and the chain's S0^T, P Vnew the P tile and
 * the chain's Vnew^T, each staged swizzled (the chain's stores: swizzled_address). A
 * warpgroup's wgmma reads each operand once for its 64 rows, where the mma.sync warps read
 * S0^T and Vnew^T once per 16 rows: per chunk the eight warps read 144 KB of shared memory
 * where they read 274 (the twenty-second step's 2192 ldmatrix wavefronts), and issue 40
 * products where they issued 832. Not causal: a 64-row product has no zero blocks to skip.
 * The sums are taken k by k as before, and o measured bit for bit the twenty-second step's.
 * Per chunk the warps wait for the slot's q and k, make P, wait for the chain's staging
 * tiles, add Q S0 and let the chain write the next S0^T (states_free), then P Vnew and let it
 * write the next Vnew^T (values_free); o goes into the warp's own part of the q tile
 * (swizzled) once every output warp is done reading q, and the q and k tiles are released:
 * the producer's q and k lane stores o out from there by tensor stores before the slot's next
 * q comes, so that no output warp waits on o's loads and stores. */
template <bool BESIDE> /* kernel 1 beside the chain: chunks may have to be waited for (wait_until_prepared) */
__device__ static void chunk_outputs_role(const gdn_device_problem &p, const chunk_workspace &w, size_t head, size_t first, size_t end,
                                          unsigned char *slots)
{
    bf16 *const output_tiles = (bf16 *)(slots + output_tiles_offset());
    uint64_t *const tiles_full = output_barriers(output_tiles), *const tiles_empty = tiles_full + OUTPUT_STAGES, *const staged_full = tiles_empty + OUTPUT_STAGES;
    uint64_t *const states_free = staged_full + 1, *const values_free = staged_full + 2;
    constexpr int SIZE = 16 * MAX_CHAIN_TILES; /* K = V = SIZE: output_warps_shape */
    const int output_warp = (int)(threadIdx.x / 32) - MAX_CHAIN_TILES, half = output_warp / 4; /* half: the warpgroup */
    const int tile_row = 16 * (output_warp % 4);
    const int output_thread = (int)threadIdx.x - 32 * MAX_CHAIN_TILES; /* 0 .. 32 OUTPUT_WARPS - 1 */
    const int column0 = half * (SIZE / 2);                                   /* this warpgroup's columns of o */
    double *gamma_buffers = (double *)(staged_full + 3); /* [2][CHUNK]: chunks j and j + 1 */
    /* lanes 0 .. 63 of the output warps bring one gamma each, a chunk ahead */
    const auto gamma_of = [&](size_t chunk) {
        const size_t t = chunk * CHUNK + (size_t)output_thread;
        if (!(output_thread < CHUNK && chunk < end && t < p.T))
            return 0.0;
        if constexpr (BESIDE)
            wait_until_prepared(w, head, chunks_of(p.T), chunk);
        return w.gamma[head * p.T + t];
    };
    double gamma_next = gamma_of(first);
    for (unsigned chunk = (unsigned)first; chunk < (unsigned)end; chunk++) {
        const unsigned j = chunk - (unsigned)first;
        const size_t t0 = (size_t)chunk * CHUNK;
        const int s = (int)(j % (unsigned)OUTPUT_STAGES), n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK);
        double *gamma = gamma_buffers + (j & 1) * CHUNK;
        if (output_thread < CHUNK)
            gamma[output_thread] = gamma_next;
        output_warps_sync(); /* gamma is here; chunk j - 2's reads of its buffer are done */
        /* every address from here, so that none is carried across chunks in a register (made_here) */
        unsigned char *const here = (unsigned char *)made_here((const bf16 *)slots);
        bf16 *const q = (bf16 *)(here + output_tiles_offset()) + OUTPUT_TILES_PER_SLOT * s * OUTPUT_TILE;
        const bf16 *const k = q + OUTPUT_TILE;
        bf16 *const p_tile = (bf16 *)(here + output_p_tile_offset());
        const bf16 *const states_tile = (const bf16 *)(here + output_staging_offset()), *const values_tile = states_tile + SIZE * SIZE;
        const int upper = made_here(fragment_row(tile_row, 0)), lower = upper + 8; /* this lane's two rows */
        const int pair = made_here(fragment_column(0, 0, 0));                      /* and its columns' offset */
        barrier_wait(&tiles_full[s], (uint32_t)((j / OUTPUT_STAGES) & 1)); /* q, k (and v) */

        /* P = lower(Q K^T e^(gamma_i - gamma_l)): this warpgroup's 32 tokens of all 64 rows,
           into the P tile (swizzled), which both warpgroups then read as P Vnew's A */
        {
            const int token0 = half * (CHUNK / 2);
            float scores[CHUNK / 2 / 8][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < SIZE / 16; kk++)
                wgmma_64x32x16(scores, descriptor_here(q + swizzled_offset(CHUNK, 0, 16 * kk)),
                               descriptor_here(k + swizzled_offset(CHUNK, token0, 16 * kk)), kk > 0);
            /* e^(gamma_i - gamma_l) = 2^(gamma_i log2 e - gamma_l log2 e): this lane's two rows' and eight
               tokens' exponents once a chunk, in float (gamma is summed within the chunk, so they are
               small: a relative error of about 1e-7 of their size in each), then one 2^x an element;
               made while the products run */
            const float row_exponent[2] = {(float)(gamma[upper] * LOG2_E), (float)(gamma[lower] * LOG2_E)};
            float token_exponent[CHUNK / 2 / 8][2];
#pragma unroll
            for (int jj = 0; jj < CHUNK / 2 / 8; jj++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    token_exponent[jj][e] = (float)(gamma[token0 + 8 * jj + pair + e] * LOG2_E);
            wgmma_commit_and_wait();
            /* this lane's first place in its two rows; token pieces jj further by XOR (swizzled_address) */
            const uint32_t p_upper = made_here(swizzled_address(p_tile, CHUNK, upper, token0 + pair)); /* the lower row: 1024 bytes on */
#pragma unroll
            for (int jj = 0; jj < CHUNK / 2 / 8; jj++)
#pragma unroll
                for (int r = 0; r < 4; r += 2) {
                    const int i = r < 2 ? upper : lower, l = token0 + 8 * jj + pair;
                    float exact[2];
#pragma unroll
                    for (int e = 0; e < 2; e++) /* only l <= i: exponents <= 0 */
                        exact[e] = l + e <= i && i < n ? scores[jj][r + e] * exp2_approx(row_exponent[r / 2] - token_exponent[jj][e]) : 0.0f;
                    store_shared((p_upper ^ (jj << 4)) + (r < 2 ? 0 : 8 * 128), pack_bf16(exact[0], exact[1]));
                }
            fence_shared_for_bulk_store(); /* for the other warpgroup's wgmma: the async proxy reads P */
            output_warps_sync();           /* P is whole */
        }
        /* the next chunk's gamma, from global memory: loaded here, Q S0, P Vnew and o's stores hide
           its latency; loaded after P Vnew, the next chunk's first barrier waited for it (docs/06,
           the forty-sixth step) */
        gamma_next = gamma_of(chunk + 1);
        float acc[SIZE / 2 / 8][4];
        barrier_wait(staged_full, (uint32_t)(j & 1)); /* S0^T and Vnew^T of this chunk */
        /* Q S0: B^T is this warpgroup's 64 rows of S0^T */
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < SIZE / 16; kk++)
            wgmma_64x64x16(acc, descriptor_here(q + swizzled_offset(CHUNK, 0, 16 * kk)),
                           descriptor_here(states_tile + swizzled_offset(SIZE, column0, 16 * kk)), kk > 0);
        /* the rows' decays while the products run, without a branch there (gamma is 0 past T) */
        const float row_decay[2] = {expf((float)gamma[upper]), expf((float)gamma[lower])};
        const float decay_upper = upper < n ? row_decay[0] : 0.0f, decay_lower = lower < n ? row_decay[1] : 0.0f;
        wgmma_commit_and_wait();
        barrier_arrive(states_free);
#pragma unroll
        for (int jj = 0; jj < SIZE / 2 / 8; jj++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[jj][r] *= r < 2 ? decay_upper : decay_lower;
        /* + P Vnew: A from the P tile, B^T this warpgroup's 64 rows of Vnew^T */
        wgmma_fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CHUNK / 16; kk++)
            wgmma_64x64x16(acc, descriptor_here(p_tile + swizzled_offset(CHUNK, 0, 16 * kk)),
                           descriptor_here(values_tile + swizzled_offset(SIZE, column0, 16 * kk)), 1);
        wgmma_commit_and_wait();
        barrier_arrive(values_free);
        /* o in bf16 into this warp's 16 rows and 64 columns of the q tile (swizzled), once every
           output warp is done reading q (one barrier); the q and k lane stores the tile out */
        output_warps_sync();
        const uint32_t o_upper = made_here(swizzled_address(q, CHUNK, upper, column0 + pair));
#pragma unroll
        for (int jj = 0; jj < SIZE / 2 / 8; jj++)
#pragma unroll
            for (int r = 0; r < 4; r += 2)
                store_shared((o_upper ^ (jj << 4)) + (r < 2 ? 0 : 8 * 128), pack_bf16(p.scale * acc[jj][r], p.scale * acc[jj][r + 1]));
        fence_shared_for_bulk_store(); /* o goes out by the TMA unit, and the slot's next q and k come by it */
        barrier_arrive(&tiles_empty[s]);
    }
}

/* a chain warpgroup's own barrier (barriers 2 and 3; 1 is the output warps') */
__device__ __forceinline__ static void chain_warpgroup_sync(int warpgroup)
{
    if (warpgroup == 0) /* the barrier's number as a constant: as a register, ptxas reserves all 16 */
        asm volatile("bar.sync 2, 128;" ::: "memory");
    else
        asm volatile("bar.sync 3, 128;" ::: "memory");
}

/* The chain's two warpgroups with output warps (K = V = 128), by wgmma. The state is kept
 * transposed, S^T (128 state columns x 128 keys), as the accumulators of one m64n128 product a
 * warpgroup: warpgroup h holds state columns 64 h .. + 63, its warp w columns 16 w .. + 15 (as
 * the mma.sync warps did), lane 4g + t rows (columns of S) 16 w + g and + 8 and keys 8 j + 2t,
 * + 1. Vnew is made from v, not from W and U (the thirty-third step): with W = Tm diag(beta
 * e^gamma) K and U = Tm diag(beta) V (eq. 12),
 *     Vnew = U - W S0 = Tm Z,   Z = diag(beta) V - diag(beta e^gamma) K S0            (eq. 13)
 * so kernel 1 writes only Tm (8 KB a chunk in bf16, where W and U are 33 KB) and the factors,
 * and the chain reads v's tile (16 KB) beside the q and k tiles it shares with the output
 * warps. Per chunk:
 *     Y^T = S0^T K^T               8 m64n64k16, A = S0^T in bf16 from the staging tile the
 *                                  chain writes for the output warps anyway (swizzled); B =
 *                                  the k tile (swizzled, K-major)
 *     Z^T = V^T diag(beta) - Y^T diag(beta e^gamma)   in fp32, a column a token; V^T's pairs
 *                                  by ldmatrix.trans from the v tile
 *     Vnew^T = Z^T + Z^T lower(Tm)^T   4 m64n64k16: D starts as Z^T (Tm's diagonal of ones,
 *                                  in fp32), A = Z^T in bf16 from the registers (a product's
 *                                  sums are the next one's A), B = Tm's strictly lower part
 *     S^T = decay S^T + (Vnew^T diag(d)) K      4 m64n128k16, A from Vnew^T's accumulators
 *                                  scaled by d (a column of A a token), B = the k tile read
 *                                  N-major (its rows the depth)
 * S0^T and Vnew^T go to the output warps' staging tiles as before (the same swizzled places). */
__device__ static void chain_states_role(const gdn_device_problem &p, const chain_segments &segments, size_t head, size_t segment,
                                         size_t first, size_t end, unsigned char *slots, int stages)
{
    constexpr int SIZE = 16 * MAX_CHAIN_TILES; /* K = V = SIZE: output_warps_shape */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int column0 = 16 * warp, warpgroup = warp / 4; /* this warp's state columns */
    const int slot_bytes = (int)output_slot_bytes();
    uint64_t *const full = (uint64_t *)(slots + stages * slot_bytes), *const empty = full + stages;
    bf16 *const output_tiles = (bf16 *)(slots + output_tiles_offset());
    uint64_t *const tiles_full = output_barriers(output_tiles), *const tiles_empty = tiles_full + stages;
    uint64_t *const staged_full = tiles_empty + stages, *const states_free = staged_full + 1, *const values_free = staged_full + 2;
    bf16 *const states_staged = (bf16 *)(slots + output_staging_offset()), *const values_staged = states_staged + SIZE * SIZE;
    const size_t P = segments.count, K = p.K, V = p.V;

    float S[SIZE / 8][4]; /* S^T: rows column0 + g (+ 8), keys 8 j + 2t (+ 1) */
#pragma unroll
    for (int j = 0; j < SIZE / 8; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int c = column0 + g + 8 * (r / 2), m = 8 * j + 2 * t + r % 2;
            S[j][r] = segments.starts ? segments.starts[((head * P + segment) * K + m) * V + c] : 0.0f;
        }
    /* step j reads slot s = j % stages on pass j / stages: counted (chain_block's consumers) */
    const int steps = (int)(end - first);
    for (int j = 0, s = 0, pass = 0; j < steps; j++) {
        const unsigned char *slot = slots + s * slot_bytes;
        const bf16 *const Tm = (const bf16 *)slot; /* the transform block */
        const float *const beta = (const float *)(slot + TRANSFORM_TM_BYTES), *const scaled_beta = beta + CHUNK, *const d = beta + 2 * CHUNK;
        const bf16 *const key_tile = output_tiles + (OUTPUT_TILES_PER_SLOT * s + 1) * OUTPUT_TILE, *const value_tile = key_tile + OUTPUT_TILE;
        barrier_wait(&full[s], (uint32_t)pass & 1);
        if (j > 0) /* the output warps have read the last chunk's S0^T */
            barrier_wait(states_free, (uint32_t)((j - 1) & 1));
        /* S0^T in bf16 into the staging tile: the output warps' S0^T, and this warpgroup's A of
           Y's products (from shared memory: held in registers beside S and Vnew, the 32
           registers of its fragments made ptxas serialize the products) */
        const uint32_t states_row = swizzled_address(states_staged, SIZE, column0 + g, 2 * t); /* piece jj % 8: XOR (swizzled_address) */
#pragma unroll
        for (int jj = 0; jj < SIZE / 8; jj++) {
            const uint32_t at = (states_row ^ (jj % 8 << 4)) + jj / 8 * SIZE * 128; /* the second panel: SIZE rows of 128 bytes on */
            store_shared(at, pack_bf16(S[jj][0], S[jj][1]));
            store_shared(at + 8 * 128, pack_bf16(S[jj][2], S[jj][3])); /* row + 8 */
        }
        /* Y^T = S0^T K^T, once the warpgroup's four warps have written their S0^T rows (and the
           async proxy, which wgmma reads by, sees them) and the k and v tiles are here */
        barrier_wait(&tiles_full[s], (uint32_t)pass & 1);
        fence_shared_for_bulk_store();
        chain_warpgroup_sync(warpgroup);
        float values[CHUNK / 8][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < SIZE / 16; kk++)
            wgmma_64x64x16(values, descriptor_here(states_staged + swizzled_offset(SIZE, 64 * warpgroup, 16 * kk)),
                           descriptor_here(key_tile + swizzled_offset(CHUNK, 0, 16 * kk)), kk > 0);
        /* V^T's pairs while the products run: ldmatrix.trans of an 8 x 8 block of v (8 tokens x
           8 columns, its rows 16 bytes of the swizzled tile) hands lane 4g + t column g, tokens
           2t, 2t + 1, as the accumulators hold Y^T; matrix m of a load: tokens 8 (2 i + m / 2),
           columns column0 + 8 (m % 2) */
        uint32_t value_pairs[CHUNK / 16][4]; /* [i][m] */
#pragma unroll
        for (int i = 0; i < CHUNK / 16; i++) {
            const int m = lane / 8, token = 16 * i + 8 * (m / 2) + lane % 8;
            load_matrices_transposed(value_pairs[i], value_tile + swizzled_offset(CHUNK, token, column0 + 8 * (m % 2)));
        }
        wgmma_commit_and_wait();
        wgmma_fence_operands(values); /* read only after the wait */
        /* Z^T, in fp32 (the start of Vnew^T's sums) and in bf16 pairs (their A: jj and jj + 1 of
           a 16-token step, as the update's A below) */
        uint32_t z[CHUNK / 16][4];
#pragma unroll
        for (int jj = 0; jj < CHUNK / 8; jj++) {
            const int token = 8 * jj + 2 * t;
            const float beta0 = beta[token], beta1 = beta[token + 1], scaled0 = scaled_beta[token], scaled1 = scaled_beta[token + 1];
#pragma unroll
            for (int half = 0; half < 2; half++) { /* rows g, g + 8: columns column0 + g, + 8 */
                const uint32_t pair = value_pairs[jj / 2][2 * (jj % 2) + half];
                const __nv_bfloat162 two = *(const __nv_bfloat162 *)&pair;
                values[jj][2 * half] = beta0 * __low2float(two) - scaled0 * values[jj][2 * half];
                values[jj][2 * half + 1] = beta1 * __high2float(two) - scaled1 * values[jj][2 * half + 1];
                z[jj / 2][2 * (jj % 2) + half] = pack_bf16(values[jj][2 * half], values[jj][2 * half + 1]);
            }
        }
        /* Vnew^T = Z^T + Z^T lower(Tm)^T */
        wgmma_fence_operands(values);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CHUNK / 16; kk++)
            wgmma_64x64x16_a_in_registers<1, false>(values, z[kk], descriptor_here(Tm + swizzled_offset(CHUNK, 0, 16 * kk)), 1);
        wgmma_commit_and_wait();
        wgmma_fence_operands(values);
        if (j > 0) /* and its Vnew^T */
            barrier_wait(values_free, (uint32_t)((j - 1) & 1));
        /* Vnew^T in bf16 for the output warps, and scaled by d (a token a column) as the update's A */
        uint32_t scaled[CHUNK / 16][4];
        const uint32_t values_row = swizzled_address(values_staged, SIZE, column0 + g, 2 * t);
#pragma unroll
        for (int jj = 0; jj < CHUNK / 8; jj++) {
            const int token = 8 * jj + 2 * t;
            const float d0 = d[token], d1 = d[token + 1];
            store_shared(values_row ^ (jj << 4), pack_bf16(values[jj][0], values[jj][1]));
            store_shared((values_row ^ (jj << 4)) + 8 * 128, pack_bf16(values[jj][2], values[jj][3]));
            scaled[jj / 2][2 * (jj % 2)] = pack_bf16(values[jj][0] * d0, values[jj][1] * d1);
            scaled[jj / 2][2 * (jj % 2) + 1] = pack_bf16(values[jj][2] * d0, values[jj][3] * d1);
        }
        fence_shared_for_bulk_store(); /* the output warps' wgmma reads S0^T and Vnew^T by the async proxy */
        barrier_arrive(staged_full);
        const float decay = *(const float *)(slot + TRANSFORM_BYTES);
        barrier_arrive(&empty[s]); /* the transform block and the decay are read */
#pragma unroll
        for (int jj = 0; jj < SIZE / 8; jj++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                S[jj][r] *= decay;
        wgmma_fence_operands(S);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CHUNK / 16; kk++)
            wgmma_64x128x16_a_in_registers<1, true>(S, scaled[kk], descriptor_n_major_here(key_tile + 16 * kk * 64, CHUNK), 1);
        wgmma_commit_and_wait();
        wgmma_fence_operands(S);
        barrier_arrive(&tiles_empty[s]); /* this thread has read the k and v tiles */
        if (++s == stages) {
            s = 0;
            pass++;
        }
    }
    if (segment + 1 != P)
        return;
#pragma unroll
    for (int j = 0; j < SIZE / 8; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int c = column0 + g + 8 * (r / 2), m = 8 * j + 2 * t + r % 2;
            segments.ends[(head * K + m) * V + c] = S[j][r];
        }
}

/* A chain block (kernel 2). NTILES: chain_ntiles of the block's tiles; STAGED: S0^T and
 * Vnew^T leave by bulk stores. OUTPUTS: they do not leave; output warps in the block take
 * them from the staging tiles and do kernel 3's work (chunk_outputs_role, above), so that
 * kernel 3 does not run. */
template <bool PRECISE, bool FOLD, int NTILES, bool STAGED, bool OUTPUTS, bool BESIDE = false, bool FROM_VALUES = false>
__device__ __forceinline__ static void chain_block(gdn_device_problem p, chunk_workspace w, chain_segments segments,
                                                   int stages, const CUtensorMap *o_map, const CUtensorMap *q_map, const CUtensorMap *k_map,
                                                   const CUtensorMap *v_map)
{
    static_assert(!(FOLD && STAGED), "a fold stores nothing for kernel 3");
    static_assert(!OUTPUTS || (STAGED && !PRECISE && NTILES == 2), "output warps read the staging tiles of 8-tile blocks, bf16 only");
    static_assert(!FROM_VALUES || (!PRECISE && !OUTPUTS), "Vnew from v: bf16 only, and the output warps' chain has its own");
    if constexpr (OUTPUTS && !HAVE_SETMAXNREG) { /* the compute_90 PTX: never run on an H200 */
        __trap();
        return;
    }
    constexpr int KEY_TILES = MAX_K / 16; /* m-tiles of S a warp may hold */
    extern __shared__ uint4 ring[];
    const int K = (int)p.K, KP = round_up16(p.K), LDK = key_stride(p.K), VP = round_up16(p.V);
    const int columns = FOLD ? KP + VP : VP, value_column0 = FOLD ? KP : 0; /* state columns; where U's begin */
    /* consumers: the chain's warps, 0 .. consumers - 1; the producer is warp `consumers`, or
       with OUTPUTS warp OUTPUT_PRODUCER_WARP (warps 8 .. 15 are the output warps) */
    const int consumers = OUTPUTS ? MAX_CHAIN_TILES : blockDim.x / 32 - 1, block_columns = 8 * NTILES * consumers, tiles = block_columns / 16;
    const size_t V = p.V, chunks = chunks_of(p.T), P = segments.count, runs = segments.runs;
    const size_t groups = (columns + block_columns - 1) / block_columns, group = blockIdx.x % groups;
    const size_t segment = blockIdx.x / groups % runs, head = blockIdx.x / groups / runs;
    const size_t first = segment_chunk(segment, P, chunks), end = segment_chunk(segment + 1, P, chunks);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int block_column0 = (int)group * block_columns;
    const int slot_bytes = OUTPUTS ? (int)output_slot_bytes() : FROM_VALUES ? (int)values_slot_bytes(p.K, tiles) : (int)chain_slot_bytes(p.K, PRECISE, tiles);
    const int u_offset = (int)chain_u_offset(p.K, PRECISE);
    const size_t block_bytes = chain_block_bytes(p.K, V, PRECISE);
    const unsigned char *blocks = w.chain + head * chunks * block_bytes;
    /* with OUTPUTS from a 1024-byte boundary, for the swizzled tiles (output_tiles); FROM_VALUES
       from a 128-byte one, for the tensor copies */
    unsigned char *slots = OUTPUTS ? SHARED_AT_1024_BYTES(ring) : FROM_VALUES ? SHARED_AT_128_BYTES(ring) : (unsigned char *)ring;
    uint64_t *full = (uint64_t *)(slots + stages * slot_bytes), *empty = full + stages;
    /* OUTPUTS: each slot's q, k and v tiles, then the hand-over barriers between the chain's warps
       and the output warps: staging tiles written (staged_full), S0^T and Vnew^T read (states_free,
       values_free); before them the tiles' own barriers a slot (tiles_full, tiles_empty):
       with OUTPUTS a slot's transform block (full, empty) is free once the chain has made Vnew,
       its q, k and v once the output warps have made o and the chain its update (docs/06, the
       twenty-second step) */
    bf16 *const output_tiles = OUTPUTS ? (bf16 *)(slots + output_tiles_offset()) : NULL;
    uint64_t *const tiles_full = OUTPUTS ? output_barriers(output_tiles) : NULL, *const tiles_empty = tiles_full + stages;
    uint64_t *const staged_full = tiles_empty + stages, *const states_free = staged_full + 1, *const values_free = staged_full + 2;

    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            barrier_init(&full[s], 1);
            barrier_init(&empty[s], 32 * consumers); /* the threads that read a slot's W and U (its transform block) */
            if (OUTPUTS) {
                barrier_init(&tiles_full[s], 1);
                barrier_init(&tiles_empty[s], 32 * (consumers + OUTPUT_WARPS)); /* the threads that read its q or k */
            }
        }
        if (OUTPUTS) {
            barrier_init(staged_full, 32 * consumers);
            barrier_init(states_free, 32 * OUTPUT_WARPS);
            barrier_init(values_free, 32 * OUTPUT_WARPS);
        }
        barrier_init_fence(); /* visible to the TMA unit */
    }
    __syncthreads(); /* the block's only barrier */
    wait_for_previous_kernel(); /* kernel 1's W, keys and U (and in stage 07 the scan's starts) */
    if (segments.outputs_early && threadIdx.x == 0) /* kernel 3's blocks may be placed now */
        let_next_kernel_start();

    /* Each role returns where it ends, so that with OUTPUTS the chain's code below is reached
       only after its registers grew (ptxas allocates by those regions) */
    if (OUTPUTS ? warp >= OUTPUT_PRODUCER_WARP : warp == consumers) { /* the producer */
        if constexpr (OUTPUTS)
            set_max_registers<OUTPUT_PRODUCER_REGISTERS>(); /* its whole warpgroup gives registers back */
        if constexpr (OUTPUTS)
            if (warp == OUTPUT_PRODUCER_WARP + 1 && lane == 0) { /* a lane of the next warp brings q, k and v (kernel 3's tensor copies) */
                const uint32_t key_tile_bytes = (uint32_t)(OUTPUT_TILE * sizeof(bf16));
                const int b = (int)(head / p.H), h = (int)(head % p.H);
                /* and takes o out: the output warps leave chunk c's o in its slot's q tile, in q's
                   swizzled layout, and the slot is empty (tiles_empty) once they and the chain's
                   update are done with it; two tensor stores (o's map: q's boxes) write it, rows
                   past T dropped, and once they have read the tile the slot takes the next q */
                const auto store_o = [&](size_t c) {
                    const int s = (int)((c - first) % stages);
                    barrier_wait(&tiles_empty[s], (uint32_t)(((c - first) / stages) & 1));
                    for (int panel = 0; panel < 2; panel++)
                        tensor_store_3d(o_map, h * (int)V + 64 * panel, (int)(c * CHUNK), b, output_tiles + OUTPUT_TILES_PER_SLOT * s * OUTPUT_TILE + panel * CHUNK * 64);
                    bulk_store_commit();
                    bulk_store_wait_read();
                };
                for (size_t chunk = first; chunk < end; chunk++) {
                    const size_t j = chunk - first;
                    const int s = (int)(j % stages), t0 = (int)(chunk * CHUNK);
                    if (j >= (size_t)stages) /* chunk j - stages's o out of the slot */
                        store_o(chunk - stages);
                    barrier_arrive_expecting(&tiles_full[s], OUTPUT_TILES_PER_SLOT * key_tile_bytes);
                    bf16 *const q_tile = output_tiles + OUTPUT_TILES_PER_SLOT * s * OUTPUT_TILE;
                    for (int panel = 0; panel < 2; panel++) { /* 64 keys (or values) each, swizzled by the maps */
                        tensor_copy_3d(q_tile + panel * CHUNK * 64, q_map, h * K + 64 * panel, t0, b, &tiles_full[s]);
                        tensor_copy_3d(q_tile + OUTPUT_TILE + panel * CHUNK * 64, k_map, h * K + 64 * panel, t0, b, &tiles_full[s]);
                        tensor_copy_3d(q_tile + 2 * OUTPUT_TILE + panel * CHUNK * 64, v_map, h * (int)V + 64 * panel, t0, b, &tiles_full[s]);
                    }
                }
                for (size_t chunk = end - first > (size_t)stages ? end - stages : first; chunk < end; chunk++) /* the last chunks' o */
                    store_o(chunk);
                bulk_store_wait(); /* o written before the block ends */
            }
        if (OUTPUTS ? warp == OUTPUT_PRODUCER_WARP && lane == 0 : lane == 0) { /* one lane brings each chunk's W, keys and U (with OUTPUTS its transform block) */
            /* this block's rows of U_t: its state columns that are U's (not the identity of a fold) */
            const int u_first = block_column0 > value_column0 ? block_column0 : value_column0;
            const int u_end = block_column0 + block_columns < value_column0 + VP ? block_column0 + block_columns : value_column0 + VP;
            const uint32_t u_row = CHUNK * sizeof(chain_u_type<PRECISE>); /* bytes of a row of U_t */
            const uint32_t u_bytes = u_first < u_end ? (uint32_t)(u_end - u_first) * u_row : 0;
            const uint32_t decay_to = (uint32_t)(u_offset + block_columns * u_row);
            for (size_t chunk = first; chunk < end; chunk++) {
                const size_t j = chunk - first;
                const int s = (int)(j % stages);
                if (j >= (size_t)stages) /* the consumers are done with chunk j - stages */
                    barrier_wait(&empty[s], (uint32_t)((j / stages - 1) & 1));
                unsigned char *slot = slots + s * slot_bytes;
                const unsigned char *block = blocks + chunk * block_bytes;
                if constexpr (OUTPUTS) { /* the transform block (already swizzled) and the decay after it */
                    if constexpr (BESIDE) {
                        wait_until_prepared(w, head, chunks, chunk);
                        asm volatile("fence.proxy.async.global;" ::: "memory"); /* kernel 1's stores, ordered by the flag, before the TMA unit's reads */
                    }
                    barrier_arrive_expecting(&full[s], (uint32_t)(TRANSFORM_BYTES + 16));
                    bulk_copy(slot, w.transforms + (head * chunks + chunk) * TRANSFORM_BYTES, (uint32_t)TRANSFORM_BYTES, &full[s]);
                    bulk_copy(slot + TRANSFORM_BYTES, block + chain_decay_offset(K, V, PRECISE), 16, &full[s]);
                    continue;
                }
                if constexpr (FROM_VALUES) { /* the k tile, the transform block, the decay, the block's v tile */
                    const int b = (int)(head / p.H), h = (int)(head % p.H), t0 = (int)(chunk * CHUNK);
                    const bool has_values = block_column0 + block_columns > value_column0; /* not all identity columns (a fold's) */
                    const int values_first = block_column0 > value_column0 ? block_column0 : value_column0; /* the tile's first column */
                    const uint32_t values_bytes =
                        has_values ? (uint32_t)(CHUNK * values_tile_stride(values_tile_columns(tiles, V)) * sizeof(bf16)) : 0;
                    barrier_arrive_expecting(&full[s], (uint32_t)(chain_w_bytes(K) + TRANSFORM_BYTES + 16) + values_bytes);
                    tensor_copy_3d(slot, k_map, h * K, t0, b, &full[s]);
                    bulk_copy(slot + values_slot_transform_offset(K), w.transforms + (head * chunks + chunk) * TRANSFORM_BYTES,
                              (uint32_t)TRANSFORM_BYTES, &full[s]);
                    bulk_copy(slot + values_slot_decay_offset(K), block + chain_decay_offset(K, V, PRECISE), 16, &full[s]);
                    if (has_values) /* state column c is column c - value_column0 of the head's v */
                        tensor_copy_3d(slot + values_slot_values_offset(K), v_map, h * (int)V + values_first - value_column0, t0, b, &full[s]);
                    continue;
                }
                barrier_arrive_expecting(&full[s], (uint32_t)u_offset + u_bytes + 16);
                bulk_copy(slot, block, (uint32_t)u_offset, &full[s]); /* W (W_low), keys_t */
                if (u_bytes)
                    bulk_copy(slot + u_offset + (u_first - block_column0) * u_row,
                              block + u_offset + (size_t)(u_first - value_column0) * u_row, u_bytes, &full[s]);
                bulk_copy(slot + decay_to, block + chain_decay_offset(K, V, PRECISE), 16, &full[s]);
            }
        }
        return;
    }
    if constexpr (OUTPUTS) {
        if (warp >= consumers) { /* the output warps */
            set_max_registers<OUTPUT_ROLE_REGISTERS>();
            chunk_outputs_role<BESIDE>(p, w, head, first, end, slots);
            return;
        }
        set_max_registers<OUTPUT_CHAIN_REGISTERS>(); /* the chain's two warpgroups, by wgmma */
        chain_states_role(p, segments, head, segment, first, end, slots, stages);
        return;
    }

    /* a consumer: state columns column0 .. column0 + 8 NTILES - 1, n-tile u: column0 + 8 u .. */
    const int column0 = block_column0 + 8 * NTILES * warp;
    const bool has_columns = column0 < columns, identity = FOLD && column0 < KP; /* identity: U is zero there */
    bf16 *states_t = w.states_t + (head * chunks + first) * VP * LDK + column0 * LDK;
    bf16 *new_values_t = w.new_values_t + (head * chunks + first) * VP * TOKEN_STRIDE + column0 * TOKEN_STRIDE;
    const size_t low_offset = PRECISE ? w.states_low_t - w.states_t : 0, new_low_offset = PRECISE ? w.new_values_low_t - w.new_values_t : 0;
    /* STAGED: this warp's staging tiles: S0^T rows, Vnew^T rows, then (--precise) their low terms */
    constexpr int ROWS = 8 * NTILES;
    bf16 *stage_states = (bf16 *)(empty + stages) + (size_t)warp * ROWS * (LDK + TOKEN_STRIDE) * (PRECISE ? 2 : 1);
    bf16 *stage_values = stage_states + ROWS * LDK;
    bf16 *stage_states_low = stage_values + ROWS * TOKEN_STRIDE, *stage_values_low = stage_states_low + ROWS * LDK;

    float S[NTILES][KEY_TILES][4]; /* n-tile u, m-tile q: rows 16 q + g (+ 8), columns column0 + 8 u + 2t (+ 1) */
#pragma unroll
    for (int u = 0; u < NTILES; u++)
#pragma unroll
        for (int q = 0; q < KEY_TILES; q++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int m = fragment_row(16 * q, r), c = column0 + 8 * u + fragment_column(0, 0, r);
                float start = 0.0f;
                if (FOLD)
                    start = m == c && m < K ? 1.0f : 0.0f; /* [I | 0] */
                else if (segments.starts && m < K && c < (int)V)
                    start = segments.starts[((head * P + segment) * K + m) * V + c];
                S[u][q][r] = start;
            }

    /* step j (chunk first + j) reads slot s = j % stages on its pass j / stages over the ring:
       counted, where dividing a 64-bit j put some 20 dependent instructions before each wait
       (docs/06, the thirty-eighth step; chain_states_role counts the same way); 32 bits hold a
       segment's steps (T / 64 chunks) */
    const int steps = (int)(end - first);
    for (int j = 0, s = 0, pass = 0; j < steps; j++) {
        const unsigned char *slot = slots + s * slot_bytes;
        const bf16 *W = (const bf16 *)slot, *W_low = (const bf16 *)(slot + chain_w_bytes(K));
        const bf16 *keys_t = (const bf16 *)(slot + chain_keys_offset(K, PRECISE));
        const chain_u_type<PRECISE> *U_t = (const chain_u_type<PRECISE> *)(slot + u_offset) + (column0 - block_column0) * CHUNK; /* this warp's rows */
        /* FROM_VALUES: the k tile in W's place, Tm (swizzled) and its factors, this warp's columns of v */
        const bf16 *const keys = W, *const Tm = (const bf16 *)(slot + values_slot_transform_offset(K));
        const float *const beta = (const float *)(slot + values_slot_transform_offset(K) + TRANSFORM_TM_BYTES);
        const float *const scaled_beta = beta + CHUNK, *const d = beta + 2 * CHUNK;
        const int LDV = values_tile_stride(values_tile_columns(tiles, V)), values_first = block_column0 > value_column0 ? block_column0 : value_column0;
        const bf16 *const values_tile = (const bf16 *)(slot + values_slot_values_offset(K)) + (column0 - values_first); /* (not read where identity) */
        barrier_wait(&full[s], (uint32_t)pass & 1);
        /* One chunk step of this warp's columns. TILES: the key tiles (KP / 16) where the
         * compiler is told them, 4 or 8 (K = 64, 128); 0: any K, a test per tile. The test
         * is a branch between the tiles, and code does not move across it: with TILES known
         * the loops have no branches, so the independent products of different key tiles
         * interleave (the update's four depth steps of one tile wait on each other; those of
         * the next tile need not wait for them), and their shared-memory loads are issued
         * early. */
        auto chunk_step = [&](auto known_tiles, auto known_values_stride) {
            constexpr int TILES = decltype(known_tiles)::value, VALUES_STRIDE = decltype(known_values_stride)::value;
            /* with the key tiles known, so is the stride of W's (or the k tile's) rows, and
               (FROM_VALUES) with the v tile's stride known, each fragment's or pair's address is
               one base a lane plus a constant (docs/06, the thirty-seventh step) */
            const int LDK_STEP = TILES ? 16 * TILES + KEY_STRIDE_PADDING : LDK;
            [[maybe_unused]] const int LDV_STEP = VALUES_STRIDE ? VALUES_STRIDE : LDV;
            /* where S0^T and Vnew^T go: the staging tiles, or the workspace (the same rows) */
            bf16 *const states_out = STAGED ? stage_states : states_t, *const values_out = STAGED ? stage_values : new_values_t;
            bf16 *const states_low_out = STAGED ? stage_states_low : states_t + low_offset;
            bf16 *const values_low_out = STAGED ? stage_values_low : new_values_t + new_low_offset;
            if (STAGED && j > 0) { /* the last chunk's stores have read the staging tiles */
                bulk_store_wait_read();
                __syncwarp();
            }
            /* Vnew = U - W S0 (eq. 13): token m-tiles 16 i .., depth K. Per key tile q, S0 as B
             * fragments (and S0^T for kernel 3: after the transpose, this lane holds column
             * column0 + 8 u + g, rows 16 q + 2t, 2t + 1 (+ 8)); each A fragment of W serves
             * every n-tile. FROM_VALUES: the same products from the k tile in W's place make
             * Y = K S0, and Vnew is made from it below. */
            float values[NTILES][4][4];
#pragma unroll
            for (int u = 0; u < NTILES; u++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    values[u][i][0] = values[u][i][1] = values[u][i][2] = values[u][i][3] = 0.0f;
#pragma unroll
            for (int q = 0; q < KEY_TILES; q++) {
                if (TILES ? q >= TILES : 16 * q >= KP)
                    break;
                uint32_t state[NTILES][2], state_low[PRECISE ? NTILES : 1][2];
#pragma unroll
                for (int u = 0; u < NTILES; u++) {
                    to_b_fragment<false>(state[u], S[u][q]);
                    if (PRECISE)
                        to_b_fragment<true>(state_low[PRECISE ? u : 0], S[u][q]);
                    if (!FOLD)
#pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int at = (8 * u + g) * LDK_STEP + 16 * q + 8 * half + 2 * t;
                            *(uint32_t *)&states_out[at] = state[u][half];
                            if (PRECISE)
                                *(uint32_t *)&states_low_out[at] = state_low[PRECISE ? u : 0][half];
                        }
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    uint32_t a[4];
                    load_a_fragment(a, W, LDK_STEP, 16 * i, 16 * q);
#pragma unroll
                    for (int u = 0; u < NTILES; u++) {
                        mma_bf16_16x8x16(values[u][i], a, state[u]);
                        if (PRECISE) /* (W + W_low)(S + S_low) less the product of the two small parts */
                            mma_bf16_16x8x16(values[u][i], a, state_low[PRECISE ? u : 0]);
                    }
                    if (PRECISE) {
                        load_a_fragment(a, W_low, LDK_STEP, 16 * i, 16 * q);
#pragma unroll
                        for (int u = 0; u < NTILES; u++)
                            mma_bf16_16x8x16(values[u][i], a, state[u]);
                    }
                }
            }
            if constexpr (FROM_VALUES) {
                /* values holds Y = K S0. Vnew = U - W S0 = Tm Z, Z = diag(beta) V - diag(beta e^gamma) Y
                 * (eq. 13 regrouped, as the output warps' chain does: chain_states_role). Z in fp32,
                 * this lane's pairs of V (token rows g and g + 8 of tile i, columns 2t, 2t + 1) by
                 * 4-byte loads; then as B fragments, the depth of Tm's products */
                uint32_t z[NTILES][4][2];
#pragma unroll
                for (int u = 0; u < NTILES; u++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
#pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int token = 16 * i + g + 8 * half;
                            uint32_t pair = 0; /* a fold's identity columns: V is zero there */
                            if (!identity)
                                pair = *(const uint32_t *)&values_tile[token * LDV_STEP + 8 * u + 2 * t];
                            const __nv_bfloat162 two = *(const __nv_bfloat162 *)&pair;
                            const float factor = beta[token], scaled_factor = scaled_beta[token];
                            values[u][i][2 * half] = factor * __low2float(two) - scaled_factor * values[u][i][2 * half];
                            values[u][i][2 * half + 1] = factor * __high2float(two) - scaled_factor * values[u][i][2 * half + 1];
                        }
                        to_b_fragment<false>(z[u][i], values[u][i]);
                    }
                /* Vnew's token tile i = Z_i + sum over kk <= i of lower(Tm)[i][kk] Z_kk: the sums start
                 * at Z (Tm's diagonal of ones, in fp32); each A fragment of Tm serves every n-tile */
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int kk = 0; kk <= i; kk++) {
                        uint32_t a[4];
                        load_a_fragment_swizzled(a, Tm, 16 * i, 16 * kk);
#pragma unroll
                        for (int u = 0; u < NTILES; u++)
                            mma_bf16_16x8x16(values[u][i], a, z[u][kk]);
                    }
            }
            /* the B fragments of Vnew (the update's, FROM_VALUES: of diag(d) Vnew, the keys being
               as given there) */
            uint32_t value[NTILES][4][2], value_low[PRECISE ? NTILES : 1][4][2], decayed_value[FROM_VALUES ? NTILES : 1][4][2];
#pragma unroll
            for (int u = 0; u < NTILES; u++) {
                /* this lane's 16 values of n-tile u of U, [token tile][r], in 16-byte loads
                 * (u_fragment_index: pieces lane, 32 + lane, ...) */
                using u_type = chain_u_type<PRECISE>;
                constexpr int PIECES = 4 / u_tiles_a_piece<u_type>();
                uint4 pieces[PIECES];
#pragma unroll
                for (int piece = 0; piece < PIECES; piece++)
                    pieces[piece] = identity || FROM_VALUES ? make_uint4(0, 0, 0, 0) : ((const uint4 *)(U_t + 8 * u * CHUNK))[32 * piece + lane];
                [[maybe_unused]] const u_type *mine = (const u_type *)pieces; /* (FROM_VALUES reads no U) */
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    if constexpr (FROM_VALUES) {
                        const float d0 = d[16 * i + g], d1 = d[16 * i + g + 8];
                        const float decayed[4] = {d0 * values[u][i][0], d0 * values[u][i][1], d1 * values[u][i][2], d1 * values[u][i][3]};
                        to_b_fragment<false>(decayed_value[FROM_VALUES ? u : 0][i], decayed);
                    } else
#pragma unroll
                        for (int r = 0; r < 4; r++)
                            values[u][i][r] = to_float(mine[4 * i + r]) - values[u][i][r];
                    to_b_fragment<false>(value[u][i], values[u][i]);
                    if (PRECISE)
                        to_b_fragment<true>(value_low[PRECISE ? u : 0][i], values[u][i]);
                    if (!FOLD) /* Vnew^T for kernel 3: column column0 + 8 u + g, tokens 16 i + 2t, 2t + 1 (+ 8) */
#pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int at = (8 * u + g) * TOKEN_STRIDE + 16 * i + 8 * half + 2 * t;
                            *(uint32_t *)&values_out[at] = value[u][i][half];
                            if (PRECISE)
                                *(uint32_t *)&values_low_out[at] = value_low[PRECISE ? u : 0][i][half];
                        }
                }
            }
            if (STAGED) { /* S0^T and Vnew^T out, whole lines, while the update runs */
                fence_shared_for_bulk_store();
                __syncwarp();
                if (lane < 2 * (PRECISE ? 2 : 1)) { /* the warp's rows are contiguous in the workspace too */
                    const bool is_value = lane & 1, is_low = lane >> 1;
                    if (is_value)
                        bulk_store(new_values_t + (is_low ? new_low_offset : 0), is_low ? stage_values_low : stage_values,
                                   ROWS * TOKEN_STRIDE * sizeof(bf16));
                    else
                        bulk_store(states_t + (is_low ? low_offset : 0), is_low ? stage_states_low : stage_states, ROWS * LDK * sizeof(bf16));
                }
                bulk_store_commit();
            }
            /* S = exp(gamma_C) S + Kdec^T Vnew (eq. 15): key m-tiles 16 q .., depth 64; each A
             * fragment of the decayed keys serves every n-tile (FROM_VALUES: K^T (diag(d) Vnew),
             * K^T's fragments from the k tile by ldmatrix.trans) */
            const float decay = FROM_VALUES ? *(const float *)(slot + values_slot_decay_offset(K))
                                            : *(const float *)((const chain_u_type<PRECISE> *)(slot + u_offset) + block_columns * CHUNK);
#pragma unroll
            for (int q = 0; q < KEY_TILES; q++) {
                if (TILES ? q >= TILES : 16 * q >= KP)
                    break;
#pragma unroll
                for (int u = 0; u < NTILES; u++)
#pragma unroll
                    for (int r = 0; r < 4; r++)
                        S[u][q][r] *= decay;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    uint32_t a[4];
                    if constexpr (FROM_VALUES)
                        load_a_fragment_transposed(a, keys, LDK_STEP, 16 * q, 16 * i);
                    else
                        load_a_fragment(a, keys_t, TOKEN_STRIDE, 16 * q, 16 * i);
#pragma unroll
                    for (int u = 0; u < NTILES; u++) {
                        mma_bf16_16x8x16(S[u][q], a, FROM_VALUES ? decayed_value[FROM_VALUES ? u : 0][i] : value[u][i]);
                        if (PRECISE)
                            mma_bf16_16x8x16(S[u][q], a, value_low[PRECISE ? u : 0][i]);
                    }
                }
            }
        };
        /* the step with its tiles known where a warp carries one n-tile, default precision: with
         * two n-tiles (the widest blocks) the copies' extra registers cost blocks an SM, and
         * --precise spilled */
        constexpr bool SPECIALIZED = !PRECISE && NTILES == 1;
        /* and where a fold's two-n-tile blocks make Vnew from v (K = V = 64 only: the fortieth
           step); not the other chains' two-n-tile blocks (ptxas spilled 20 bytes there) */
        constexpr bool FOLD_SPECIALIZED = FROM_VALUES && FOLD && NTILES == 2;
        using unknown = std::integral_constant<int, 0>;
        if (has_columns) {
            if constexpr (FROM_VALUES && SPECIALIZED) {
                /* made at K = V = 64 and 128 only (chain_from_values_sizes): 4 or 8 key tiles,
                   and the v tile's stride that of one of the kernel's two block widths
                   (chain_ntiles: 1 or 2 tiles) */
                constexpr int NARROW = values_tile_stride(16), WIDE = values_tile_stride(32);
                if (KP == 64 && LDV == NARROW)
                    chunk_step(std::integral_constant<int, 4>{}, std::integral_constant<int, NARROW>{});
                else if (KP == 64)
                    chunk_step(std::integral_constant<int, 4>{}, std::integral_constant<int, WIDE>{});
                else if (LDV == NARROW)
                    chunk_step(std::integral_constant<int, 8>{}, std::integral_constant<int, NARROW>{});
                else
                    chunk_step(std::integral_constant<int, 8>{}, std::integral_constant<int, WIDE>{});
            } else if (FOLD_SPECIALIZED && KP == 64 && LDV == values_tile_stride(64)) {
                /* 4 or 8 tiles at K = V = 64: 4 key tiles, the v tile 64 + 8 wide */
                constexpr int SIXTY_FOUR = values_tile_stride(64);
                chunk_step(std::integral_constant<int, FOLD_SPECIALIZED ? 4 : 0>{},
                           std::integral_constant<int, FOLD_SPECIALIZED ? SIXTY_FOUR : 0>{});
            } else if (SPECIALIZED && KP == 64)
                chunk_step(std::integral_constant<int, SPECIALIZED ? 4 : 0>{}, unknown{});
            else if (SPECIALIZED && KP == 128)
                chunk_step(std::integral_constant<int, SPECIALIZED ? 8 : 0>{}, unknown{});
            else
                chunk_step(unknown{}, unknown{});
        }
        barrier_arrive(&empty[s]); /* this thread has read the slot */
        states_t += VP * LDK;
        new_values_t += VP * TOKEN_STRIDE;
        if (++s == stages) {
            s = 0;
            pass++;
        }
    }
    if (STAGED && has_columns)
        bulk_store_wait(); /* the staging tiles stay until the stores are done */
    if (!has_columns || (!FOLD && segment + 1 != P))
        return;
#pragma unroll
    for (int u = 0; u < NTILES; u++)
#pragma unroll
        for (int q = 0; q < KEY_TILES; q++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int m = fragment_row(16 * q, r), c = column0 + 8 * u + fragment_column(0, 0, r);
                if (m >= K)
                    continue;
                if (!FOLD && c < (int)V)
                    segments.ends[(head * K + m) * V + c] = S[u][q][r];
                else if (FOLD && (c < K || (c >= KP && c - KP < (int)V))) /* row m of [A | B] */
                    segments.ends[((head * runs + segment) * K + m) * (K + V) + (c < KP ? c : K + c - KP)] = S[u][q][r];
            }
}

/* Kernel 2's two entries. Each is bound by its widest block: 2 tiles of two one-n-tile warps
 * each (5 warps with the producer), widest_chain_tiles tiles of one two-n-tile warp each (9
 * warps, 5 with --precise), and with output warps five warpgroups. ptxas reads the bound even
 * where it caps nothing (docs/06, the sixteenth step). The output warps' kernel is an entry of
 * its own, with its own parameters, so that the other blocks' code stays as it was: with
 * them, and one shift moved in the PTX, ptxas scheduled the one-tile chain 5 % slower
 * (docs/06, the seventeenth step). */
template <bool PRECISE, bool FOLD, int NTILES, bool STAGED>
__global__ void __launch_bounds__(chain_block_threads(NTILES == 1 ? 2 : widest_chain_tiles(PRECISE)), 1)
    chunk_states_kernel(gdn_device_problem p, chunk_workspace w, chain_segments segments, int stages)
{
    chain_block<PRECISE, FOLD, NTILES, STAGED, false>(p, w, segments, stages, NULL, NULL, NULL, NULL);
}
/* the same blocks making Vnew from v (chain_from_values): tensor maps of k (boxes of a padded
   row, W's layout) and v (the block's columns and 8 more: values_tile_stride) */
template <bool FOLD, int NTILES, bool STAGED>
__global__ void __launch_bounds__(chain_block_threads(NTILES == 1 ? 2 : MAX_CHAIN_TILES), 1)
    chunk_states_from_values_kernel(gdn_device_problem p, chunk_workspace w, chain_segments segments, int stages,
                                    const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map)
{
    chain_block<false, FOLD, NTILES, STAGED, false, false, true>(p, w, segments, stages, NULL, NULL, &k_map, &v_map);
}
/* the 8-tile block with output warps: tensor maps of o (in bf16), q, k and v. BESIDE: kernel 1
   runs beside it (kernel1_beside_chain), and it waits for each chunk's flag from w.ready_from */
template <bool BESIDE>
static __global__ void __launch_bounds__(OUTPUT_BLOCK_THREADS, 1)
    chunk_states_outputs_kernel(gdn_device_problem p, chunk_workspace w, chain_segments segments, int stages,
                                const __grid_constant__ CUtensorMap o_map, const __grid_constant__ CUtensorMap q_map,
                                const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map)
{
    chain_block<false, false, 2, true, true, BESIDE>(p, w, segments, stages, &o_map, &q_map, &k_map, &v_map);
}

/* ---- kernel 3: one block per (head, chunk, COLUMNS columns of o), 8 warps ----
 *     P = lower(Q K^T exp(gamma_i - gamma_j))                       (eq. 14)
 *     o = scale (exp(gamma) Q S0 + P Vnew)                          (eq. 14)
 * B^T operands: k as stored, S0^T and Vnew^T as kernel 2 saved them. Warp w: rows 16 (w % 4)
 * of P and of o, columns 32 (w / 4) of P and COLUMNS / 2 (w / 4) of o. COLUMNS is 128 where
 * V is a multiple of 128 (output_columns): with 64, a block per 64 columns, each block of a
 * chunk loaded the same q and k and made the same P; measured at (8, 4096, 16, 128, 128) in
 * the docs. */
template <bool PRECISE, int COLUMNS, int SIZE>
__global__ void __launch_bounds__(THREADS) chunk_outputs_kernel(gdn_device_problem p, chunk_workspace w, float *o, bf16 *o16,
                                                                const __grid_constant__ CUtensorMap q_map,
                                                                const __grid_constant__ CUtensorMap k_map, bool beside)
{
    /* beside the chain (outputs_beside_chain): not --precise, whose kernel ptxas then compiled
       with 8 bytes of spills, for a mode that is not the one timed against FLA */
    const bool beside_chain = !PRECISE && beside;
    extern __shared__ double shared[];
    /* SIZE: K = V = SIZE known to the compiler (64 or 128), as in kernel 1; 0: as given */
    const size_t key_count = SIZE ? (size_t)SIZE : p.K, V = SIZE ? (size_t)SIZE : p.V;
    const int K = (int)key_count, KP = round_up16(key_count), LDK = key_stride(key_count), VP = round_up16(V);
    const size_t chunks = chunks_of(p.T), tiles_per_chunk = (V + COLUMNS - 1) / COLUMNS;
    const size_t column0 = blockIdx.x % tiles_per_chunk * COLUMNS, head_chunk = blockIdx.x / tiles_per_chunk;
    const size_t head = head_chunk / chunks, chunk = head_chunk % chunks, t0 = chunk * CHUNK;
    const size_t b = head / p.H, h = head % p.H, row0 = head * p.T + t0;
    const int n = (int)(p.T - t0 < CHUNK ? p.T - t0 : CHUNK), warp = threadIdx.x / 32;
    const int tile_row = 16 * (warp % 4), tile_column = 32 * (warp / 4), output_column = COLUMNS / 2 * (warp / 4);
    const bf16 *q16 = (const bf16 *)p.q_bf16, *k16 = (const bf16 *)p.k_bf16;
    const bf16 *S0_t = w.states_t + head_chunk * VP * LDK, *new_values_t = w.new_values_t + head_chunk * VP * TOKEN_STRIDE;
    /* the tiles from a 128-byte boundary, as tensor copies want (q lands at 512 bytes past it,
     * k at 128 LDK bytes past q); the launch adds 128 bytes for the shift */
    double *gamma = (double *)SHARED_AT_128_BYTES(shared); /* common/bulk_copy.cuh */
    bf16 *q = (bf16 *)(gamma + CHUNK), *k = q + CHUNK * LDK, *S = k + CHUNK * LDK, *Vnew = S + COLUMNS * LDK;
    bf16 *P = Vnew + COLUMNS * TOKEN_STRIDE;
    /* --precise: the low bf16 terms of S0, Vnew and P */
    bf16 *S_low = P + CHUNK * TOKEN_STRIDE, *Vnew_low = S_low + COLUMNS * LDK, *P_low = Vnew_low + COLUMNS * TOKEN_STRIDE;

    /* S0^T and Vnew^T rows of this block's columns: kernel 2 stored them padded as these tiles
     * are, so each tile is one contiguous piece and comes by one bulk copy (the TMA unit),
     * issued by one thread, where 256 threads issued 16-byte copies and their addresses */
    __shared__ uint64_t tiles_landed, keys_landed;
    const int columns = VP - (int)column0 < COLUMNS ? VP - (int)column0 : COLUMNS;
    const size_t low_states = PRECISE ? w.states_low_t - w.states_t : 0, low_values = PRECISE ? w.new_values_low_t - w.new_values_t : 0;
    /* q and k: a head's 64 rows of a chunk lie H K values apart in the input, so they are no
     * one piece; a tensor map (made by the launch, make_token_tile_map) describes that layout,
     * and one tensor copy each brings the tile, already padded: the box is LDK wide, so each
     * row brings 8 more values, the next head's first keys (or, for the last head, zeros from
     * past the row), into the padding, and the rows past T land as zeros. Where the box does
     * not fit (keys_by_tensor_map) the threads copy the tiles (copy_tile). */
    const bool keys_by_map = keys_by_tensor_map(key_count, p.H, p.T);
    /* S0^T and Vnew^T come by one bulk copy each, issued by thread 0 once the chain has ended */
    const auto copy_chain_tiles = [&] {
        wait_for_previous_kernel(); /* the chain's S0^T and Vnew^T */
        const uint32_t state_bytes = (uint32_t)(columns * LDK * sizeof(bf16)), value_bytes = (uint32_t)(columns * TOKEN_STRIDE * sizeof(bf16));
        barrier_arrive_expecting(&tiles_landed, (state_bytes + value_bytes) * (PRECISE ? 2 : 1));
        bulk_copy(S, S0_t + column0 * LDK, state_bytes, &tiles_landed);
        bulk_copy(Vnew, new_values_t + column0 * TOKEN_STRIDE, value_bytes, &tiles_landed);
        if (PRECISE) {
            bulk_copy(S_low, S0_t + low_states + column0 * LDK, state_bytes, &tiles_landed);
            bulk_copy(Vnew_low, new_values_t + low_values + column0 * TOKEN_STRIDE, value_bytes, &tiles_landed);
        }
    };
    if (threadIdx.x == 0) {
        barrier_init(&tiles_landed, 1);
        barrier_init(&keys_landed, 1);
        barrier_init_fence();
        if (keys_by_map) { /* q and k are inputs: no kernel of the pass writes them */
            barrier_arrive_expecting(&keys_landed, (uint32_t)(2 * CHUNK * LDK * sizeof(bf16)));
            tensor_copy_3d(q, &q_map, (int)(h * K), (int)t0, (int)b, &keys_landed);
            tensor_copy_3d(k, &k_map, (int)(h * K), (int)t0, (int)b, &keys_landed);
        }
        if (!beside_chain)
            copy_chain_tiles();
    }
    const uint4 zero = make_uint4(0, 0, 0, 0); /* the rows past V, 16 bytes a store (not unrolled:
                                                   unrolled, ptxas spilled here at 40 registers) */
#pragma unroll 1
    for (int e = columns * LDK / 8 + threadIdx.x; e < COLUMNS * LDK / 8; e += THREADS) {
        ((uint4 *)S)[e] = zero;
        if (PRECISE)
            ((uint4 *)S_low)[e] = zero;
    }
#pragma unroll 1
    for (int e = columns * TOKEN_STRIDE / 8 + threadIdx.x; e < COLUMNS * TOKEN_STRIDE / 8; e += THREADS) {
        ((uint4 *)Vnew)[e] = zero;
        if (PRECISE)
            ((uint4 *)Vnew_low)[e] = zero;
    }
    const size_t first_token = gdn_device_token(&p, b, t0, h), token_stride = p.H; /* token t0 + i: first + i H */
    if (!keys_by_map) {
        copy_tile(q, LDK, CHUNK, n, K, KP, q16 + first_token * K, token_stride * K);
        copy_tile(k, LDK, CHUNK, n, K, KP, k16 + first_token * K, token_stride * K);
        __pipeline_commit();
    }
    /* gamma: kernel 1's, or beside the chain the gates' sums made here from g (an input) by
       kernel 1's own function (the same values to the bit), so that nothing before P waits */
    if (!beside_chain)
        wait_for_previous_kernel(); /* kernel 1's gamma: kernel 1 ended before the chain did */
    for (int i = threadIdx.x; i < CHUNK; i += THREADS)
        gamma[i] = i >= n ? 0.0 : beside_chain ? (double)p.g[first_token + i * token_stride] : w.gamma[row0 + i];
    if (!keys_by_map)
        __pipeline_wait_prior(0);
    __syncthreads(); /* gamma (or g) is here; the barriers' initialization is seen before any thread waits on them */
    if (beside_chain) {
        if (warp == 0)
            running_gate_sums(gamma, n); /* eq. 9 */
        __syncthreads();
        if (threadIdx.x == 0) /* the only thread that waits: its warp makes its part of P after the chain */
            copy_chain_tiles();
    }
    if (keys_by_map)
        barrier_wait(&keys_landed, 0); /* q and k */

    /* P first, from q and k alone, while S0^T and Vnew^T are still landing */
    float scores[4][4];
    clear(scores);
    warp_product(scores, q, LDK, k, LDK, tile_row, tile_column, KP, causal_tiles(tile_row, tile_column)); /* Q K^T, its l <= i blocks */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int r = 0; r < 4; r += 2) { /* sums r and r + 1 are neighbours in a row: one 4-byte store */
            const int i = fragment_row(tile_row, r), l = fragment_column(tile_column, j, r);
            float exact[2];
#pragma unroll
            for (int s = 0; s < 2; s++) /* only l <= i: exponents <= 0 */
                exact[s] = l + s <= i && i < n ? scores[j][r + s] * exp_approx((float)(gamma[i] - gamma[l + s])) : 0.0f;
            const __nv_bfloat162 high = __floats2bfloat162_rn(exact[0], exact[1]);
            *(__nv_bfloat162 *)&P[i * TOKEN_STRIDE + l] = high;
            if (PRECISE)
                *(__nv_bfloat162 *)&P_low[i * TOKEN_STRIDE + l] =
                    __floats2bfloat162_rn(exact[0] - __low2float(high), exact[1] - __high2float(high));
        }
    constexpr int TILES = COLUMNS / 16; /* n-tiles of o per warp */
    float acc[TILES][4];
    clear(acc);
    barrier_wait(&tiles_landed, 0); /* S0^T and Vnew^T */
    warp_product(acc, q, LDK, S, LDK, tile_row, output_column, KP); /* Q S0 */
    if (PRECISE)
        warp_product(acc, q, LDK, S_low, LDK, tile_row, output_column, KP);
    const int upper = fragment_row(tile_row, 0), lower = upper + 8; /* this lane's two rows of o */
    const float decay_upper = upper < n ? expf((float)gamma[upper]) : 0.0f, decay_lower = lower < n ? expf((float)gamma[lower]) : 0.0f;
#pragma unroll
    for (int j = 0; j < TILES; j++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            acc[j][r] *= r < 2 ? decay_upper : decay_lower;
    __syncthreads(); /* P complete */
    warp_product(acc, P, TOKEN_STRIDE, Vnew, TOKEN_STRIDE, tile_row, output_column, causal_depth(tile_row)); /* + P Vnew */
    if (PRECISE) {
        warp_product(acc, P, TOKEN_STRIDE, Vnew_low, TOKEN_STRIDE, tile_row, output_column, causal_depth(tile_row));
        warp_product(acc, P_low, TOKEN_STRIDE, Vnew, TOKEN_STRIDE, tile_row, output_column, causal_depth(tile_row));
    }
    /* o leaves in bf16, as FLA writes it (half the bytes of fp32), or with --precise in fp32
     * (a bf16 o would undo what the two terms gained). In bf16 with V a multiple of 8 it goes
     * through a staging tile, as kernel 1's W and U do: a lane's fragment is 4-byte pairs in 8
     * rows, half of each 32-byte sector of a direct store; from the tile the block stores whole
     * rows, 16 bytes a thread. The tile takes the place of q onwards (q, k, S0, Vnew and P are
     * spent by then), row stride COLUMNS + 8 so that a fragment's 8 rows fall on different
     * banks. */
    if (!PRECISE && p.V % 8 == 0) { /* (p.V: with V a constant the path below would be unreachable code, a warning) */
        constexpr int OUTPUT_STRIDE = COLUMNS + 8, ROW_PIECES = COLUMNS / 8;
        static_assert(CHUNK * OUTPUT_STRIDE <= (COLUMNS + CHUNK) * TOKEN_STRIDE, "the staging tile is no larger than Vnew and P, so it fits in the tiles from q on");
        bf16 *o_stage = q;
        __syncthreads(); /* every warp has read q, k, S0, Vnew and P */
#pragma unroll
        for (int j = 0; j < TILES; j++)
#pragma unroll
            for (int r = 0; r < 4; r += 2) {
                const int i = fragment_row(tile_row, r), c = fragment_column(output_column, j, r);
                *(__nv_bfloat162 *)&o_stage[i * OUTPUT_STRIDE + c] = __floats2bfloat162_rn(p.scale * acc[j][r], p.scale * acc[j][r + 1]);
            }
        __syncthreads();
        const int pieces = (int)(V - column0 < COLUMNS ? V - column0 : COLUMNS) / 8; /* of a row, inside V */
        bf16 *o_rows = o16 + first_token * V + column0; /* token t0 + i's row: i H V further */
        for (int e = threadIdx.x; e < n * ROW_PIECES; e += THREADS) {
            const int i = e / ROW_PIECES, piece = e % ROW_PIECES;
            if (piece < pieces)
                ((uint4 *)(o_rows + i * token_stride * V))[piece] = ((const uint4 *)(o_stage + i * OUTPUT_STRIDE))[piece];
        }
        return;
    }
    /* Otherwise a lane's two neighbours in a row go out as one store (4 or 8 bytes) where V is
     * even, so the pair is aligned. */
#pragma unroll
    for (int j = 0; j < TILES; j++)
#pragma unroll
        for (int r = 0; r < 4; r += 2) {
            const int i = fragment_row(tile_row, r);
            const size_t out = column0 + fragment_column(output_column, j, r), row = gdn_device_token(&p, b, t0 + i, h) * V;
            const float first = p.scale * acc[j][r], second = p.scale * acc[j][r + 1];
            if (i >= n)
                continue;
            if (V % 2 == 0 && out + 1 < V) {
                if (PRECISE)
                    *(float2 *)&o[row + out] = make_float2(first, second);
                else
                    *(__nv_bfloat162 *)&o16[row + out] = __floats2bfloat162_rn(first, second);
            } else
                for (int s = 0; s < 2 && out + s < V; s++) {
                    if (PRECISE)
                        o[row + out + s] = s ? second : first;
                    else
                        o16[row + out + s] = __float2bfloat16_rn(s ? second : first);
                }
        }
}

/* ---- the three passes, each launched and checked (stage 07 launches them too) ---- */

/* q, k (width K) or v (width V), (B, T, H, width) bf16, as a 3-D tensor for the TMA unit:
 * innermost the token's row of all heads (H width values), then T, then B (strides in bytes);
 * and the box a kernel takes of it: box_width values of a row (from h width: one head's, plus
 * the padding) of CHUNK tokens, the padded tile ldmatrix reads. Every box dimension is within
 * the tensor's (the callers' conditions); the tokens past T land as zeros.
 * cuTensorMapEncodeTiled is a driver function; the runtime hands out its address, so nothing
 * links the driver library. */
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    if (!encode) {
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess || !encode) {
            encode = NULL;
            gdn_set_error("stage 06: the CUDA driver does not offer cuTensorMapEncodeTiled");
        }
    }
    return encode;
}
static int make_token_tile_map(CUtensorMap *map, const void *tensor, const gdn_device_problem *p, size_t width, int box_width,
                               bool swizzled = false)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode)
        return -1;
    const cuuint64_t sizes[3] = {p->H * width, p->T, p->B};
    const cuuint64_t strides[2] = {p->H * width * sizeof(bf16), p->T * p->H * width * sizeof(bf16)};
    const cuuint32_t box[3] = {(cuuint32_t)box_width, CHUNK, 1}, steps[3] = {1, 1, 1};
    const CUresult result = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)tensor, sizes, strides, box, steps,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, swizzled ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return result == CUDA_SUCCESS ? 0 : gdn_set_error("stage 06: cuTensorMapEncodeTiled refused a map of q, k, v or o (CUresult %d)", (int)result);
}
/* Blocks of `kernel` an SM holds at once with `bytes` of dynamic shared memory (the occupancy
 * query: registers, shared memory, threads); 0 where no device answers (the launch then
 * reports what is missing). */
template <typename Kernel>
static int kernel_blocks_per_sm(Kernel kernel, int threads, size_t bytes)
{
    int per_sm = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes) != cudaSuccess) {
        cudaGetLastError();
        per_sm = 0;
    }
    return per_sm;
}

/* parts: what kernel 1 writes (WRITE_KEYS_T, ...: chunk_parts_for) */
template <bool PRECISE>
static int launch_prepare_chunks(const gdn_device_problem *p, chunk_workspace w, int parts, size_t first_chunk = 0,
                                 size_t end_chunk = 0, cudaStream_t stream = 0)
{
    const size_t M = CHUNK, LDK = key_stride(p->K);
    /* the gates, Tm's place, the keys, then the values' place (the solve's scratch, then v) */
    const size_t before_values = 128 + M * sizeof(double) + 2 * M * sizeof(float) + tm_place_bytes(PRECISE) + M * LDK * sizeof(bf16);
    const size_t bytes = before_values + values_place_bytes((size_t)value_stride(p->V));
    const size_t transform_only_bytes = before_values; /* no v: the scratch in the keys' place */
    /* every chunk, or (beside the chain: w.ready) chunks first_chunk .. end_chunk - 1 */
    const size_t chunk_count = w.ready ? end_chunk - first_chunk : chunks_of(p->T);
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * chunk_count, 1, &blocks))
        return -1;
    CUtensorMap k_map = {}, v_map = {}; /* unused (zero) where the threads copy k and v */
    if (tiles_by_tensor_map(p->K, p->V, p->H, p->T) && (make_token_tile_map(&k_map, p->k_bf16, p, p->K, key_stride(p->K)) ||
                                                        make_token_tile_map(&v_map, p->v_bf16, p, p->V, value_stride(p->V))))
        return -1;
    /* four blocks an SM where the occupancy query says their shared memory fits (and V is one
     * slice, as that kernel assumes): at K = V = 64 (2048 blocks at (1, 16384, 8, 64, 64)) 3
     * an SM run 5.2 waves, so 6 rounds; 4 run 3.9. At K = V = 128 four fit because the tiles
     * share their places (tm_place_bytes): 53 KB a block */
    auto prepare_chunks = prepare_chunks_kernel<PRECISE, PRECISE ? 2 : 3, 0>;
    size_t launch_bytes = bytes;
    const auto transform_only = p->K == 64 ? prepare_chunks_kernel<false, TRANSFORM_BLOCKS, 64> : prepare_chunks_kernel<false, TRANSFORM_BLOCKS, 128>;
    if (!PRECISE && parts == WRITE_TRANSFORM && p->K == p->V && (p->K == 64 || p->K == 128) && /* those instances know K = V */
        kernel_blocks_per_sm(transform_only, THREADS, transform_only_bytes) >= TRANSFORM_BLOCKS) {
        /* the transform block alone (the chains that make Vnew from v): six blocks an SM */
        prepare_chunks = transform_only;
        launch_bytes = transform_only_bytes;
    } else if (!PRECISE && p->V <= VALUE_SLICE && kernel_blocks_per_sm(prepare_chunks_kernel<false, 4, 0>, THREADS, bytes) >= 4) {
        /* K = V = 64 or 128, the common sizes, compiled with them known */
        const bool square = p->K == p->V;
        prepare_chunks = square && p->K == 64    ? prepare_chunks_kernel<false, 4, 64>
                         : square && p->K == 128 ? prepare_chunks_kernel<false, 4, 128>
                                                 : prepare_chunks_kernel<false, 4, 0>;
    }
    if (w.ready && prepare_chunks != prepare_chunks_kernel<false, TRANSFORM_BLOCKS, 128>)
        return gdn_set_error("kernel 1 beside the chain: only its transform-block instance runs by chunk windows");
    CUDA_LAUNCH_WITH_SHARED_ON(stream, prepare_chunks, blocks, THREADS, launch_bytes, *p, w, k_map, v_map, parts, (unsigned)first_chunk);
    return 0;
}

/* How kernel 2 is launched: tiles per block and ring slots, and the shared memory that takes.
 * Tiles (chain_tiles): the most (8, 4, 2, 1; at most 4 with --precise: widest_chain_tiles)
 * that divide a head's tiles (tiles_per_run) and still leave a block for every SM: wider
 * blocks share each copy of W and the decayed keys
 * among more columns, but when blocks are few the chain's latency is the time, and more
 * blocks on more SMs shorten it. 8 tiles (128 columns, a whole head at K = V = 128) where
 * they leave a block for 95 % of the SMs (widest_blocks_percent): one a head at 128 heads
 * leaves 4 of 132 SMs idle, and still ran faster than two 64-column blocks an SM (docs/06, the
 * sixteenth step); 70 % where those blocks carry output warps, which take kernel 3's pass
 * away. Slots
 * (chain_shape_of): as many as fit on an SM, up to 4, so that the producer runs up to three
 * chunks ahead, unless fewer save a wave (below). Staged stores (chunk_states_kernel) where
 * the blocks fill the GPU, and always in 8-tile blocks (from registers, their 128 columns'
 * stores ran the chain 2.2 times slower). Stage 07's model of its launches uses all three, so
 * that it models what runs. */
typedef struct {
    int tiles, stages;
    bool staged, from_values; /* from_values: values slots (chain_from_values) */
    size_t bytes;
} chain_shape;

/* The share of the SMs 8-tile blocks must leave a block for. With output warps the 8-tile
 * block also does kernel 3's work, and fewer SMs busy is worth that: at (1, 8192, 96, 128,
 * 128), 96 heads on 132 SMs, 96 blocks with output warps took 1.087 ms, 192 blocks of 64
 * columns and kernel 3 1.200 (docs/06, the nineteenth step). */
static int widest_blocks_percent(bool outputs) { return outputs ? 70 : 95; }
static int chain_tiles(size_t one_tile_blocks, size_t tiles_per_run, size_t sms, int widest, bool outputs)
{
    for (int tiles = widest; tiles > 1; tiles /= 2) {
        const size_t blocks = one_tile_blocks / tiles;
        if (tiles_per_run % tiles == 0 &&
            (tiles == MAX_CHAIN_TILES ? blocks * 100 >= sms * (size_t)widest_blocks_percent(outputs) : blocks >= sms))
            return tiles;
    }
    return 1;
}

/* the shared memory a block may have on this GPU (an H200's 227 KB where no device answers:
   a missing device is reported by the launch) */
static size_t shared_bytes_per_block(void)
{
    int per_block = 227 * 1024;
    if (cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) != cudaSuccess)
        cudaGetLastError();
    return (size_t)per_block;
}

static chain_shape chain_shape_of(int tiles, size_t K, bool precise, bool staged, bool from_values)
{
    const size_t per_block = shared_bytes_per_block();
    chain_shape shape;
    shape.tiles = tiles;
    shape.stages = 2;
    shape.staged = staged;
    shape.from_values = from_values;
    while (shape.stages < 4 && chain_shared_bytes(K, precise, shape.tiles, shape.stages + 1, staged, from_values) <= per_block)
        shape.stages++;
    shape.bytes = chain_shared_bytes(K, precise, shape.tiles, shape.stages, staged, from_values);
    return shape;
}
/* The same blocks with the shallowest ring, two slots: the most blocks an SM (for
 * chain_launch_shape, and for stage 07's model of the waves its launches take) */
static chain_shape two_slot_shape(int tiles, size_t K, bool precise, bool staged, bool from_values)
{
    const chain_shape shape = {tiles, 2, staged, from_values, chain_shared_bytes(K, precise, tiles, 2, staged, from_values)};
    return shape;
}

/* Kernel 2 as made for a shape: its blocks' tiles (chain_ntiles), staged or not (a fold
 * never is: it stores nothing for kernel 3; STAGED = !FOLD below, so that the staged fold,
 * which the kernel refuses by a static_assert, is never instantiated) */
typedef void (*chain_kernel)(gdn_device_problem, chunk_workspace, chain_segments, int);
template <bool PRECISE, bool FOLD>
static chain_kernel chain_kernel_for(chain_shape shape)
{
    if (shape.staged && !FOLD)
        return chain_ntiles(shape.tiles) == 2 ? chunk_states_kernel<PRECISE, FOLD, 2, !FOLD> : chunk_states_kernel<PRECISE, FOLD, 1, !FOLD>;
    return chain_ntiles(shape.tiles) == 2 ? chunk_states_kernel<PRECISE, FOLD, 2, false> : chunk_states_kernel<PRECISE, FOLD, 1, false>;
}
typedef void (*chain_from_values_kernel)(gdn_device_problem, chunk_workspace, chain_segments, int, const CUtensorMap, const CUtensorMap);
template <bool FOLD>
static chain_from_values_kernel from_values_kernel_for(chain_shape shape)
{
    if (shape.staged && !FOLD)
        return chain_ntiles(shape.tiles) == 2 ? chunk_states_from_values_kernel<FOLD, 2, !FOLD> : chunk_states_from_values_kernel<FOLD, 1, !FOLD>;
    return chain_ntiles(shape.tiles) == 2 ? chunk_states_from_values_kernel<FOLD, 2, false> : chunk_states_from_values_kernel<FOLD, 1, false>;
}

/* Blocks of a shape an SM holds at once (registers, shared memory, threads: the occupancy
 * query); 1 where no device answers. */
template <bool PRECISE, bool FOLD>
static size_t chain_blocks_per_sm(chain_shape shape)
{
    const int threads = chain_block_threads(shape.tiles);
    const int per_sm = !PRECISE && shape.from_values ? kernel_blocks_per_sm(from_values_kernel_for<FOLD>(shape), threads, shape.bytes)
                                                     : kernel_blocks_per_sm(chain_kernel_for<PRECISE, FOLD>(shape), threads, shape.bytes);
    return per_sm < 1 ? 1 : (size_t)per_sm;
}

/* The launch's shape: chain_tiles' width and the ring's depth: the deepest ring that fits
 * (chain_shape_of), unless two slots, the most blocks an SM, run the blocks in fewer waves.
 * A block alone on its SM is latency-bound and the producer's lead hides its copies: at (1,
 * 65536, 8, 128, 128), 64 one-tile blocks, 4 slots took 2.164 ms, 3 slots 2.213, 2 slots
 * 2.247. Where the blocks outnumber what the GPU holds at once, they must share SMs, and two
 * slots shared best: at (2, 16384, 16, 128, 128), 256 one-tile blocks, four 38 KB slots allow
 * one an SM (two waves of 256 chunk steps), three allow two and two allow three (one wave
 * either way), and two slots ran 1.240 ms where three ran 1.282 (docs/06). Staged where the
 * blocks are at least the SMs, or 8 tiles wide (not with FOLD). `outputs`: 8-tile blocks
 * would carry output warps (chain_tiles). */
template <bool PRECISE, bool FOLD>
static chain_shape chain_launch_shape(size_t one_tile_blocks, size_t tiles_per_run, size_t K, bool outputs, bool from_values)
{
    const int sms = gdn_sm_count();
    const int tiles = chain_tiles(one_tile_blocks, tiles_per_run, (size_t)sms, widest_chain_tiles(PRECISE), outputs);
    const size_t blocks = one_tile_blocks / tiles;
    const bool staged = !FOLD && (blocks >= (size_t)sms || tiles == MAX_CHAIN_TILES);
    const chain_shape deepest = chain_shape_of(tiles, K, PRECISE, staged, from_values);
    const chain_shape two_slots = two_slot_shape(tiles, K, PRECISE, staged, from_values);
    const auto waves = [&](chain_shape shape) {
        const size_t at_once = (size_t)sms * chain_blocks_per_sm<PRECISE, FOLD>(shape);
        return (blocks + at_once - 1) / at_once;
    };
    return waves(two_slots) < waves(deepest) ? two_slots : deepest;
}

/* Kernel 3's columns of o a block: 128 where V is a multiple of 128 (no block half empty) and
 * not --precise (whose low terms would double the block's 98 KB of shared memory at K = 128);
 * else 64. Its blocks: one per head, chunk and that many columns. */
template <bool PRECISE>
static size_t output_columns(const gdn_device_problem *p)
{
    return !PRECISE && p->V % 128 == 0 ? 128 : 64;
}
static size_t output_blocks(const gdn_device_problem *p, size_t columns)
{
    return p->B * p->H * chunks_of(p->T) * ((p->V + columns - 1) / columns);
}

/* Kernel 3 beside the chain (docs/06, the forty-first step): where all of kernel 3's blocks
 * fit on the GPU at once (a block per head, chunk and 128 or 64 columns of o, launch_chunk_outputs;
 * at least two an SM at any K <= 128), they are placed while the chain runs, sum their gates from
 * g and make P there, and wait only for S0^T and Vnew^T. Elsewhere they come in waves after
 * the chain, and each block copies S0^T and Vnew^T first (measured: the order beside the
 * chain took 1 to 3 % longer there). */
template <bool PRECISE>
static bool outputs_beside_chain(const gdn_device_problem *p)
{
    return !PRECISE && output_blocks(p, output_columns<PRECISE>(p)) <= 2 * (size_t)gdn_sm_count();
}
/* The chain lets kernel 3 start (griddepcontrol.launch_dependents, at its start) where kernel 3
 * runs beside it and the chain's blocks are all on the GPU at once, so that kernel 3's take
 * only room they leave: where the chain runs in waves its later blocks would share SMs with
 * them (measured slower, the fourteenth step). */
template <bool PRECISE, bool FOLD>
static bool outputs_may_start_early(const gdn_device_problem *p, chain_shape shape, unsigned blocks)
{
    return !FOLD && outputs_beside_chain<PRECISE>(p) && (size_t)blocks <= (size_t)gdn_sm_count() * chain_blocks_per_sm<PRECISE, FOLD>(shape);
}

/* Output warps possible for kernel 2 (not a fold): K = V = 128, q and k by tensor maps, the
 * block's shared memory there; they run where its blocks are then 8 tiles wide */
template <bool PRECISE, bool FOLD>
static bool outputs_possible(const gdn_device_problem *p)
{
    return !PRECISE && !FOLD && output_warps_shape(p->K, p->V) && keys_by_tensor_map(p->K, p->H, p->T) &&
           output_block_bytes() <= shared_bytes_per_block();
}
/* the K and v-tile strides the one-n-tile from-values step is compiled for (chain_block) */
__host__ __device__ constexpr bool one_n_tile_from_values_compiled(size_t K, int values_stride)
{
    return (K == 64 || K == MAX_K) && (values_stride == values_tile_stride(16) || values_stride == values_tile_stride(32));
}
static_assert(chain_ntiles(1) == 1 && chain_ntiles(2) == 1 && chain_ntiles(4) == 2 &&
                  one_n_tile_from_values_compiled(MAX_K, values_tile_stride(values_tile_columns(1, MAX_K))) &&
                  one_n_tile_from_values_compiled(MAX_K, values_tile_stride(values_tile_columns(2, MAX_K))) &&
                  one_n_tile_from_values_compiled(64, values_tile_stride(values_tile_columns(1, 64))) &&
                  one_n_tile_from_values_compiled(64, values_tile_stride(values_tile_columns(2, 64))),
              "the one-n-tile blocks that make Vnew from v (1 or 2 tiles, K = V = 64 or 128) run a step compiled for them");
/* Whether the chain can make Vnew from v as the one with output warps does (FROM_VALUES: Vnew
 * = Tm Z, eq. 13 regrouped), so that kernel 1 writes the transform block alone and no W, U or
 * decayed keys, for every launch: where k and v come by tensor maps (their boxes fit:
 * tiles_by_tensor_map), not with --precise (whose W, S and Vnew carry low terms), and at K =
 * V = 64 or 128, the sizes its step and kernel 1's transform-only instance are compiled for
 * (at V = 48 and 64 the GPU suites once failed, where kernel 1 took an instance compiled for
 * K = V = 128: docs/06, the thirty-sixth step). Stage 07's model asks this, for the slots. */
__host__ __device__ static inline bool chain_from_values_sizes(size_t K, size_t V, size_t H, size_t T, bool precise)
{
    return !precise && K == V && (K == 64 || K == MAX_K) && tiles_by_tensor_map(K, V, H, T);
}
/* Whether it pays. The trade: kernel 1's W, U and keys (2 K + V values a token) against a longer
 * chain step (Z, and Tm's products, four deep). At K = V = 128 it won everywhere it was
 * measured (the thirty-sixth step: 0.830 -> 0.693 ms at (2, 16384, 16), stage 07 at (1, 65536,
 * 8) 0.826 -> 0.743). At K = V = 64 the bytes are fewer and the step shorter, and it wins only
 * where kernel 1's work, spread over the GPU, outweighs the steps the chain adds on its
 * critical path (the thirty-ninth step, H200, ms: 06 at (2, 16384, 16) 0.421 -> 0.359 and (8,
 * 4096, 16) 0.368 -> 0.307, 07 at (1, 16384, 8) P = 16 0.1485 -> 0.1403, (1, 131072, 8) 0.960
 * -> 0.900, (1, 65536, 4) P = 32 0.290 -> 0.272; lost: 06 at (1, 16384, 8) 0.189 -> 0.203, 07
 * at (1, 16384, 2) P = 16 0.0700 -> 0.0740). The first grows as heads x chunks, the second
 * as the chain's depth in steps (chunks with one segment, a fold's and a replay's
 * chunks / P with P), so from v where heads x chunks >= VALUES_AT_64_HEADS x depth: 24, inside
 * the measured band (it lost at 8 and 16 equivalent heads, won at 32 and above). */
enum { VALUES_AT_64_HEADS = 24 };
__host__ __device__ static inline bool chain_from_values_pays(size_t K, size_t heads, size_t chunks, size_t P)
{
    const size_t depth = P <= 1 ? chunks : 2 * ((chunks + P - 1) / P);
    return K == MAX_K || heads * chunks >= (size_t)VALUES_AT_64_HEADS * depth;
}
/* The choice, for every launch of a pass over P segments of each head (stage 06: P = 1):
 * kernel 1's parts and every chain after it must agree. Elsewhere the chain reads W, U and the
 * decayed keys. */
template <bool PRECISE>
static bool chain_from_values(const gdn_device_problem *p, size_t P)
{
    return chain_from_values_sizes(p->K, p->V, p->H, p->T, PRECISE) && chain_from_values_pays(p->K, p->B * p->H, chunks_of(p->T), P);
}
/* kernel 2's shape for `runs` of the P segments of every head */
template <bool PRECISE, bool FOLD>
static chain_shape chain_shape_for(const gdn_device_problem *p, size_t P, size_t runs, bool outputs)
{
    const size_t columns = (FOLD ? round_up16(p->K) : 0) + round_up16(p->V);
    return chain_launch_shape<PRECISE, FOLD>(p->B * p->H * runs * (columns / 16), columns / 16, p->K, outputs, chain_from_values<PRECISE>(p, P));
}
/* whether kernel 2 over `runs` segments of every head makes o itself (and so reads no keys_t) */
template <bool PRECISE>
static bool chain_makes_outputs(const gdn_device_problem *p, size_t runs)
{
    return outputs_possible<PRECISE, false>(p) && chain_shape_for<PRECISE, false>(p, runs, runs, true).tiles == MAX_CHAIN_TILES;
}

/* What kernel 1 writes for the chains that follow it over P segments of each head (folds,
 * replays, with output warps or not): the transform block where they make Vnew from v
 * (chain_from_values; the output warps' chain always does), else W, U and the decayed keys */
template <bool PRECISE>
static int chunk_parts_for(const gdn_device_problem *p, size_t P)
{
    return chain_from_values<PRECISE>(p, P) ? WRITE_TRANSFORM : WRITE_KEYS_T | WRITE_W_AND_U;
}

/* Kernel 2 over segments 0 .. runs-1 of every head (with FOLD: K + V columns). With `r` (not
 * with FOLD), where the blocks are MAX_CHAIN_TILES wide and hold a whole head of K = V = 128,
 * the block also makes o (OUTPUTS: chunk_outputs_role), and *outputs_done says so. */
template <bool PRECISE, bool FOLD>
static int launch_chunk_states(const gdn_device_problem *p, chunk_workspace w, chain_segments segments, gdn_device_result *r = NULL,
                               bool *outputs_done = NULL, cudaStream_t stream = 0)
{
    const size_t columns = (FOLD ? round_up16(p->K) : 0) + round_up16(p->V), runs = segments.runs;
    const size_t output_bytes = output_block_bytes();
    const bool outputs = r && outputs_done && outputs_possible<PRECISE, FOLD>(p); /* if the blocks are 8 tiles wide */
    const chain_shape shape = chain_shape_for<PRECISE, FOLD>(p, segments.count, runs, outputs);
    const size_t block_columns = 16 * (size_t)shape.tiles;
    unsigned blocks;
    if (gdn_blocks_for(p->B * p->H * runs * ((columns + block_columns - 1) / block_columns), 1, &blocks))
        return -1;
    if (outputs_done)
        *outputs_done = false;
    if constexpr (!PRECISE && !FOLD) {
        if (outputs && shape.tiles == MAX_CHAIN_TILES) {
            if (!r->o_bf16)
                return gdn_set_error("the chain's output warps write o in bf16: the runner made no room for it");
            CUtensorMap o_map, q_map, k_map, v_map;
            /* boxes of 64 keys (128 bytes) with the 128-byte swizzle: the output warps' and the chain's wgmma operands,
               and o, which leaves from the q tile in the same layout */
            if (make_token_tile_map(&q_map, p->q_bf16, p, p->K, 64, true) || make_token_tile_map(&k_map, p->k_bf16, p, p->K, 64, true) ||
                make_token_tile_map(&o_map, r->o_bf16, p, p->V, 64, true) || make_token_tile_map(&v_map, p->v_bf16, p, p->V, 64, true))
                return -1;
            /* two ring slots, passed at run time: with the depth known to the compiler this
               kernel ran 5 % slower (docs/06, the end of the seventeenth step) */
            if (stream) /* beside kernel 1 (kernel1_beside_chain): in a stream of its own, after kernel 1's first launch */
                CUDA_LAUNCH_WITH_SHARED_ON(stream, chunk_states_outputs_kernel<true>, blocks, OUTPUT_BLOCK_THREADS, output_bytes, *p, w, segments,
                                           OUTPUT_STAGES, o_map, q_map, k_map, v_map);
            else
                CUDA_LAUNCH_AFTER_PREVIOUS(chunk_states_outputs_kernel<false>, blocks, OUTPUT_BLOCK_THREADS, output_bytes, *p, w, segments,
                                           OUTPUT_STAGES, o_map, q_map, k_map, v_map);
            r->o_in_bf16 = 1;
            *outputs_done = true;
            return 0;
        }
    }
    if constexpr (!PRECISE)
        if (shape.from_values) {
            const int values_stride = values_tile_stride(values_tile_columns(shape.tiles, p->V));
            /* the one-n-tile blocks' step is compiled for K = 64 and 128 and two v-tile strides only
               (chain_block, the thirty-seventh step): never run it on another (the blocks made
               today are those: one_n_tile_from_values_compiled, above) */
            if (chain_ntiles(shape.tiles) == 1 && !one_n_tile_from_values_compiled(p->K, values_stride))
                return gdn_set_error("the chain from v: K = %zu and a v tile of stride %d, where its step is compiled for K = 64 or %d and strides %d or %d",
                                     p->K, values_stride, (int)MAX_K, values_tile_stride(16), values_tile_stride(32));
            CUtensorMap k_map, v_map;
            if (make_token_tile_map(&k_map, p->k_bf16, p, p->K, key_stride(p->K)) ||
                make_token_tile_map(&v_map, p->v_bf16, p, p->V, values_stride))
                return -1;
            const chain_from_values_kernel chunk_states = from_values_kernel_for<FOLD>(shape);
            segments.outputs_early = outputs_may_start_early<PRECISE, FOLD>(p, shape, blocks);
            CUDA_LAUNCH_AFTER_PREVIOUS(chunk_states, blocks, chain_block_threads(shape.tiles), shape.bytes, *p, w, segments, shape.stages,
                                       k_map, v_map);
            return 0;
        }
    const chain_kernel chunk_states = chain_kernel_for<PRECISE, FOLD>(shape);
    segments.outputs_early = outputs_may_start_early<PRECISE, FOLD>(p, shape, blocks);
    CUDA_LAUNCH_AFTER_PREVIOUS(chunk_states, blocks, chain_block_threads(shape.tiles), shape.bytes, *p, w, segments, shape.stages);
    return 0;
}

/* Kernel 3 with COLUMNS columns of o a block. */
template <bool PRECISE, int COLUMNS>
static int launch_chunk_outputs_by(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    const size_t M = CHUNK, LDK = key_stride(p->K), LDT = TOKEN_STRIDE, terms = PRECISE ? 2 : 1;
    const size_t bytes = 128 + M * sizeof(double) + (2 * M * LDK + terms * (COLUMNS * LDK + COLUMNS * LDT + M * LDT)) * sizeof(bf16);
    unsigned blocks;
    if (gdn_blocks_for(output_blocks(p, COLUMNS), 1, &blocks))
        return -1;
    if (!PRECISE && !r->o_bf16)
        return gdn_set_error("kernel 3 writes o in bf16: the runner made no room for it");
    CUtensorMap q_map = {}, k_map = {}; /* unused (zero) where the threads copy q and k */
    if (keys_by_tensor_map(p->K, p->H, p->T) &&
        (make_token_tile_map(&q_map, p->q_bf16, p, p->K, key_stride(p->K)) || make_token_tile_map(&k_map, p->k_bf16, p, p->K, key_stride(p->K))))
        return -1;
    /* K = V = 64 or 128 (one COLUMNS each: 64 columns where V is not a multiple of 128) compiled with them known */
    constexpr int SIZE = PRECISE ? 0 : COLUMNS;
    auto chunk_outputs = SIZE && p->K == SIZE && p->V == SIZE ? chunk_outputs_kernel<PRECISE, COLUMNS, SIZE> : chunk_outputs_kernel<PRECISE, COLUMNS, 0>;
    CUDA_LAUNCH_AFTER_PREVIOUS(chunk_outputs, blocks, THREADS, bytes, *p, w, r->o, (bf16 *)r->o_bf16, q_map, k_map,
                               outputs_beside_chain<PRECISE>(p));
    r->o_in_bf16 = !PRECISE;
    return 0;
}

/* Kernel 3 with output_columns a block. */
template <bool PRECISE>
static int launch_chunk_outputs(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    if constexpr (!PRECISE) /* (no 128-column kernel is compiled for --precise) */
        if (output_columns<PRECISE>(p) == 128)
            return launch_chunk_outputs_by<PRECISE, 128>(p, w, r);
    return launch_chunk_outputs_by<PRECISE, 64>(p, w, r);
}

static int check_key_width(size_t K)
{
    return K > MAX_K ? gdn_set_error("K = %zu: stages 06 and 07 keep K-wide tiles in shared memory, K at most %d", K, MAX_K) : 0;
}

#ifndef WARP_SPECIALIZED_KERNELS_ONLY /* stage 07 includes this file for its kernels, and stops here */

/* Kernel 1 beside the chain (docs/06, the thirty-fifth step). Where the chain's blocks with
 * output warps, one a head, leave SMs idle (heads between 70 % of the SMs, where those blocks
 * start, and the SMs less MIN_IDLE_SMS), kernel 1 runs in two launches: chunks 0 .. split - 1
 * of every head on every SM first; then the fused kernel and the rest of kernel 1 at once, in
 * two streams, the fused kernel's of the higher priority so that its blocks are placed first
 * (one an SM) and kernel 1's second launch takes the SMs they leave. That launch makes the
 * chunks in the chain's order (every head's chunk c before any head's c + 1) and flags each
 * (w.ready); the chain's producer and the output warps wait for a chunk's flag before they
 * read it (wait_until_prepared). Nothing can wait forever: kernel 1 waits for nothing, and
 * the fused blocks wait only for it; it is launched first, so that where kernels run one at
 * a time (a sanitizer, CUDA_LAUNCH_BLOCKING) it ends before the chain begins. Were kernel 1's
 * blocks placed first after all, the pass would only be as slow as the two launches one after
 * the other.
 * The split: the second launch makes a chunk of every head in heads / (idle SMs x
 * KERNEL1_CHUNKS_PER_SM_US) us, the chain takes one in CHAIN_STEP_US, so the second launch
 * falls behind by their ratio a chunk, and must start at the chunk from which it falls no
 * further behind than the chain's end: split = chunks (1 - idle x rate x step / heads), and
 * RAMP_CHUNKS more. Measured on an H200 (docs/06, the forty-fifth step): kernel 1 alone, 8192
 * chunks in 93.7 us on 132 SMs (0.662 a us an SM; ncu, the card's clocks); the chain's step
 * beside kernel 1 3.24 us (at 96 heads: the pass less the first launch and about 10 us of
 * launches and events, over 128 chunks).
 * The ramp was fitted to the same session's sweeps of the split, whose best splits (34 of 128
 * chunks at 96 heads, 82 of 128 at 110, 27 of 64 at 100) it meets within a chunk or two: a
 * split too early leaves the chain waiting for flags, which costs more than the idle SMs of
 * one too late. At least MIN_CHUNKS chunks: the second launch, the streams' events and the
 * flags' memset cost about 10 us a pass (measured at 3 and 5 chunks), which 64 chunks repay. */
constexpr double KERNEL1_CHUNKS_PER_SM_US = 0.662, CHAIN_STEP_US = 3.24, RAMP_CHUNKS = 9.0;
constexpr size_t MIN_IDLE_SMS = 16, MIN_CHUNKS = 64;
/* the first chunk of kernel 1's second launch, or 0 where kernel 1 does not run beside the
   chain (warp_specialized.h; tested on its own, as host code) */
extern "C" size_t warp_specialized_kernel1_split(size_t heads, size_t chunks, size_t sms)
{
    if (chunks < MIN_CHUNKS || heads + MIN_IDLE_SMS > sms)
        return 0;
    const double behind = (double)(sms - heads) * KERNEL1_CHUNKS_PER_SM_US * CHAIN_STEP_US / (double)heads;
    const double split = behind >= 1.0 ? 0.0 : (double)chunks * (1.0 - behind);
    const size_t first = (size_t)(split + RAMP_CHUNKS);
    return first < chunks ? first : chunks - 1;
}
/* the same for a pass: only where the chain carries output warps */
static size_t kernel1_split_chunk(const gdn_device_problem *p)
{
    return chain_makes_outputs<false>(p, 1) ? warp_specialized_kernel1_split(p->B * p->H, chunks_of(p->T), (size_t)gdn_sm_count()) : 0;
}
/* whether the chains of a pass make Vnew from v (warp_specialized.h; tested on its own, as
   host code): chain_from_values_pays */
extern "C" int warp_specialized_values_pay(size_t K, size_t heads, size_t chunks, size_t P)
{
    return chain_from_values_pays(K, heads, chunks, P);
}
static int kernel1_beside_chain(const gdn_device_problem *p, chunk_workspace w, chain_segments whole, gdn_device_result *r,
                                size_t split)
{
    static cudaStream_t chain_stream, kernel1_stream;
    static cudaEvent_t first_launch_done, chain_done, kernel1_done;
    static bool made = false;
    if (!made) { /* once a process: streams that never wait for the default stream by themselves */
        int lowest = 0, highest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&chain_stream, cudaStreamNonBlocking, highest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&kernel1_stream, cudaStreamNonBlocking, lowest));
        CUDA_CHECK(cudaEventCreateWithFlags(&first_launch_done, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&chain_done, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&kernel1_done, cudaEventDisableTiming));
        made = true;
    }
    const size_t chunks = chunks_of(p->T), heads = p->B * p->H;
    w.ready = (unsigned *)(w.transforms + heads * chunks * TRANSFORM_BYTES);
    w.ready_from = split;
    bool outputs_done = false;
    CUDA_CHECK(cudaMemsetAsync(w.ready, 0, heads * chunks * sizeof(unsigned), 0));
    if (launch_prepare_chunks<false>(p, w, WRITE_TRANSFORM, 0, split))
        return -1;
    CUDA_CHECK(cudaEventRecord(first_launch_done, 0));
    CUDA_CHECK(cudaStreamWaitEvent(chain_stream, first_launch_done, 0));
    CUDA_CHECK(cudaStreamWaitEvent(kernel1_stream, first_launch_done, 0));
    /* kernel 1's second launch first: where kernels run one at a time after all (a sanitizer,
       CUDA_LAUNCH_BLOCKING) it then ends before the chain waits for it */
    if (launch_prepare_chunks<false>(p, w, WRITE_TRANSFORM, split, chunks, kernel1_stream) ||
        launch_chunk_states<false, false>(p, w, whole, r, &outputs_done, chain_stream))
        return -1;
    CUDA_CHECK(cudaEventRecord(chain_done, chain_stream));
    CUDA_CHECK(cudaEventRecord(kernel1_done, kernel1_stream));
    CUDA_CHECK(cudaStreamWaitEvent(0, chain_done, 0)); /* the default stream's next work after both */
    CUDA_CHECK(cudaStreamWaitEvent(0, kernel1_done, 0));
    return outputs_done ? 0 : gdn_set_error("kernel 1 beside the chain: the chain made no o (its blocks carry no output warps here)");
}

template <bool PRECISE>
static int warp_specialized_passes(const gdn_device_problem *p, chunk_workspace w, gdn_device_result *r)
{
    const chain_segments whole = {1, 1, p->h0, r->ht}; /* one segment: the whole sequence from h0 */
    const int parts = chunk_parts_for<PRECISE>(p, 1);
    bool outputs_done;
    if constexpr (!PRECISE)
        if (const size_t split = kernel1_split_chunk(p))
            return kernel1_beside_chain(p, w, whole, r, split);
    if (launch_prepare_chunks<PRECISE>(p, w, parts) ||
        launch_chunk_states<PRECISE, false>(p, w, whole, r, &outputs_done))
        return -1;
    return outputs_done ? 0 : launch_chunk_outputs<PRECISE>(p, w, r);
}

static int warp_specialized_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    if (check_key_width(p->K))
        return -1;
    chunk_workspace w = workspace_at(r->workspace, p, s->precise);
    return s->precise ? warp_specialized_passes<true>(p, w, r) : warp_specialized_passes<false>(p, w, r);
}

static int warp_specialized_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    size_t parts[4];
    if (workspace_parts(p->B * p->H, p->T, p->K, p->V, s->precise, parts))
        return -1;
    *bytes = parts[0] + parts[1] + parts[2] + parts[3];
    if (*bytes < parts[1] || *bytes < parts[2] || *bytes < parts[3])
        return gdn_set_error("the workspace of %zu x %zu tokens overflows size_t", p->B * p->H, p->T);
    return 0;
}

static void warp_specialized_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    s->chunk = CHUNK; /* fixed here; stage 05's flop count reads it */
}

extern "C" const gdn_stage warp_specialized_stage = {
    .name = "06_warp_specialized",
    .idea = "stage 05 on tensor cores: bf16 inputs, mma.sync products, fp32 sums and state",
    .options = GDN_OPTION_PRECISE,
    .forward = NULL,
    .counted_flops = wy_chunked_flops,
    .resolve_options = warp_specialized_resolve_options,
    .device_forward = warp_specialized_forward,
    .device_workspace_bytes = warp_specialized_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 1,
};

#endif /* WARP_SPECIALIZED_KERNELS_ONLY */
