/* precision_study.c -- how much precision the state needs: stage 01 with S rounded after every token.
 *
 * The loop is computed in double, but after each token's update the state S is rounded to
 * fp16, bf16 or fp32 (round-to-nearest-even, common/half.c), as if it were stored in that
 * format between tokens. The output is compared with the unrounded fp64 loop (the oracle)
 * over the latest half of the sequence, t in (T/2, T], for T = 256, 512, ..., so the curve
 * shows whether the error drifts as the sequence grows. Gate regimes: the contract's
 * g = log(sigmoid(N(0,1))) (alpha about 0.5: fast forgetting), slow forgetting
 * (alpha in [0.99, 0.999]) and almost none (alpha in [0.99999, 0.999999]); with little
 * forgetting, rounding errors are washed out slowly, and the curve shows whether they drift
 * (docs/precision.md: they settle, since the delta rule's write contracts old errors).
 *
 * Build and run:  make bin/precision_study && bin/precision_study --T 65536 > plots/data/precision.dat
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "../common/problem.h"
#include "../common/random.h"
#include "../common/stage.h"

enum format { FORMAT_FP64, FORMAT_FP32, FORMAT_BF16, FORMAT_FP16, FORMAT_COUNT };
static const char *format_names[FORMAT_COUNT] = {"fp64", "fp32", "bf16", "fp16"};

enum regime { REGIME_CONTRACT, REGIME_SLOW, REGIME_NONE, REGIME_COUNT };
static const char *regime_names[REGIME_COUNT] = {"alpha~0.5", "alpha~0.99-0.999", "alpha~0.99999"};

static double round_to(enum format format, double x)
{
    switch (format) {
    case FORMAT_FP32: return (double)(float)x;
    case FORMAT_BF16: return (double)bf16_to_float(float_to_bf16((float)x));
    case FORMAT_FP16: return (double)fp16_to_float(float_to_fp16((float)x));
    default: return x;
    }
}

/* The loop of stage 01 in double for head 0, with the state rounded after every token. */
static void loop_with_rounded_state(const gdn_problem *p, enum format format, double *o)
{
    const size_t K = p->K, V = p->V;
    double *S = calloc(K * V, sizeof *S), *predicted = malloc(2 * V * sizeof *S), *u = predicted + V;
    if (!S || !predicted) {
        fprintf(stderr, "precision_study: error: out of memory\n");
        exit(1);
    }
    for (size_t t = 0; t < p->T; t++) {
        const real_t *q = p->q + t * K, *k = p->k + t * K, *v = p->v + t * V;
        double alpha = exp((double)p->g[t]), beta = p->beta[t];
        memset(predicted, 0, V * sizeof *predicted);
        for (size_t i = 0; i < K; i++)
            for (size_t j = 0; j < V; j++) {
                S[i * V + j] *= alpha;
                predicted[j] += S[i * V + j] * k[i];
            }
        for (size_t j = 0; j < V; j++) {
            u[j] = beta * (v[j] - predicted[j]);
            o[t * V + j] = 0;
        }
        for (size_t i = 0; i < K; i++)
            for (size_t j = 0; j < V; j++) {
                S[i * V + j] = round_to(format, S[i * V + j] + k[i] * u[j]);
                o[t * V + j] += q[i] * S[i * V + j];
            }
        for (size_t j = 0; j < V; j++)
            o[t * V + j] *= p->scale;
    }
    free(S);
    free(predicted);
}

static const char usage[] =
    "precision_study: stage 01 with the state rounded to fp16, bf16 or fp32 after every token,\n"
    "against the unrounded fp64 loop, in three gate regimes\n"
    "\n"
    "usage: bin/precision_study [options]\n"
    "  --T N          longest sequence, at least 256 (default 65536); errors at T = 256, 512, ...\n"
    "  --K N --V N    head sizes (default K=64 V=64)\n"
    "  --seed N       generator seed (default 1)\n"
    "  --help         this text\n"
    "\n"
    "prints a table: format regime T rel_err_o (the relative L2 error of o over tokens\n"
    "T/2 < t <= T), the form of plots/data/precision.dat\n";

int main(int argc, char **argv)
{
    static const char *const names[] = {"T", "K", "V", "seed", NULL};
    size_t values[4] = {65536, 64, 64, 1};
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
    gdn_tool_options(argc, argv, "precision_study", names, values, (size_t)1 << 24);
    size_t T = values[0], K = values[1], V = values[2];
    uint64_t seed = values[3];
    if (T < 256) {
        fprintf(stderr, "precision_study: error: --T must be at least 256, got %zu\n", T);
        return 1;
    }
    double *outputs[REGIME_COUNT][FORMAT_COUNT];
    gdn_problem problems[REGIME_COUNT];
    for (int regime = 0; regime < REGIME_COUNT; regime++) {
        if (gdn_problem_alloc(&problems[regime], 1, T, 1, K, V, 0)) {
            fprintf(stderr, "precision_study: error: cannot allocate the problem\n");
            return 1;
        }
        gdn_problem_generate(&problems[regime], seed);
        /* log-uniform alpha in the regime's range: g = -exp(uniform(log(-g_low), log(-g_high))) */
        double ranges[REGIME_COUNT][2] = {{0, 0}, {-1e-2, -1e-3}, {-1e-5, -1e-6}};
        if (regime != REGIME_CONTRACT)
            for (size_t t = 0; t < T; t++) {
                double u = random_uniform(seed, STREAM_TEST, t);
                double low = log(-ranges[regime][0]), high = log(-ranges[regime][1]);
                problems[regime].g[t] = (real_t)-exp(low + u * (high - low));
            }
        for (int format = 0; format < FORMAT_COUNT; format++) {
            outputs[regime][format] = malloc(T * V * sizeof(double));
            if (!outputs[regime][format]) {
                fprintf(stderr, "precision_study: error: out of memory\n");
                return 1;
            }
        }
    }
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int regime = 0; regime < REGIME_COUNT; regime++)
        for (int format = 0; format < FORMAT_COUNT; format++)
            loop_with_rounded_state(&problems[regime], (enum format)format, outputs[regime][format]);

    printf("# precision study: stage 01 with the state rounded after every token; K=%zu V=%zu seed=%llu\n", K, V,
           (unsigned long long)seed);
    printf("# relative L2 error of o over tokens T/2 < t <= T against the unrounded fp64 loop\n");
    printf("format regime T rel_err_o\n");
    for (int regime = 0; regime < REGIME_COUNT; regime++)
        for (int format = FORMAT_FP32; format < FORMAT_COUNT; format++)
            for (size_t end = 256; end <= T; end *= 2) {
                double difference = 0, reference = 0;
                const double *o = outputs[regime][format], *exact = outputs[regime][FORMAT_FP64];
                for (size_t i = end / 2 * V; i < end * V; i++) {
                    difference += (o[i] - exact[i]) * (o[i] - exact[i]);
                    reference += exact[i] * exact[i];
                }
                printf("%s %s %zu %.6e\n", format_names[format], regime_names[regime], end,
                       sqrt(difference / reference));
            }
    for (int regime = 0; regime < REGIME_COUNT; regime++) {
        for (int format = 0; format < FORMAT_COUNT; format++)
            free(outputs[regime][format]);
        gdn_problem_free(&problems[regime]);
    }
    return 0;
}
