/* 04_two_phase_scan_cuda -- stage 04 on the GPU: fold segments, scan their maps, replay them.
 *
 * The idea (docs/04_two_phase_scan.md, "On the GPU"): stage 01's GPU loop runs T dependent
 * token steps per head, with B H V / 64 small blocks: at B H = 8 most of the 132 SMs idle.
 * Cut every sequence into P segments and run the three phases of the CPU stage as three
 * kernels, each parallel over (head, segment):
 *   1. fold_segments:   segments 0 .. P-2 folded into their maps (A_p, B_p): stage 01's
 *      token loop (naive_loop_step.cuh) on the augmented state [A | B], K + V columns,
 *      from [I | 0], with values [0 | v] (eq. 6). One thread per column, as in stage 01.
 *   2. scan_summaries:  start_{p+1} = A_p start_p + B_p from start_0 = h0 (eq. 7), P - 1
 *      ordered steps per head; a block per (head, 8 state columns), a thread per 4 entries.
 *   3. replay_segments: every segment replayed from its true start with stage 01's loop,
 *      writing o; the last one writes ht.
 * On the GPU a fold costs the same time per token as a replay (a wider state means more
 * threads, not longer ones), so the segments are equal, T / P tokens each, and segment 0
 * is folded like the others (the CPU stage's uneven schedule buys nothing here).
 *
 * Cost per head: replay 7 K V per token, fold 5 K (K + V) per token of segments 0 .. P-2,
 * scan 2 K^2 V per segment; memory: P - 1 maps K x (K + V) and P states K x V per head.
 * Depth: 2 T / P token steps plus P scan steps, against T for stage 01. P is chosen from
 * the SM count so that phase 1 puts about FOLD_BLOCKS_PER_SM blocks on every SM; --segments
 * overrides it.
 * Limits: K <= 128 (stage 01's register column).
 *
 * Build and run:  make bin/04_two_phase_scan_cuda && bin/04_two_phase_scan_cuda --T 16384 --H 8 --check-against oracle
 */
#include <stdio.h>

#include "../../common/cuda_check.h"
#include "../../common/device.h"
#include "../../common/stage.h"
#include "../01_naive_loop/naive_loop_step.cuh"
#include "scan_summaries.cuh" /* phase 2 */

enum { FOLD_BLOCKS_PER_SM = 4, MAX_SEGMENTS = 4096 };

/* First token of segment s of P (s = P gives T): equal segments. */
__host__ __device__ static inline size_t segment_begin(size_t s, size_t P, size_t T) { return s * T / P; }
__device__ static inline size_t segment_tokens(size_t s, size_t P, size_t T)
{
    return segment_begin(s + 1, P, T) - segment_begin(s, P, T);
}
/* segment s of head (b, h) = (head / H, head % H): where its tokens lie (naive_loop_step.cuh) */
__device__ static inline token_rows segment_rows(const gdn_device_problem &p, size_t head, size_t s, size_t P)
{
    const size_t first = gdn_device_token(&p, head / p.H, segment_begin(s, P, p.T), head % p.H);
    return {first, p.H, first, p.H};
}

/* Maps of segments 0 .. P-2: block (head, segment) x column tile; summaries[head][s] is
 * K x (K + V), row i = [A_s[i, :] | B_s[i, :]]. */
template <int MAX_K>
__global__ void __launch_bounds__(COLUMNS_PER_BLOCK * threads_per_column(MAX_K))
fold_segments_kernel(gdn_device_problem p, size_t P, float *summaries)
{
    constexpr int SPLIT = threads_per_column(MAX_K), ROWS = rows_per_thread(MAX_K);
    __shared__ token_tile<MAX_K> tile;
    const size_t head = blockIdx.x / (P - 1), segment = blockIdx.x % (P - 1), K = p.K, W = p.K + p.V;
    const size_t first_column = (size_t)blockIdx.y * COLUMNS_PER_BLOCK, column = first_column + threadIdx.x / SPLIT;
    const size_t first_row = threadIdx.x % SPLIT * ROWS;
    float state[ROWS]; /* column of [I | 0] */
#pragma unroll
    for (int i = 0; i < ROWS; i++)
        state[i] = first_row + i == column ? 1.0f : 0.0f;
    naive_loop_run_tokens<MAX_K>(p, segment_rows(p, head, segment, P), segment_tokens(segment, P, p.T), state, first_column,
                                 K, NULL, tile);
    float *map = summaries + (head * (P - 1) + segment) * K * W;
    if (column < W)
#pragma unroll
        for (int i = 0; i < ROWS; i++)
            if (first_row + i < K)
                map[(first_row + i) * W + column] = state[i];
}

/* Every segment from its start state, writing o; the last segment writes ht. */
template <int MAX_K>
__global__ void __launch_bounds__(COLUMNS_PER_BLOCK * threads_per_column(MAX_K))
replay_segments_kernel(gdn_device_problem p, size_t P, const float *starts, float *o, float *ht)
{
    constexpr int SPLIT = threads_per_column(MAX_K), ROWS = rows_per_thread(MAX_K);
    __shared__ token_tile<MAX_K> tile;
    const size_t head = blockIdx.x / P, segment = blockIdx.x % P, K = p.K, V = p.V;
    const size_t first_column = (size_t)blockIdx.y * COLUMNS_PER_BLOCK, column = first_column + threadIdx.x / SPLIT;
    const size_t first_row = threadIdx.x % SPLIT * ROWS;
    const float *start = starts + (head * P + segment) * K * V;
    float state[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++)
        state[i] = first_row + i < K && column < V ? start[(first_row + i) * V + column] : 0.0f;
    naive_loop_run_tokens<MAX_K>(p, segment_rows(p, head, segment, P), segment_tokens(segment, P, p.T), state, first_column,
                                 0, o, tile);
    if (segment + 1 == P && column < V)
#pragma unroll
        for (int i = 0; i < ROWS; i++)
            if (first_row + i < K)
                ht[(head * K + first_row + i) * V + column] = state[i];
}

