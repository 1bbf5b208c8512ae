/* 05_wy_chunked -- the chunked WY form: inside a chunk, matrix products; across chunks, the recurrence.
 *
 * The idea (docs/05_wy_chunked.md, docs/contract.md section 1): stage 04 folds a segment token by
 * token. Here a chunk of C tokens is folded at once. With gamma_i the cumulative log-gate
 * inside the chunk and S0 the state at its start, the C delta-rule corrections solve one
 * unit lower triangular system (eq. 10):
 *     M[i,j] = beta_i (k_i . k_j) exp(gamma_i - gamma_j)   for i > j, else 0
 *     Tm     = (I + M)^-1                                  (forward substitution, eq. 11)
 *     W      = Tm (beta exp(gamma) K),   U = Tm (beta V)   (the WY representation, eq. 12)
 *     Vnew   = U - W S0                                    (the corrected values, eq. 13)
 *     o_i    = scale (exp(gamma_i) q_i^T S0 + sum_{j<=i} (q_i . k_j) exp(gamma_i - gamma_j) Vnew_j)  (eq. 14)
 *     S_C    = exp(gamma_C) S0 + sum_j exp(gamma_C - gamma_j) k_j Vnew_j^T                         (eq. 15)
 * Everything but the triangular solve is a matrix product, done by matmul_add below.
 * exp() is only taken of gamma_i - gamma_j with i >= j, which is <= 0 since g <= 0: a gate
 * of -1e4 underflows to 0 instead of overflowing.
 *
 * Cost per token, for a chunk of C tokens (full products, counted in wy_chunked_flops):
 *     6 K V (W S0, the S0 read, the state update)  +  2 C (2 K + K + V + V) (K K^T, Q K^T,
 *     Tm [K | V], P Vnew)  +  C^2 / 3 (the solve).
 * Stage 01 does 7 K V per token. Larger C means more work per token (the C-terms) but fewer
 * sequential steps (T / C chunks, each a few dependent products instead of C dependent
 * token updates); at K = V = 64 and C = 64 the work is 2.3 times stage 01's, and is repaid
 * because products run near the FMA peak while the loop does not. Memory: the inputs plus
 * about 4 C (K + V) + 3 C^2 + K V values per thread. Depth: T / C chunk steps. OpenMP runs
 * one (sequence, value head) per thread. Each sequence's chunks start at its first token, so
 * in a packed batch no chunk spans two sequences and a sequence's last chunk may be short.
 *
 * matmul_add computes an 8 x TILE_COLUMNS tile of C at a time, keeping it in 16 vector
 * registers across the whole k loop; with -O3 -march=native on AVX-512 machines GCC 12
 * compiles the inner loop to one broadcast and two vfmadd231ps on zmm registers per row of
 * the tile, so each loaded row of B feeds 16 FMAs.
 *
 * Build and run:  make bin/05_wy_chunked && bin/05_wy_chunked --T 16384 --H 8 --chunk 64 --check-against oracle
 */
#include "wy_chunked.h"

#include <math.h>
#include <string.h>

#include "../../common/scratch.h"

enum { TILE_ROWS = 8, TILE_COLUMNS = 128 / sizeof(real_t) }; /* 8 rows x two 64-byte vectors */

void matmul_add(real_t *restrict C, size_t ldc, const real_t *restrict A, size_t lda, const real_t *restrict B,
                size_t ldb, size_t m, size_t k, size_t n)
{
    size_t i = 0, j = 0;
    for (; i + TILE_ROWS <= m; i += TILE_ROWS)
        for (j = 0; j + TILE_COLUMNS <= n; j += TILE_COLUMNS) {
            real_t tile[TILE_ROWS][TILE_COLUMNS]; /* fixed sizes: the compiler keeps it in registers */
            for (size_t r = 0; r < TILE_ROWS; r++)
                for (size_t c = 0; c < TILE_COLUMNS; c++)
                    tile[r][c] = C[(i + r) * ldc + j + c];
            for (size_t l = 0; l < k; l++) {
                const real_t *restrict b = B + l * ldb + j;
                for (size_t r = 0; r < TILE_ROWS; r++) {
                    const real_t a = A[(i + r) * lda + l];
                    for (size_t c = 0; c < TILE_COLUMNS; c++)
                        tile[r][c] += a * b[c];
                }
            }
            for (size_t r = 0; r < TILE_ROWS; r++)
                for (size_t c = 0; c < TILE_COLUMNS; c++)
                    C[(i + r) * ldc + j + c] = tile[r][c];
        }
    /* edges: the columns right of the last full tile, then the rows below the last full tile */
    size_t full_rows = m / TILE_ROWS * TILE_ROWS, full_columns = n / TILE_COLUMNS * TILE_COLUMNS;
    for (size_t row = 0; row < m; row++) {
        size_t first_column = row < full_rows ? full_columns : 0;
        for (size_t l = 0; l < k; l++) {
            const real_t a = A[row * lda + l];
            for (size_t c = first_column; c < n; c++)
                C[row * ldc + c] += a * B[l * ldb + c];
        }
    }
}

