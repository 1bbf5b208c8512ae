/* 10_backward_chunked -- the gradients of stage 05's chunked WY form: two parallel passes around
 * two serial chains, one forward and one backward.
 *
 * The idea (docs/10_backward_chunked.md): differentiate eq. 9-15 of a chunk instead of eq. 1 of a
 * token. Stage 09's dS runs back through a chunk's C tokens at once as
 *     dVnew = P^T dO + Kdec dS_C                                        (eq. 19a)
 *     dS0   = Qg^T dO + exp(gamma_C) dS_C - W^T dVnew                   (eq. 19b)
 * (P_ij = scale (q_i . k_j) exp(gamma_i - gamma_j), i >= j; Kdec_j = exp(gamma_C - gamma_j) k_j;
 * Qg_i = scale exp(gamma_i) q_i): the transpose of eq. 13-15, a chain over chunks like the forward's.
 * Everything else is local to a chunk once its S0, Vnew and dS_C are known: the gradients of
 * eq. 14 and 15 (dq, and dk and dgamma from P and Kdec), of Vnew = U - W S0 (dU = dVnew, dW =
 * -dVnew S0^T), of the WY products U = Tm (beta V) and W = Tm (beta e^gamma K) (eq. 19c), and of
 * the solve Tm = (I + M)^-1 (eq. 19d):
 *     dM = -Tm^T dTm Tm^T,   kept below the diagonal, where M depends on the inputs
 * and dg is dgamma summed from the end of the chunk back (gamma is g's running sum).
 * So the pass is FLA's: (1) in parallel over every chunk, the solve, W, U and P^T dO; (2) the
 * forward chain, S0 of every chunk and Vnew; (3) the backward chain, dS_C of every chunk and
 * dVnew; (4) in parallel over every chunk, o and the gradients. W and U are recomputed from the
 * inputs, never kept from a forward pass; the states S0 and dS_C are kept, one K x V matrix a
 * chunk each (the memory the chunk size trades: T / C states a head).
 *
 * Every product runs on contiguous tiles by stage 05's matmul_add: 28 a chunk, full matrices
 * (triangles included, as stage 05 counts them).
 * Cost per token (backward_chunked_flops): 18 K V (the chains' 10, the local products' 8) plus
 * C (22 K + 12 V) (the products with the chunk's other tokens) plus 4.3 C^2 (Tm^T dTm Tm^T and
 * the solve): at C = K = V = 64, 1.9 times stage 09's 30 K V. On a 2-core AMD EPYC the products
 * run at about the loop's rate (matmul_add reaches 31 GFlop/s there on one chunk's products in
 * cache), so 10 takes 1.1-1.6 times 09's time at its best chunk (plots/data/backward_cpu.dat);
 * what the chunks buy is depth, 2 T / C chain steps where 09 has 2 T, and products that tensor
 * cores run.
 * Memory: the inputs, the gradients and per head T (K + 2 V + 2 C) + 2 (T / C) K V values.
 *
 * Build and run:  make bin/10_backward_chunked && bin/10_backward_chunked --T 1024 --h0 --chunk 64 --check-against oracle
 */
#include "backward_chunked.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/error.h"
#include "../../common/scratch.h"
#include "../05_wy_chunked/wy_chunked.h" /* wy_solve_tril: the solve of eq. 11, unchanged */

/* What passes 1-3 leave for the next; each array holds every head's, one after the other. */
typedef struct {
    size_t C, chunks, T, K, V;
    double *gamma;        /* [heads T] running sums of g inside each chunk */
    real_t *decay;        /* [heads chunks C C] exp(gamma_i - gamma_j) for j <= i, else 0 */
    real_t *Tm;           /* [heads chunks C C] (I + M)^-1 */
    real_t *minus_W, *U;  /* [heads T K], [heads T V]: -W, as both chains use it; U becomes Vnew in pass 2 */
    real_t *dVnew;        /* [heads T V]: P^T dO after pass 1, dVnew after pass 3 */
    real_t *S0, *dS_end;  /* [heads chunks K V]: the state at each chunk's start; dL/dS at its end */
} workspace;

