/* sequence_parallel.cuh -- what stages 07 and 08 share: the flop count of fold, scan and
 * replay with stage 06's kernels, and the choice of P.
 *
 * With few heads stage 06's chain leaves most SMs idle, and its time is chunks times one
 * step's latency. Here each sequence is cut into P segments of whole chunks, and stage 04's
 * two-phase scan (docs/04, eq. 6 and 7) is done with chunk steps (sequence_parallel_passes, in
 * sequence_parallel.cu):
 * kernel 1 as in stage 06; the chain with FOLD over segments 0 .. P-2, each carrying its map
 * [A | B] from [I | 0]; the scan of the maps (scan_on_tensor_cores.cuh), start_{s+1} = A_s
 * start_s + B_s; the chain again over every segment from its true start, which also makes o
 * where its blocks carry output warps; else kernel 3. P = 1 is exactly stage 06's pass. P
 * comes from a model of the chain launches' time (modelled_steps), built from stage 06's own
 * launch rules (chain_tiles, chain_blocks_per_sm), with constants fitted to measured sweeps.
 *
 * Cost: stage 06's work, plus the fold, (K + V) / V times the chain's work on segments 0 ..
 * P-2, plus the scan, 2 K^2 V (P - 1) flops per head (sequence_parallel_flops); workspace:
 * stage 06's plus P - 1 maps K x (K + V) and P start states K x V per head, fp32
 * (sequence_parallel_parts, in sequence_parallel.cu). Depth: chunks / P fold steps + P - 1 scan steps + chunks / P
 * replay steps, against stage 06's chunks.
 *
 * Included by sequence_parallel.cu (stage 07) and by stage 08, which runs the same phases
 * with its segments spread over GPUs.
 */
#pragma once
#include "../06_warp_specialized/warp_specialized.cuh" /* stage 06's kernels and launchers */
#include "scan_on_tensor_cores.cuh" /* phase 2 */
#include <stdio.h>
#include <stdlib.h> /* malloc: a packed batch's row lengths */

extern "C" {
#include "sequence_parallel.h"
}

/* The fold's state (phase 1): [A | B], K x (KP + V) from [I | 0], stage 06's chain loop on
 * these columns, with U's columns [0 | U] (and v's: the first KP columns have no values), so
 * that a segment's chunks leave its map (eq. 6 of stage 04, a chunk at a time: S -> (exp(gamma_C)
 * I - Kdec^T W) S + Kdec^T U). Its S0 and Vnew feed no o: it stores neither (HAS_OUTPUTS
 * false), and every segment it runs writes its map to segments.ends, [head][segment] K x (K +
 * V), row m = [A_m | B_m], segments.runs a head. WIDE_STEP_KNOWN: its two-n-tile blocks making
 * Vnew from v at K = V = 64 run a step compiled for those tiles. */
struct folded_columns {
    static constexpr bool HAS_OUTPUTS = false, WIDE_STEP_KNOWN = true;
    __host__ __device__ static int count(int KP, int VP) { return KP + VP; }
    __host__ __device__ static int first_value_column(int KP) { return KP; }
    __device__ static float start(const chain_segments &segments, size_t head, size_t segment, int m, int c, int K, size_t V)
    {
        (void)segments, (void)head, (void)segment, (void)V;
        return m == c && m < K ? 1.0f : 0.0f; /* [I | 0] */
    }
    __host__ __device__ static bool writes_end(size_t segment, size_t P) { return (void)segment, (void)P, true; }
    __device__ static void store_end(const chain_segments &segments, size_t head, size_t segment, int m, int c, int K,
                                     size_t V, float value)
    {
        const int KP = round_up16(K);
        if (c < K || (c >= KP && c - KP < (int)V)) /* row m of [A | B] */
            segments.ends[((head * segments.runs + segment) * K + m) * (K + V) + (c < KP ? c : K + c - KP)] = value;
    }
};

/* The chain steps on a pass's serial path, for stage 06's launch rules (chain_from_values_pays):
 * a head's chunks at P = 1; with P segments a fold's and a replay's, ceil(chunks / P) each */
static inline size_t sequence_parallel_depth(size_t chunks, size_t P) { return P <= 1 ? chunks : 2 * ((chunks + P - 1) / P); }

enum { MAX_AUTOMATIC_SEGMENTS = 128 };
static_assert(1 << (CHAIN_WIDTHS - 1) == MAX_CHAIN_TILES, "one blocks_per_sm entry for each width chain_tiles picks");

/* Stage 06's flops, plus the fold (the chain's W S0 and update on K + V columns, over the
 * chunks of segments 0 .. P-2) and the scan. A packed batch runs as padded rows whose padding
 * is not run (padded_rows.cuh): a sequence folds its own chunks before segment P-1's first. */
