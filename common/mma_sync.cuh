/* mma_sync.cuh -- a warp's tensor-core instructions (sm_80 on), written out: ldmatrix, which
 * loads MMA fragments from shared memory, and mma.sync in its bf16 (m16n8k16) and tf32
 * (m16n8k8) shapes, with fp32 sums. Used by stage 06's kernels (and so by 07's and 08's).
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
