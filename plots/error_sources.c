/* error_sources.c -- where the bf16 kernels' error enters: stage 06's roundings, one at a time.
 *
 * The idea: a GPU kernel cannot switch off one rounding to see what it costs; an emulation can.
 * This runs the chunked WY form (docs/05_wy_chunked.md eq. 9-15, C = 64) in double, with a hook
 * on every operand stage 06 rounds (docs/06_warp_specialized.md, "Precision"): the state where
 * it enters a product (S), W and U as stored between kernels, the scaled Tm that forms them,
 * the decayed keys of the state update, Vnew, P, o as written, the solve's tf32 joins (modelled
 * as Tm's entries rounded to 11 significant bits), the gate factors (ex2.approx, modelled as
 * 22 bits) and the state kept in fp32 between chunks. A hook rounds its operand to its format's
 * significant bits (round to nearest even) or leaves it exact. Each configuration is compared
 * with the fp64 loop (common/oracle.c) on the same bf16-rounded inputs, by relative L2 error of
 * o and of the final state: "exact" (every hook off: the emulation's own error, about 1e-15),
 * each rounding alone at the default mode's format, the default mode (all of them), the
 * --precise mode (W, S, Vnew and P as two bf16 terms, about 16 bits; U and o in fp32),
 * --precise with the scaled Tm and the decayed keys split too, that with the solve in fp32,
 * that with S and Vnew as three bf16 terms (about 24 bits), and every split operand in three.
 * This is a model of the kernels' arithmetic, not a measurement of them: fp32 sums are taken
 * exact (their rounding, 2^-24 a term, is far below bf16's 2^-9).
 *
 * Cost: per chunk of C tokens about C^2 (K + V) + 3 C K V multiply-adds in double; a head of
 * 65536 tokens at K = V = 128 takes seconds. The configurations run in parallel (OpenMP).
 *
 * Build and run:  make bin/error_sources && bin/error_sources > plots/data/error_sources.dat
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/oracle.h"
#include "../common/problem.h"
#include "../common/stage.h"

enum source { S_OPERAND, W_STORED, U_STORED, SCALED_TM, DECAYED_KEYS, VNEW, P_OPERAND, O_WRITTEN, SOLVE, GATES,
              STATE, SOURCES };
static const char *const source_names[SOURCES] = {"S", "W", "U", "scaled_Tm", "decayed_keys", "Vnew", "P", "o",
                                                  "solve_tf32", "gates_ex2", "state_fp32"};
/* significant bits in the default mode: bf16 8, tf32 11, ex2.approx about 22, fp32 24 */
static const int default_bits[SOURCES] = {8, 8, 8, 8, 8, 8, 8, 8, 11, 22, 24};

/* x rounded to `bits` significant bits, to nearest even (0: exact) */
static double round_bits(double x, int bits)
{
    if (bits == 0 || x == 0 || !isfinite(x))
        return x;
    int exponent;
    double mantissa = frexp(x, &exponent); /* x = mantissa 2^exponent, 0.5 <= |mantissa| < 1 */
    return ldexp(nearbyint(ldexp(mantissa, bits)), exponent - bits);
}

typedef struct {
    const char *name;
    int bits[SOURCES]; /* 0: exact */
} configuration;

enum { C = 64 };

/* The chunked form of one head, every rounding stage 06 makes hooked; o [T, V] and the final
 * state [K, V] out. */