static double sequence_parallel_flops(const gdn_problem *p, const gdn_settings *s)
{
    const gdn_problem rows = p->offsets ? padded_rows_of(p) : *p;
    const size_t P = s->segments ? s->segments : 1, chunks = chunks_of(rows.T), folded_chunks = P > 1 ? segment_chunk(P - 1, P, chunks) : 0;
    const double K = (double)p->K, V = (double)p->V;
    double folded_tokens = 0.0; /* over the rows */
    for (size_t n = 0; n < rows.B; n++) {
        const size_t own = chunks_of(p->offsets ? gdn_sequence_length(p, n) : p->T);
        folded_tokens += (double)((own < folded_chunks ? own : folded_chunks) * CHUNK);
    }
    return wy_chunked_flops(p, s) +
           (double)gdn_value_heads(p) * (folded_tokens * 4 * K * (K + V) + (double)(rows.B * (P - 1)) * 2 * K * K * V);
}

/* The model behind the automatic P, in chunk steps of a one-tile chain block. Each chain
 * launch is modelled as stage 06 makes it: n one-tile blocks' worth of columns go out as
 * blocks of chain_tiles(n) tiles, an SM holds blocks_per_sm of them (the occupancy query, by
 * width), and a launch runs in ceil(blocks / (SMs x blocks_per_sm)) waves, each as long as a
 * block's chunks, a chunk step of a wider block costing STEP_COST of a one-tile one:
 *   P = 1:  waves(heads * groups(V)) * chunks
 *   P > 1:  waves(heads * (P - 1) * groups(K + V)) * ceil(chunks / P)         fold
 *         + waves(heads * P * groups(V)) * ceil(chunks / P)                   replay
 *         + SCAN_STEP * (P - 1) + FIXED                                       scan, the rest
 *   and at K = V = 128 (not --precise), where the replay's blocks are 8 tiles wide, they make
 *   o too (stage 06's output warps) at STEP_COST_WITH_OUTPUTS a step; where they do not,
 *   + OUTPUT_STEP * heads * chunks / SMs                                       kernel 3
 *   (elsewhere kernel 3 runs at every P, the same time, and is left out).
 * groups(n): 16-column tiles of an n-column state. A packed batch's rows (modelled_rows) have
 * their own chunks: its waves count the busy blocks only, those holding one of their row's
 * chunks, and kernel 3 its real chunks. blocks_per_sm is the count for stage 06's
 * two-slot ring: chain_launch_shape takes two slots where they save a wave, so a launch runs
 * in the waves the two-slot ring allows. The constants, in one-tile chunk steps:
 *   STEP_COST            a chunk step of a 2-, 4- or 8-tile block (2 and 4 fitted, 8 by ncu);
 *   FOLD_STEP_COST_8     the fold's 8-tile step, which stores nothing a chunk (by ncu);
 *   STEP_COST_WITH_OUTPUTS  the replay's 8-tile step with output warps (fitted);
 *   OUTPUT_STEP          kernel 3, a chunk of a head over the SMs (fitted);
 *   SCAN_STEP            a scan step: K FMAs a column, the next map copied meanwhile;
 *   FIXED                the scan's launch and first maps, two more launches, a fold's and a
 *                        replay's pipeline start (fitted to short sequences).
 * Their values, where each comes from and the sweeps on an NVIDIA H200 that fit them: docs/07,
 * "Choosing P". The fit keeps the chosen P one whose measured time is within 3 % of the best,
 * and never more segments for more heads; it prices stage 06's launches, so a change to stage
 * 06's chain blocks asks for a new sweep. Where the heads' one-tile blocks alone give every SM
 * a block, P = 1 without asking the model: the chain is then bound by the GPU's throughput,
 * not one block's latency, and a fold mostly adds work; P = 1 there runs exactly stage 06's
 * launches (docs/07, "Measured and not kept"). */
enum chain_launch_kind { FOLD_LAUNCH, REPLAY_LAUNCH, REPLAY_WITH_OUTPUTS };
/* one launch's modelled time; with REPLAY_WITH_OUTPUTS, *outputs_in_chain says whether its
   blocks are the 8-tile ones that make o (stage 06's output warps). The blocks' width follows
   every block launched, as stage 06 picks it; the waves count the busy ones, those with a
   real chunk to run (a packed batch's segments past a short row's end return at once). */