/* One chunk: n tokens from t0 of head (b, h); its rows in the workspace start at row. */
typedef struct {
    size_t b, h, head, t0, n, c, row;
} chunk_at;

static chunk_at chunk_of(const gdn_problem *p, const workspace *w, size_t head, size_t c)
{
    const size_t t0 = c * w->C;
    return (chunk_at){head / p->H, head % p->H, head, t0, p->T - t0 < w->C ? p->T - t0 : w->C, c, head * p->T + t0};
}

static size_t token_of(const gdn_problem *p, const chunk_at *x, size_t i) { return gdn_token(p, x->b, x->t0 + i, x->h); }
static const real_t *q_of(const gdn_problem *p, const chunk_at *x, size_t i) { return p->q + token_of(p, x, i) * p->K; }
static const real_t *k_of(const gdn_problem *p, const chunk_at *x, size_t i) { return p->k + token_of(p, x, i) * p->K; }

/* a . b; `omp simd reduction` lets the compiler split the sum over vector lanes (it may not
   reorder a plain loop's sum by itself) */
static real_t dot(const real_t *restrict a, const real_t *restrict b, size_t n)
{
    real_t sum = 0;
#pragma omp simd reduction(+ : sum)
    for (size_t i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* A thread's tiles for one chunk of at most C tokens. The products run on contiguous tiles by
 * stage 05's matmul_add (C += A B, all row-major), so every operand a product reads
 * transposed is copied transposed first (the _t tiles). */
typedef struct {
    real_t *q, *k, *v, *d_o;                  /* [C K] [C K] [C V] [C V]: the chunk's rows */
    real_t *k_t, *v_t, *Vnew_t;               /* [K C] [V C] [V C] */
    real_t *S0_t, *dS_t;                      /* [V K] [V K]: S0^T and dS_C^T */
    real_t *G, *M, *QK, *P, *dP, *Z, *Z_t;    /* [C C] each: K K^T, M, Q K^T, P, dO Vnew^T, ... */
    real_t *Tm_t, *dTm, *TmT_dTm, *dM_minus;  /* [C C] each */
    real_t *F, *F_t;                          /* [C C]: dM's weights on K K^T's rows and columns */
    real_t *Y, *dq, *dk, *dS_Vnew, *dW, *dY;  /* [C K] each */
    real_t *X, *o, *dX;                       /* [C V] each */
    real_t *decayed_k, *decayed_k_t;          /* [C K] [K C]: the chains' Kdec, Kdec^T */
    real_t *read_q_t, *minus_W_t;             /* [K C] [K C]: scale (e^gamma Q)^T, -W^T */
    double *dgamma;                           /* [C] */
} chunk_scratch;

/* the tiles' sizes, in chunk_scratch_at's order: one table for the sizes and the pointers */
enum { TILES = 35 };
static void tile_sizes(size_t C, size_t K, size_t V, size_t sizes[TILES])
{
    const size_t in_order[TILES] = {C * K, C * K, C * V, C * V, K * C, V * C, V * C, V * K, V * K, C * C, C * C,
                                    C * C, C * C, C * C, C * C, C * C, C * C, C * C, C * C, C * C, C * C,
                                    C * C, C * K, C * K, C * K, C * K, C * K, C * K, C * V, C * V, C * V,
                                    C * K, K * C, K * C, K * C};
    memcpy(sizes, in_order, sizeof in_order);
}

static size_t chunk_scratch_bytes(size_t C, size_t K, size_t V)
{
    size_t sizes[TILES], values = 0;
    tile_sizes(C, K, V, sizes);
    for (int i = 0; i < TILES; i++)
        values += sizes[i];
    return values * sizeof(real_t) + C * sizeof(double);
}

static chunk_scratch chunk_scratch_at(void *base, size_t C, size_t K, size_t V)
{
    chunk_scratch t;
    t.dgamma = base;
    real_t *next = (real_t *)(t.dgamma + C);
    real_t **const tiles[TILES] = {&t.q, &t.k, &t.v, &t.d_o, &t.k_t, &t.v_t, &t.Vnew_t, &t.S0_t, &t.dS_t, &t.G, &t.M,
                                   &t.QK, &t.P, &t.dP, &t.Z, &t.Z_t, &t.Tm_t, &t.dTm, &t.TmT_dTm, &t.dM_minus, &t.F,
                                   &t.F_t, &t.Y, &t.dq, &t.dk, &t.dS_Vnew, &t.dW, &t.dY, &t.X, &t.o, &t.dX,
                                   &t.decayed_k, &t.decayed_k_t, &t.read_q_t, &t.minus_W_t};
    size_t sizes[TILES];
    tile_sizes(C, K, V, sizes);
    for (int i = 0; i < TILES; i++) {
        *tiles[i] = next;
        next += sizes[i];
    }
    return t;
}

static void transpose(real_t *restrict to, const real_t *restrict from, size_t rows, size_t columns)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < columns; j++)
            to[j * rows + i] = from[i * columns + j];
}

