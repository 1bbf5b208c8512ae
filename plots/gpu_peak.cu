/* gpu_peak.cu -- the two rates the GPU stages are measured against (docs/06, "Against the
 * roofline"): how fast this GPU copies memory, and how many bf16 flops a second its tensor
 * cores give through mma.sync, the instruction stage 06 uses.
 *
 * Copy: a kernel reads one buffer and writes another, 16 bytes a thread a step (grid-stride
 * loop, 8 blocks of 256 threads an SM), both buffers far larger than the L2 cache; the bytes
 * counted are those read plus those written. cudaMemcpy device to device is timed the same
 * way, for comparison. The copy is checked value for value once.
 * Tensor cores: every warp runs 8 independent accumulators through mma.sync.m16n8k16 bf16 ->
 * fp32 (8 products in flight hide the instruction's latency), its operands in registers, no
 * memory touched; 2 x 16 x 8 x 16 flops an instruction. With every operand 1, each product
 * adds 16 to each sum, so the sums are checked exactly (16 x steps stays below 2^24).
 * mma.sync is not the H200's fastest path: wgmma (which 06 does not use) reaches the data
 * sheet's 989 TFLOP/s; this is the rate stage 06's own instruction can reach.
 * Times: CUDA events, the median of --reps runs after 3 warm-up runs.
 *
 * Build and run:  make bin/gpu_peak && bin/gpu_peak [--copy-mib 1024] [--reps 20]
 * Prints one line: result tool=gpu_peak copy_gbs=... memcpy_gbs=... mma_bf16_tflops=...
 * Where there is no GPU it stops with one line.
 */
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cuda_check.h"
#include "../common/device.h"
#include "../common/error.h"
#include "../common/stage.h"
extern "C" {
#include "../common/timing.h"
}

constexpr int COPY_THREADS = 256, MMA_THREADS = 256, CHAINS = 8, WARMUP = 3;

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

typedef enum { COPY_BY_KERNEL, COPY_BY_MEMCPY, MMA } measure_kind;

typedef struct {
    measure_kind kind;
    const uint4 *from;
    uint4 *to;
    size_t pieces;
    unsigned copy_blocks, mma_blocks;
    int steps;
    float *sums;
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

static int gpu_peak(long copy_mib, long reps)
{
    if (!gdn_cuda_device_present())
        return -1;
    const int sms = gdn_sm_count();
    measure m = {};
    m.pieces = (size_t)copy_mib * 1024 * 1024 / sizeof(uint4);
    m.copy_blocks = (unsigned)(8 * sms);
    m.mma_blocks = (unsigned)(4 * sms); /* 32 warps an SM */
    m.steps = 16384;
    unsigned long long *wrong = NULL;
    uint4 *from = NULL, *to = NULL;
    CUDA_CHECK(cudaMalloc(&from, m.pieces * sizeof(uint4)));
    CUDA_CHECK(cudaMalloc(&to, m.pieces * sizeof(uint4)));
    CUDA_CHECK(cudaMalloc(&m.sums, (size_t)m.mma_blocks * MMA_THREADS * CHAINS * 4 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&wrong, sizeof *wrong));
    m.from = from;
    m.to = to;

    fill_kernel<<<m.copy_blocks, COPY_THREADS>>>(from, m.pieces);
    CUDA_CHECK_LAUNCH("fill_kernel");
    CUDA_CHECK(cudaMemset(to, 0xff, m.pieces * sizeof(uint4))); /* poisoned: a piece not copied shows */
    double copy_ms = 0, memcpy_ms = 0, mma_ms = 0;
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

    /* every sum of every lane is 16 x steps */
    const size_t sums = (size_t)m.mma_blocks * MMA_THREADS * CHAINS * 4;
    float *host = (float *)malloc(sums * sizeof(float));
    if (!host)
        return gdn_set_error("gpu_peak: out of host memory");
    if (cudaMemcpy(host, m.sums, sums * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(host);
        return gdn_set_error("gpu_peak: reading the sums back: %s", cudaGetErrorString(cudaGetLastError()));
    }
    size_t wrong_sums = 0;
    for (size_t i = 0; i < sums; i++)
        wrong_sums += host[i] != 16.0f * (float)m.steps;
    free(host);
    if (wrong_sums)
        return gdn_set_error("gpu_peak: %zu of %zu tensor-core sums differ from %d", wrong_sums, sums, 16 * m.steps);
    CUDA_CHECK(cudaFree(from));
    CUDA_CHECK(cudaFree(to));
    CUDA_CHECK(cudaFree(m.sums));
    CUDA_CHECK(cudaFree(wrong));

    const double bytes = 2.0 * (double)m.pieces * sizeof(uint4); /* read and written */
    const double flops = 2.0 * 16 * 8 * 16 * CHAINS * (double)m.steps * (double)m.mma_blocks * (MMA_THREADS / 32);
    printf("result tool=gpu_peak sms=%d copy_mib=%ld copy_gbs=%.1f memcpy_gbs=%.1f mma_bf16_tflops=%.1f\n", sms, copy_mib,
           bytes / (copy_ms * 1e-3) * 1e-9, bytes / (memcpy_ms * 1e-3) * 1e-9, flops / (mma_ms * 1e-3) * 1e-12);
    return 0;
}

static const char usage[] =
    "gpu_peak: this GPU's copy rate and its bf16 mma.sync rate, the roofs of stage 06's roofline\n"
    "\n"
    "usage: bin/gpu_peak [options]\n"
    "  --copy-mib N   size of each of the two copy buffers, MiB (default 1024)\n"
    "  --reps N       timed runs after 3 warm-up runs; the median is reported (default 20)\n"
    "  --help         this text\n"
    "\n"
    "prints one line: result tool=gpu_peak sms=... copy_mib=... copy_gbs=... memcpy_gbs=...\n"
    "mma_bf16_tflops=...\n";

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
