/* wgmma_layout.cu -- do common/wgmma.cuh's swizzled layout, descriptors and products agree
 * with the hardware? One warpgroup on the GPU, checked against the CPU: the assumptions 06's
 * output warps rest on (docs/06, the twenty-third step), tested on their own, so that a wrong
 * descriptor field is named by this test and not only seen as a wrong o.
 *
 * 1. The TMA unit's 128-byte swizzle: a 64 x 128 bf16 tile brought by a tensor map with
 *    CU_TENSOR_MAP_SWIZZLE_128B (two boxes of 64 columns) must land where swizzled_offset says.
 * 2. The products: A (64 x 128) and B (64 x 128), each written into a swizzled tile by the
 *    threads at swizzled_offset; D = A B^T by eight wgmma m64n64k16 (descriptors 32 bytes apart
 *    within a panel, a panel apart past 64 columns), and the right half of D again by m64n32k16
 *    from B's rows 32 .. 63 (a descriptor 32 rows in: 4096 bytes): both against the CPU's
 *    product of the same bf16 values, in double.
 *
 * wgmma_layout_check (C, for tests/gpu/test_tensor_core_stage.c) draws A and B from `seed`,
 * runs it, and returns the misplaced count and both relative errors; -1 with gdn_last_error
 * where a CUDA call fails. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <math.h>

#include "../../common/bulk_copy.cuh"
#include "../../common/cuda_check.h"
#include "../../common/wgmma.cuh"
extern "C" {
#include "../../common/random.h"
}

typedef __nv_bfloat16 bf16;
enum { ROWS = 64, COLUMNS = 128, TILE = ROWS * COLUMNS };

__global__ void __launch_bounds__(128) layout_kernel(const bf16 *a, const bf16 *b, float *d64, float *d32, bf16 *landed,
                                                      const __grid_constant__ CUtensorMap a_map)
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
    barrier_wait(&landed_barrier, 0);
    for (int e = thread; e < TILE; e += 128)
        landed[e] = tma_tile[e]; /* as it lies in shared memory: the host finds each element */
}

/* the device buffers, freed on every path out of wgmma_layout_run */
struct layout_buffers {
    bf16 *a = NULL, *b = NULL, *landed = NULL;
    float *d64 = NULL, *d32 = NULL;
    ~layout_buffers() { cudaFree(a), cudaFree(b), cudaFree(landed), cudaFree(d64), cudaFree(d32); }
};

/* the kernel on a and b; d64, d32 and landed copied back */
static int wgmma_layout_run(const bf16 *a, const bf16 *b, float *d64, float *d32, bf16 *landed)
{
    layout_buffers device;
    const size_t tile_bytes = TILE * sizeof(bf16), product_bytes = ROWS * ROWS * sizeof(float);
    CUDA_CHECK(cudaMalloc(&device.a, tile_bytes));
    CUDA_CHECK(cudaMalloc(&device.b, tile_bytes));
    CUDA_CHECK(cudaMalloc(&device.landed, tile_bytes));
    CUDA_CHECK(cudaMalloc(&device.d64, product_bytes));
    CUDA_CHECK(cudaMalloc(&device.d32, product_bytes));
    CUDA_CHECK(cudaMemcpy(device.a, a, tile_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(device.b, b, tile_bytes, cudaMemcpyHostToDevice));
    /* poisoned: a product or an element the kernel does not write reads as NaN */
    CUDA_CHECK(cudaMemset(device.d64, 0xFF, product_bytes));
    CUDA_CHECK(cudaMemset(device.d32, 0xFF, product_bytes));
    CUDA_CHECK(cudaMemset(device.landed, 0xFF, tile_bytes));
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
    const size_t shared = 1024 + 3 * tile_bytes; /* three tiles from a 1024-byte boundary */
    CUDA_LAUNCH_WITH_SHARED(layout_kernel, 1, 128, shared, device.a, device.b, device.d64, device.d32, device.landed, a_map);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(d64, device.d64, product_bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(d32, device.d32, product_bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(landed, device.landed, tile_bytes, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int wgmma_layout_check(uint64_t seed, int *misplaced, double *error_64, double *error_32)
{
    static bf16 a[TILE], b[TILE], landed[TILE];
    static float d64[ROWS * ROWS], d32[ROWS * ROWS];
    for (int e = 0; e < TILE; e++) { /* uniform in (-1, 1]: no zeros to hide a misplaced element */
        a[e] = __float2bfloat16((float)(2 * random_uniform(seed, STREAM_TEST, 2 * e) - 1));
        b[e] = __float2bfloat16((float)(2 * random_uniform(seed, STREAM_TEST, 2 * e + 1) - 1));
    }
    if (wgmma_layout_run(a, b, d64, d32, landed))
        return -1;
    *misplaced = 0;
    for (int row = 0; row < ROWS; row++)
        for (int column = 0; column < COLUMNS; column++) /* NaN compares unequal: a poisoned place counts */
            *misplaced += !(__bfloat162float(landed[swizzled_offset(ROWS, row, column)]) == __bfloat162float(a[row * COLUMNS + column]));
    double error64 = 0, error32 = 0, norm = 0, norm32 = 0;
    for (int row = 0; row < ROWS; row++)
        for (int column = 0; column < ROWS; column++) {
            double sum = 0;
            for (int k = 0; k < COLUMNS; k++)
                sum += (double)__bfloat162float(a[row * COLUMNS + k]) * __bfloat162float(b[column * COLUMNS + k]);
            error64 += (d64[row * ROWS + column] - sum) * (d64[row * ROWS + column] - sum), norm += sum * sum;
            if (column >= 32)
                error32 += (d32[row * ROWS + column] - sum) * (d32[row * ROWS + column] - sum), norm32 += sum * sum;
        }
    *error_64 = sqrt(error64 / norm), *error_32 = sqrt(error32 / norm32); /* NaN where any product is */
    return 0;
}
