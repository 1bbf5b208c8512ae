/* gpu_peak.cu -- the rates the GPU stages are measured against (docs/06, "Against the
 * roofline"): how fast this GPU copies memory, and how many bf16 flops a second its tensor
 * cores give through mma.sync, the instruction most of stage 06 uses, and through wgmma.
 *
 * Copy: a kernel reads one buffer and writes another, 16 bytes a thread a step (grid-stride
 * loop, 8 blocks of 256 threads an SM), both buffers far larger than the L2 cache; the bytes
 * counted are those read plus those written. cudaMemcpy device to device is timed the same
 * way, for comparison. The copy is checked value for value once.
 * Tensor cores: every warp runs 8 independent accumulators through mma.sync.m16n8k16 bf16 ->
 * fp32 (8 products in flight hide the instruction's latency), its operands in registers, no
 * memory touched; 2 x 16 x 8 x 16 flops an instruction. With every operand 1, each product
 * adds 16 to each sum, so the sums are checked exactly (16 x steps stays below 2^24).
 * Tensor cores by wgmma, Hopper's warpgroup instruction (06's output warps and the peers' kernels
 * use it): each of a block's two warpgroups runs WGMMA_CHAINS independent 64 x 128 sums through
 * wgmma.m64n128k16, A (ones) in registers and B (ones) from a 128-row tile in shared memory,
 * every product of a step issued before one wait; 2 x 64 x 128 x 16 flops an instruction,
 * checked as the mma.sync sums are. The roofline takes the faster of the two rates: a kernel
 * that outruns mma.sync is not above the card's roof.
 * Times: CUDA events, the median of --reps runs after 3 warm-up runs.
 *
 * Build and run:  make bin/gpu_peak && bin/gpu_peak [--copy-mib 1024] [--reps 20]
 * Prints one line: result tool=gpu_peak copy_gbs=... memcpy_gbs=... mma_bf16_tflops=... wgmma_bf16_tflops=...
 * Where there is no GPU it stops with one line.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cuda_check.h"
#include "../common/device.h"
#include "../common/error.h"
#include "../common/stage.h"
#include "../common/wgmma.cuh" /* the descriptors and wgmma.m64n128k16 with A in registers */
extern "C" {
#include "../common/timing.h"
}

constexpr int COPY_THREADS = 256, MMA_THREADS = 256, CHAINS = 8, WARMUP = 3;
/* a step: WGMMA_DEPTH products into each of WGMMA_CHAINS sums, then one wait; WGMMA_SUMS: a
   thread's registers of one 64 x 128 sum */
constexpr int WGMMA_THREADS = 256, WGMMA_CHAINS = 2, WGMMA_DEPTH = 4, WGMMA_SUMS = 16 * 4;

__global__ void copy_kernel(const uint4 *from, uint4 *to, size_t pieces)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < pieces; i += (size_t)gridDim.x * blockDim.x)
        to[i] = from[i];
}

/* piece i holds (i, i + 1, i + 2, i + 3): no two pieces alike, so a misplaced piece shows */
__global__ void fill_kernel(uint4 *buffer, size_t pieces)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < pieces; i += (size_t)gridDim.x * blockDim.x)
        buffer[i] = make_uint4((unsigned)i, (unsigned)i + 1, (unsigned)i + 2, (unsigned)i + 3);
}
__global__ void count_wrong_kernel(const uint4 *buffer, size_t pieces, unsigned long long *wrong)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < pieces; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 x = buffer[i];
        if (x.x != (unsigned)i || x.y != (unsigned)i + 1 || x.z != (unsigned)i + 2 || x.w != (unsigned)i + 3)
            atomicAdd(wrong, 1ull);
    }
}

/* CHAINS independent 16 x 8 sums per warp, `steps` products each; every lane writes its sums,
 * so the compiler keeps every product */