/* C = A B (C zeroed first; sizes as matmul_add's) */
static void product(real_t *C, size_t ldc, const real_t *A, size_t lda, const real_t *B, size_t ldb, size_t m,
                    size_t k, size_t n)
{
    for (size_t i = 0; i < m; i++)
        memset(C + i * ldc, 0, n * sizeof *C);
    matmul_add(C, ldc, A, lda, B, ldb, m, k, n);
}

/* the chunk's rows of q, k, v and do as contiguous tiles, and k^T and v^T */
static void gather_chunk(const gdn_problem *p, const gdn_cotangents *cot, const chunk_at *x, chunk_scratch t)
{
    const size_t K = p->K, V = p->V;
    for (size_t i = 0; i < x->n; i++) {
        const size_t token = token_of(p, x, i);
        memcpy(t.q + i * K, p->q + token * K, K * sizeof(real_t));
        memcpy(t.k + i * K, p->k + token * K, K * sizeof(real_t));
        memcpy(t.v + i * V, p->v + token * V, V * sizeof(real_t));
        memcpy(t.d_o + i * V, cot->d_o + token * V, V * sizeof(real_t));
    }
    transpose(t.k_t, t.k, x->n, K);
    transpose(t.v_t, t.v, x->n, V);
}

/* ---- pass 1: per chunk, in parallel: gamma, Tm (eq. 10-11), W and U (eq. 12), P^T dO ---- */
static void prepare_chunk(const gdn_problem *p, const gdn_cotangents *cot, const workspace *w, chunk_at x,
                          chunk_scratch t)
{
    const size_t K = p->K, V = p->V, n = x.n;
    double *gamma = w->gamma + x.row, sum = 0;
    for (size_t i = 0; i < n; i++)
        gamma[i] = sum += gdn_summed_gate(p->g[token_of(p, &x, i)]); /* real.h: exact, never -1e16 */
    gather_chunk(p, cot, &x, t);
    product(t.G, n, t.k, K, t.k_t, n, n, K, n); /* K K^T */
    product(t.QK, n, t.q, K, t.k_t, n, n, K, n); /* Q K^T */
    real_t *decay = w->decay + (x.head * w->chunks + x.c) * w->C * w->C;
    for (size_t i = 0; i < n; i++) {
        const real_t beta = p->beta[token_of(p, &x, i)];
        for (size_t j = 0; j < n; j++) {
            decay[i * n + j] = j <= i ? (real_t)exp(gamma[i] - gamma[j]) : 0; /* never exp of a positive gap */
            t.M[i * n + j] = j < i ? beta * decay[i * n + j] * t.G[i * n + j] : 0;
            t.Z_t[j * n + i] = (real_t)p->scale * decay[i * n + j] * t.QK[i * n + j]; /* P^T */
        }
        const real_t grown = -beta * (real_t)exp(gamma[i]); /* exp out of the loop: the compiler keeps every call */
        for (size_t c = 0; c < K; c++) /* Y = -beta e^gamma K (W's sign: minus_W), X = beta V (eq. 12) */
            t.Y[i * K + c] = grown * t.k[i * K + c];
        for (size_t c = 0; c < V; c++)
            t.X[i * V + c] = beta * t.v[i * V + c];
    }
    real_t *Tm = w->Tm + (x.head * w->chunks + x.c) * w->C * w->C;
    wy_solve_tril(Tm, t.M, n);
    product(w->minus_W + x.row * K, K, Tm, n, t.Y, K, n, n, K);
    product(w->U + x.row * V, V, Tm, n, t.X, V, n, n, V);
    product(w->dVnew + x.row * V, V, t.Z_t, n, t.d_o, V, n, n, V); /* P^T dO, eq. 19a's first term */
}

