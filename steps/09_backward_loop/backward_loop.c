/* 09_backward_loop -- the gradients of Gated DeltaNet, one token at a time, backwards in time.
 *
 * The idea (docs/09_backward_loop.md): the forward step (eq. 1a-1d) is affine in the state,
 *     S_t = A_t S_{t-1} + k_t (beta_t v_t)^T,   A_t = (I - beta_t k_t k_t^T) alpha_t,
 * so the gradient of the loss with respect to the state, dS_t = dL/dS_t, runs through the
 * transposed maps the other way (A_t is symmetric):
 *     dS_t     += scale q_t do_t^T                          (read, eq. 18a)
 *     du        = dS_t^T k_t                                 (write, eq. 18b)
 *     dS_{t-1}  = alpha_t (dS_t - beta_t k_t du^T)           (eq. 18c)
 * and each token's input gradients are read off the same step:
 *     dq_t = scale S_t do_t
 *     dk_t = dS_t u_t - beta_t S'_t du                       (S'_t = alpha_t S_{t-1})
 *     dv_t = beta_t du,   dbeta_t = du . (v_t - S'_t^T k_t)
 *     dg_t = < dS_t - beta_t k_t du^T , S'_t >              (alpha_t = exp(g_t))
 *     dh0  = dS_{-1}
 * The loop back needs S_{t-1}, S_t and u_t at every token, in the reverse order of the forward:
 * the forward keeps the state every KEPT_EVERY tokens, and each stretch is recomputed from the
 * state kept before it, just before the loop back walks it (a checkpoint, memory against time).
 * Heads are independent, but value heads that share a key head (grouped value heads) add
 * their dq and dk into the same rows: OpenMP runs one (sequence, key head) per thread, its
 * value heads one after another, so each row's sum has one writer and one order.
 *
 * Cost per token and head, counted from the loops (a factor of a loop's row, scale q_i or
 * beta k_i, taken once a row): the forward twice without its read (5 K V each: decay, S^T k,
 * write) and the step back, 20 K V (o and dq 4, dS += q do^T 2, du 2, S'^T k 2 again for
 * dbeta, dk's two sums 4, dS' 2, dg 2, alpha dS' and S' 2): 30 K V flops, 4.3 times the
 * forward's 7 K V. Memory: (T / KEPT_EVERY + KEPT_EVERY) K V values a thread (kept every
 * 64 tokens, T = 4096: 128 states where keeping them all takes 4096). Depth: 2 T serial steps
 * per head.
 *
 * Build and run:  make bin/09_backward_loop && bin/09_backward_loop --T 1024 --h0 --check-against oracle
 */
#include "backward_loop.h"

#include <string.h>

#include "../../common/scratch.h"

enum { KEPT_EVERY = 64 };

/* One forward token (eq. 1a-1c) on S: decay, u = beta (v - S'^T k), write; u kept for the loop
 * back. o is made on the way back, where S_t is at hand. */
static void forward_token(real_t *restrict S, size_t K, size_t V, const real_t *restrict k, const real_t *restrict v,
                          real_t alpha, real_t beta, real_t *restrict u)
{
    for (size_t j = 0; j < V; j++)
        u[j] = 0;
    for (size_t i = 0; i < K; i++)
        for (size_t j = 0; j < V; j++) {
            S[i * V + j] *= alpha;
            u[j] += S[i * V + j] * k[i];
        }
    for (size_t j = 0; j < V; j++)
        u[j] = beta * (v[j] - u[j]);
    for (size_t i = 0; i < K; i++)
        for (size_t j = 0; j < V; j++)
            S[i * V + j] += k[i] * u[j];
}

/* One token back (eq. 18a-18c): o_t and the token's gradients (dq and dk added to their key
 * rows); dS from dL/dS_t to dL/dS_{t-1}. token: the value-head token (v, g, beta, o), keys: its
 * key row (q, k). S_prev is the state before the token, S_t after it; scratch holds 2 V values. */
