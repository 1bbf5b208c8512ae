/* 04_two_phase_scan -- fold segments into one map each, scan the P summaries, replay the segments.
 *
 * The idea (docs/04_two_phase_scan.md): stage 03 pays K^3 per composition and keeps T maps.
 * Instead cut the sequence into P segments, one per thread, and
 *   1. fold each segment into one map (A_p, B_p) (eq. 6), in parallel;
 *   2. scan the P summaries in order: start_{p+1} = A_p start_p + B_p, from start_0 = h0
 *      (eq. 7). Only P steps, and on states (K^2 V each), not maps (K^3);
 *   3. replay each segment from its true start state with stage 01's token step, in
 *      parallel, writing o.
 * Folding never forms a per-token K x K matrix: the map of a segment is the loop itself run
 * on the augmented state X = [A | B] (K x (K + V)), from X = [I | 0], with values [0 | v_t]:
 *     X <- alpha X - beta k k^T (alpha X) + beta k [0 | v]^T
 * is exactly (A, B) <- (A_t A, A_t B + B_t). So the fold is stage 01's step on a wider state,
 * O(L K (K + V)) for a segment of L tokens.
 *
 * Schedule (eq. 8): segment 0 starts from h0, which is known, so it needs no fold: it is
 * replayed during phase 1 while the other segments fold, and so it gets more tokens (fold
 * cost / replay cost times as many). The last segment needs no summary (nobody starts
 * after it), so it is not folded. With one head and P segments, phase 1 and phase 3 each run
 * P - 1 tasks.
 *
 * Cost per head, counted (K = V = d): replay 7 d^2 per token for all T tokens, fold
 * 5 d (2d) = 10 d^2 per token for the middle segments, scan 2 d^3 per segment. Compared
 * with stage 01 (7 d^2 per token, one thread), the time with P threads is about
 * (10 + 7) d^2 L for segments of L tokens, with T = (P - 1 + 10/7) L, so the expected
 * speedup is 7 (P - 1 + 10/7) / 17 = (7 P + 3) / 17 for P segments. The default is
 * P = threads + 1 for one head, so that every thread is busy in both phases: with N threads,
 * 7 (N + 10/7) / 17 = (7 N + 10) / 17, 7.2 at N = 16 (0.9 x N/2), 1.4 at N = 2.
 * Memory: P maps and P states per head. Depth: 2 T / P + P.
 * A head here is a (sequence, value head) pair; a sequence shorter than P tokens (in a packed
 * batch) is cut into as many segments as it has tokens.
 *
 * Build and run:  make bin/04_two_phase_scan && bin/04_two_phase_scan --T 65536 --H 1 --threads 2 --segments 3 --check-against oracle
 */
#include "two_phase_scan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/error.h"
#include "../../common/scratch.h"
#include "../01_naive_loop/naive_loop.h"

size_t segment_start(size_t p, size_t P, size_t T, double first_weight)
{
    if (p == 0)
        return 0;
    if (p >= P)
        return T;
    /* segment 0 has weight first_weight, every other segment weight 1 */
    double total = first_weight + (double)(P - 1);
    size_t start = (size_t)((double)T * (first_weight + (double)(p - 1)) / total);
    /* keep every segment non-empty when P <= T: p tokens before it at least, P - p after */
    if (start < p)
        start = p;
    if (start > T - (P - p))
        start = T - (P - p);
    return start;
}

/* Replay positions [first, last) of value head h on state S with stage 01's step, writing o. */
static void replay_segment(const gdn_problem *p, gdn_result *r, size_t h, size_t first, size_t last, real_t *S,
                           real_t *step_scratch)
{
    for (size_t t = first; t < last; t++) {
        size_t token = gdn_value_token(p, t, h), keys = gdn_key_token(p, t, h);
        naive_loop_token_step(S, p->K, p->V, p->q + keys * p->K, p->k + keys * p->K, p->v + token * p->V,
                              (real_t)exp(p->g[token]), p->beta[token], (real_t)p->scale, r->o + token * p->V,
                              step_scratch);
    }
}

