/* fma_peak.c -- one core's fp32 FMA peak, and how close stage 05's chunk products come to it.
 *
 * Peak: 12 independent accumulator vectors of 16 floats, each updated acc = acc * x + y in a
 * loop. With -O3 -march=native GCC turns every update into one vfmadd on a 512-bit register
 * (256-bit where the target has no AVX-512); 12 independent chains hide the FMA latency
 * (4 cycles) across 2 FMA pipes. Counted as 2 flops per lane per update.
 * Chunk products: matmul_add of stage 05 on exactly the products of one chunk (C x K by K x C,
 * C x C by C x (K + V), C x K by K x V, ...), timed over many chunks on one thread.
 *
 * Build and run:  make bin/fma_peak && bin/fma_peak --chunk 64 --K 64 --V 64
 * Prints one line: result tool=fma_peak peak_gflops=... products_gflops=... fraction=...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/real.h"
#include "../common/stage.h"
#include "../common/timing.h"
#include "../steps/05_wy_chunked/wy_chunked.h"

static const char usage[] =
    "fma_peak: one core's fp32 FMA peak, and the rate of stage 05's chunk products on one thread\n"
    "\n"
    "usage: bin/fma_peak [options]\n"
    "  --chunk N      chunk size C of the products (default 64)\n"
    "  --K N --V N    head sizes (default K=64 V=64)\n"
    "  --help         this text\n"
    "\n"
    "prints one line: result tool=fma_peak precision=... chunk=... K=... V=... peak_gflops=...\n"
    "products_gflops=... fraction=... check=...\n";

static float fma_loop(long iterations, float x)
{
    float acc[12][16];
    for (int r = 0; r < 12; r++)
        for (int c = 0; c < 16; c++)
            acc[r][c] = (float)(r + c);
    for (long i = 0; i < iterations; i++)
        for (int r = 0; r < 12; r++)
            for (int c = 0; c < 16; c++)
                acc[r][c] = acc[r][c] * x + 1e-7f;
    float sum = 0;
    for (int r = 0; r < 12; r++)
        for (int c = 0; c < 16; c++)
            sum += acc[r][c];
    return sum; /* used, so the loop is not removed */
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"chunk", "K", "V", NULL};
    size_t values[3] = {64, 64, 64};
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
    gdn_tool_options(argc, argv, "fma_peak", names, values, 4096);
    size_t C = values[0], K = values[1], V = values[2];
    double times[7];

    /* 1. the FMA peak, median of 7 runs */
    const long iterations = 20000000;
    float sink = 0;
    for (int run = 0; run < 7; run++) {
        double start = gdn_now_seconds();
        sink += fma_loop(iterations, 0.9999999f + (float)run * 1e-9f);
        times[run] = gdn_now_seconds() - start;
    }
    double peak = 2.0 * 12 * 16 * (double)iterations / gdn_median(times, 7) * 1e-9;

    /* 2. the chunk products of stage 05 (one chunk's worth), median of 7 runs of many chunks */
    size_t W = K + V, biggest = (C > K ? C : K) * (W > C ? W : C);
    real_t *A = calloc(biggest, sizeof(real_t)), *B = calloc(biggest, sizeof(real_t)), *out = calloc(biggest, sizeof(real_t));
    if (!A || !B || !out) {
        fprintf(stderr, "fma_peak: error: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < biggest; i++)
        A[i] = B[i] = (real_t)(1e-3 * (double)(i % 17));
    const size_t shapes[7][3] = {{C, K, C}, {C, C, W}, {C, K, V}, {C, K, C}, {C, K, V}, {C, C, V}, {K, C, V}};
    double flops_per_chunk = 0;
    for (int s = 0; s < 7; s++)
        flops_per_chunk += 2.0 * (double)(shapes[s][0] * shapes[s][1] * shapes[s][2]);
    long chunks = (long)(4e9 / flops_per_chunk) + 1;
    for (int run = 0; run < 7; run++) {
        double start = gdn_now_seconds();
        for (long c = 0; c < chunks; c++)
            for (int s = 0; s < 7; s++)
                matmul_add(out, shapes[s][2], A, shapes[s][1], B, shapes[s][2], shapes[s][0], shapes[s][1], shapes[s][2]);
        times[run] = gdn_now_seconds() - start;
    }
    double products = flops_per_chunk * (double)chunks / gdn_median(times, 7) * 1e-9;
    printf("result tool=fma_peak precision=%s chunk=%zu K=%zu V=%zu peak_gflops=%.1f products_gflops=%.1f "
           "fraction=%.2f check=%g\n",
           REAL_NAME, C, K, V, peak, products, products / peak, (double)sink + (double)out[0]);
    free(A);
    free(B);
    free(out);
    return 0;
}
