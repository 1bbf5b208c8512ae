/* 01_naive_loop -- Gated DeltaNet, one token at a time (docs/contract.md section 1, docs/01_naive_loop.md eq. 1).
 *
 * The idea: keep the K x V state S and, for every token t, in FLA's order,
 *     S   <- exp(g_t) S                      decay           (eq. 1a)
 *     u   =  beta_t (v_t - S^T k_t)          delta-rule error (eq. 1b)
 *     S   <- S + k_t u^T                     rank-1 write    (eq. 1c)
 *     o_t =  scale S^T q_t                   read            (eq. 1d)
 * Token t needs the state left by token t - 1: the loop is serial along the sequence.
 * Sequences and value heads are independent, so OpenMP runs one (sequence, value head) per
 * thread; with grouped value heads (HV > H) several of them read the same key head, and a
 * packed batch's sequences are spans of the one row (problem.h).
 *
 * Cost per token and head: K V (decay) + 2 K V (S^T k) + 2 K V (write) + 2 K V (read)
 * = 7 K V flops (plus 3 V). Work 7 B T HV K V; memory: the inputs plus one K x V state
 * per thread; parallel depth T, the longest sequence (only N HV heads run at once).
 *
 * The two passes over S below each touch a row S[i, :] with a loop over j that has
 * no dependence between iterations, so -O3 compiles them to vector FMAs over V.
 *
 * Build and run:  make bin/01_naive_loop && bin/01_naive_loop --T 4096 --check-against oracle
 */
#include "naive_loop.h"

#include <math.h>

#include "../../common/scratch.h"

void naive_loop_token_step(real_t *restrict S, size_t K, size_t V, const real_t *restrict q,
                           const real_t *restrict k, const real_t *restrict v, real_t alpha, real_t beta,
                           real_t scale, real_t *restrict o, real_t *restrict scratch)
{
    real_t *restrict predicted = scratch, *restrict u = scratch + V;

    /* pass 1: decay (eq. 1a) and predicted_j = sum_i S_ij k_i, on the decayed state */
    for (size_t j = 0; j < V; j++)
        predicted[j] = 0;
    for (size_t i = 0; i < K; i++) {
        real_t *restrict row = S + i * V;
        for (size_t j = 0; j < V; j++) {
            row[j] *= alpha;
            predicted[j] += row[j] * k[i];
        }
    }
    /* the error the write corrects (eq. 1b) */
    for (size_t j = 0; j < V; j++)
        u[j] = beta * (v[j] - predicted[j]);
    if (q)
        for (size_t j = 0; j < V; j++)
            o[j] = 0;
    /* pass 2: rank-1 write (eq. 1c) and read of the updated state (eq. 1d) */
    if (!q) { /* write only: stage 04 folds segments with this step */
        for (size_t i = 0; i < K; i++)
            for (size_t j = 0; j < V; j++)
                S[i * V + j] += k[i] * u[j];
        return;
    }
    for (size_t i = 0; i < K; i++) {
        real_t *restrict row = S + i * V;
        for (size_t j = 0; j < V; j++) {
            row[j] += k[i] * u[j];
            o[j] += q[i] * row[j];
        }
    }
    for (size_t j = 0; j < V; j++)
        o[j] *= scale;
}

static int naive_loop_forward(const gdn_problem *p, const gdn_settings *s, gdn_result *r)
{
    (void)s;
    const size_t K = p->K, V = p->V, state_size = K * V, HV = gdn_value_heads(p), N = gdn_sequences(p);
    gdn_scratch scratch;
    if (gdn_scratch_alloc(&scratch, (state_size + 2 * V) * sizeof(real_t)))
        return -1;
#pragma omp parallel
    {
        real_t *S = gdn_scratch_mine(&scratch), *step_scratch = S + state_size;
#pragma omp for collapse(2) schedule(dynamic) /* sequences may differ in length */
        for (size_t n = 0; n < N; n++)
            for (size_t h = 0; h < HV; h++) {
                size_t head = gdn_head(p, n, h), start = gdn_sequence_start(p, n);
                gdn_initial_state(p, head, S);
                for (size_t t = start; t < start + gdn_sequence_length(p, n); t++) {
                    size_t token = gdn_value_token(p, t, h), keys = gdn_key_token(p, t, h);
                    naive_loop_token_step(S, K, V, p->q + keys * K, p->k + keys * K, p->v + token * V,
                                          (real_t)exp(p->g[token]), p->beta[token], (real_t)p->scale,
                                          r->o + token * V, step_scratch);
                }
                for (size_t ij = 0; ij < state_size; ij++)
                    r->ht[head * state_size + ij] = S[ij];
            }
    }
    gdn_scratch_free(&scratch);
    return 0;
}

double naive_loop_flops(const gdn_problem *p, const gdn_settings *s)
{
    (void)s;
    return (double)gdn_tokens(p) * (7.0 * (double)p->K * (double)p->V + 3.0 * (double)p->V);
}

const gdn_stage naive_loop_stage = {
    .name = "01_naive_loop",
    .idea = "the per-token recurrence: decay, delta-rule error, rank-1 write, read",
    .options = GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED,
    .forward = naive_loop_forward,
    .counted_flops = naive_loop_flops,
};
