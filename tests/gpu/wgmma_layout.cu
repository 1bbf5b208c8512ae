/* wgmma_layout.cu -- do common/wgmma.cuh's swizzled layout, descriptors and products agree
 * with the hardware? One warpgroup on the GPU, checked against the CPU: the assumptions 06's
 * output warps and chain rest on (docs/06, output warps and wgmma), tested
 * on their own, so that a wrong descriptor field is named by this test and not only seen as a
 * wrong o.
 *
 * 1. The TMA unit's 128-byte swizzle: a 64 x 128 bf16 tile brought by a tensor map with
 *    CU_TENSOR_MAP_SWIZZLE_128B (two boxes of 64 columns) must land where swizzled_offset says.
 * 2. The products: A (64 x 128) and B (64 x 128), each written into a swizzled tile by the
 *    threads at swizzled_offset; D = A B^T by eight wgmma m64n64k16 (descriptors 32 bytes apart
 *    within a panel, a panel apart past 64 columns), and the right half of D again by m64n32k16
 *    from B's rows 32 .. 63 (a descriptor 32 rows in: 4096 bytes): both against the CPU's
 *    product of the same bf16 values, in double.
 *
 * 3. A from registers (the chain's operands: its own sums, packed to bf16): c - a b^T by eight
 *    m64n64k16 with A scaled by -1 onto accumulators that start as c (B K-major, b's tile:
 *    a form of the chain's product for Vnew^T; the merged chain takes this A from its staging tile
 *    by wgmma_64x64x16<-1>, the same instruction field, so this case checks its -1 and the
 *    A fragments' layout from registers, which its update uses at m64n128k16);
 *    and a2 a (a2 64 x 64 from registers, a 64 x 128) by four m64n128k16 with B read
 *    N-major from the tensor map's tile of a (its rows the depth: swizzled_descriptor_n_major);
 *    the same with the descriptor's two offsets swapped is reported, not checked.
 *
 * wgmma_layout_check (C, for tests/gpu/test_tensor_core_stage.c) draws the inputs from `seed`,
 * runs it, and fills a wgmma_layout_result (wgmma_layout.h); -1 with gdn_last_error where a
 * CUDA call fails. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <math.h>

#include "../../common/bulk_copy.cuh"
#include "../../common/cuda_check.h"
#include "../../common/wgmma.cuh"
extern "C" {
#include "../../common/random.h"
#include "wgmma_layout.h"
}

typedef __nv_bfloat16 bf16;
enum { ROWS = 64, COLUMNS = 128, TILE = ROWS * COLUMNS };

/* this lane's A fragment of rows 16 warp .., depth 16 k .., of a row-major bf16 matrix in global
   memory (`columns` wide): the layout wgmma takes A in from registers */
__device__ static void a_fragment_from(uint32_t (&a)[4], const bf16 *matrix, int columns, int k)
{
    const int lane = threadIdx.x % 32, row = 16 * (threadIdx.x / 32) + lane / 4, column = 16 * k + 2 * (lane % 4);
    for (int r = 0; r < 4; r++) {
        const bf16 *at = matrix + (row + 8 * (r & 1)) * columns + column + 8 * (r >> 1);
        a[r] = *(const uint32_t *)at;
    }
}
/* d's tile as it lies in the accumulators, into a row-major matrix `columns` wide */
template <int N> __device__ static void store_accumulators(float *to, int columns, const float (&d)[N][4], int column0 = 0)
{
    const int lane = threadIdx.x % 32, row = 16 * (threadIdx.x / 32) + lane / 4;
    for (int j = 0; j < N; j++)
        for (int r = 0; r < 4; r++)
            to[(row + 8 * (r >> 1)) * columns + column0 + 8 * j + 2 * (lane % 4) + (r & 1)] = d[j][r];
}