static void emulate(const gdn_problem *p, const configuration *c, double *o, double *S)
{
    const size_t K = p->K, V = p->V, T = p->T;
    const int *b = c->bits;
    double *Tm = malloc(C * C * sizeof *Tm), *gaps = malloc(C * C * sizeof *gaps), *W = malloc(C * K * sizeof *W),
           *U = malloc(C * V * sizeof *U), *Vnew = malloc(C * V * sizeof *Vnew), *S0 = malloc(K * V * sizeof *S0),
           *kd = malloc(C * K * sizeof *kd), *decay = malloc(C * sizeof *decay), *gamma = malloc(C * sizeof *gamma);
    if (!Tm || !gaps || !W || !U || !Vnew || !S0 || !kd || !decay || !gamma) {
        fprintf(stderr, "error_sources: error: out of memory\n");
        exit(1);
    }
    memset(S, 0, K * V * sizeof *S);
    for (size_t t0 = 0; t0 < T; t0 += C) {
        const size_t n = T - t0 < C ? T - t0 : C;
        const real_t *q = p->q + t0 * K, *k = p->k + t0 * K, *v = p->v + t0 * V, *beta = p->beta + t0;
        /* gates (eq. 9): sums in double, factors e^(difference <= 0) */
        for (size_t i = 0; i < n; i++)
            gamma[i] = (i ? gamma[i - 1] : 0) + p->g[t0 + i];
        for (size_t i = 0; i < n; i++) {
            decay[i] = round_bits(exp(gamma[i]), b[GATES]);
            for (size_t j = 0; j <= i; j++)
                gaps[i * C + j] = round_bits(exp(gamma[i] - gamma[j]), b[GATES]);
        }
        /* Tm = (I + M)^-1, M = strict-lower(beta K K^T gaps) (eq. 10, 11), by substitution */
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < n; j++)
                Tm[i * C + j] = i == j;
            for (size_t l = 0; l < i; l++) {
                double kk = 0;
                for (size_t x = 0; x < K; x++)
                    kk += (double)k[i * K + x] * k[l * K + x];
                const double m = beta[i] * kk * gaps[i * C + l];
                for (size_t j = 0; j <= l; j++)
                    Tm[i * C + j] -= m * Tm[l * C + j];
            }
        }
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < i; j++)
                Tm[i * C + j] = round_bits(Tm[i * C + j], b[SOLVE]);
        /* W = Tm diag(beta e^gamma) K, U = Tm diag(beta) V (eq. 12): the strictly lower part
         * scaled and rounded as the products' A, the diagonal's term exact */
        for (size_t i = 0; i < n; i++) {
            for (size_t x = 0; x < K; x++)
                W[i * K + x] = beta[i] * decay[i] * k[i * K + x];
            for (size_t x = 0; x < V; x++)
                U[i * V + x] = beta[i] * (double)v[i * V + x];
            for (size_t j = 0; j < i; j++) {
                const double aw = round_bits(Tm[i * C + j] * beta[j] * decay[j], b[SCALED_TM]);
                const double au = round_bits(Tm[i * C + j] * beta[j], b[SCALED_TM]);
                for (size_t x = 0; x < K; x++)
                    W[i * K + x] += aw * k[j * K + x];
                for (size_t x = 0; x < V; x++)
                    U[i * V + x] += au * v[j * V + x];
            }
            for (size_t x = 0; x < K; x++)
                W[i * K + x] = round_bits(W[i * K + x], b[W_STORED]);
            for (size_t x = 0; x < V; x++)
                U[i * V + x] = round_bits(U[i * V + x], b[U_STORED]);
        }
        /* S0 as a product's operand; Vnew = U - W S0 (eq. 13), rounded where it is an operand */
        for (size_t ij = 0; ij < K * V; ij++)
            S0[ij] = round_bits(S[ij], b[S_OPERAND]);
        for (size_t i = 0; i < n; i++)
            for (size_t x = 0; x < V; x++) {
                double ws = 0;
                for (size_t y = 0; y < K; y++)
                    ws += W[i * K + y] * S0[y * V + x];
                Vnew[i * V + x] = round_bits(U[i * V + x] - ws, b[VNEW]);
            }
        /* o = scale (e^gamma Q S0 + P Vnew), P = lower(Q K^T gaps) (eq. 14) */
        for (size_t i = 0; i < n; i++) {
            double *out = o + (t0 + i) * V;
            for (size_t x = 0; x < V; x++) {
                double qs = 0;
                for (size_t y = 0; y < K; y++)
                    qs += (double)q[i * K + y] * S0[y * V + x];
                out[x] = decay[i] * qs;
            }
            for (size_t j = 0; j <= i; j++) {
                double qk = 0;
                for (size_t y = 0; y < K; y++)
                    qk += (double)q[i * K + y] * k[j * K + y];
                const double P = round_bits(qk * gaps[i * C + j], b[P_OPERAND]);
                for (size_t x = 0; x < V; x++)
                    out[x] += P * Vnew[j * V + x];
            }
            for (size_t x = 0; x < V; x++)
                out[x] = round_bits(p->scale * out[x], b[O_WRITTEN]);
        }
        /* S_C = e^gamma_C S0 + (decayed K)^T Vnew (eq. 15), the state exact (fp32) between chunks */
        for (size_t j = 0; j < n; j++) {
            const double to_end = round_bits(exp(gamma[n - 1] - gamma[j]), b[GATES]);
            for (size_t y = 0; y < K; y++)
                kd[j * K + y] = round_bits(k[j * K + y] * to_end, b[DECAYED_KEYS]);
        }
        for (size_t y = 0; y < K; y++)
            for (size_t x = 0; x < V; x++) {
                double sum = decay[n - 1] * S[y * V + x];
                for (size_t j = 0; j < n; j++)
                    sum += kd[j * K + y] * Vnew[j * V + x];
                S[y * V + x] = round_bits(sum, b[STATE]);
            }
    }
    free(Tm), free(gaps), free(W), free(U), free(Vnew), free(S0), free(kd), free(decay), free(gamma);
}