/* ---- pass 2: the forward chain of a head: S0 of each chunk, Vnew = U - W S0 (eq. 13), eq. 15 ---- */
static void forward_chain(const gdn_problem *p, const workspace *w, size_t head, gdn_result *r, chunk_scratch t)
{
    const size_t K = p->K, V = p->V, KV = K * V;
    real_t *S = w->S0 + head * w->chunks * KV;
    gdn_initial_state(p, head, S);
    for (size_t c = 0; c < w->chunks; c++, S += KV) {
        const chunk_at x = chunk_of(p, w, head, c);
        const size_t n = x.n;
        const double *gamma = w->gamma + x.row, gamma_C = gamma[n - 1];
        real_t *Vnew = w->U + x.row * V, *next = c + 1 < w->chunks ? S + KV : r->ht + head * KV;
        matmul_add(Vnew, V, w->minus_W + x.row * K, K, S, V, n, K, V); /* U - W S0 */
        for (size_t j = 0; j < n; j++) { /* Kdec^T: column j is e^(gamma_C - gamma_j) k_j */
            const real_t decay = (real_t)exp(gamma_C - gamma[j]), *k = k_of(p, &x, j);
            for (size_t a = 0; a < K; a++)
                t.decayed_k_t[a * n + j] = decay * k[a];
        }
        const real_t decay_C = (real_t)exp(gamma_C); /* once: the compiler keeps every call in a loop */
        for (size_t ij = 0; ij < KV; ij++)
            next[ij] = decay_C * S[ij];
        matmul_add(next, V, t.decayed_k_t, n, Vnew, V, K, n, V);
    }
}

/* ---- pass 3: the backward chain of a head: dS_C of each chunk, dVnew (eq. 19a), dS0 (eq. 19b) ---- */
static void backward_chain(const gdn_problem *p, const gdn_cotangents *cot, const workspace *w, size_t head,
                           gdn_gradients *g, real_t *dS, chunk_scratch t)
{
    const size_t K = p->K, V = p->V, KV = K * V;
    memcpy(dS, cot->dht + head * KV, KV * sizeof *dS);
    for (size_t c = w->chunks; c-- > 0;) {
        const chunk_at x = chunk_of(p, w, head, c);
        const size_t n = x.n;
        const double *gamma = w->gamma + x.row, gamma_C = gamma[n - 1];
        real_t *dVnew = w->dVnew + x.row * V;
        memcpy(w->dS_end + (head * w->chunks + c) * KV, dS, KV * sizeof *dS);
        for (size_t i = 0; i < n; i++) { /* the tiles: Kdec, scale (e^gamma Q)^T, -W^T, dO */
            const real_t decay = (real_t)exp(gamma_C - gamma[i]), read = (real_t)(p->scale * exp(gamma[i]));
            const real_t *k = k_of(p, &x, i), *q = q_of(p, &x, i), *minus_W = w->minus_W + (x.row + i) * K;
            for (size_t a = 0; a < K; a++) {
                t.decayed_k[i * K + a] = decay * k[a];
                t.read_q_t[a * n + i] = read * q[a];
                t.minus_W_t[a * n + i] = minus_W[a];
            }
            memcpy(t.d_o + i * V, cot->d_o + token_of(p, &x, i) * V, V * sizeof(real_t));
        }
        matmul_add(dVnew, V, t.decayed_k, K, dS, V, n, K, V); /* dVnew = P^T dO + Kdec dS_C */
        const real_t decay_C = (real_t)exp(gamma_C);
        for (size_t ij = 0; ij < KV; ij++)
            dS[ij] *= decay_C;
        matmul_add(dS, V, t.read_q_t, n, t.d_o, V, K, n, V);  /* + scale Qg^T dO */
        matmul_add(dS, V, t.minus_W_t, n, dVnew, V, K, n, V); /* - W^T dVnew */
    }
    if (g->dh0)
        memcpy(g->dh0 + head * KV, dS, KV * sizeof *dS);
}