__global__ void mma_kernel(int steps, float *sums)
{
    const __nv_bfloat162 one_pair = __floats2bfloat162_rn(1.0f, 1.0f);
    const uint32_t one = *(const uint32_t *)&one_pair;
    uint32_t a[4] = {one, one, one, one}, b[2] = {one, one};
    float d[CHAINS][4] = {};
    for (int step = 0; step < steps; step++)
#pragma unroll
        for (int c = 0; c < CHAINS; c++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                         "{%0, %1, %2, %3};\n"
                         : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    float *mine = sums + ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * CHAINS * 4;
#pragma unroll
    for (int c = 0; c < CHAINS; c++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            mine[4 * c + r] = d[c][r];
}

/* WGMMA_CHAINS independent 64 x 128 sums a warpgroup, WGMMA_DEPTH x `steps` products each, as a
 * matrix product's main loop issues its k steps: depth 16 each. B is
 * rows of ones in a 1024-byte-aligned tile (any rows give the same ones, so the swizzle does
 * not matter here), made visible to wgmma's reads (the async proxy) before the first. Every
 * lane writes its sums, so the compiler keeps every product. */
__global__ void __launch_bounds__(WGMMA_THREADS, 1) wgmma_kernel(int steps, float *sums)
{
    __shared__ __align__(1024) __nv_bfloat16 ones[128 * 64];
    for (int i = threadIdx.x; i < 128 * 64; i += blockDim.x)
        ones[i] = __float2bfloat16_rn(1.0f);
    fence_shared_for_bulk_store(); /* the threads' writes, for the async proxy's reads */
    __syncthreads();
    const __nv_bfloat162 one_pair = __floats2bfloat162_rn(1.0f, 1.0f);
    const uint32_t one = *(const uint32_t *)&one_pair;
    const uint32_t a[4] = {one, one, one, one};
    const uint64_t b = swizzled_descriptor(ones);
    float d[WGMMA_CHAINS][16][4] = {};
    for (int step = 0; step < steps; step++) {
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < WGMMA_DEPTH; k++)
#pragma unroll
            for (int c = 0; c < WGMMA_CHAINS; c++)
                wgmma_64x128x16_a_in_registers<1, false>(d[c], a, b, 1);
        wgmma_commit_and_wait();
    }
    float *mine = sums + ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * WGMMA_CHAINS * WGMMA_SUMS;
#pragma unroll
    for (int c = 0; c < WGMMA_CHAINS; c++)
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                mine[c * WGMMA_SUMS + 4 * j + r] = d[c][j][r];
}

/* whether this build's code for the GPU has wgmma (common/wgmma.cuh, HAVE_WGMMA) */
__global__ void wgmma_compiled_kernel(int *has_wgmma) { *has_wgmma = HAVE_WGMMA; }

typedef enum { COPY_BY_KERNEL, COPY_BY_MEMCPY, MMA, WGMMA } measure_kind;

typedef struct {
    measure_kind kind;
    const uint4 *from;
    uint4 *to;
    size_t pieces;
    unsigned copy_blocks, mma_blocks, wgmma_blocks;
    int steps, wgmma_steps;
    float *sums, *wgmma_sums;
} measure;

static int run_once(const measure *m)
{
    switch (m->kind) {
    case COPY_BY_KERNEL:
        copy_kernel<<<m->copy_blocks, COPY_THREADS>>>(m->from, m->to, m->pieces);
        CUDA_CHECK_LAUNCH("copy_kernel");
        break;
    case COPY_BY_MEMCPY:
        CUDA_CHECK(cudaMemcpyAsync(m->to, m->from, m->pieces * sizeof(uint4), cudaMemcpyDeviceToDevice));
        break;
    case MMA:
        mma_kernel<<<m->mma_blocks, MMA_THREADS>>>(m->steps, m->sums);
        CUDA_CHECK_LAUNCH("mma_kernel");
        break;
    case WGMMA:
        wgmma_kernel<<<m->wgmma_blocks, WGMMA_THREADS>>>(m->wgmma_steps, m->wgmma_sums);
        CUDA_CHECK_LAUNCH("wgmma_kernel");
        break;
    }
    return 0;
}

/* median milliseconds of reps runs after WARMUP */
static int time_median(const measure *m, int reps, double *median_ms)
{
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    double *times = (double *)malloc(reps * sizeof(double));
    if (!times)
        return gdn_set_error("gpu_peak: out of host memory");
    int status = 0;
    for (int i = 0; i < WARMUP + reps && status == 0; i++) {
        float ms = 0.0f;
        if (cudaEventRecord(start) != cudaSuccess)
            status = gdn_set_error("gpu_peak: cudaEventRecord: %s", cudaGetErrorString(cudaGetLastError()));
        else if (run_once(m)) /* the reason is set */
            status = -1;
        else if (cudaEventRecord(stop) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
                 cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
            status = gdn_set_error("gpu_peak: timing a run: %s", cudaGetErrorString(cudaGetLastError()));
        if (i >= WARMUP)
            times[i - WARMUP] = ms;
    }
    if (status == 0)
        *median_ms = gdn_median(times, (size_t)reps);
    free(times);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return status;
}

/* every one of `count` sums on the device equals `expected` */
static int check_sums(const float *device_sums, size_t count, float expected, const char *instruction)
{
    float *host = (float *)malloc(count * sizeof(float));
    if (!host)
        return gdn_set_error("gpu_peak: out of host memory");
    if (cudaMemcpy(host, device_sums, count * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(host);
        return gdn_set_error("gpu_peak: reading the %s sums back: %s", instruction, cudaGetErrorString(cudaGetLastError()));
    }
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += host[i] != expected;
    free(host);
    return wrong ? gdn_set_error("gpu_peak: %zu of %zu %s sums differ from %.0f", wrong, count, instruction, (double)expected) : 0;
}

static int gpu_peak(long copy_mib, long reps)
{
    if (!gdn_cuda_device_present())
        return -1;
    const int sms = gdn_sm_count();
    measure m = {};
    m.pieces = (size_t)copy_mib * 1024 * 1024 / sizeof(uint4);
    m.copy_blocks = (unsigned)(8 * sms);
    m.mma_blocks = (unsigned)(4 * sms); /* 32 warps an SM */
    m.wgmma_blocks = (unsigned)(2 * sms);
    m.steps = 16384;
    m.wgmma_steps = m.steps / WGMMA_DEPTH; /* as many products a sum as mma.sync's */
    unsigned long long *wrong = NULL;
    uint4 *from = NULL, *to = NULL;
    CUDA_CHECK(cudaMalloc(&from, m.pieces * sizeof(uint4)));
    CUDA_CHECK(cudaMalloc(&to, m.pieces * sizeof(uint4)));
    CUDA_CHECK(cudaMalloc(&m.sums, (size_t)m.mma_blocks * MMA_THREADS * CHAINS * 4 * sizeof(float)));
    const size_t wgmma_sums = (size_t)m.wgmma_blocks * WGMMA_THREADS * WGMMA_CHAINS * WGMMA_SUMS;
    CUDA_CHECK(cudaMalloc(&m.wgmma_sums, wgmma_sums * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&wrong, sizeof *wrong));
    m.from = from;
    m.to = to;

    fill_kernel<<<m.copy_blocks, COPY_THREADS>>>(from, m.pieces);
    CUDA_CHECK_LAUNCH("fill_kernel");
    CUDA_CHECK(cudaMemset(to, 0xff, m.pieces * sizeof(uint4))); /* poisoned: a piece not copied shows */
    double copy_ms = 0, memcpy_ms = 0, mma_ms = 0, wgmma_ms = 0;
    m.kind = COPY_BY_KERNEL;
    if (run_once(&m))
        return -1;
    unsigned long long wrong_pieces = 0;
    CUDA_CHECK(cudaMemset(wrong, 0, sizeof *wrong));
    count_wrong_kernel<<<m.copy_blocks, COPY_THREADS>>>(to, m.pieces, wrong);
    CUDA_CHECK_LAUNCH("count_wrong_kernel");
    CUDA_CHECK(cudaMemcpy(&wrong_pieces, wrong, sizeof wrong_pieces, cudaMemcpyDeviceToHost));
    if (wrong_pieces)
        return gdn_set_error("gpu_peak: the copy kernel got %llu of %zu 16-byte pieces wrong", wrong_pieces, m.pieces);
    if (time_median(&m, (int)reps, &copy_ms))
        return -1;
    m.kind = COPY_BY_MEMCPY;
    if (time_median(&m, (int)reps, &memcpy_ms))
        return -1;
    m.kind = MMA;
    if (time_median(&m, (int)reps, &mma_ms))
        return -1;
    /* wgmma where this build has it (sm_90a's code on a Hopper GPU): else its rate is nan */
    int *has_wgmma = NULL, wgmma_here = 0;
    CUDA_CHECK(cudaMalloc(&has_wgmma, sizeof *has_wgmma));
    wgmma_compiled_kernel<<<1, 1>>>(has_wgmma);
    CUDA_CHECK_LAUNCH("wgmma_compiled_kernel");
    CUDA_CHECK(cudaMemcpy(&wgmma_here, has_wgmma, sizeof wgmma_here, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(has_wgmma));
    m.kind = WGMMA;
    if (wgmma_here && time_median(&m, (int)reps, &wgmma_ms))
        return -1;

    /* every sum of every lane is 16 x its products (ones times ones, depth 16) */
    if (check_sums(m.sums, (size_t)m.mma_blocks * MMA_THREADS * CHAINS * 4, 16.0f * (float)m.steps, "mma.sync") ||
        (wgmma_here && check_sums(m.wgmma_sums, wgmma_sums, 16.0f * WGMMA_DEPTH * (float)m.wgmma_steps, "wgmma")))
        return -1;
    CUDA_CHECK(cudaFree(from));
    CUDA_CHECK(cudaFree(to));
    CUDA_CHECK(cudaFree(m.sums));
    CUDA_CHECK(cudaFree(m.wgmma_sums));
    CUDA_CHECK(cudaFree(wrong));

    const double bytes = 2.0 * (double)m.pieces * sizeof(uint4); /* read and written */
    const double flops = 2.0 * 16 * 8 * 16 * CHAINS * (double)m.steps * (double)m.mma_blocks * (MMA_THREADS / 32);
    const double wgmma_flops = 2.0 * 64 * 128 * 16 * WGMMA_CHAINS * WGMMA_DEPTH * (double)m.wgmma_steps *
                               (double)m.wgmma_blocks * (WGMMA_THREADS / 128);
    printf("result tool=gpu_peak sms=%d copy_mib=%ld copy_gbs=%.1f memcpy_gbs=%.1f mma_bf16_tflops=%.1f wgmma_bf16_tflops=%.1f\n", sms,
           copy_mib, bytes / (copy_ms * 1e-3) * 1e-9, bytes / (memcpy_ms * 1e-3) * 1e-9, flops / (mma_ms * 1e-3) * 1e-12,
           wgmma_here ? wgmma_flops / (wgmma_ms * 1e-3) * 1e-12 : nan(""));
    return 0;
}

static const char usage[] =
    "gpu_peak: this GPU's copy rate and its bf16 tensor rates (mma.sync, wgmma), the roofs of the roofline\n"
    "\n"
    "usage: bin/gpu_peak [options]\n"
    "  --copy-mib N   size of each of the two copy buffers, MiB (default 1024)\n"
    "  --reps N       timed runs after 3 warm-up runs; the median is reported (default 20)\n"
    "  --help         this text\n"
    "\n"
    "prints one line: result tool=gpu_peak sms=... copy_mib=... copy_gbs=... memcpy_gbs=...\n"
    "mma_bf16_tflops=... wgmma_bf16_tflops=...\n";

int main(int argc, char **argv)
{
    static const char *const names[] = {"copy-mib", "reps", NULL};
    size_t values[2] = {1024, 20};
    for (int i = 1; i < argc; i++) /* before any CUDA call: --help needs no GPU */
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
    gdn_tool_options(argc, argv, "gpu_peak", names, values, (size_t)1 << 20); /* the tools' options (common/cli.c) */
    if (gpu_peak((long)values[0], (long)values[1])) {
        fprintf(stderr, "%s\n", gdn_last_error());
        return 1;
    }
    return 0;
}