static void backward_token(const gdn_problem *p, const gdn_cotangents *c, size_t token, size_t keys,
                           const real_t *restrict S_prev, const real_t *restrict S_t, const real_t *restrict u,
                           real_t *restrict dS, gdn_result *r, gdn_gradients *g, real_t *restrict scratch)
{
    const size_t K = p->K, V = p->V;
    const real_t alpha = real_exp(p->g[token]), beta = p->beta[token], scale = (real_t)p->scale;
    const real_t *restrict q = p->q + keys * K, *restrict k = p->k + keys * K, *restrict v = p->v + token * V;
    const real_t *restrict d_o = c->d_o + token * V;
    real_t *restrict du = scratch, *restrict predicted = scratch + V;
    real_t *restrict o = r->o + token * V, *restrict dq = g->dq + keys * K, *restrict dk = g->dk + keys * K;
    /* the read: o_t = scale S_t^T q_t; dq_t = scale S_t do_t; dS_t += scale q_t do_t^T (18a) */
    for (size_t j = 0; j < V; j++)
        o[j] = 0;
    for (size_t i = 0; i < K; i++) {
        real_t sum = 0;
#pragma omp simd reduction(+ : sum) /* a sum over j in vector lanes: the compiler may not reorder it unasked */
        for (size_t j = 0; j < V; j++) {
            o[j] += q[i] * S_t[i * V + j];
            sum += S_t[i * V + j] * d_o[j];
            dS[i * V + j] += scale * q[i] * d_o[j];
        }
        dq[i] += scale * sum;
    }
    for (size_t j = 0; j < V; j++)
        o[j] *= scale;
    /* the write S_t = S'_t + k u^T: du = dS^T k (18b); predicted = S'^T k for dbeta */
    for (size_t j = 0; j < V; j++)
        du[j] = predicted[j] = 0;
    for (size_t i = 0; i < K; i++)
        for (size_t j = 0; j < V; j++) {
            du[j] += dS[i * V + j] * k[i];
            predicted[j] += alpha * S_prev[i * V + j] * k[i];
        }
    /* the error u = beta (v - S'^T k): dv, dbeta */
    real_t dbeta = 0;
#pragma omp simd reduction(+ : dbeta)
    for (size_t j = 0; j < V; j++) {
        g->dv[token * V + j] = beta * du[j];
        dbeta += du[j] * (v[j] - predicted[j]);
    }
    g->dbeta[token] = dbeta;
    /* dk_t = dS u - beta S' du; then dS' = dS - beta k du^T, dg = <dS', S'>, dS_{t-1} = alpha dS' (18c) */
    real_t dg = 0;
    for (size_t i = 0; i < K; i++) {
        real_t from_write = 0, from_error = 0;
#pragma omp simd reduction(+ : from_write, from_error, dg)
        for (size_t j = 0; j < V; j++) {
            const real_t decayed = alpha * S_prev[i * V + j], dS_decayed = dS[i * V + j] - beta * k[i] * du[j];
            from_write += dS[i * V + j] * u[j];
            from_error += decayed * du[j];
            dg += dS_decayed * decayed;
            dS[i * V + j] = alpha * dS_decayed;
        }
        dk[i] += from_write - beta * from_error;
    }
    g->dg[token] = dg;
}