/* ---- pass 4: per chunk, in parallel: o (eq. 14) and every gradient of the chunk's tokens ---- */

/* eq. 14 and its gradients: o, dq; dk and dgamma from P and from the S0 read */
static void read_gradients(const gdn_problem *p, const workspace *w, chunk_at x, gdn_result *r, chunk_scratch t)
{
    const size_t K = p->K, V = p->V, n = x.n;
    const double *gamma = w->gamma + x.row;
    const real_t *S0 = w->S0 + (x.head * w->chunks + x.c) * K * V, *Vnew = w->U + x.row * V;
    const real_t *decays = w->decay + (x.head * w->chunks + x.c) * w->C * w->C;
    product(t.QK, n, t.q, K, t.k_t, n, n, K, n);             /* Q K^T */
    product(t.dP, n, t.d_o, V, t.Vnew_t, n, n, V, n);        /* dP = dO Vnew^T */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) { /* P = scale decay (Q K^T), Z = scale decay dP: both masked */
            const real_t decay = (real_t)p->scale * decays[i * n + j];
            t.P[i * n + j] = decay * t.QK[i * n + j];
            t.Z[i * n + j] = t.Z_t[j * n + i] = decay * t.dP[i * n + j];
            if (j < i) { /* j = i: gamma_i - gamma_i has no gradient; adding it and taking it back
                            would round away what dgamma_i holds where the gates are -200 */
                t.dgamma[i] += t.dP[i * n + j] * t.P[i * n + j];
                t.dgamma[j] -= t.dP[i * n + j] * t.P[i * n + j];
            }
        }
    product(t.o, V, t.q, K, S0, V, n, K, V);     /* o_i = scale e^gamma_i S0^T q_i + (P Vnew)_i */
    product(t.dq, K, t.d_o, V, t.S0_t, K, n, V, K); /* dq_i = scale e^gamma_i S0 dO_i + (Z K)_i */
    for (size_t i = 0; i < n; i++) {
        const real_t read = (real_t)(p->scale * exp(gamma[i]));
        t.dgamma[i] += read * dot(t.q + i * K, t.dq + i * K, K);
        for (size_t c = 0; c < V; c++)
            t.o[i * V + c] *= read;
        for (size_t c = 0; c < K; c++)
            t.dq[i * K + c] *= read;
    }
    matmul_add(t.o, V, t.P, n, Vnew, V, n, n, V);
    matmul_add(t.dq, K, t.Z, n, t.k, K, n, n, K);
    product(t.dk, K, t.Z_t, n, t.q, K, n, n, K); /* dk_j = (Z^T Q)_j, and more below */
    for (size_t i = 0; i < n; i++)
        memcpy(r->o + token_of(p, &x, i) * V, t.o + i * V, V * sizeof(real_t));
}

