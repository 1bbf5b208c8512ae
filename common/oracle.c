#include "oracle.h"

#include <math.h>
#include <string.h>

#include "scratch.h"

int gdn_oracle(const gdn_problem *p, double *o, double *ht)
{
    const size_t K = p->K, V = p->V, HV = gdn_value_heads(p), N = gdn_sequences(p);
    gdn_scratch scratch;
    if (gdn_scratch_alloc(&scratch, (K * V + 3 * V) * sizeof(double)))
        return -1;
#pragma omp parallel
    {
        double *S = gdn_scratch_mine(&scratch); /* state, S[i*V + j] = S_ij */
        double *error = S + K * V, *predicted = error + V, *out = error + 2 * V;
#pragma omp for collapse(2) schedule(dynamic)
        for (size_t n = 0; n < N; n++)
            for (size_t h = 0; h < HV; h++) {
                size_t head = gdn_head(p, n, h), start = gdn_sequence_start(p, n);
                for (size_t ij = 0; ij < K * V; ij++)
                    S[ij] = p->h0 ? (double)p->h0[head * K * V + ij] : 0.0;
                for (size_t t = start; t < start + gdn_sequence_length(p, n); t++) {
                    size_t token = gdn_value_token(p, t, h), keys = gdn_key_token(p, t, h);
                    const real_t *q = p->q + keys * K, *k = p->k + keys * K, *v = p->v + token * V;
                    double alpha = exp((double)p->g[token]), beta = p->beta[token];
                    /* S <- alpha S;  u_j = beta (v_j - sum_i S_ij k_i) */
                    for (size_t j = 0; j < V; j++)
                        predicted[j] = 0.0;
                    for (size_t i = 0; i < K; i++)
                        for (size_t j = 0; j < V; j++) {
                            S[i * V + j] *= alpha;
                            predicted[j] += S[i * V + j] * (double)k[i];
                        }
                    for (size_t j = 0; j < V; j++) {
                        error[j] = beta * ((double)v[j] - predicted[j]);
                        out[j] = 0.0;
                    }
                    /* S_ij += k_i u_j;  o_j = scale sum_i q_i S_ij, reading the updated state */
                    for (size_t i = 0; i < K; i++)
                        for (size_t j = 0; j < V; j++) {
                            S[i * V + j] += (double)k[i] * error[j];
                            out[j] += (double)q[i] * S[i * V + j];
                        }
                    for (size_t j = 0; j < V; j++)
                        o[token * V + j] = p->scale * out[j];
                }
                memcpy(ht + head * K * V, S, K * V * sizeof *S);
            }
    }
    gdn_scratch_free(&scratch);
    return 0;
}