static double modelled_launch(size_t one_tile_blocks, size_t busy_one_tile_blocks, size_t tiles_per_run, size_t sms,
                              const size_t blocks_per_sm[CHAIN_WIDTHS], double steps, chain_launch_kind kind, bool *outputs_in_chain)
{
    static const double STEP_COST[MAX_CHAIN_TILES + 1] = {0.0, 1.0, 1.8, 0.0, 2.6, 0.0, 0.0, 0.0, 5.3};
    const double FOLD_STEP_COST_8 = 3.0, STEP_COST_WITH_OUTPUTS = 4.8;
    const auto width_index = [](int tiles) { return tiles == 1 ? 0 : tiles == 2 ? 1 : tiles == 4 ? 2 : 3; }; /* log2 */
    int widest = MAX_CHAIN_TILES; /* the widest blocks stage 06 makes (4 tiles with --precise) */
    while (widest > 1 && blocks_per_sm[width_index(widest)] == 0)
        widest /= 2;
    const int tiles = chain_tiles(one_tile_blocks, tiles_per_run, sms, widest, kind == REPLAY_WITH_OUTPUTS);
    const size_t blocks = busy_one_tile_blocks / tiles, per_sm = blocks_per_sm[width_index(tiles)];
    const size_t slots = sms * (per_sm ? per_sm : 1);
    const bool wide = tiles == MAX_CHAIN_TILES;
    if (outputs_in_chain)
        *outputs_in_chain = kind == REPLAY_WITH_OUTPUTS && wide;
    /* a step's cost by the blocks' width; 8-tile blocks by what they do as well */
    double cost = STEP_COST[tiles];
    if (wide && kind == FOLD_LAUNCH)
        cost = FOLD_STEP_COST_8;
    else if (wide && kind == REPLAY_WITH_OUTPUTS)
        cost = STEP_COST_WITH_OUTPUTS;
    return (double)((blocks + slots - 1) / slots) * steps * cost;
}

/* The rows the model times: `rows` rows of row_chunks[n] chunks each (real_chunks in all),
 * every row heads_per_row heads of one chain (B H rows of `chunks`: one entry, heads_per_row
 * B H; a packed batch: its sequences' chunks, heads_per_row HV), all cut at the longest row's
 * chunks */
struct modelled_rows {
    const size_t *row_chunks;
    size_t rows, heads_per_row, chunks, real_chunks;
};
/* the busy segments among the first `first_segments` of every row at P segments: those that
 * hold one of the row's chunks (segment s starts at chunk s * chunks / P, segment_chunk) */
static size_t busy_segments(const modelled_rows &r, size_t P, size_t first_segments)
{
    size_t busy = 0;
    for (size_t n = 0; n < r.rows; n++)
        for (size_t s = 0; s < first_segments; s++)
            busy += segment_chunk(s, P, r.chunks) < r.row_chunks[n] ? 1 : 0;
    return busy * r.heads_per_row;
}

static double modelled_steps(const modelled_rows &r, size_t K, size_t V, size_t sms, const size_t blocks_per_sm[CHAIN_WIDTHS], size_t P)
{
    const double SCAN_STEP = 2.0, FIXED = 31.0, OUTPUT_STEP = 5.0;
    const size_t value_groups = (size_t)round_up16(V) / 16, fold_groups = value_groups + (size_t)round_up16(K) / 16;
    const size_t heads = r.rows * r.heads_per_row;
    const double steps = (double)((r.chunks + P - 1) / P);
    /* stage 06's output warps: K = V = 128 in 8-tile blocks (none with --precise) */
    const bool outputs_possible = output_warps_shape(K, V) && blocks_per_sm[CHAIN_WIDTHS - 1] > 0;
    bool outputs_in_chain = false;
    const double replay = modelled_launch(heads * P * value_groups, busy_segments(r, P, P) * value_groups, value_groups, sms,
                                          blocks_per_sm, steps, outputs_possible ? REPLAY_WITH_OUTPUTS : REPLAY_LAUNCH, &outputs_in_chain);
    /* kernel 3, where P decides whether it runs: its blocks fill the GPU, so its time is its work */
    const double outputs =
        outputs_possible && !outputs_in_chain ? OUTPUT_STEP * (double)(r.real_chunks * r.heads_per_row) / (double)sms : 0.0;
    if (P == 1)
        return replay + outputs;
    const double fold = modelled_launch(heads * (P - 1) * fold_groups, busy_segments(r, P, P - 1) * fold_groups, fold_groups, sms,
                                        blocks_per_sm, steps, FOLD_LAUNCH, NULL);
    return fold + replay + outputs + SCAN_STEP * (double)(P - 1) + FIXED;
}