/* eq. 15's gradients: dk and dgamma from Kdec = e^(gamma_C - gamma_j) k_j and from e^gamma_C S0 */
static void state_gradients(const gdn_problem *p, const workspace *w, chunk_at x, chunk_scratch t)
{
    const size_t K = p->K, V = p->V, KV = K * V, last = x.n - 1;
    const double *gamma = w->gamma + x.row;
    const real_t *S0 = w->S0 + (x.head * w->chunks + x.c) * KV, *dS_C = w->dS_end + (x.head * w->chunks + x.c) * KV;
    product(t.dS_Vnew, K, w->U + x.row * V, V, t.dS_t, K, x.n, V, K); /* row j: dS_C Vnew_j */
    for (size_t j = 0; j < x.n; j++) {
        const real_t decay = (real_t)exp(gamma[last] - gamma[j]);
        for (size_t a = 0; a < K; a++)
            t.dk[j * K + a] += decay * t.dS_Vnew[j * K + a];
        if (j < last) { /* the last token's decay is e^0 whatever its gate: nothing to add and take back */
            const real_t dKdec = decay * dot(t.k + j * K, t.dS_Vnew + j * K, K);
            t.dgamma[last] += dKdec;
            t.dgamma[j] -= dKdec;
        }
    }
    t.dgamma[last] += exp(gamma[last]) * dot(S0, dS_C, KV);
}

/* Vnew = U - W S0, U = Tm (beta V), W = Tm (beta e^gamma K) (eq. 12-13) and the solve (eq. 11):
 * dv, dbeta, and dk and dgamma from W and from M (eq. 19c, 19d) */
static void wy_gradients(const gdn_problem *p, const workspace *w, chunk_at x, gdn_gradients *g, chunk_scratch t)
{
    const size_t K = p->K, V = p->V, n = x.n;
    const double *gamma = w->gamma + x.row;
    const real_t *Tm = w->Tm + (x.head * w->chunks + x.c) * w->C * w->C, *dU = w->dVnew + x.row * V;
    const real_t *decays = w->decay + (x.head * w->chunks + x.c) * w->C * w->C;
    product(t.dW, K, dU, V, t.S0_t, K, n, V, K); /* -dW = dVnew S0^T */
    for (size_t i = 0; i < n * K; i++)
        t.dW[i] = -t.dW[i];
    transpose(t.Tm_t, Tm, n, n);
    product(t.dX, V, t.Tm_t, n, dU, V, n, n, V);   /* dX = Tm^T dU: the gradient of X = beta V */
    product(t.dY, K, t.Tm_t, n, t.dW, K, n, n, K); /* dY = Tm^T dW: of Y = beta e^gamma K (eq. 19c) */
    for (size_t j = 0; j < n; j++) {
        const size_t token = token_of(p, &x, j);
        const real_t beta = p->beta[token], grown = (real_t)exp(gamma[j]), dY_k = dot(t.dY + j * K, t.k + j * K, K);
        for (size_t c = 0; c < V; c++)
            g->dv[token * V + c] = beta * t.dX[j * V + c];
        g->dbeta[token] = dot(t.dX + j * V, t.v + j * V, V) + grown * dY_k;
        for (size_t a = 0; a < K; a++)
            t.dk[j * K + a] += beta * grown * t.dY[j * K + a];
        t.dgamma[j] += beta * grown * dY_k;
    }
    /* dTm_ij = beta_j (dU_i . v_j + e^gamma_j dW_i . k_j) below the diagonal (the rest of Tm does
       not depend on M); dM = -Tm^T dTm Tm^T (eq. 19d) */
    product(t.QK, n, dU, V, t.v_t, n, n, V, n);      /* dU V^T, in QK's tile */
    product(t.dP, n, t.dW, K, t.k_t, n, n, K, n);    /* dW K^T, in dP's tile */
    for (size_t j = 0; j < n; j++) { /* column by column: beta_j and e^gamma_j once */
        const real_t beta = p->beta[token_of(p, &x, j)], grown = (real_t)exp(gamma[j]);
        for (size_t i = 0; i < n; i++)
            t.dTm[i * n + j] = j < i ? beta * (t.QK[i * n + j] + grown * t.dP[i * n + j]) : 0;
    }
    product(t.TmT_dTm, n, t.Tm_t, n, t.dTm, n, n, n, n);
    product(t.dM_minus, n, t.TmT_dTm, n, t.Tm_t, n, n, n, n);
    product(t.G, n, t.k, K, t.k_t, n, n, K, n); /* K K^T */
    for (size_t a = 0; a < n; a++) { /* M_ab = beta_a e^(gamma_a - gamma_b) (k_a . k_b), a > b */
        const size_t token = token_of(p, &x, a);
        const real_t beta = p->beta[token];
        for (size_t b = 0; b < n; b++) {
            const real_t decay = b < a ? decays[a * n + b] : 0, dM = -t.dM_minus[a * n + b];
            t.F[a * n + b] = t.F_t[b * n + a] = dM * beta * decay; /* dM_ab dM_ab/d(k_a . k_b) */
            if (b < a) {
                g->dbeta[token] += dM * decay * t.G[a * n + b];
                t.dgamma[a] += t.F[a * n + b] * t.G[a * n + b];
                t.dgamma[b] -= t.F[a * n + b] * t.G[a * n + b];
            }
        }
    }
    matmul_add(t.dk, K, t.F, n, t.k, K, n, n, K);   /* dk_a += sum_b F_ab k_b */
    matmul_add(t.dk, K, t.F_t, n, t.k, K, n, n, K); /* dk_b += sum_a F_ab k_a */
}