/* Fold positions [first, last) into X = [A | B] (K x (K + V)): the loop on the augmented state (eq. 6). */
static void fold_segment(const gdn_problem *p, size_t h, size_t first, size_t last, real_t *X, real_t *augmented_v,
                         real_t *step_scratch)
{
    const size_t K = p->K, V = p->V, W = K + V;
    memset(X, 0, K * W * sizeof(real_t));
    for (size_t i = 0; i < K; i++)
        X[i * W + i] = 1;
    memset(augmented_v, 0, K * sizeof(real_t));
    for (size_t t = first; t < last; t++) {
        size_t token = gdn_value_token(p, t, h);
        memcpy(augmented_v + K, p->v + token * V, V * sizeof(real_t));
        naive_loop_token_step(X, K, W, NULL, p->k + gdn_key_token(p, t, h) * K, augmented_v, (real_t)exp(p->g[token]),
                              p->beta[token], 0, NULL, step_scratch);
    }
}

/* Fold cost over replay cost per token (the counted flops below): segment 0's extra length. */
static double first_segment_weight(size_t K, size_t V)
{
    double W = (double)(K + V);
    return (5.0 * (double)K * W + 2 * W) / (7.0 * (double)K * (double)V + 3.0 * (double)V);
}

/* Head `head` (sequence head / HV, value head head % HV): its first position, its length, and
 * its segment count, P or fewer where the sequence has fewer tokens. */
typedef struct {
    size_t start, length, segments;
} head_span;
static head_span span_of(const gdn_problem *p, size_t head, size_t P)
{
    size_t n = head / gdn_value_heads(p), length = gdn_sequence_length(p, n);
    return (head_span){gdn_sequence_start(p, n), length, P < length ? P : length};
}

static int two_phase_scan_forward(const gdn_problem *p, const gdn_settings *s, gdn_result *r)
{
    const size_t K = p->K, V = p->V, W = K + V, P = s->segments, HV = gdn_value_heads(p);
    const size_t heads = gdn_sequences(p) * HV;
    const double weight = first_segment_weight(K, V);
    /* per head: P folded maps [A | B] (slots 0 and P - 1 unused) and P start states */
    size_t per_head = P * (K * W + K * V), bytes, factors[3] = {heads, per_head, sizeof(real_t)};
    if (P == 0 || P > gdn_longest_sequence(p))
        return gdn_set_error("04_two_phase_scan needs 1 <= segments <= T, got %zu for T=%zu", P, gdn_longest_sequence(p));
    if (gdn_multiply_sizes(&bytes, 3, factors) || gdn_memory_check(bytes, "stage 04's summaries"))
        return -1;
    real_t *summaries = malloc(bytes);
    gdn_scratch scratch;
    if (!summaries)
        return gdn_set_error("out of memory for stage 04's summaries (%zu bytes)", bytes);
    if (gdn_scratch_alloc(&scratch, (K * V + W + 2 * W) * sizeof(real_t))) {
        free(summaries);
        return -1;
    }
#define FOLD(head, seg) (summaries + (head) * per_head + (seg) * K * W)
#define START(head, seg) (summaries + (head) * per_head + P * K * W + (seg) * K * V)
    const long long phase1_tasks = (long long)(heads * (P > 1 ? P - 1 : 1));
    const long long phase3_tasks = (long long)(heads * (P - 1));
#pragma omp parallel
    {
        real_t *S = gdn_scratch_mine(&scratch), *augmented_v = S + K * V, *step_scratch = augmented_v + W;
        /* phase 1: segment 0 replays from h0; segments 1 .. P-2 fold; the last does nothing yet */
#pragma omp for schedule(static)
        for (long long task = 0; task < phase1_tasks; task++) {
            size_t head = (size_t)task / (P > 1 ? P - 1 : 1), seg = (size_t)task % (P > 1 ? P - 1 : 1);
            head_span span = span_of(p, head, P);
            const size_t Ph = span.segments, h = head % HV;
            if (seg >= (Ph > 1 ? Ph - 1 : 1))
                continue; /* a short sequence: fewer segments */
            size_t first = span.start + segment_start(seg, Ph, span.length, weight),
                   last = span.start + segment_start(seg + 1, Ph, span.length, weight);
            if (seg == 0) {
                gdn_initial_state(p, head, S);
                replay_segment(p, r, h, first, last, S, step_scratch);
                memcpy(Ph > 1 ? START(head, 1) : r->ht + head * K * V, S, K * V * sizeof(real_t));
            } else {
                fold_segment(p, h, first, last, FOLD(head, seg), augmented_v, step_scratch);
            }
        }
        /* phase 2: start_{p+1} = A_p start_p + B_p, in order (eq. 7) */
#pragma omp for schedule(static)
        for (size_t head = 0; head < heads; head++)
            for (size_t seg = 1; seg + 1 < span_of(p, head, P).segments; seg++) {
                const real_t *X = FOLD(head, seg), *start = START(head, seg);
                real_t *next = START(head, seg + 1);
                for (size_t i = 0; i < K; i++) {
                    real_t *restrict row = next + i * V;
                    memcpy(row, X + i * W + K, V * sizeof(real_t)); /* B_p */
                    for (size_t l = 0; l < K; l++)
                        for (size_t j = 0; j < V; j++)
                            row[j] += X[i * W + l] * start[l * V + j]; /* + A_p start_p */
                }
            }
        /* phase 3: replay segments 1 .. P-1 from their start states */
#pragma omp for schedule(static)
        for (long long task = 0; task < phase3_tasks; task++) {
            size_t head = (size_t)task / (P - 1), seg = 1 + (size_t)task % (P - 1);
            head_span span = span_of(p, head, P);
            if (seg >= span.segments)
                continue;
            memcpy(S, START(head, seg), K * V * sizeof(real_t));
            replay_segment(p, r, head % HV, span.start + segment_start(seg, span.segments, span.length, weight),
                           span.start + segment_start(seg + 1, span.segments, span.length, weight), S, step_scratch);
            if (seg == span.segments - 1)
                memcpy(r->ht + head * K * V, S, K * V * sizeof(real_t));
        }
    }
#undef FOLD
#undef START
    gdn_scratch_free(&scratch);
    free(summaries);
    return 0;
}

