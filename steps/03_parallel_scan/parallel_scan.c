/* 03_parallel_scan -- the maps of stage 02, combined by a parallel prefix scan along the sequence.
 *
 * The idea (docs/03_parallel_scan.md): composition is associative, so the prefixes
 * P_t = m_t o ... o m_1 of the token maps m_t = (A_t, B_t) can be bracketed in any way,
 * and a prefix scan computes all T of them in O(log T) parallel steps. This stage is
 * stage 02 with one change: the loop `prefix = m_t o prefix` becomes a scan.
 *
 * The scan is the work-efficient up-sweep/down-sweep scan (Blelloch 1990), in its
 * in-place inclusive form (Brent-Kung), which needs no padding to a power of two:
 *   up-sweep,   stride 1, 2, 4, ...:  maps[r] = maps[r] o maps[r - stride]
 *               for r = 2 stride - 1, 4 stride - 1, ...   (each node: its subtree's total)
 *   down-sweep, stride ..., 2, 1:     maps[r] = maps[r] o maps[r - stride]
 *               for r = 3 stride - 1, 5 stride - 1, ...   (fill in the prefixes between)
 * After both, maps[t] holds P_t. The operand order is the lesson: maps[r] covers later
 * tokens than maps[r - stride], so it is the outer (later) map. Swapping them is the
 * classic bug; test_parallel_scan.c catches it. OpenMP's `inscan` reduction is not used:
 * compilers disagree on the operand order it passes for non-commutative operators.
 *
 * Cost per head: T maps built (3 K^2 + 2 K V each); about 2 T compositions of
 * 2 K^2 (K + V) flops (the K^3 wall: stage 01 does 7 K V per token); T applications to
 * h0 (2 K^2 V, skipped when h0 is zero) and T reads (2 K V). Memory: T maps of
 * K (K + V) values per head at once (refused up front when larger than this machine's
 * memory). Depth: 2 log2 T compositions. Heads (a sequence and a value head each) run one
 * after another, each parallel along its sequence; the maps buffer fits the longest.
 *
 * Build and run:  make bin/03_parallel_scan && bin/03_parallel_scan --T 4096 --K 32 --V 32 --check-against oracle
 */
#include "parallel_scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/error.h"
#include "../../common/scratch.h"
#include "../02_affine/affine.h"

/* maps[r] = maps[r] o maps[r - stride] for r = first, first + 2 stride, ... < T, in parallel.
 * Called from inside a parallel region; the implicit barrier of `omp for` ends the level. */
static void combine_level(real_t *maps, size_t T, size_t K, size_t V, size_t first, size_t stride, real_t *scratch)
{
    if (first >= T)
        return;
    long long count = (long long)((T - 1 - first) / (2 * stride) + 1);
    affine_map combined = affine_map_at(scratch, 0, K, V);
#pragma omp for schedule(static)
    for (long long n = 0; n < count; n++) {
        size_t r = first + (size_t)n * 2 * stride;
        affine_map later = affine_map_at(maps, r, K, V), earlier = affine_map_at(maps, r - stride, K, V);
        compose_affine(combined, later, earlier, K, V);
        memcpy(later.A, combined.A, K * (K + V) * sizeof(real_t));
    }
}

static int parallel_scan_forward(const gdn_problem *p, const gdn_settings *s, gdn_result *r)
{
    (void)s;
    const size_t K = p->K, V = p->V, map_size = K * (K + V), HV = gdn_value_heads(p), N = gdn_sequences(p);
    const size_t longest = gdn_longest_sequence(p);
    size_t bytes, factors[3] = {longest, map_size, sizeof(real_t)};
    if (gdn_multiply_sizes(&bytes, 3, factors) || gdn_memory_check(bytes, "stage 03's T maps of one head"))
        return -1;
    real_t *maps = malloc(bytes);
    if (!maps)
        return gdn_set_error("out of memory for stage 03's T maps of one head (%zu bytes)", bytes);
    gdn_scratch scratch;
    if (gdn_scratch_alloc(&scratch, map_size * sizeof(real_t))) {
        free(maps);
        return -1;
    }

    for (size_t n = 0; n < N; n++)
        for (size_t h = 0; h < HV; h++) {
            const real_t *h0 = p->h0 ? p->h0 + gdn_head(p, n, h) * K * V : NULL;
            const size_t start = gdn_sequence_start(p, n), T = gdn_sequence_length(p, n);
            size_t top_stride = 1;
            while (2 * top_stride < T)
                top_stride *= 2;
#pragma omp parallel
            {
                real_t *mine = gdn_scratch_mine(&scratch);
                /* 1. every token as a map (eq. 2 of docs/02_affine.md) */
#pragma omp for schedule(static)
                for (size_t t = 0; t < T; t++) {
                    size_t token = gdn_value_token(p, start + t, h), keys = gdn_key_token(p, start + t, h);
                    affine_token_map(affine_map_at(maps, t, K, V), K, V, p->k + keys * K, p->v + token * V,
                                     (real_t)exp(p->g[token]), p->beta[token]);
                }
                /* 2. inclusive scan: up-sweep, then down-sweep (eq. 4 and 5) */
                for (size_t stride = 1; stride < T; stride *= 2)
                    combine_level(maps, T, K, V, 2 * stride - 1, stride, mine);
                for (size_t stride = top_stride; stride >= 1; stride /= 2)
                    combine_level(maps, T, K, V, 3 * stride - 1, stride, mine);
                /* 3. S_t = P_t(h0), then o_t = scale S_t^T q_t */
#pragma omp for schedule(static)
                for (size_t t = 0; t < T; t++) {
                    size_t token = gdn_value_token(p, start + t, h), keys = gdn_key_token(p, start + t, h);
                    const real_t *state = affine_read_output(affine_map_at(maps, t, K, V), h0, p->q + keys * K,
                                                             (real_t)p->scale, r->o + token * V, mine, K, V);
                    if (t + 1 == T)
                        memcpy(r->ht + gdn_head(p, n, h) * K * V, state, K * V * sizeof(real_t));
                }
            }
        }
    gdn_scratch_free(&scratch);
    free(maps);
    return 0;
}

/* Compositions the scan performs for a sequence of T maps (the loops above, counted). */
static double scan_compositions(size_t T)
{
    double count = 0;
    size_t top_stride = 1;
    for (size_t stride = 1; stride < T; stride *= 2) {
        if (2 * stride - 1 < T)
            count += (double)((T - 1 - (2 * stride - 1)) / (2 * stride) + 1);
        top_stride = stride;
    }
    for (size_t stride = top_stride; stride >= 1; stride /= 2)
        if (3 * stride - 1 < T)
            count += (double)((T - 1 - (3 * stride - 1)) / (2 * stride) + 1);
    return count;
}

double parallel_scan_flops(const gdn_problem *p, const gdn_settings *s)
{
    (void)s;
    double K = (double)p->K, V = (double)p->V, total = 0;
    double per_token = 3 * K * K + 2 * K * V + (p->h0 ? 2 * K * K * V : 0) + 2 * K * V + V;
    for (size_t n = 0; n < gdn_sequences(p); n++) {
        size_t T = gdn_sequence_length(p, n);
        total += (double)T * per_token + scan_compositions(T) * 2 * K * K * (K + V);
    }
    return (double)gdn_value_heads(p) * total;
}

const gdn_stage parallel_scan_stage = {
    .name = "03_parallel_scan",
    .idea = "prefix scan of the token maps along the sequence (up-sweep/down-sweep), OpenMP",
    .options = GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED,
    .forward = parallel_scan_forward,
    .counted_flops = parallel_scan_flops,
};