static void chunk_gradients(const gdn_problem *p, const gdn_cotangents *cot, const workspace *w, chunk_at x,
                            gdn_result *r, gdn_gradients *g, chunk_scratch t)
{
    const size_t K = p->K, V = p->V, KV = K * V;
    gather_chunk(p, cot, &x, t);
    transpose(t.Vnew_t, w->U + x.row * V, x.n, V);
    transpose(t.S0_t, w->S0 + (x.head * w->chunks + x.c) * KV, K, V);
    transpose(t.dS_t, w->dS_end + (x.head * w->chunks + x.c) * KV, K, V);
    for (size_t i = 0; i < x.n; i++)
        t.dgamma[i] = 0;
    read_gradients(p, w, x, r, t);
    state_gradients(p, w, x, t);
    wy_gradients(p, w, x, g, t);
    double from_later = 0; /* gamma_i = g_0 + ... + g_i: dg_t = sum of dgamma_i over i >= t */
    for (size_t i = x.n; i-- > 0;) {
        const size_t token = token_of(p, &x, i);
        g->dg[token] = (real_t)(from_later += t.dgamma[i]);
        memcpy(g->dq + token * K, t.dq + i * K, K * sizeof(real_t));
        memcpy(g->dk + token * K, t.dk + i * K, K * sizeof(real_t));
    }
}