static double relative_error(const double *got, const double *want, size_t count)
{
    double difference = 0, norm = 0;
    for (size_t i = 0; i < count; i++) {
        difference += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
    }
    return sqrt(difference / norm);
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"seed", NULL};
    size_t values[1] = {1};
    gdn_tool_options(argc, argv, "error_sources", names, values, (size_t)1 << 40);

    /* the configurations: exact, each source alone, the two modes, and --precise with the two
     * roundings it leaves in bf16 split as well */
    configuration configurations[SOURCES + 7] = {{"exact", {0}}};
    int count = 1;
    for (int s = 0; s < SOURCES; s++, count++) {
        configurations[count] = (configuration){source_names[s], {0}};
        configurations[count].bits[s] = default_bits[s];
    }
    configuration all = {"default", {0}};
    memcpy(all.bits, default_bits, sizeof all.bits);
    configuration precise = all;
    precise.name = "precise";
    precise.bits[S_OPERAND] = precise.bits[W_STORED] = precise.bits[VNEW] = precise.bits[P_OPERAND] = 16;
    precise.bits[U_STORED] = precise.bits[O_WRITTEN] = 24;
    configuration precise_all = precise;
    precise_all.name = "precise+Tm,keys";
    precise_all.bits[SCALED_TM] = precise_all.bits[DECAYED_KEYS] = 16;
    configuration precise_solve = precise_all;
    precise_solve.name = "precise+Tm,keys,solve";
    precise_solve.bits[SOLVE] = 24;
    configurations[count++] = all;
    configurations[count++] = precise;
    configurations[count++] = precise_all;
    configuration three_state = precise_solve; /* S and Vnew as three bf16 terms: about 24 bits */
    three_state.name = "precise+Tm,keys,solve+S,Vnew3";
    three_state.bits[S_OPERAND] = three_state.bits[VNEW] = 24;
    configuration three_all = three_state; /* every split operand as three terms */
    three_all.name = "all3";
    three_all.bits[W_STORED] = three_all.bits[P_OPERAND] = three_all.bits[SCALED_TM] = three_all.bits[DECAYED_KEYS] = 24;
    configurations[count++] = precise_solve;
    configurations[count++] = three_state;
    configurations[count++] = three_all;

    /* the shapes of the accuracy table (one head each), fast gates (the contract's) and slow
     * ones (g x 1e-3: a memory of thousands of tokens) */
    static const struct {
        size_t T, K;
    } shapes[] = {{4096, 128}, {16384, 64}, {65536, 128}};
    printf("# error_sources: stage 06's roundings emulated in double (plots/error_sources.c), relative L2\n"
           "# error of o and of the final state against the fp64 loop on the same bf16 inputs; one head,\n"
           "# K = V, C = 64, seed %zu. Command: bin/error_sources > plots/data/error_sources.dat\n"
           "configuration T K gates rel_err_o rel_err_state\n", values[0]);
    for (size_t shape = 0; shape < sizeof shapes / sizeof shapes[0]; shape++)
        for (int slow = 0; slow < 2; slow++) {
            gdn_problem p;
            const size_t T = shapes[shape].T, K = shapes[shape].K;
            if (gdn_problem_alloc(&p, 1, T, 1, K, K, 0)) {
                fprintf(stderr, "error_sources: error: %s\n", gdn_last_error());
                return 1;
            }
            gdn_problem_generate(&p, values[0]);
            gdn_problem_round_to_bf16(&p);
            for (size_t t = 0; slow && t < T; t++)
                p.g[t] *= (real_t)1e-3;
            double *oracle_o = malloc(T * K * sizeof *oracle_o), *oracle_state = malloc(K * K * sizeof *oracle_state);
            double rows[SOURCES + 7][2];
            if (!oracle_o || !oracle_state || gdn_oracle(&p, oracle_o, oracle_state)) {
                fprintf(stderr, "error_sources: error: out of memory\n");
                return 1;
            }
#pragma omp parallel for schedule(dynamic)
            for (int i = 0; i < count; i++) {
                double *o = malloc(T * K * sizeof *o), *S = malloc(K * K * sizeof *S);
                if (!o || !S) {
                    fprintf(stderr, "error_sources: error: out of memory\n");
                    exit(1);
                }
                emulate(&p, &configurations[i], o, S);
                rows[i][0] = relative_error(o, oracle_o, T * K);
                rows[i][1] = relative_error(S, oracle_state, K * K);
                free(o), free(S);
            }
            for (int i = 0; i < count; i++)
                printf("%s %zu %zu %s %.3e %.3e\n", configurations[i].name, T, K, slow ? "slow" : "fast", rows[i][0],
                       rows[i][1]);
            fflush(stdout);
            free(oracle_o), free(oracle_state);
            gdn_problem_free(&p);
        }
    return 0;
}