static int backward_loop_backward(const gdn_problem *p, const gdn_cotangents *c, const gdn_settings *s, gdn_result *r,
                                  gdn_gradients *g)
{
    (void)s;
    const size_t K = p->K, V = p->V, KV = K * V, HV = gdn_value_heads(p), N = gdn_sequences(p), group = HV / p->H;
    const size_t longest = gdn_longest_sequence(p);
    const size_t kept = (longest + KEPT_EVERY - 1) / KEPT_EVERY;
    gdn_scratch scratch;
    /* the kept states, a stretch's states and u's, dS, the step's 2 V */
    if (gdn_scratch_alloc(&scratch, ((kept + KEPT_EVERY + 1) * KV + (KEPT_EVERY + 2) * V) * sizeof(real_t)))
        return -1;
#pragma omp parallel
    {
        real_t *kept_states = gdn_scratch_mine(&scratch), *states = kept_states + kept * KV;
        real_t *dS = states + KEPT_EVERY * KV, *us = dS + KV, *step_scratch = us + KEPT_EVERY * V;
#pragma omp for collapse(2) schedule(dynamic) /* sequences may differ in length */
        for (size_t n = 0; n < N; n++)
            for (size_t key_head = 0; key_head < p->H; key_head++) {
                const size_t start = gdn_sequence_start(p, n), T = gdn_sequence_length(p, n);
                for (size_t t = start; t < start + T; t++) { /* dq and dk: sums over the group's value heads */
                    memset(g->dq + gdn_key_token(p, t, key_head * group) * K, 0, K * sizeof(real_t));
                    memset(g->dk + gdn_key_token(p, t, key_head * group) * K, 0, K * sizeof(real_t));
                }
                for (size_t h = key_head * group; h < (key_head + 1) * group; h++) {
                    const size_t head = gdn_head(p, n, h);
                    /* forward: keep the state before every KEPT_EVERY-th token; ht */
                    real_t *S = states;
                    gdn_initial_state(p, head, S);
                    for (size_t t = 0; t < T; t++) {
                        const size_t token = gdn_value_token(p, start + t, h), keys = gdn_key_token(p, start + t, h);
                        if (t % KEPT_EVERY == 0)
                            memcpy(kept_states + t / KEPT_EVERY * KV, S, KV * sizeof *S);
                        forward_token(S, K, V, p->k + keys * K, p->v + token * V, real_exp(p->g[token]), p->beta[token],
                                      us);
                    }
                    memcpy(r->ht + head * KV, S, KV * sizeof *S);
                    /* back: dS = dL/dS_{T-1} = dht, then stretch by stretch from the last */
                    memcpy(dS, c->dht + head * KV, KV * sizeof *dS);
                    for (size_t stretch = (T + KEPT_EVERY - 1) / KEPT_EVERY; stretch-- > 0;) {
                        const size_t first = stretch * KEPT_EVERY, end = first + KEPT_EVERY < T ? first + KEPT_EVERY : T;
                        const real_t *before = kept_states + stretch * KV;
                        for (size_t t = first; t < end; t++) { /* states[at]: after token first + at */
                            const size_t token = gdn_value_token(p, start + t, h), at = t - first;
                            const size_t keys = gdn_key_token(p, start + t, h);
                            memcpy(states + at * KV, at ? states + (at - 1) * KV : before, KV * sizeof *states);
                            forward_token(states + at * KV, K, V, p->k + keys * K, p->v + token * V,
                                          real_exp(p->g[token]), p->beta[token], us + at * V);
                        }
                        for (size_t t = end; t-- > first;) {
                            const size_t at = t - first;
                            backward_token(p, c, gdn_value_token(p, start + t, h), gdn_key_token(p, start + t, h),
                                           at ? states + (at - 1) * KV : before, states + at * KV, us + at * V, dS, r,
                                           g, step_scratch);
                        }
                    }
                    if (g->dh0)
                        memcpy(g->dh0 + head * KV, dS, KV * sizeof *dS);
                }
            }
    }
    gdn_scratch_free(&scratch);
    return 0;
}

double backward_loop_flops(const gdn_problem *p, const gdn_settings *s)
{
    (void)s;
    return (double)gdn_tokens(p) * 30.0 * (double)p->K * (double)p->V;
}

const gdn_backward_stage backward_loop_stage = {
    .name = "09_backward_loop",
    .idea = "the gradients: the adjoint recurrence, one token at a time backwards, states recomputed per stretch",
    .options = GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED,
    .backward = backward_loop_backward,
    .counted_flops = backward_loop_flops,
};