void wy_solve_tril(real_t *restrict Tm, const real_t *restrict M, size_t n)
{
    /* (I + M) Tm = I, row by row: Tm[i, :] = e_i - sum_{l<i} M[i, l] Tm[l, :]; row l of Tm is
     * zero right of column l, so row i only touches columns 0 .. i. */
    for (size_t i = 0; i < n; i++) {
        real_t *restrict row = Tm + i * n;
        memset(row, 0, n * sizeof(real_t));
        row[i] = 1;
        for (size_t l = 0; l < i; l++) {
            const real_t m = M[i * n + l];
            const real_t *restrict earlier = Tm + l * n;
            for (size_t c = 0; c <= l; c++)
                row[c] -= m * earlier[c];
        }
    }
}

/* Per-thread work space for one chunk of at most C tokens. */
typedef struct {
    real_t *keys_t, *decayed_keys_t;                  /* K x C each */
    real_t *right;                                    /* C x (K + V): [beta exp(gamma) K | beta V] */
    real_t *wu;                                       /* C x (K + V): [W | U] = Tm right */
    real_t *scores, *Tm, *gaps;                       /* C x C each; gaps[i, j] = exp(gamma_i - gamma_j), j <= i */
    real_t *new_values, *out;                         /* C x V each */
    double *gamma;                                    /* C: cumulative log-gates, in double (see wy_chunk) */
    real_t *decay;                                    /* C */
    real_t *S;                                        /* K x V state */
} chunk_space;

static size_t chunk_space_values(size_t C, size_t K, size_t V)
{
    return C * sizeof(double) / sizeof(real_t) + 2 * C * K + 2 * C * (K + V) + 3 * C * C + 2 * C * V + C + K * V;
}

static chunk_space chunk_space_at(real_t *base, size_t C, size_t K, size_t V)
{
    chunk_space w;
    w.gamma = (double *)(void *)base; /* first, so it keeps the scratch's 64-byte alignment */
    w.keys_t = base + C * sizeof(double) / sizeof(real_t);
    w.decayed_keys_t = w.keys_t + K * C;
    w.right = w.decayed_keys_t + K * C;
    w.wu = w.right + C * (K + V);
    w.scores = w.wu + C * (K + V);
    w.Tm = w.scores + C * C;
    w.gaps = w.Tm + C * C;
    w.new_values = w.gaps + C * C;
    w.out = w.new_values + C * V;
    w.decay = w.out + C * V;
    w.S = w.decay + C;
    return w;
}

/* One chunk of n tokens from position t0 on, of value head h: reads w.S = S0, leaves S_C there. */
static void wy_chunk(const gdn_problem *p, gdn_result *r, size_t h, size_t t0, size_t n, chunk_space w)
{
    const size_t K = p->K, V = p->V, W = K + V, row_stride = p->H * K; /* a key head's tokens are H rows apart */
    const real_t *restrict beta = p->beta;
    const real_t *keys = p->k + gdn_key_token(p, t0, h) * K, *queries = p->q + gdn_key_token(p, t0, h) * K;

    /* gamma = cumulative log-gate (eq. 9); K^T and [beta exp(gamma) K | beta V] gathered;
     * the products read the chunk's q and k rows where they are, H rows apart.
     * gamma is summed in double: after a gate of -1000 (the floor), a float gamma near -1000 has
     * an ulp of 6e-5, which the small differences gamma_i - gamma_j that follow would carry. */
    double gamma = 0;
    for (size_t i = 0; i < n; i++) {
        size_t token = gdn_value_token(p, t0 + i, h);
        const real_t *k = keys + i * row_stride;
        gamma += gdn_summed_gate(p->g[token]); /* real.h: a gate of -1e16 would swallow the ones after it */
        w.gamma[i] = gamma;
        w.decay[i] = real_exp((real_t)gamma);
        for (size_t c = 0; c < K; c++) {
            w.keys_t[c * n + i] = k[c];
            w.right[i * W + c] = beta[token] * w.decay[i] * k[c];
        }
        for (size_t c = 0; c < V; c++)
            w.right[i * W + K + c] = beta[token] * p->v[token * V + c];
    }

    /* the decay between tokens j <= i, exp(gamma_i - gamma_j) <= 1: formed once, only for j <= i
     * (never exp of a positive difference, never a quotient of decays that may underflow) */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++)
            w.gaps[i * n + j] = real_exp((real_t)(w.gamma[i] - w.gamma[j]));

    /* M = strict-lower(beta K K^T exp(gamma_i - gamma_j)) (eq. 10), then Tm = (I + M)^-1 (eq. 11) */
    memset(w.scores, 0, n * n * sizeof(real_t));
    matmul_add(w.scores, n, keys, row_stride, w.keys_t, n, n, K, n);
    for (size_t i = 0; i < n; i++) {
        real_t beta_i = beta[gdn_value_token(p, t0 + i, h)];
        for (size_t j = 0; j < n; j++)
            w.scores[i * n + j] = j < i ? beta_i * w.scores[i * n + j] * w.gaps[i * n + j] : 0;
    }
    wy_solve_tril(w.Tm, w.scores, n);

    /* [W | U] = Tm [beta exp(gamma) K | beta V] (eq. 12); Vnew = U - W S0 (eq. 13) */
    memset(w.wu, 0, n * W * sizeof(real_t));
    matmul_add(w.wu, W, w.Tm, n, w.right, W, n, n, W);
    memset(w.out, 0, n * V * sizeof(real_t));
    matmul_add(w.out, V, w.wu, W, w.S, V, n, K, V); /* W S0, in out for now */
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < V; c++)
            w.new_values[i * V + c] = w.wu[i * W + K + c] - w.out[i * V + c];

    /* o = scale (exp(gamma) Q S0 + P Vnew), P = lower(Q K^T exp(gamma_i - gamma_j)) (eq. 14) */
    memset(w.scores, 0, n * n * sizeof(real_t));
    matmul_add(w.scores, n, queries, row_stride, w.keys_t, n, n, K, n);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            w.scores[i * n + j] = j <= i ? w.scores[i * n + j] * w.gaps[i * n + j] : 0;
    memset(w.out, 0, n * V * sizeof(real_t));
    matmul_add(w.out, V, queries, row_stride, w.S, V, n, K, V); /* Q S0, then rows times exp(gamma_i) */
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < V; c++)
            w.out[i * V + c] *= w.decay[i];
    matmul_add(w.out, V, w.scores, n, w.new_values, V, n, n, V);
    for (size_t i = 0; i < n; i++) {
        real_t *o = r->o + gdn_value_token(p, t0 + i, h) * V;
        for (size_t c = 0; c < V; c++)
            o[c] = (real_t)p->scale * w.out[i * V + c];
    }

    /* S_C = exp(gamma_C) S0 + sum_j exp(gamma_C - gamma_j) k_j Vnew_j^T (eq. 15) */
    const real_t *to_last = w.gaps + (n - 1) * n; /* exp(gamma_C - gamma_j) */
    for (size_t c = 0; c < K; c++)
        for (size_t j = 0; j < n; j++)
            w.decayed_keys_t[c * n + j] = w.keys_t[c * n + j] * to_last[j];
    for (size_t ij = 0; ij < K * V; ij++)
        w.S[ij] *= w.decay[n - 1];
    matmul_add(w.S, V, w.decayed_keys_t, n, w.new_values, V, K, n, V);
}