static int backward_chunked_backward(const gdn_problem *p, const gdn_cotangents *cot, const gdn_settings *s,
                                     gdn_result *r, gdn_gradients *g)
{
    const size_t K = p->K, V = p->V, C = s->chunk ? s->chunk : 64, heads = p->B * p->H;
    workspace w = {C, (p->T + C - 1) / C, p->T, K, V, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t rows, states, squares, per_row, reals, bytes;
    if (gdn_multiply_sizes(&rows, 2, (size_t[]){heads, p->T}) ||
        gdn_multiply_sizes(&states, 4, (size_t[]){heads, w.chunks, K, V}) ||
        gdn_multiply_sizes(&squares, 4, (size_t[]){2, heads, w.chunks, C * C}) ||
        gdn_multiply_sizes(&per_row, 2, (size_t[]){rows, K + 2 * V}))
        return -1;
    reals = squares + per_row;
    if (reals < per_row || reals + 2 * states < reals || (reals += 2 * states) > SIZE_MAX / sizeof(real_t) ||
        (bytes = reals * sizeof(real_t) + rows * sizeof(double)) < reals * sizeof(real_t))
        return gdn_set_error("the backward's workspace for %zu heads of %zu tokens overflows size_t", heads, p->T);
    if (gdn_memory_check(bytes, "the backward's workspace"))
        return -1;
    w.gamma = malloc(rows * sizeof *w.gamma);
    w.Tm = malloc(reals * sizeof *w.Tm);
    if (!w.gamma || !w.Tm) {
        free(w.gamma);
        free(w.Tm);
        return gdn_set_error("out of memory for the backward's workspace (%zu bytes)", reals * sizeof(real_t));
    }
    w.decay = w.Tm + heads * w.chunks * C * C;
    w.minus_W = w.decay + heads * w.chunks * C * C;
    w.U = w.minus_W + rows * K;
    w.dVnew = w.U + rows * V;
    w.S0 = w.dVnew + rows * V;
    w.dS_end = w.S0 + states;
    gdn_scratch scratch;
    const size_t per_thread = chunk_scratch_bytes(C, K, V) + K * V * sizeof(real_t); /* and the chains' dS */
    if (gdn_scratch_alloc(&scratch, per_thread)) {
        free(w.gamma);
        free(w.Tm);
        return -1;
    }
#pragma omp parallel
    {
        void *mine = gdn_scratch_mine(&scratch);
        chunk_scratch tiles = chunk_scratch_at(mine, C, K, V);
        real_t *dS = (real_t *)((unsigned char *)mine + chunk_scratch_bytes(C, K, V));
#pragma omp for collapse(2) schedule(static)
        for (size_t head = 0; head < heads; head++) /* pass 1 */
            for (size_t c = 0; c < w.chunks; c++)
                prepare_chunk(p, cot, &w, chunk_of(p, &w, head, c), tiles);
#pragma omp for schedule(static)
        for (size_t head = 0; head < heads; head++) { /* passes 2 and 3: each head's two chains */
            forward_chain(p, &w, head, r, tiles);
            backward_chain(p, cot, &w, head, g, dS, tiles);
        }
#pragma omp for collapse(2) schedule(static)
        for (size_t head = 0; head < heads; head++) /* pass 4 */
            for (size_t c = 0; c < w.chunks; c++)
                chunk_gradients(p, cot, &w, chunk_of(p, &w, head, c), r, g, tiles);
    }
    gdn_scratch_free(&scratch);
    free(w.gamma);
    free(w.Tm);
    return 0;
}

double backward_chunked_flops(const gdn_problem *p, const gdn_settings *s)
{
    const double C = (double)(s->chunk ? s->chunk : 64), K = (double)p->K, V = (double)p->V;
    /* a chunk's products as multiply-adds: 9 C K V (the chains' 5, pass 4's 4), C^2 (11 K + 6 V)
       (pass 1's 3 K + 2 V, pass 4's 8 K + 4 V) and 2 C^3 (Tm^T dTm Tm^T), the solve C^3 / 6;
       per token, two flops each, over C tokens */
    return (double)gdn_tokens(p) * (18.0 * K * V + C * (22.0 * K + 12.0 * V) + 13.0 / 3.0 * C * C);
}

static void backward_chunked_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    (void)p;
    if (s->chunk == 0)
        s->chunk = 64;
}

const gdn_backward_stage backward_chunked_stage = {
    .name = "10_backward_chunked",
    .idea = "the gradients of the chunked WY form: per-chunk products around a forward and a backward chain",
    .options = GDN_OPTION_CHUNK,
    .backward = backward_chunked_backward,
    .counted_flops = backward_chunked_flops,
    .resolve_options = backward_chunked_resolve_options,
};
