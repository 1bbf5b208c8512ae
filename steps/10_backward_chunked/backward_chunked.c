/* 10_backward_chunked -- the gradients of stage 05's chunked WY form: two parallel passes around
 * two serial chains, one forward and one backward.
 *
 * The idea (docs/10_backward_chunked.md): differentiate eq. 9-15 of a chunk instead of eq. 1 of a
 * token. Stage 09's dS runs back through a chunk's C tokens at once as
 *     dVnew = P^T dO + Kdec dS_C                                        (eq. 17a)
 *     dS0   = scale Qg^T dO + exp(gamma_C) dS_C - W^T dVnew             (eq. 17b)
 * (P_ij = scale (q_i . k_j) exp(gamma_i - gamma_j), i >= j; Kdec_j = exp(gamma_C - gamma_j) k_j;
 * Qg_i = exp(gamma_i) q_i): the transpose of eq. 13-15, a chain over chunks like the forward's.
 * Everything else is local to a chunk once its S0, Vnew and dS_C are known: the gradients of
 * eq. 14 and 15 (dq, and dk and dgamma from P and Kdec), of Vnew = U - W S0 (dU = dVnew, dW =
 * -dVnew S0^T), of the WY products U = Tm (beta V) and W = Tm (beta e^gamma K) (eq. 17c), and of
 * the solve Tm = (I + M)^-1 (eq. 17d):
 *     dM = -Tm^T dTm Tm^T,   kept below the diagonal, where M depends on the inputs
 * and dg is dgamma summed from the end of the chunk back (gamma is g's running sum).
 * So the pass is FLA's: (1) in parallel over every chunk, the solve, W, U and P^T dO; (2) the
 * forward chain, S0 of every chunk and Vnew; (3) the backward chain, dS_C of every chunk and
 * dVnew; (4) in parallel over every chunk, o and the gradients. W and U are recomputed from the
 * inputs, never kept from a forward pass; the states S0 and dS_C are kept, one K x V matrix a
 * chunk each (the memory the chunk size trades: T / C states a head).
 *
 * Cost per token (backward_chunked_flops): about 20 K V (the chains' 10 and the local products'
 * 10) plus C (12 K + 10 V) and the solve's and its gradient's C^2: at C = 64 and K = V = 64
 * about 2.2 times stage 09's 21 K V, in matrix products. Memory: the inputs, the gradients and
 * per head T (K + 2 V + C) + 2 (T / C) K V values. Depth: 2 T / C chunk steps.
 *
 * Build and run:  make bin/10_backward_chunked && bin/10_backward_chunked --T 1024 --h0 --chunk 64 --check-against oracle
 */
#include "backward_chunked.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/error.h"
#include "../../common/scratch.h"
#include "../05_wy_chunked/wy_chunked.h" /* wy_solve_tril: the solve of eq. 11, unchanged */

