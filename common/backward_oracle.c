#include "backward_oracle.h"

#include <math.h>
#include <string.h>

#include "scratch.h"

/* The states are kept every EVERY tokens on the way forward; the way back recomputes the EVERY
 * states of a stretch from the one kept before it: (T / EVERY + EVERY) K V doubles a head. */
enum { EVERY = 64 };

/* One token forward in double: S <- alpha S, u = beta (v - S^T k), S += k u^T; keeps u. */
static void token_forward(double *S, size_t K, size_t V, const real_t *k, const real_t *v, double alpha, double beta,
                          double *u)
{
    for (size_t j = 0; j < V; j++)
        u[j] = 0.0;
    for (size_t i = 0; i < K; i++)
        for (size_t j = 0; j < V; j++) {
            S[i * V + j] *= alpha;
            u[j] += S[i * V + j] * (double)k[i];
        }
    for (size_t j = 0; j < V; j++)
        u[j] = beta * ((double)v[j] - u[j]);
    for (size_t i = 0; i < K; i++)
        for (size_t j = 0; j < V; j++)
            S[i * V + j] += (double)k[i] * u[j];
}

int gdn_backward_oracle(const gdn_problem *p, const gdn_cotangents *c, double *o, double *ht, gdn_gradients_f64 *g)
{
    const size_t K = p->K, V = p->V, KV = K * V, HV = gdn_value_heads(p), N = gdn_sequences(p), group = HV / p->H;
    const size_t longest = gdn_longest_sequence(p);
    const size_t kept = (longest + EVERY - 1) / EVERY;
    gdn_scratch scratch;
    /* kept states, the EVERY states of a stretch and its u's, dS, and a V-vector */
    if (gdn_scratch_alloc(&scratch, ((kept + EVERY + 1) * KV + (EVERY + 1) * V) * sizeof(double)))
        return -1;
#pragma omp parallel
    {
        double *kept_states = gdn_scratch_mine(&scratch), *states = kept_states + kept * KV;
        double *dS = states + EVERY * KV, *us = dS + KV, *du = us + EVERY * V;
        /* one thread a (sequence, key head): dq and dk sum over the key head's value heads */
#pragma omp for collapse(2) schedule(dynamic)
        for (size_t n = 0; n < N; n++)
            for (size_t key_head = 0; key_head < p->H; key_head++) {
                const size_t start = gdn_sequence_start(p, n), T = gdn_sequence_length(p, n);
                for (size_t t = start; t < start + T; t++)
                    for (size_t i = 0; i < K; i++)
                        g->dq[gdn_key_token(p, t, key_head * group) * K + i] =
                            g->dk[gdn_key_token(p, t, key_head * group) * K + i] = 0.0;
                for (size_t h = key_head * group; h < (key_head + 1) * group; h++) {
                    const size_t head = gdn_head(p, n, h);
                    /* forward: o, ht, and the state before every EVERY-th token */
                    double *S = states;
                    for (size_t ij = 0; ij < KV; ij++)
                        S[ij] = p->h0 ? (double)p->h0[head * KV + ij] : 0.0;
                    for (size_t t = 0; t < T; t++) {
                        const size_t token = gdn_value_token(p, start + t, h), keys = gdn_key_token(p, start + t, h);
                        if (t % EVERY == 0)
                            memcpy(kept_states + t / EVERY * KV, S, KV * sizeof *S);
                        token_forward(S, K, V, p->k + keys * K, p->v + token * V, exp((double)p->g[token]),
                                      (double)p->beta[token], us);
                        for (size_t j = 0; j < V; j++) {
                            double sum = 0.0;
                            for (size_t i = 0; i < K; i++)
                                sum += (double)p->q[keys * K + i] * S[i * V + j];
                            o[token * V + j] = p->scale * sum;
                        }
                    }
                    memcpy(ht + head * KV, S, KV * sizeof *S);
                    /* backward: dS = dL/dS_t, the state after token t, from dht */
                    for (size_t ij = 0; ij < KV; ij++)
                        dS[ij] = (double)c->dht[head * KV + ij];
                    for (size_t stretch = (T + EVERY - 1) / EVERY; stretch-- > 0;) {
                        const size_t first = stretch * EVERY, end = first + EVERY < T ? first + EVERY : T;
                        /* states[n]: the state after token first + n; us[n]: its u */
                        const double *before = kept_states + stretch * KV;
                        for (size_t t = first; t < end; t++) {
                            const size_t token = gdn_value_token(p, start + t, h), at = t - first;
                            const size_t keys = gdn_key_token(p, start + t, h);
                            memcpy(states + at * KV, at ? states + (at - 1) * KV : before, KV * sizeof(double));
                            token_forward(states + at * KV, K, V, p->k + keys * K, p->v + token * V,
                                          exp((double)p->g[token]), (double)p->beta[token], us + at * V);
                        }
                        for (size_t t = end; t-- > first;) {
                            const size_t token = gdn_value_token(p, start + t, h), at = t - first;
                            const size_t keys = gdn_key_token(p, start + t, h);
                            const double *S_t = states + at * KV, *S_prev = at ? states + (at - 1) * KV : before;
                            const double *u = us + at * V, alpha = exp((double)p->g[token]), beta = p->beta[token];
                            const real_t *q = p->q + keys * K, *k = p->k + keys * K, *v = p->v + token * V;
                            const real_t *d_o = c->d_o + token * V;
                            /* o_t = scale S_t^T q_t: dq_t = scale S_t do_t, dS_t += scale q_t do_t^T */
                            for (size_t i = 0; i < K; i++) {
                                double sum = 0.0;
                                for (size_t j = 0; j < V; j++) {
                                    sum += S_t[i * V + j] * (double)d_o[j];
                                    dS[i * V + j] += p->scale * (double)q[i] * (double)d_o[j];
                                }
                                g->dq[keys * K + i] += p->scale * sum;
                            }
                            /* S_t = S' + k u^T: du = dS^T k, dk = dS u */
                            for (size_t j = 0; j < V; j++) {
                                double sum = 0.0;
                                for (size_t i = 0; i < K; i++)
                                    sum += dS[i * V + j] * (double)k[i];
                                du[j] = sum;
                            }
                            /* u = beta (v - S'^T k), S' = alpha S_prev: dv = beta du, dbeta = du . (v - S'^T k),
                               dk += S' (-beta du), dS' = dS - beta k du^T */
                            double dbeta = 0.0;
                            for (size_t j = 0; j < V; j++) {
                                double predicted = 0.0;
                                for (size_t i = 0; i < K; i++)
                                    predicted += alpha * S_prev[i * V + j] * (double)k[i];
                                dbeta += du[j] * ((double)v[j] - predicted);
                                g->dv[token * V + j] = beta * du[j];
                            }
                            g->dbeta[token] = dbeta;
                            for (size_t i = 0; i < K; i++) {
                                double from_write = 0.0, from_prediction = 0.0;
                                for (size_t j = 0; j < V; j++) {
                                    from_write += dS[i * V + j] * u[j];
                                    from_prediction += alpha * S_prev[i * V + j] * du[j];
                                }
                                g->dk[keys * K + i] += from_write - beta * from_prediction;
                            }
                            /* S' = alpha S_prev with alpha = exp(g): dg = <dS', S'>; dS_prev = alpha dS' */
                            double dg = 0.0;
                            for (size_t i = 0; i < K; i++)
                                for (size_t j = 0; j < V; j++) {
                                    double dS_decayed = dS[i * V + j] - beta * (double)k[i] * du[j];
                                    dg += dS_decayed * alpha * S_prev[i * V + j];
                                    dS[i * V + j] = alpha * dS_decayed;
                                }
                            g->dg[token] = dg;
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