static double two_phase_scan_flops(const gdn_problem *p, const gdn_settings *s)
{
    double K = (double)p->K, V = (double)p->V, W = K + V, total = 0;
    double weight = first_segment_weight(p->K, p->V);
    for (size_t n = 0; n < gdn_sequences(p); n++) {
        head_span span = span_of(p, n * gdn_value_heads(p), s->segments);
        const size_t P = span.segments;
        double folded = 0; /* tokens in segments 1 .. P-2 */
        for (size_t seg = 1; seg + 1 < P; seg++)
            folded += (double)(segment_start(seg + 1, P, span.length, weight) - segment_start(seg, P, span.length, weight));
        double replay = (double)span.length * (7 * K * V + 3 * V), fold = folded * (5 * K * W + 2 * W);
        double scan = (P > 2 ? (double)(P - 2) : 0) * 2 * K * K * V;
        total += replay + fold + scan;
    }
    return (double)gdn_value_heads(p) * total;
}

/* Default: enough segments that each phase has one task per thread. Phase 1 and phase 3 each
 * run P - 1 tasks per head, so P = 1 + ceil(threads / heads): 17 for one head on 16 threads.
 * (P = threads would leave one thread idle in each phase, and at 2 threads give no speedup.) */
static void two_phase_scan_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    size_t heads = gdn_sequences(p) * gdn_value_heads(p), threads = (size_t)s->threads, T = gdn_longest_sequence(p);
    if (s->segments == 0) {
        s->segments = 1 + (threads + heads - 1) / heads;
        if (s->segments > T) /* a default needs no note: at most one segment per token */
            s->segments = T;
    }
    if (s->segments > T) {
        fprintf(stderr, "04_two_phase_scan: note: %zu segments for T=%zu tokens; clamped to %zu (one token each)\n",
                s->segments, T, T);
        s->segments = T;
    }
}

const gdn_stage two_phase_scan_stage = {
    .name = "04_two_phase_scan",
    .idea = "fold segments into one map each, scan the summaries in order, replay the segments",
    .options = GDN_OPTION_SEGMENTS | GDN_OPTION_VALUE_HEADS | GDN_OPTION_PACKED,
    .forward = two_phase_scan_forward,
    .counted_flops = two_phase_scan_flops,
    .resolve_options = two_phase_scan_resolve_options,
};