__global__ void __launch_bounds__(128) layout_kernel(const bf16 *a, const bf16 *b, float *d64, float *d32, bf16 *landed,
                                                      const float *c, const bf16 *a2, float *d_k_major, float *d_n_major,
                                                      float *d_n_swapped, const __grid_constant__ CUtensorMap a_map)
{
    extern __shared__ unsigned char raw[];
    bf16 *const a_tile = (bf16 *)SHARED_AT_1024_BYTES(raw), *const b_tile = a_tile + TILE, *const tma_tile = b_tile + TILE;
    __shared__ uint64_t landed_barrier;
    const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
    for (int e = thread; e < TILE; e += 128) {
        const int row = e / COLUMNS, column = e % COLUMNS;
        a_tile[swizzled_offset(ROWS, row, column)] = a[e];
        b_tile[swizzled_offset(ROWS, row, column)] = b[e];
    }
    if (thread == 0) {
        barrier_init(&landed_barrier, 1);
        barrier_init_fence();
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* the threads' stores, for wgmma's reads */
    __syncthreads();
    if (thread == 0) {
        barrier_arrive_expecting(&landed_barrier, TILE * sizeof(bf16));
        for (int panel = 0; panel < 2; panel++)
            tensor_copy_3d(tma_tile + panel * ROWS * 64, &a_map, 64 * panel, 0, 0, &landed_barrier);
    }
    float d[8][4], half[4][4];
    wgmma_fence();
    for (int kk = 0; kk < COLUMNS / 16; kk++)
        wgmma_64x64x16(d, swizzled_descriptor(a_tile + swizzled_offset(ROWS, 0, 16 * kk)),
                       swizzled_descriptor(b_tile + swizzled_offset(ROWS, 0, 16 * kk)), kk > 0);
    wgmma_commit_and_wait();
    wgmma_fence();
    for (int kk = 0; kk < COLUMNS / 16; kk++)
        wgmma_64x32x16(half, swizzled_descriptor(a_tile + swizzled_offset(ROWS, 0, 16 * kk)),
                       swizzled_descriptor(b_tile + swizzled_offset(ROWS, 32, 16 * kk)), kk > 0);
    wgmma_commit_and_wait();
    for (int j = 0; j < 8; j++)
        for (int r = 0; r < 4; r++) {
            const int row = 16 * warp + g + (r >= 2 ? 8 : 0), column = 8 * j + 2 * t + (r & 1);
            d64[row * ROWS + column] = d[j][r];
            if (j < 4)
                d32[row * ROWS + 32 + column] = half[j][r];
        }
    /* A from registers, B K-major, A scaled by -1 onto a d that starts as c: c - a b^T */
    float from_c[8][4];
    for (int j = 0; j < 8; j++)
        for (int r = 0; r < 4; r++)
            from_c[j][r] = c[(16 * warp + g + 8 * (r >> 1)) * ROWS + 8 * j + 2 * t + (r & 1)];
    uint32_t fragments[8][4];
    for (int kk = 0; kk < COLUMNS / 16; kk++)
        a_fragment_from(fragments[kk], a, COLUMNS, kk);
    wgmma_fence();
    for (int kk = 0; kk < COLUMNS / 16; kk++)
        wgmma_64x64x16_a_in_registers<-1, false>(from_c, fragments[kk], swizzled_descriptor(b_tile + swizzled_offset(ROWS, 0, 16 * kk)), 1);
    wgmma_commit_and_wait();
    store_accumulators(d_k_major, ROWS, from_c);
    /* A (a2, 64 x 64) from registers, B N-major: the tensor map's tile of a read with its rows as
       the depth, a2 a (64 x 128); and the same with the two strides of the descriptor
       swapped, which the test reports (not checks), should the first be wrong */
    barrier_wait(&landed_barrier, 0);
    float wide[16][4];
    for (int swapped = 0; swapped < 2; swapped++) {
        wgmma_fence();
        for (int kk = 0; kk < ROWS / 16; kk++) {
            uint32_t fragment[4];
            a_fragment_from(fragment, a2, ROWS, kk);
            uint64_t descriptor = swizzled_descriptor_n_major(tma_tile + 16 * kk * 64, ROWS);
            if (swapped) /* leading offset <-> stride offset */
                descriptor = (descriptor & ~((0x3FFFull << 16) | (0x3FFFull << 32))) | ((descriptor >> 32 & 0x3FFF) << 16) |
                             ((descriptor >> 16 & 0x3FFF) << 32);
            wgmma_fence();
            wgmma_64x128x16_a_in_registers<1, true>(wide, fragment, descriptor, kk > 0);
        }
        wgmma_commit_and_wait();
        store_accumulators(swapped ? d_n_swapped : d_n_major, COLUMNS, wide);
    }
    for (int e = thread; e < TILE; e += 128)
        landed[e] = tma_tile[e]; /* as it lies in shared memory: the host finds each element */
}

/* what the kernel reads and writes, on the host */
struct layout_arrays {
    bf16 a[TILE], b[TILE], a2[ROWS * ROWS], landed[TILE];
    float c[ROWS * ROWS], d64[ROWS * ROWS], d32[ROWS * ROWS], d_k_major[ROWS * ROWS], d_n_major[TILE], d_n_swapped[TILE];
};
/* the device's copies, freed on every path out of wgmma_layout_run */
struct layout_buffers {
    bf16 *a = NULL, *b = NULL, *a2 = NULL, *landed = NULL;
    float *c = NULL, *d64 = NULL, *d32 = NULL, *d_k_major = NULL, *d_n_major = NULL, *d_n_swapped = NULL;
    ~layout_buffers()
    {
        cudaFree(a), cudaFree(b), cudaFree(a2), cudaFree(landed), cudaFree(c);
        cudaFree(d64), cudaFree(d32), cudaFree(d_k_major), cudaFree(d_n_major), cudaFree(d_n_swapped);
    }
};

/* x to the device (or, with no source, poisoned: what the kernel does not write reads as NaN) */
template <typename T> static int to_device(T **device, const T *host, size_t count)
{
    CUDA_CHECK(cudaMalloc(device, count * sizeof(T)));
    if (host)
        CUDA_CHECK(cudaMemcpy(*device, host, count * sizeof(T), cudaMemcpyHostToDevice));
    else
        CUDA_CHECK(cudaMemset(*device, 0xFF, count * sizeof(T)));
    return 0;
}
template <typename T> static int to_host(T *host, const T *device, size_t count)
{
    CUDA_CHECK(cudaMemcpy(host, device, count * sizeof(T), cudaMemcpyDeviceToHost));
    return 0;
}

/* the kernel on x's inputs; its outputs copied back into x */
static int wgmma_layout_run(layout_arrays *x)
{
    layout_buffers device;
    if (to_device(&device.a, x->a, TILE) || to_device(&device.b, x->b, TILE) || to_device(&device.a2, x->a2, ROWS * ROWS) ||
        to_device(&device.c, x->c, ROWS * ROWS) || to_device<bf16>(&device.landed, NULL, TILE) ||
        to_device<float>(&device.d64, NULL, ROWS * ROWS) || to_device<float>(&device.d32, NULL, ROWS * ROWS) ||
        to_device<float>(&device.d_k_major, NULL, ROWS * ROWS) || to_device<float>(&device.d_n_major, NULL, TILE) ||
        to_device<float>(&device.d_n_swapped, NULL, TILE))
        return -1;
    /* a as a 3-D tensor (columns, rows, 1), boxes of 64 columns x 64 rows, swizzled 128 bytes */
    PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    cudaDriverEntryPointQueryResult found;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &found));
    CUtensorMap a_map;
    const cuuint64_t sizes[3] = {COLUMNS, ROWS, 1}, strides[2] = {COLUMNS * sizeof(bf16), TILE * sizeof(bf16)};
    const cuuint32_t box[3] = {64, ROWS, 1}, steps[3] = {1, 1, 1};
    if (!encode || found != cudaDriverEntryPointSuccess ||
        encode(&a_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, device.a, sizes, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        return gdn_set_error("wgmma_layout_check: cuTensorMapEncodeTiled refused the 128-byte-swizzled map");
    const size_t shared = 1024 + 3 * TILE * sizeof(bf16); /* three tiles from a 1024-byte boundary */
    CUDA_LAUNCH_WITH_SHARED(layout_kernel, 1, 128, shared, device.a, device.b, device.d64, device.d32, device.landed, device.c, device.a2,
                            device.d_k_major, device.d_n_major, device.d_n_swapped, a_map);
    CUDA_CHECK(cudaDeviceSynchronize());
    return to_host(x->d64, device.d64, ROWS * ROWS) || to_host(x->d32, device.d32, ROWS * ROWS) || to_host(x->landed, device.landed, TILE) ||
                   to_host(x->d_k_major, device.d_k_major, ROWS * ROWS) || to_host(x->d_n_major, device.d_n_major, TILE) ||
                   to_host(x->d_n_swapped, device.d_n_swapped, TILE)
               ? -1
               : 0;
}

/* relative L2 error of `got` (rows x columns) against expected(row, column), in double */
template <typename F> static double relative_error(const float *got, int rows, int columns, int first_column, F expected)
{
    double error = 0, norm = 0;
    for (int row = 0; row < rows; row++)
        for (int column = first_column; column < columns; column++) {
            const double want = expected(row, column), delta = got[row * columns + column] - want;
            error += delta * delta, norm += want * want;
        }
    return sqrt(error / norm); /* NaN where any element is */
}

extern "C" int wgmma_layout_check(uint64_t seed, wgmma_layout_result *result)
{
    static layout_arrays x;
    const auto uniform = [&](uint64_t counter) { return (float)(2 * random_uniform(seed, STREAM_TEST, counter) - 1); };
    for (int e = 0; e < TILE; e++) { /* uniform in (-1, 1]: no zeros to hide a misplaced element */
        x.a[e] = __float2bfloat16(uniform(4 * e));
        x.b[e] = __float2bfloat16(uniform(4 * e + 1));
    }
    for (int e = 0; e < ROWS * ROWS; e++) {
        x.a2[e] = __float2bfloat16(uniform(4 * e + 2));
        x.c[e] = uniform(4 * e + 3);
    }
    if (wgmma_layout_run(&x))
        return -1;
    const auto value = [](bf16 v) { return (double)__bfloat162float(v); };
    result->misplaced = 0;
    for (int row = 0; row < ROWS; row++)
        for (int column = 0; column < COLUMNS; column++) /* NaN compares unequal: a poisoned place counts */
            result->misplaced += !(value(x.landed[swizzled_offset(ROWS, row, column)]) == value(x.a[row * COLUMNS + column]));
    const auto a_b = [&](int row, int column) { /* (a b^T)[row][column] */
        double sum = 0;
        for (int k = 0; k < COLUMNS; k++)
            sum += value(x.a[row * COLUMNS + k]) * value(x.b[column * COLUMNS + k]);
        return sum;
    };
    const auto a2_a = [&](int row, int column) { /* (a2 a)[row][column] */
        double sum = 0;
        for (int k = 0; k < ROWS; k++)
            sum += value(x.a2[row * ROWS + k]) * value(x.a[k * COLUMNS + column]);
        return sum;
    };
    result->error_64 = relative_error(x.d64, ROWS, ROWS, 0, a_b);
    result->error_32 = relative_error(x.d32, ROWS, ROWS, 32, a_b);
    result->error_k_major = relative_error(x.d_k_major, ROWS, ROWS, 0, [&](int row, int column) { return x.c[row * ROWS + column] - a_b(row, column); });
    result->error_n_major = relative_error(x.d_n_major, ROWS, COLUMNS, 0, a2_a);
    result->error_n_swapped = relative_error(x.d_n_swapped, ROWS, COLUMNS, 0, a2_a);
    return 0;
}
