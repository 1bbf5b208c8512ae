/* wgmma.cuh -- warpgroup matrix products (wgmma, sm_90a) from 128-byte-swizzled shared-memory
 * tiles: the layout, the operand descriptors and the instructions, for 06's output warps (and
 * tests/gpu/wgmma_layout.cu, which checks them on a GPU against a CPU product).
 *
 * A tile of ROWS rows x 128 bf16 columns in wgmma's K-major layout with the 128-byte swizzle
 * (the TMA unit's CU_TENSOR_MAP_SWIZZLE_128B): two panels of 64 columns, ROWS x 128 bytes
 * each. In a panel row r is 128 bytes, and its 16-byte piece c sits at piece c ^ (r % 8):
 * eight rows' same piece fall in eight different banks, with no padding. The swizzle is of
 * the address bits, so a tile starts on a 1024-byte boundary. PTX ISA: "wgmma", "Matrix
 * Descriptor Format", "Shared Memory Matrix Layout".
 */
#ifndef GDN_WGMMA_CUH
#define GDN_WGMMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "bulk_copy.cuh" /* shared_address */

/* wgmma is sm_90a's: nvcc -arch=sm_90a also compiles a compute_90 PTX, which gets none of it */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
constexpr bool HAVE_WGMMA = true;
#else
constexpr bool HAVE_WGMMA = false;
#endif

/* the offset in bf16 of (row, column) in such a tile */
__host__ __device__ constexpr int swizzled_offset(int rows, int row, int column)
{
    /* in unsigned bit operations: signed divisions were hoisted out of the loops as invariants
       and held in registers, and the output warps spilled */
    const unsigned r = (unsigned)row, c = (unsigned)column;
    return (int)((c >> 6) * (unsigned)rows * 64 + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7));
}
/* The shared-memory address (bytes) of (row, column) in such a tile at `tile`, for st.shared and
 * ld.shared. The swizzle XORs address bits 4-6 (the 16-byte piece) with the row's bits 0-2, and
 * rows and panels are whole multiples of 128 bytes from a 1024-byte boundary, so the same row's
 * piece c ^ x lies at this address ^ (x << 4): a loop over a row's pieces takes one XOR a
 * store, where the whole offset, made again for each (as 64-bit generic addresses), cost the
 * output warps most of their instructions. */
__device__ __forceinline__ static uint32_t swizzled_address(const __nv_bfloat16 *tile, int rows, int row, int column)
{
    return shared_address(tile) + 2u * (uint32_t)swizzled_offset(rows, row, column);
}
__device__ __forceinline__ static void store_shared(uint32_t address, uint32_t value)
{
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(address), "r"(value) : "memory");
}
__device__ __forceinline__ static uint4 load_shared_16(uint32_t address)
{
    uint4 value;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w) : "r"(address) : "memory");
    return value;
}

/* wgmma's shared-memory matrix descriptor of such a tile from `at` (a panel's start, or 16
 * columns further for the next k step: 32 bytes into the swizzled rows; PTX ISA, "Matrix
 * Descriptor Format"): start address / 16 in bits 0-13, the leading offset (unused with this
 * swizzle: 1) in 16-29, the stride between 8-row groups (1024 bytes) / 16 in 32-45, the
 * swizzle (1: 128 bytes) in 62-63 */