static size_t least_modelled_segments(const modelled_rows &r, size_t K, size_t V, size_t sms, const size_t blocks_per_sm[CHAIN_WIDTHS])
{
    size_t best = 1;
    if (sms == 0)
        sms = 1;
    /* the rows' work in rows as long as the longest: B H for rows alike */
    const size_t busy_heads = (r.heads_per_row * r.real_chunks + r.chunks - 1) / (r.chunks ? r.chunks : 1);
    if (busy_heads * ((size_t)round_up16(V) / 16) >= sms) /* the heads fill the GPU */
        return 1;
    for (size_t P = 2; P <= MAX_AUTOMATIC_SEGMENTS && P <= r.chunks; P++)
        if (modelled_steps(r, K, V, sms, blocks_per_sm, P) < modelled_steps(r, K, V, sms, blocks_per_sm, best))
            best = P;
    return best;
}

extern "C" size_t sequence_parallel_segments(size_t heads, size_t K, size_t V, size_t chunks, size_t sms,
                                             const size_t blocks_per_sm[CHAIN_WIDTHS])
{
    return least_modelled_segments(modelled_rows{&chunks, 1, heads, chunks, chunks}, K, V, sms, blocks_per_sm);
}

extern "C" size_t sequence_parallel_packed_segments(const size_t *row_chunks, size_t rows, size_t heads_per_row, size_t K, size_t V,
                                                    size_t sms, const size_t blocks_per_sm[CHAIN_WIDTHS])
{
    size_t chunks = 0, real_chunks = 0;
    for (size_t n = 0; n < rows; n++) {
        chunks = row_chunks[n] > chunks ? row_chunks[n] : chunks;
        real_chunks += row_chunks[n];
    }
    return least_modelled_segments(modelled_rows{row_chunks, rows, heads_per_row, chunks, real_chunks}, K, V, sms, blocks_per_sm);
}

/* P: --segments, else the model's choice for this GPU (an H200's 132 SMs and one chain block
 * of each width an SM when no device answers); at most one segment per chunk. */
static void sequence_parallel_resolve_options(const gdn_problem *p, gdn_settings *s)
{
    s->chunk = CHUNK;
    const gdn_problem rows = p->offsets ? padded_rows_of(p) : *p; /* a packed batch: its padded rows (padded_rows.cuh) */
    const size_t chunks = chunks_of(rows.T);
    if (s->segments == 0) {
        const int sms = gdn_sm_count();
        size_t blocks_per_sm[CHAIN_WIDTHS];
        /* the replay's kernel (no FOLD) in this mode (--precise's has more registers), with
         * the two-slot ring: chain_launch_shape takes it where it gives fewer waves than the
         * deepest, and two slots allow the most blocks an SM; staged, as it is where its
         * blocks outnumber the SMs, the only case in which blocks an SM matter */
        /* 06's slots for these sizes (at K = V = 64 those of the chain from v, which runs where
           blocks outnumber SMs, the one case the count matters: chain_from_values_pays) */
        const bool from_values = !s->batch_invariant && chain_from_values_sizes(p->K, p->V, p->H, rows.T, s->precise);
        for (int i = 0; i < CHAIN_WIDTHS; i++) { /* 1, 2, 4 and 8 tiles; 0: a width stage 06 does not make */
            const chain_shape shallowest = two_slot_shape(1 << i, p->K, s->precise, true, from_values);
            blocks_per_sm[i] = (1 << i) > widest_chain_tiles(s->precise) ? 0
                               : s->precise                              ? chain_blocks_per_sm<true, state_columns>(shallowest)
                                                                         : chain_blocks_per_sm<false, state_columns>(shallowest);
        }
        /* --batch-invariant: as for one head alone, so that a sequence is cut the same whatever
           runs beside it (the fold, the scan and the replay round differently from one chain) */
        const size_t heads = s->batch_invariant ? 1 : rows.B * gdn_value_heads(p);
        size_t *row_chunks = p->offsets && !s->batch_invariant ? (size_t *)malloc(rows.B * sizeof(size_t)) : NULL;
        if (row_chunks) { /* a packed batch: each row's own chunks, so that a short row's empty segments cost no wave */
            for (size_t n = 0; n < rows.B; n++)
                row_chunks[n] = chunks_of(gdn_sequence_length(p, n));
            s->segments = sequence_parallel_packed_segments(row_chunks, rows.B, gdn_value_heads(p), p->K, p->V, (size_t)sms, blocks_per_sm);
            free(row_chunks);
        } else /* the rows alike (or, with no memory for the lengths, counted as padded) */
            s->segments = sequence_parallel_segments(heads, p->K, p->V, chunks, (size_t)sms, blocks_per_sm);
    }
    if (s->segments > chunks) {
        fprintf(stderr, "07_sequence_parallel: note: %zu segments for %zu chunks of %d tokens; clamped to %zu\n", s->segments,
                chunks, (int)CHUNK, chunks);
        s->segments = chunks;
    }
}