template <int MAX_K>
static int launch_phases(const gdn_device_problem *p, size_t P, float *summaries, float *starts, gdn_device_result *r)
{
    const unsigned threads = COLUMNS_PER_BLOCK * threads_per_column(MAX_K);
    unsigned folds, fold_tiles, replays, replay_tiles;
    if (gdn_blocks_for(p->B * p->H * (P > 1 ? P - 1 : 1), 1, &folds) ||
        gdn_blocks_for(p->K + p->V, COLUMNS_PER_BLOCK, &fold_tiles) || gdn_blocks_for(p->B * p->H * P, 1, &replays) ||
        gdn_blocks_for(p->V, COLUMNS_PER_BLOCK, &replay_tiles))
        return -1;
    if (fold_tiles > 65535)
        return gdn_set_error("V = %zu needs more than 65535 column tiles in one grid", p->V);
    if (P > 1) {
        fold_segments_kernel<MAX_K><<<dim3(folds, fold_tiles), threads, 0, gdn_pass_stream()>>>(*p, P, summaries);
        CUDA_CHECK_LAUNCH("fold_segments_kernel");
    }
    if (launch_scan_summaries(p, P, summaries, starts))
        return -1;
    replay_segments_kernel<MAX_K><<<dim3(replays, replay_tiles), threads, 0, gdn_pass_stream()>>>(*p, P, starts, r->o, r->ht);
    CUDA_CHECK_LAUNCH("replay_segments_kernel");
    return 0;
}

/* Workspace: P - 1 maps K x (K + V), then P start states K x V, per head. */
static int two_phase_scan_cuda_workspace(const gdn_problem *p, const gdn_settings *s, size_t *bytes)
{
    size_t maps, states, heads = p->B * p->H;
    size_t map_factors[4] = {heads, s->segments, p->K * (p->K + p->V), sizeof(float)};
    size_t state_factors[4] = {heads, s->segments, p->K * p->V, sizeof(float)};
    if (gdn_multiply_sizes(&maps, 4, map_factors) || gdn_multiply_sizes(&states, 4, state_factors))
        return -1;
    *bytes = maps + states;
    return 0;
}

static int two_phase_scan_cuda_forward(const gdn_device_problem *p, const gdn_settings *s, gdn_device_result *r)
{
    const size_t P = s->segments, heads = p->B * p->H;
    float *summaries = (float *)r->workspace, *starts = summaries + heads * (P - 1) * p->K * (p->K + p->V);
    switch (naive_loop_max_k(p->K)) {
    case 32: return launch_phases<32>(p, P, summaries, starts, r);
    case 64: return launch_phases<64>(p, P, summaries, starts, r);
    case 128: return launch_phases<128>(p, P, summaries, starts, r);
    default: return gdn_set_error("K = %zu: the GPU loop keeps a state column in registers, K at most 128", p->K);
    }
}

static double two_phase_scan_cuda_flops(const gdn_problem *p, const gdn_settings *s)
{
    const size_t P = s->segments;
    double K = (double)p->K, V = (double)p->V, W = K + V;
    double folded = (double)segment_begin(P - 1, P, p->T); /* tokens of segments 0 .. P-2 */
    double replay = (double)p->T * (7 * K * V + 3 * V), fold = folded * (5 * K * W + 2 * W);
    return (double)(p->B * p->H) * (replay + fold + (double)(P - 1) * 2 * K * K * V);
}

/* Default P: enough (head, segment) blocks in phase 1 for FOLD_BLOCKS_PER_SM per SM. */
static void two_phase_scan_cuda_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    if (s->segments == 0) {
        const int sms = gdn_sm_count();
        size_t tiles = (p->K + p->V + COLUMNS_PER_BLOCK - 1) / COLUMNS_PER_BLOCK;
        s->segments = 1 + (size_t)sms * FOLD_BLOCKS_PER_SM / (p->B * p->H * tiles);
        if (s->segments > MAX_SEGMENTS)
            s->segments = MAX_SEGMENTS;
        if (s->segments > p->T)
            s->segments = p->T;
    }
    if (s->segments > p->T) {
        fprintf(stderr, "04_two_phase_scan_cuda: note: %zu segments for T=%zu tokens; clamped to %zu (one token each)\n",
                s->segments, p->T, p->T);
        s->segments = p->T;
    }
}

extern "C" const gdn_stage two_phase_scan_cuda_stage = {
    .name = "04_two_phase_scan_cuda",
    .idea = "stage 04 on the GPU: fold segments, scan the summaries, replay, every phase parallel over segments",
    .options = GDN_OPTION_SEGMENTS,
    .forward = NULL,
    .counted_flops = two_phase_scan_cuda_flops,
    .resolve_options = two_phase_scan_cuda_resolve_options,
    .device_forward = two_phase_scan_cuda_forward,
    .device_workspace_bytes = two_phase_scan_cuda_workspace,
    .runner = &gdn_cuda_runner,
    .bf16_inputs = 0,
};
