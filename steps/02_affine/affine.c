/* 02_affine -- every token as an explicit affine map; the maps composed in order.
 *
 * The idea (docs/02_affine.md eq. 2): the four lines of stage 01 are one affine map,
 *     S_t = A_t S_{t-1} + B_t,   A_t = exp(g_t) (I - beta_t k_t k_t^T),  B_t = beta_t k_t v_t^T.
 * Maps compose, applying map 1 first (eq. 3):
 *     (A2, B2) o (A1, B1) = (A2 A1, A2 B1 + B2)
 * which is associative and not commutative: the later map is applied to the earlier
 * result. This stage runs the recurrence as a sequential inclusive scan of the maps:
 * the prefix P_t = (A_t, B_t) o ... o (A_1, B_1) is built one composition at a time,
 * and S_t = P_t(h0) gives the output o_t = scale S_t^T q_t.
 *
 * Why a stage that is slower than stage 01: composition is the operator that the
 * scans of stages 03 and 04 combine. Here it runs in order, so its result must equal
 * stage 01 exactly (to 1e-10 in double); once that holds, stage 03 only changes the
 * order in which the same compositions are bracketed.
 *
 * Cost per token and head: K^2 (build A_t) + 2 K^3 + 2 K^2 V (compose) + 2 K^2 V
 * (apply to h0, skipped when h0 is zero) + 2 K V (read): O(K^2 (K + V)), against
 * stage 01's 7 K V, so 4 K / 7 times more work at K = V. Memory: three maps per thread (the
 * token's and two prefixes) and a state.
 * Depth: T, as in stage 01.
 *
 * Build and run:  make bin/02_affine && bin/02_affine --T 1024 --K 32 --V 32 --check-against oracle
 */
#include "affine.h"

#include <math.h>
#include <string.h>

#include "../../common/scratch.h"

void affine_identity(affine_map out, size_t K, size_t V)
{
    memset(out.A, 0, K * K * sizeof(real_t));
    memset(out.B, 0, K * V * sizeof(real_t));
    for (size_t i = 0; i < K; i++)
        out.A[i * K + i] = 1;
}

void affine_token_map(affine_map out, size_t K, size_t V, const real_t *restrict k, const real_t *restrict v,
                      real_t alpha, real_t beta)
{
    for (size_t i = 0; i < K; i++) {
        for (size_t l = 0; l < K; l++)
            out.A[i * K + l] = alpha * ((i == l) - beta * k[i] * k[l]);
        for (size_t j = 0; j < V; j++)
            out.B[i * V + j] = beta * k[i] * v[j];
    }
}

/* C = X Y (+ C when accumulate), X rows x inner, Y inner x columns, all row-major.
 * The j loop runs along rows of Y and C, so it vectorises. */
static void multiply(real_t *restrict C, const real_t *restrict X, const real_t *restrict Y, size_t rows,
                     size_t inner, size_t columns, int accumulate)
{
    for (size_t i = 0; i < rows; i++) {
        real_t *restrict c = C + i * columns;
        if (!accumulate)
            memset(c, 0, columns * sizeof(real_t));
        for (size_t l = 0; l < inner; l++) {
            const real_t x = X[i * inner + l], *restrict y = Y + l * columns;
            for (size_t j = 0; j < columns; j++)
                c[j] += x * y[j];
        }
    }
}

void compose_affine(affine_map out, affine_map later, affine_map earlier, size_t K, size_t V)
{
    multiply(out.A, later.A, earlier.A, K, K, K, 0);      /* A2 A1 */
    memcpy(out.B, later.B, K * V * sizeof(real_t));
    multiply(out.B, later.A, earlier.B, K, K, V, 1);      /* A2 B1 + B2 */
}

void apply_affine(real_t *S_out, affine_map map, const real_t *S_in, size_t K, size_t V)
{
    memcpy(S_out, map.B, K * V * sizeof(real_t));
    multiply(S_out, map.A, S_in, K, K, V, 1);
}

const real_t *affine_read_output(affine_map prefix, const real_t *h0, const real_t *restrict q, real_t scale,
                                real_t *restrict o, real_t *S, size_t K, size_t V)
{
    /* S_t = P_t(h0) = A h0 + B; a zero h0 leaves S_t = B */
    const real_t *restrict state = prefix.B;
    if (h0) {
        apply_affine(S, prefix, h0, K, V);
        state = S;
    }
    for (size_t j = 0; j < V; j++)
        o[j] = 0;
    for (size_t i = 0; i < K; i++)
        for (size_t j = 0; j < V; j++)
            o[j] += q[i] * state[i * V + j];
    for (size_t j = 0; j < V; j++)
        o[j] *= scale;
    return state;
}

static int affine_forward(const gdn_problem *p, const gdn_settings *s, gdn_result *r)
{
    (void)s;
    const size_t K = p->K, V = p->V, map_size = K * (K + V), HV = gdn_value_heads(p), N = gdn_sequences(p);
    gdn_scratch scratch;
    /* per thread: the token map, two prefixes (current and next), and the state S_t */
    if (gdn_scratch_alloc(&scratch, (3 * map_size + K * V) * sizeof(real_t)))
        return -1;
#pragma omp parallel
    {
        real_t *maps = gdn_scratch_mine(&scratch), *S = maps + 3 * map_size;
        affine_map token_map = affine_map_at(maps, 0, K, V);
        affine_map prefix = affine_map_at(maps, 1, K, V), next = affine_map_at(maps, 2, K, V);
#pragma omp for collapse(2) schedule(dynamic) /* sequences may differ in length */
        for (size_t n = 0; n < N; n++)
            for (size_t h = 0; h < HV; h++) {
                const real_t *h0 = p->h0 ? p->h0 + gdn_head(p, n, h) * K * V : NULL;
                size_t start = gdn_sequence_start(p, n), end = start + gdn_sequence_length(p, n);
                affine_identity(prefix, K, V);
                for (size_t t = start; t < end; t++) {
                    size_t token = gdn_value_token(p, t, h), keys = gdn_key_token(p, t, h);
                    affine_token_map(token_map, K, V, p->k + keys * K, p->v + token * V,
                                     (real_t)exp(p->g[token]), p->beta[token]);
                    compose_affine(next, token_map, prefix, K, V); /* P_t = (A_t, B_t) o P_{t-1} */
                    affine_map swap = prefix;
                    prefix = next;
                    next = swap;
                    const real_t *state = affine_read_output(prefix, h0, p->q + keys * K, (real_t)p->scale,
                                                             r->o + token * V, S, K, V);
                    if (t + 1 == end)
                        memcpy(r->ht + gdn_head(p, n, h) * K * V, state, K * V * sizeof(real_t));
                }
            }
    }
    gdn_scratch_free(&scratch);
    return 0;
}

static double affine_flops(const gdn_problem *p, const gdn_settings *s)
{
    (void)s;
    double K = (double)p->K, V = (double)p->V;
    double per_token = K * K + 2 * K * K * (K + V) + (p->h0 ? 2 * K * K * V : 0) + 2 * K * V + V;
    return (double)gdn_tokens(p) * per_token;
}

const gdn_stage affine_stage = {
    .name = "02_affine",
    .idea = "each token an affine map (A_t, B_t); the maps composed in order, S_t = P_t(h0)",
    .options = GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED,
    .forward = affine_forward,
    .counted_flops = affine_flops,
};