/* What passes 1-3 leave for the next, per head (offsets in chunk_rows()). */
typedef struct {
    size_t C, chunks, T, K, V;
    double *gamma;        /* [heads T] running sums of g inside each chunk */
    real_t *Tm;           /* [heads chunks C C] (I + M)^-1 */
    real_t *W, *U;        /* [heads T K], [heads T V]: U becomes Vnew in pass 2 */
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
static const real_t *v_of(const gdn_problem *p, const chunk_at *x, size_t i) { return p->v + token_of(p, x, i) * p->V; }

/* a . b; `omp simd reduction` lets the compiler split the sum over vector lanes (it may not
   reorder a plain loop's sum by itself), which the many dot products of pass 4 need */
static real_t dot(const real_t *restrict a, const real_t *restrict b, size_t n)
{
    real_t sum = 0;
#pragma omp simd reduction(+ : sum)
    for (size_t i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* ---- pass 1: per chunk, in parallel: gamma, Tm (eq. 10-11), W and U (eq. 12), P^T dO ---- */
static void prepare_chunk(const gdn_problem *p, const gdn_cotangents *cot, const workspace *w, chunk_at x, real_t *M)
{
    const size_t K = p->K, V = p->V, n = x.n, C = w->C;
    double *gamma = w->gamma + x.row, sum = 0;
    for (size_t i = 0; i < n; i++)
        gamma[i] = sum += (double)p->g[token_of(p, &x, i)];
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            M[i * n + j] = j < i ? p->beta[token_of(p, &x, i)] * (real_t)exp(gamma[i] - gamma[j]) *
                                       dot(k_of(p, &x, i), k_of(p, &x, j), K)
                                 : 0;
    real_t *Tm = w->Tm + (x.head * w->chunks + x.c) * C * C;
    wy_solve_tril(Tm, M, n);
    for (size_t i = 0; i < n; i++) {
        real_t *W = w->W + (x.row + i) * K, *U = w->U + (x.row + i) * V, *dP_o = w->dVnew + (x.row + i) * V;
        memset(W, 0, K * sizeof *W);
        memset(U, 0, V * sizeof *U);
        memset(dP_o, 0, V * sizeof *dP_o);
        for (size_t j = 0; j <= i; j++) { /* W_i = sum_j Tm_ij beta_j e^gamma_j k_j;  U_i = sum_j Tm_ij beta_j v_j */
            const real_t beta = p->beta[token_of(p, &x, j)], a = Tm[i * n + j] * beta * (real_t)exp(gamma[j]);
            const real_t *k = k_of(p, &x, j), *v = v_of(p, &x, j);
            for (size_t c = 0; c < K; c++)
                W[c] += a * k[c];
            for (size_t c = 0; c < V; c++)
                U[c] += Tm[i * n + j] * beta * v[c];
        }
        for (size_t l = i; l < n; l++) { /* (P^T dO)_i = sum_{l >= i} P_li dO_l */
            const real_t P = (real_t)p->scale * (real_t)exp(gamma[l] - gamma[i]) * dot(q_of(p, &x, l), k_of(p, &x, i), K);
            const real_t *d_o = cot->d_o + token_of(p, &x, l) * V;
            for (size_t c = 0; c < V; c++)
                dP_o[c] += P * d_o[c];
        }
    }
}

/* ---- pass 2: the forward chain of a head: S0 of each chunk, Vnew = U - W S0 (eq. 13), eq. 15 ---- */
static void forward_chain(const gdn_problem *p, const workspace *w, size_t head, gdn_result *r)
{
    const size_t K = p->K, V = p->V, KV = K * V;
    real_t *S = w->S0 + head * w->chunks * KV;
    gdn_initial_state(p, head, S);
    for (size_t c = 0; c < w->chunks; c++, S += KV) {
        const chunk_at x = chunk_of(p, w, head, c);
        const double *gamma = w->gamma + x.row, gamma_C = gamma[x.n - 1];
        real_t *next = c + 1 < w->chunks ? S + KV : r->ht + head * KV;
        for (size_t ij = 0; ij < KV; ij++)
            next[ij] = (real_t)exp(gamma_C) * S[ij];
        for (size_t i = 0; i < x.n; i++) {
            real_t *Vnew = w->U + (x.row + i) * V;
            const real_t *W = w->W + (x.row + i) * K, *k = k_of(p, &x, i), decay = (real_t)exp(gamma_C - gamma[i]);
            for (size_t a = 0; a < K; a++)
                for (size_t j = 0; j < V; j++)
                    Vnew[j] -= W[a] * S[a * V + j];
            for (size_t a = 0; a < K; a++)
                for (size_t j = 0; j < V; j++)
                    next[a * V + j] += decay * k[a] * Vnew[j];
        }
    }
}

/* ---- pass 3: the backward chain of a head: dS_C of each chunk, dVnew (eq. 17a), dS0 (eq. 17b) ---- */
static void backward_chain(const gdn_problem *p, const gdn_cotangents *cot, const workspace *w, size_t head,
                           gdn_gradients *g, real_t *dS)
{
    const size_t K = p->K, V = p->V, KV = K * V;
    memcpy(dS, cot->dht + head * KV, KV * sizeof *dS);
    for (size_t c = w->chunks; c-- > 0;) {
        const chunk_at x = chunk_of(p, w, head, c);
        const double *gamma = w->gamma + x.row, gamma_C = gamma[x.n - 1];
        memcpy(w->dS_end + (head * w->chunks + c) * KV, dS, KV * sizeof *dS);
        for (size_t i = 0; i < x.n; i++) { /* dVnew_i = (P^T dO)_i + e^(gamma_C - gamma_i) dS^T k_i */
            real_t *dVnew = w->dVnew + (x.row + i) * V;
            const real_t *k = k_of(p, &x, i), decay = (real_t)exp(gamma_C - gamma[i]);
            for (size_t a = 0; a < K; a++)
                for (size_t j = 0; j < V; j++)
                    dVnew[j] += decay * k[a] * dS[a * V + j];
        }
        for (size_t ij = 0; ij < KV; ij++)
            dS[ij] *= (real_t)exp(gamma_C);
        for (size_t i = 0; i < x.n; i++) { /* dS0 += scale e^gamma_i q_i dO_i^T - W_i dVnew_i^T */
            const real_t *q = q_of(p, &x, i), *W = w->W + (x.row + i) * K, *dVnew = w->dVnew + (x.row + i) * V;
            const real_t *d_o = cot->d_o + token_of(p, &x, i) * V, read = (real_t)(p->scale * exp(gamma[i]));
            for (size_t a = 0; a < K; a++)
                for (size_t j = 0; j < V; j++)
                    dS[a * V + j] += read * q[a] * d_o[j] - W[a] * dVnew[j];
        }
    }
    if (g->dh0)
        memcpy(g->dh0 + head * KV, dS, KV * sizeof *dS);
}

/* ---- pass 4: per chunk, in parallel: o (eq. 14) and every gradient of the chunk's tokens ---- */
typedef struct {
    double *dgamma;                      /* [C] dL/dgamma_i */
    real_t *dW, *dX, *dY, *dTm, *TmT_dTm; /* [C K], [C V], [C K], [C C], [C C] */
} gradient_scratch;

static size_t gradient_scratch_bytes(size_t C, size_t K, size_t V)
{
    return C * sizeof(double) + (C * (2 * K + V) + 2 * C * C) * sizeof(real_t);
}

static gradient_scratch gradient_scratch_at(void *base, size_t C, size_t K, size_t V)
{
    gradient_scratch x;
    x.dgamma = base;
    x.dW = (real_t *)(x.dgamma + C);
    x.dX = x.dW + C * K;
    x.dY = x.dX + C * V;
    x.dTm = x.dY + C * K;
    x.TmT_dTm = x.dTm + C * C;
    return x;
}

/* eq. 14 and its gradients: o, dq; dk and dgamma from P and from the S0 read */
static void read_gradients(const gdn_problem *p, const gdn_cotangents *cot, const workspace *w, chunk_at x,
                           gdn_result *r, gdn_gradients *g, double *dgamma)
{
    const size_t K = p->K, V = p->V;
    const double *gamma = w->gamma + x.row;
    const real_t *S0 = w->S0 + (x.head * w->chunks + x.c) * K * V, scale = (real_t)p->scale;
    for (size_t i = 0; i < x.n; i++) {
        const size_t token = token_of(p, &x, i);
        const real_t *q = q_of(p, &x, i), *d_o = cot->d_o + token * V, read = (real_t)(p->scale * exp(gamma[i]));
        real_t *o = r->o + token * V, *dq = g->dq + token * K;
        real_t dread = 0; /* q_i . (S0 dO_i): the gradient of the read's factor e^gamma_i */
        for (size_t j = 0; j < V; j++)
            o[j] = 0;
        for (size_t a = 0; a < K; a++) {
            real_t S0_do = 0;
            for (size_t j = 0; j < V; j++) {
                o[j] += read * q[a] * S0[a * V + j];
                S0_do += S0[a * V + j] * d_o[j];
            }
            dq[a] = read * S0_do;
            dread += q[a] * S0_do;
        }
        dgamma[i] += read * dread;
        for (size_t j = 0; j <= i; j++) { /* P_ij = scale e^(gamma_i - gamma_j) q_i . k_j */
            const real_t *k = k_of(p, &x, j), *Vnew = w->U + (x.row + j) * V;
            const real_t decayed = scale * (real_t)exp(gamma[i] - gamma[j]), P = decayed * dot(q, k, K);
            const real_t dP = dot(d_o, Vnew, V);
            real_t *dk = g->dk + token_of(p, &x, j) * K;
            for (size_t c = 0; c < V; c++)
                o[c] += P * Vnew[c];
            for (size_t a = 0; a < K; a++) {
                dq[a] += decayed * dP * k[a];
                dk[a] += decayed * dP * q[a];
            }
            if (j < i) { /* j = i: gamma_i - gamma_i, no gradient (adding and taking it back would */
                dgamma[i] += dP * P; /* round away what dgamma_i holds where the gates are -200) */
                dgamma[j] -= dP * P;
            }
        }
    }
}

/* eq. 15's gradients: dk and dgamma from Kdec = e^(gamma_C - gamma_j) k_j and from e^gamma_C S0 */
static void state_gradients(const gdn_problem *p, const workspace *w, chunk_at x, gdn_gradients *g, double *dgamma)
{
    const size_t K = p->K, V = p->V, KV = K * V, last = x.n - 1;
    const double *gamma = w->gamma + x.row;
    const real_t *S0 = w->S0 + (x.head * w->chunks + x.c) * KV, *dS_C = w->dS_end + (x.head * w->chunks + x.c) * KV;
    for (size_t j = 0; j < x.n; j++) {
        const real_t *k = k_of(p, &x, j), *Vnew = w->U + (x.row + j) * V, decay = (real_t)exp(gamma[last] - gamma[j]);
        real_t *dk = g->dk + token_of(p, &x, j) * K, dKdec = 0;
        for (size_t a = 0; a < K; a++) {
            const real_t dS_Vnew = dot(dS_C + a * V, Vnew, V);
            dk[a] += decay * dS_Vnew;
            dKdec += k[a] * dS_Vnew;
        }
        if (j < last) { /* the last token's decay is e^0 whatever its gate: nothing to add and take back */
            dgamma[last] += decay * dKdec;
            dgamma[j] -= decay * dKdec;
        }
    }
    dgamma[last] += exp(gamma[last]) * dot(S0, dS_C, KV);
}

/* Vnew = U - W S0, U = Tm (beta V), W = Tm (beta e^gamma K) (eq. 12-13) and the solve (eq. 11):
 * dv, dbeta, and dk and dgamma from W and from M (eq. 17c, 17d) */
static void wy_gradients(const gdn_problem *p, const workspace *w, chunk_at x, gdn_gradients *g, gradient_scratch s)
{
    const size_t K = p->K, V = p->V, n = x.n;
    const double *gamma = w->gamma + x.row;
    const real_t *S0 = w->S0 + (x.head * w->chunks + x.c) * K * V, *Tm = w->Tm + (x.head * w->chunks + x.c) * w->C * w->C;
    const real_t *dU = w->dVnew + x.row * V; /* dU = dVnew; dW = -dVnew S0^T */
    for (size_t i = 0; i < n; i++)
        for (size_t a = 0; a < K; a++)
            s.dW[i * K + a] = -dot(S0 + a * V, dU + i * V, V);
    /* dX = Tm^T dU, dY = Tm^T dW: the gradients of beta V and of beta e^gamma K (eq. 17c) */
    memset(s.dX, 0, n * V * sizeof *s.dX);
    memset(s.dY, 0, n * K * sizeof *s.dY);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            for (size_t c = 0; c < V; c++)
                s.dX[j * V + c] += Tm[i * n + j] * dU[i * V + c];
            for (size_t a = 0; a < K; a++)
                s.dY[j * K + a] += Tm[i * n + j] * s.dW[i * K + a];
        }
    for (size_t j = 0; j < n; j++) {
        const size_t token = token_of(p, &x, j);
        const real_t beta = p->beta[token], grown = (real_t)exp(gamma[j]), *k = k_of(p, &x, j);
        const real_t dYk = dot(s.dY + j * K, k, K);
        real_t *dk = g->dk + token * K;
        for (size_t c = 0; c < V; c++)
            g->dv[token * V + c] = beta * s.dX[j * V + c];
        g->dbeta[token] = dot(s.dX + j * V, v_of(p, &x, j), V) + grown * dYk;
        for (size_t a = 0; a < K; a++)
            dk[a] += beta * grown * s.dY[j * K + a];
        s.dgamma[j] += beta * grown * dYk;
    }
    /* dTm_ij = dU_i . (beta v)_j + dW_i . (beta e^gamma k)_j, below the diagonal (the rest of Tm
       does not depend on M); dM = -Tm^T dTm Tm^T (eq. 17d) */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            const real_t beta = p->beta[token_of(p, &x, j)];
            s.dTm[i * n + j] = j < i ? beta * (dot(dU + i * V, v_of(p, &x, j), V) +
                                               (real_t)exp(gamma[j]) * dot(s.dW + i * K, k_of(p, &x, j), K))
                                     : 0;
        }
    for (size_t a = 0; a < n; a++) /* Tm^T dTm: Tm is lower, dTm strictly lower */
        for (size_t b = 0; b < n; b++) {
            real_t sum = 0;
            for (size_t i = a > b + 1 ? a : b + 1; i < n; i++)
                sum += Tm[i * n + a] * s.dTm[i * n + b];
            s.TmT_dTm[a * n + b] = sum;
        }
    for (size_t a = 1; a < n; a++)
        for (size_t b = 0; b < a; b++) {
            real_t dM = 0; /* -(Tm^T dTm Tm^T)_ab */
            for (size_t c = 0; c <= b; c++)
                dM -= s.TmT_dTm[a * n + c] * Tm[b * n + c];
            const size_t token_a = token_of(p, &x, a), token_b = token_of(p, &x, b);
            const real_t *k_a = k_of(p, &x, a), *k_b = k_of(p, &x, b), beta = p->beta[token_a];
            const real_t decay = (real_t)exp(gamma[a] - gamma[b]), M = beta * decay * dot(k_a, k_b, K);
            real_t *dk_a = g->dk + token_a * K, *dk_b = g->dk + token_b * K;
            g->dbeta[token_a] += dM * decay * dot(k_a, k_b, K);
            for (size_t c = 0; c < K; c++) {
                dk_a[c] += dM * beta * decay * k_b[c];
                dk_b[c] += dM * beta * decay * k_a[c];
            }
            s.dgamma[a] += dM * M;
            s.dgamma[b] -= dM * M;
        }
}

static void chunk_gradients(const gdn_problem *p, const gdn_cotangents *cot, const workspace *w, chunk_at x,
                            gdn_result *r, gdn_gradients *g, gradient_scratch s)
{
    for (size_t i = 0; i < x.n; i++) {
        s.dgamma[i] = 0;
        memset(g->dk + token_of(p, &x, i) * p->K, 0, p->K * sizeof(real_t));
    }
    read_gradients(p, cot, w, x, r, g, s.dgamma);
    state_gradients(p, w, x, g, s.dgamma);
    wy_gradients(p, w, x, g, s);
    double from_later = 0; /* gamma_i = g_0 + ... + g_i: dg_t = sum of dgamma_i over i >= t */
    for (size_t i = x.n; i-- > 0;)
        g->dg[token_of(p, &x, i)] = (real_t)(from_later += s.dgamma[i]);
}

static int backward_chunked_backward(const gdn_problem *p, const gdn_cotangents *cot, const gdn_settings *s,
                                     gdn_result *r, gdn_gradients *g)
{
    const size_t K = p->K, V = p->V, C = s->chunk ? s->chunk : 64, heads = p->B * p->H;
    workspace w = {C, (p->T + C - 1) / C, p->T, K, V, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t rows, states;
    if (gdn_multiply_sizes(&rows, 2, (size_t[]){heads, p->T}) ||
        gdn_multiply_sizes(&states, 4, (size_t[]){heads, w.chunks, K, V}))
        return -1;
    const size_t reals = heads * w.chunks * C * C + rows * (K + 2 * V) + 2 * states;
    w.gamma = malloc(rows * sizeof *w.gamma);
    w.Tm = malloc(reals * sizeof *w.Tm);
    if (!w.gamma || !w.Tm) {
        free(w.gamma);
        free(w.Tm);
        return gdn_set_error("out of memory for the backward's workspace (%zu bytes)", reals * sizeof(real_t));
    }
    w.W = w.Tm + heads * w.chunks * C * C;
    w.U = w.W + rows * K;
    w.dVnew = w.U + rows * V;
    w.S0 = w.dVnew + rows * V;
    w.dS_end = w.S0 + states;
    gdn_scratch scratch;
    size_t per_thread = gradient_scratch_bytes(C, K, V);
    if (per_thread < (C * C > K * V ? C * C : K * V) * sizeof(real_t))
        per_thread = (C * C > K * V ? C * C : K * V) * sizeof(real_t);
    if (gdn_scratch_alloc(&scratch, per_thread)) {
        free(w.gamma);
        free(w.Tm);
        return -1;
    }
#pragma omp parallel
    {
        void *mine = gdn_scratch_mine(&scratch);
#pragma omp for collapse(2) schedule(static)
        for (size_t head = 0; head < heads; head++) /* pass 1 */
            for (size_t c = 0; c < w.chunks; c++)
                prepare_chunk(p, cot, &w, chunk_of(p, &w, head, c), mine);
#pragma omp for schedule(static)
        for (size_t head = 0; head < heads; head++) { /* passes 2 and 3: each head's two chains */
            forward_chain(p, &w, head, r);
            backward_chain(p, cot, &w, head, g, mine);
        }
#pragma omp for collapse(2) schedule(static)
        for (size_t head = 0; head < heads; head++) /* pass 4 */
            for (size_t c = 0; c < w.chunks; c++)
                chunk_gradients(p, cot, &w, chunk_of(p, &w, head, c), r, g, gradient_scratch_at(mine, C, K, V));
    }
    gdn_scratch_free(&scratch);
    free(w.gamma);
    free(w.Tm);
    return 0;
}

double backward_chunked_flops(const gdn_problem *p, const gdn_settings *s)
{
    const double C = (double)(s->chunk ? s->chunk : 64), K = (double)p->K, V = (double)p->V;
    /* per token: the chains' 10 K V and the local products' 10 K V; the products with the chunk's
       other tokens (M, W, U, P^T dO, P, dX, dY, dTm, dM's rank updates): C (12 K + 10 V) / 2 on
       average over a triangle, times two for the multiply-add; the solve and dM, C^2 */
    return (double)gdn_tokens(p) * (20.0 * K * V + C * (12.0 * K + 10.0 * V) + C * C);
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
