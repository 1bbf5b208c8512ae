/* wgmma_layout_check.cu -- do common/wgmma.cuh's swizzled layout, descriptors and products agree
 * with the hardware? One warpgroup on a GPU, checked against the CPU, before 06's output warps
 * trust them (docs/06, the wgmma output warps).
 *
 * 1. The TMA unit's 128-byte swizzle: a 64 x 128 bf16 tile brought by a tensor map with
 *    CU_TENSOR_MAP_SWIZZLE_128B (two boxes of 64 columns) must land where swizzled_offset says.
 * 2. The products: A (64 x 128) and B (64 x 128), each written into a swizzled tile by the
 *    threads at swizzled_offset; D = A B^T by eight wgmma m64n64k16 (descriptors 32 bytes apart
 *    within a panel, a panel apart past 64 columns), and the right half of D again by m64n32k16
 *    from B's rows 32 .. 63 (a descriptor 32 rows in: 4096 bytes): both against the CPU's
 *    product of the same bf16 values, in double.
 *
 * Build and run (on an H100 or H200):
 *   nvcc -O2 -std=c++20 -arch=sm_90a -Icommon plots/wgmma_layout_check.cu -o /tmp/wgmma_layout_check && /tmp/wgmma_layout_check
 * Prints one line: wgmma_layout_check: tma_misplaced=N err_64=E err_32=E, and exits 1 unless
 * every element is where it should be and both relative errors are below 1e-5.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bulk_copy.cuh"
#include "wgmma.cuh"

typedef __nv_bfloat16 bf16;
enum { ROWS = 64, COLUMNS = 128, TILE = ROWS * COLUMNS };

#define CHECK(call)                                                                                                                        \
    do {                                                                                                                                   \
        cudaError_t e_ = (call);                                                                                                           \
        if (e_ != cudaSuccess) {                                                                                                           \
            fprintf(stderr, "wgmma_layout_check: %s: %s\n", #call, cudaGetErrorString(e_));                                             \
            exit(2);                                                                                                                       \
        }                                                                                                                                  \
    } while (0)

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

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("wgmma_layout_check: no CUDA device, nothing checked\n");
        return 0;
    }
    static bf16 a[TILE], b[TILE], landed[TILE];
    static float d64[ROWS * ROWS], d32[ROWS * ROWS];
    srand(7);
    for (int e = 0; e < TILE; e++) {
        a[e] = __float2bfloat16((float)rand() / RAND_MAX - 0.5f);
        b[e] = __float2bfloat16((float)rand() / RAND_MAX - 0.5f);
    }
    bf16 *a_device, *b_device, *landed_device;
    float *d64_device, *d32_device;
    CHECK(cudaMalloc(&a_device, sizeof a));
    CHECK(cudaMalloc(&b_device, sizeof b));
    CHECK(cudaMalloc(&landed_device, sizeof landed));
    CHECK(cudaMalloc(&d64_device, sizeof d64));
    CHECK(cudaMalloc(&d32_device, sizeof d32));
    CHECK(cudaMemcpy(a_device, a, sizeof a, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b_device, b, sizeof b, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d32_device, 0, sizeof d32));
    /* a as a 3-D tensor (columns, rows, 1), boxes of 64 columns x 64 rows, swizzled 128 bytes */
    PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &found));
    CUtensorMap a_map;
    const cuuint64_t sizes[3] = {COLUMNS, ROWS, 1}, strides[2] = {COLUMNS * sizeof(bf16), TILE * sizeof(bf16)};
    const cuuint32_t box[3] = {64, ROWS, 1}, steps[3] = {1, 1, 1};
    if (!encode || encode(&a_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, a_device, sizes, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        fprintf(stderr, "wgmma_layout_check: no tensor map\n");
        return 2;
    }
    const size_t shared = 1024 + 3 * TILE * sizeof(bf16);
    CHECK(cudaFuncSetAttribute(layout_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    layout_kernel<<<1, 128, shared>>>(a_device, b_device, d64_device, d32_device, landed_device, a_map);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(d64, d64_device, sizeof d64, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(d32, d32_device, sizeof d32, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(landed, landed_device, sizeof landed, cudaMemcpyDeviceToHost));
    int misplaced = 0;
    for (int row = 0; row < ROWS; row++)
        for (int column = 0; column < COLUMNS; column++)
            misplaced += __bfloat162float(landed[swizzled_offset(ROWS, row, column)]) != __bfloat162float(a[row * COLUMNS + column]);
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
    error64 = sqrt(error64 / norm), error32 = sqrt(error32 / norm32);
    printf("wgmma_layout_check: tma_misplaced=%d err_64=%.3e err_32=%.3e\n", misplaced, error64, error32);
    return misplaced == 0 && error64 < 1e-5 && error32 < 1e-5 ? 0 : 1; /* NaN fails */
}