__device__ __forceinline__ static uint64_t swizzled_descriptor(const __nv_bfloat16 *at)
{
    return (uint64_t)((shared_address(at) & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}
/* The same tile read N-major, as the B of a product whose depth runs along the tile's rows:
 * B (depth x N) = tile^T, the tile's ROWS rows the depth and its 128 columns N (the k tile, 64
 * tokens x 128 keys, as the B of S^T += A K: depth the tokens, N the keys). PTX ISA, "Major-ness
 * supported by strides", MN-major with the 128-byte swizzle, canonical layout ((8, 8, m), (8,
 * k)) : ((1, 8, LBO), (64, SBO)) in elements: 64 N-elements (one panel's row) contiguous, the
 * next 64 a panel further (the leading offset: ROWS x 128 bytes), the 8 rows of an atom 128
 * bytes apart, the next 8 rows 1024 bytes further (the stride offset). `at`: row 16 k of panel
 * 0 for the k-th depth step. */
__device__ __forceinline__ static uint64_t swizzled_descriptor_n_major(const __nv_bfloat16 *at, int rows)
{
    return (uint64_t)((shared_address(at) & 0x3FFFF) >> 4) | (uint64_t)((rows * 128) >> 4) << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}
/* the descriptor of `at`, made where the product that takes it is issued: ptxas otherwise makes
   every descriptor of a run of products first, two registers each, and the output warps spilled */
__device__ __forceinline__ static uint64_t descriptor_here(const __nv_bfloat16 *at)
{
    uint64_t descriptor = swizzled_descriptor(at);
    asm volatile("" : "+l"(descriptor));
    return descriptor;
}
/* x, which the compiler may not carry from one loop step to the next: the swizzled addresses of a
   thread's stores are loop invariants, and hoisted out of the chunk loop, one register each, they
   made the output warps spill */
__device__ __forceinline__ static int made_here(int x)
{
    asm volatile("" : "+r"(x));
    return x;
}
__device__ __forceinline__ static const __nv_bfloat16 *made_here(const __nv_bfloat16 *x)
{
    asm volatile("" : "+l"(x));
    return x;
}
__device__ __forceinline__ static uint64_t descriptor_n_major_here(const __nv_bfloat16 *at, int rows)
{
    uint64_t descriptor = swizzled_descriptor_n_major(at, rows);
    asm volatile("" : "+l"(descriptor));
    return descriptor;
}
__device__ __forceinline__ static void wgmma_fence(void)
{
    if constexpr (HAVE_WGMMA)
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
/* d's registers as they are here: what wrote them last (a scaling between two runs of products)
   may not move past the wgmma_fence that follows, where it would be a write to wgmma's
   accumulators in flight, and ptxas injects a fence of its own (info C7519) */
template <int N> __device__ __forceinline__ static void wgmma_fence_operands(float (&d)[N][4])
{
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            asm volatile("" : "+f"(d[j][r])::"memory");
}
/* the warpgroup's products issued so far are done (their shared-memory reads too) */
__device__ __forceinline__ static void wgmma_commit_and_wait(void)
{
    if constexpr (HAVE_WGMMA)
        asm volatile("wgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;" ::: "memory");
}
/* d (+)= A B, 64 x N, depth 16, one warpgroup: A (64 x 16) and B^T (N x 16) in swizzled tiles,
 * by descriptors. d is [n-tile][4]: each warp's 16 rows as mma.sync's accumulators
 * (fragment_row, fragment_column) */
template <int SCALE_A = 1> /* 1 or -1: d -= A B */
__device__ __forceinline__ static void wgmma_64x64x16(float (&d)[8][4], uint64_t a, uint64_t b, int accumulate)
{
    static_assert(SCALE_A == 1 || SCALE_A == -1, "wgmma scales A by 1 or -1");
    if constexpr (HAVE_WGMMA)
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                     "}, %32, %33, p, %35, 1, 0, 0;\n}"
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                       "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                       "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                       "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                     : "l"(a), "l"(b), "r"(accumulate), "n"(SCALE_A));
}
__device__ __forceinline__ static void wgmma_64x32x16(float (&d)[4][4], uint64_t a, uint64_t b, int accumulate)
{
    if constexpr (HAVE_WGMMA)
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %18, 0;\n\t"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
                     "}, %16, %17, p, 1, 1, 0, 0;\n}"
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                       "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                     : "l"(a), "l"(b), "r"(accumulate));
}

/* A in registers: the m16n8k16 A fragment of each warp's 16 rows (fragment_row, columns 2t,
 * 2t + 1, 2t + 8, 2t + 9 of the 16-deep step, bf16 pairs), which is also how a D tile's two
 * neighbouring n-tiles lie (d[2k], d[2k + 1] of a product 16 k .. 16 k + 15 deep): a product's
 * sums feed the next product's A without leaving the registers (pack them to bf16 pairs).
 * SCALE_A: 1 or -1 (d -= A B). B by descriptor: K-major (swizzled_descriptor) unless
 * N_MAJOR (swizzled_descriptor_n_major). d (+)= A B, 64 x 64, depth 16: the chain's Vnew^T =
 * Z^T + Z^T lower(Tm)^T (06, chain_states_role); the 64 x 128 form below is its update. */
template <int SCALE_A, bool N_MAJOR>
__device__ __forceinline__ static void wgmma_64x64x16_a_in_registers(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, int accumulate)
{
    static_assert(SCALE_A == 1 || SCALE_A == -1, "wgmma scales A by 1 or -1");
    if constexpr (HAVE_WGMMA)
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                     "}, {%32, %33, %34, %35}, %36, p, %38, 1, %39;\n}"
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                       "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                       "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                       "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(SCALE_A), "n"(N_MAJOR ? 1 : 0));
}
/* the same, 64 x 128 */
template <int SCALE_A, bool N_MAJOR>
__device__ __forceinline__ static void wgmma_64x128x16_a_in_registers(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b, int accumulate)
{
    static_assert(SCALE_A == 1 || SCALE_A == -1, "wgmma scales A by 1 or -1");
    if constexpr (HAVE_WGMMA)
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                     "}, {%64, %65, %66, %67}, %68, p, %70, 1, %71;\n}"
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                       "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                       "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                       "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
                       "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
                       "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                       "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
                       "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(SCALE_A), "n"(N_MAJOR ? 1 : 0));
}

#endif /* GDN_WGMMA_CUH */