static int wy_chunked_forward(const gdn_problem *p, const gdn_settings *s, gdn_result *r)
{
    const size_t K = p->K, V = p->V, C = s->chunk ? s->chunk : 64, HV = gdn_value_heads(p), N = gdn_sequences(p);
    gdn_scratch scratch;
    if (gdn_scratch_alloc(&scratch, chunk_space_values(C, K, V) * sizeof(real_t)))
        return -1;
#pragma omp parallel
    {
        chunk_space w = chunk_space_at(gdn_scratch_mine(&scratch), C, K, V);
#pragma omp for collapse(2) schedule(dynamic) /* sequences may differ in length */
        for (size_t n = 0; n < N; n++)
            for (size_t h = 0; h < HV; h++) {
                /* chunks start at the sequence's first token: none spans two sequences */
                size_t head = gdn_head(p, n, h), start = gdn_sequence_start(p, n), end = start + gdn_sequence_length(p, n);
                gdn_initial_state(p, head, w.S);
                for (size_t t0 = start; t0 < end; t0 += C)
                    wy_chunk(p, r, h, t0, end - t0 < C ? end - t0 : C, w);
                memcpy(r->ht + head * K * V, w.S, K * V * sizeof(real_t));
            }
    }
    gdn_scratch_free(&scratch);
    return 0;
}

double wy_chunked_flops(const gdn_problem *p, const gdn_settings *s)
{
    const size_t C = s->chunk ? s->chunk : 64;
    double K = (double)p->K, V = (double)p->V, total = 0;
    for (size_t sequence = 0; sequence < gdn_sequences(p); sequence++)
        for (size_t t0 = 0, length = gdn_sequence_length(p, sequence); t0 < length; t0 += C) {
            double n = (double)(length - t0 < C ? length - t0 : C);
            total += 2 * n * n * K             /* K K^T */
                     + n * (n - 1) * (n + 1) / 3 /* the solve: sum over i of sum_{l<i} 2 (l + 1) */
                     + 2 * n * n * (K + V)     /* Tm [..] */
                     + 2 * n * K * V + n * V   /* W S0, Vnew */
                     + 2 * n * n * K           /* Q K^T */
                     + 2 * n * K * V           /* Q S0 */
                     + 2 * n * n * V + n * V   /* P Vnew, scale */
                     + K * V + 2 * n * K * V;  /* state update */
        }
    return (double)gdn_value_heads(p) * total;
}

static void wy_chunked_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    if (s->chunk == 0)
        s->chunk = 64;
}

const gdn_stage wy_chunked_stage = {
    .name = "05_wy_chunked",
    .idea = "chunked WY form: per chunk a triangular solve and matrix products; chunks in sequence",
    .options = GDN_OPTION_CHUNK | GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED,
    .forward = wy_chunked_forward,
    .counted_flops = wy_chunked_flops,
    .resolve_options = wy_chunked_resolve_options,
};
