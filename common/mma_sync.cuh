/* mma_sync.cuh -- a warp's tensor-core instructions (sm_80 on), written out: ldmatrix, which
 * loads MMA fragments from shared memory, and mma.sync in its bf16 (m16n8k16) and tf32
 * (m16n8k8) shapes, with fp32 sums; the fragment loads built on them (an A fragment of a
 * tile or of its transpose, tf32 fragments from fp32 tiles) and movmatrix, which transposes
 * a lane's 8 x 8 pair in registers. Used by stage 06's kernels (and so by 07's and 08's).
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 g + t. A (16 x 16, row
 * major) gives each lane rows g and g + 8, columns 2t, 2t+1 and 2t+8, 2t+9, as four 32-bit
 * pairs; B (16 x 8) gives it column g, rows 2t, 2t+1 and 2t+8, 2t+9, as two pairs, so B is
 * kept transposed (N x K, K contiguous) in shared memory, or row major and loaded with
 * ldmatrix.trans; the sums D (16 x 8) sit at rows g and g + 8, columns 2t and 2t+1.
 */
#ifndef GDN_MMA_SYNC_CUH
#define GDN_MMA_SYNC_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "bulk_copy.cuh" /* shared_address */

/* Four 8 x 8 bf16 matrices from shared memory into fragments, one instruction (ldmatrix): lane
 * l gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned), and gets back,
 * in register m, the pair of row g, columns 2t, 2t + 1 of matrix m: the layout of an MMA
 * fragment, one instruction a warp where four 4-byte loads a lane would gather it. */
__device__ __forceinline__ static void load_matrices(uint32_t (&r)[4], const __nv_bfloat16 *row)
{
    const uint32_t address = shared_address(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

/* The same, transposed (ldmatrix.trans): lane l gets the pair (rows 2t, 2t + 1, column g) of
 * an 8 x 8 matrix stored by rows, which is a B fragment of a row-major B: no transposed copy. */
__device__ __forceinline__ static void load_matrices_transposed(uint32_t (&r)[4], const __nv_bfloat16 *row)
{
    const uint32_t address = shared_address(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

/* d += a b for one 16 x 8 tile, bf16 operands, fp32 sums. */
__device__ __forceinline__ static void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The tf32 shape, m16n8k8: fp32 operands as tf32 (10 mantissa bits), fp32 sums. Fragments: A
 * (16 x 8) gives lane 4 g + t rows g, g + 8 of columns t and t + 4, one value a register; B
 * (8 x 8) rows t and t + 4 of column g; D as in the bf16 shape. to_tf32 rounds to nearest
 * (cvt.rna), where the tensor cores would only drop the low 13 bits. */
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

/* The row this lane gives ldmatrix.x4 for the 16 x 16 block at (row0, col0) of a row-major
 * tile: matrices 0-3 are its quarters (rows +0, +8, +0, +8; columns +0, +0, +8, +8), which is
 * the order of an A fragment's registers, and, read with .trans, of two B fragments' (k rows
 * +0/+8 of n-tile j, then of n-tile j + 1). */
__device__ __forceinline__ static const __nv_bfloat16 *quarter_row(const __nv_bfloat16 *tile, int ld, int row0, int col0)
{
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    return tile + (row0 + lane % 8 + 8 * (quarter % 2)) * ld + col0 + 8 * (quarter / 2);
}

/* A fragment of a row-major bf16 tile at (row0, k0), by ldmatrix */
__device__ __forceinline__ static void load_a_fragment(uint32_t (&a)[4], const __nv_bfloat16 *tile, int ld, int row0, int k0)
{
    load_matrices(a, quarter_row(tile, ld, row0, k0));
}
/* The A fragment at (row0, k0) of the transpose of a row-major bf16 tile B (A[m][k] = B[k][m],
 * stride ld), by ldmatrix.trans: matrix q of the load is B's 8 x 8 block at rows k0 + 8 (q / 2),
 * columns row0 + 8 (q % 2), which transposed is the A quarter at rows + 8 (q % 2), depth + 8 (q
 * / 2): the order of an A fragment's registers */
__device__ __forceinline__ static void load_a_fragment_transposed(uint32_t (&a)[4], const __nv_bfloat16 *tile, int ld, int row0, int k0)
{
    const int lane = threadIdx.x % 32, quarter = lane / 8;
    load_matrices_transposed(a, tile + (k0 + lane % 8 + 8 * (quarter / 2)) * ld + row0 + 8 * (quarter % 2));
}

/* the 8 x 8 bf16 matrix whose row g, columns 2t, 2t + 1 this lane holds, transposed: the lane
 * gets row g, columns 2t, 2t + 1 of the transpose, that is column g, rows 2t, 2t + 1 */
__device__ __forceinline__ static uint32_t transpose8x8(uint32_t pair)
{
    uint32_t out;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(out) : "r"(pair));
    return out;
}

/* The sums of a warp's products: sum r of n-tile j of a 16-row block at (row0, col0) sits at
 * row row0 + g (+ 8 for r >= 2), column col0 + 8 j + 2 t (+ 1 for odd r); clear zeroes them. */
__device__ __forceinline__ static int fragment_row(int row0, int r) { return row0 + (threadIdx.x % 32) / 4 + (r >= 2 ? 8 : 0); }
__device__ __forceinline__ static int fragment_column(int col0, int j, int r) { return col0 + 8 * j + 2 * (threadIdx.x % 4) + (r & 1); }

template <int TILES>
__device__ __forceinline__ static void clear(float (&acc)[TILES][4])
{
#pragma unroll
    for (int j = 0; j < TILES; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

#endif
