/* test_sequence_parallel.c -- stage 07 (fold segments, scan their maps, replay; bf16 inputs,
 * tensor cores) equals the fp64 oracle and stage 06, all on the same bf16-rounded inputs,
 * within GDN_TOLERANCE_BF16 of the oracle and GDN_TOLERANCE_BF16_VS_STAGE of 06, for P = 1, 2, 7 and 64 segments and the automatic P, segments of
 * unequal length, with and without h0, with --precise, with slow gates (state carried across
 * segments) and extreme ones; and the automatic
 * P is 1 where the heads fill the GPU (that part runs without a GPU too). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/oracle.h"

#include "../../steps/07_sequence_parallel/sequence_parallel.h"
#include "../test_support.h"

extern const gdn_stage warp_specialized_stage;

/* A stage once on p with --segments (0: automatic) and --precise; the P it ran with in *used. */
static gdn_result run_with(const gdn_stage *stage, const gdn_problem *p, size_t segments, int precise, size_t *used)
{
    gdn_settings s = {.reps = 1, .threads = 1, .segments = segments, .precise = precise};
    gdn_result r = test_run_settings(stage, p, &s);
    if (used)
        *used = s.segments;
    return r;
}

/* Round p's inputs as the driver does; stage 07 with each P of `segments` (0: automatic; a
 * count of `count`) in both modes, against the oracle (computed once) and against stage 06 in
 * the same mode. A P past the chunks (of the longest sequence) is asked as the chunks: 07
 * clamps it so with a note on stderr (segments_clamped_to_the_chunks checks both), which a
 * suite run would print once a case. */
static void check_segments(gdn_problem *p, const size_t *segments, int count, const char *what)
{
    gdn_problem_round_to_bf16(p);
    const size_t o_count = gdn_tokens(p) * p->V, ht_count = gdn_state_count(p);
    double *oracle = malloc((o_count + ht_count) * sizeof *oracle);
    ck_assert_ptr_nonnull(oracle);
    ck_assert_msg(gdn_oracle(p, oracle, oracle + o_count) == 0, "%s", gdn_last_error());
    for (int precise = 0; precise <= 1; precise++) {
        gdn_result whole = run_with(&warp_specialized_stage, p, 0, precise, NULL);
        for (int i = 0; i < count; i++) {
            const size_t chunks = (gdn_longest_sequence(p) + 63) / 64, asked = segments[i] < chunks ? segments[i] : chunks;
            size_t used;
            gdn_result cut = run_with(&sequence_parallel_stage, p, asked, precise, &used);
            ck_assert(used >= 1 && (asked == 0 || used == asked));
            char label[200];
            snprintf(label, sizeof label, "07 P=%zu%s against the oracle, %s", used, precise ? " --precise" : "", what);
            assert_close(gdn_worse(gdn_compare(cut.o, oracle, o_count), gdn_compare(cut.ht, oracle + o_count, ht_count)),
                         GDN_TOLERANCE_BF16, label);
            snprintf(label, sizeof label, "07 P=%zu%s against 06, %s", used, precise ? " --precise" : "", what);
            assert_close(test_against_result(p, &cut, &whole), GDN_TOLERANCE_BF16_VS_STAGE, label);
            gdn_result_free(&cut);
        }
        gdn_result_free(&whole);
    }
    free(oracle);
}

/* _i: (grid shape, with or without h0); P automatic, 2 and 7 (clamped to the chunks) */
START_TEST(segments_on_the_grid)
{
    const size_t segments[] = {0, 2, 7};
    gdn_problem p = test_problem(test_grid[_i % test_grid_count], _i / test_grid_count, 5000 + _i);
    check_segments(&p, segments, 3, "grid");
    gdn_problem_free(&p);
}
END_TEST

/* _i: (shape of test_bf16_shapes, with or without h0): P automatic, 2 and 7 (clamped to the
 * chunks) */
START_TEST(segments_on_more_shapes)
{
    const size_t segments[] = {0, 2, 7};
    test_shape shape = test_bf16_shapes[_i % test_bf16_shape_count];
    char what[80];
    test_describe_shape(what, sizeof what, shape, _i / test_bf16_shape_count);
    gdn_problem p = test_problem(shape, _i / test_bf16_shape_count, 5400 + _i);
    check_segments(&p, segments, 3, what);
    gdn_problem_free(&p);
}
END_TEST

/* _i: the edge cases of test_support.c but the first (left out of every bf16 suite; see
 * test_tensor_core_stage.c), with P = 2 and 7 */
START_TEST(segments_on_edge_cases)
{
    const size_t segments[] = {2, 7};
    gdn_problem p = test_edge_case(1 + _i, 5500 + _i);
    check_segments(&p, segments, 2, test_edge_case_names[1 + _i]);
    gdn_problem_free(&p);
}
END_TEST

/* _i: (shape, with or without h0): many chunks, so that P = 64 cuts whole chunks, and chunk
 * counts P does not divide (segments of unequal length), a partial last chunk, K = V = 128,
 * K and V off the multiples of 16, several heads and batches; and K = 128 with two heads or
 * more: at V = 128 the folds and replays make Vnew from v (06's chain_from_values), at V = 48
 * they read W and U (this shape catches kernel 1's transform-only instance, compiled for K = V
 * = 128, run at V = 48: docs/06, Vnew from v); and K, V not multiples of 4, where the
 * TMA unit cannot take the scan's maps and the threads copy them (scan_on_tensor_cores.cuh,
 * copy_map_by_threads). */
static const test_shape long_shapes[] = {{1, 4096 + 100, 2, 64, 64}, {1, 8192, 1, 128, 128}, {2, 4500, 3, 48, 80},
                                         {1, 1000, 4, 64, 64}, {1, 3000, 2, 128, 128}, {2, 2500, 3, 128, 48},
                                         {1, 2000, 2, 33, 17}};
START_TEST(segments_on_long_sequences)
{
    const int count = sizeof long_shapes / sizeof long_shapes[0];
    const size_t segments[] = {0, 1, 2, 7, 64};
    test_shape shape = long_shapes[_i % count];
    char what[80];
    test_describe_shape(what, sizeof what, shape, _i / count);
    gdn_problem p = test_problem(shape, _i / count, 5100 + _i);
    check_segments(&p, segments, 5, what);
    gdn_problem_free(&p);
}
END_TEST

/* _i: (shape, P of 2, 7, 64). Slow gates, log-uniform in [-1e-2, -1e-4]: a chunk keeps at least
 * e^-0.64 of its start state, so every segment's output depends on the segments before it
 * and a wrong start shows. (The generator's gates, log sigmoid of a normal, forget a chunk's
 * start within the chunk: there a stitch off by a rounding leaves no trace at all.) The third
 * shape's folds and replays make Vnew from v (K = V = 128, two heads: 06's chain_from_values),
 * where a wrong decay e^gamma_C would show only with such gates. */
static const test_shape slow_shapes[] = {{1, 4096 + 100, 2, 64, 64}, {1, 8192, 1, 128, 128}, {1, 4096 + 100, 2, 128, 128}};
START_TEST(segments_with_slow_gates)
{
    const size_t segments[] = {2, 7, 64};
    test_shape shape = slow_shapes[_i / 3];
    gdn_problem p = test_problem(shape, 1, 5150 + _i);
    test_set_gates(&p, -1e-2, -1e-4, 5150 + _i);
    char what[80];
    snprintf(what, sizeof what, "slow gates, T=%zu H=%zu K=%zu", shape.T, shape.H, shape.K);
    check_segments(&p, &segments[_i % 3], 1, what);
    gdn_problem_free(&p);
}
END_TEST

/* _i: gates of -1e4 (a segment's map A collapses to 0), no decay at all (A near I), beta 0 or 1 */
START_TEST(segments_with_extreme_gates)
{
    const size_t segments[] = {2, 7};
    test_shape shape = {1, 900, 2, 64, 64};
    gdn_problem p = test_problem(shape, 1, 5200 + _i);
    test_set_extreme_gates(&p, _i, 5201 + _i);
    check_segments(&p, segments, 2, test_extreme_gate_names[_i]);
    gdn_problem_free(&p);
}
END_TEST

/* Grouped value heads (HV a multiple of H): 07 with P automatic, 2 and 5 against the oracle
 * and 06 on the same bf16 inputs: from v at K = V = 128 and 64 (one key head: the threads copy
 * k there), W and U at K = 100. _i: the shape. */
START_TEST(segments_take_grouped_heads)
{
    static const gdn_layout shapes[] = {{.B = 1, .T = 2000, .H = 2, .HV = 8, .K = 128, .V = 128, .with_h0 = 1},
                                        {.B = 1, .T = 1500, .H = 1, .HV = 4, .K = 64, .V = 64, .with_h0 = 1},
                                        {.B = 2, .T = 700, .H = 3, .HV = 6, .K = 100, .V = 72, .with_h0 = 0}};
    const size_t segments[] = {0, 2, 5};
    gdn_problem p = test_layout_problem(&shapes[_i], 5600 + _i);
    char what[64];
    snprintf(what, sizeof what, "HV/H = %zu", shapes[_i].HV / shapes[_i].H);
    check_segments(&p, segments, 3, what);
    gdn_problem_free(&p);
}
END_TEST

/* --batch-invariant: one sequence's o and ht, alone and inside a batch, to the bit, in both
 * modes: P is chosen for one head's sequence, where by default the batch's heads would run it
 * whole and the sequence alone cut. (--precise takes neither the chain from v nor output warps
 * by default either: its half checks the choices that move work, not those that round.) _i:
 * the case. */
START_TEST(segments_batch_invariant)
{
    static const test_shape alone[] = {{1, 8192, 1, 128, 128}, {1, 4000, 2, 64, 64}};
    static const test_shape batch[] = {{2, 8192, 64, 128, 128}, {4, 4000, 32, 64, 64}};
    gdn_problem p = test_problem(alone[_i], 1, 5610 + 2 * _i), many = test_problem(batch[_i], 1, 5611 + 2 * _i);
    test_embed_alone(&many, &p);
    gdn_problem_round_to_bf16(&p);
    gdn_problem_round_to_bf16(&many);
    for (int precise = 0; precise <= 1; precise++) {
        gdn_settings s = {.reps = 1, .threads = 1, .precise = precise, .batch_invariant = 1};
        gdn_result by_itself = test_run_settings(&sequence_parallel_stage, &p, &s);
        const size_t P = s.segments;
        ck_assert_msg(P > 1, "--batch-invariant: one head of T = %zu runs whole (P = 1): the case cuts nothing", p.T);
        s = (gdn_settings){.reps = 1, .threads = 1, .precise = precise, .batch_invariant = 1};
        gdn_result in_batch = test_run_settings(&sequence_parallel_stage, &many, &s);
        ck_assert_msg(s.segments == P, "--batch-invariant: P = %zu alone, %zu in the batch", P, s.segments);
        char label[120];
        snprintf(label, sizeof label, "07 --batch-invariant%s P=%zu alone against the oracle", precise ? " --precise" : "", P);
        assert_close(test_against_oracle(&p, &by_itself), GDN_TOLERANCE_BF16, label);
        long where;
        ck_assert_msg(test_same_bits_as_alone(&many, &in_batch, &p, &by_itself, &where),
                      "07 --batch-invariant%s P=%zu: the sequence's bits differ in the batch at %ld", precise ? " --precise" : "", P, where);
        gdn_result_free(&in_batch);
        gdn_result_free(&by_itself);
    }
    gdn_problem_free(&many);
    gdn_problem_free(&p);
}
END_TEST

/* A packed batch, run as stage 06 runs it (rows padded to the longest sequence), P automatic,
 * 2 and 5, against the oracle and 06: one long sequence among short ones around a chunk's
 * length, with grouped value heads (HV / H = 4 at K = V = 128: the replay's output warps; 2 at
 * K = V = 64: the chain from v; 3 at K = 100, V = 72). _i: the case. */
START_TEST(segments_take_packed_batches)
{
    static const size_t long_and_short[6] = {2000, 1, 63, 64, 65, 300}, two[2] = {1800, 420};
    static const gdn_layout layouts[] = {
        {.B = 1, .H = 2, .HV = 8, .K = 128, .V = 128, .with_h0 = 1, .sequences = 6, .lengths = long_and_short},
        {.B = 1, .H = 1, .HV = 2, .K = 64, .V = 64, .with_h0 = 1, .sequences = 2, .lengths = two},
        {.B = 1, .H = 3, .HV = 9, .K = 100, .V = 72, .with_h0 = 0, .sequences = 6, .lengths = long_and_short}};
    gdn_layout l = layouts[_i];
    l.T = 0;
    for (size_t n = 0; n < l.sequences; n++)
        l.T += l.lengths[n];
    const size_t segments[] = {0, 2, 5};
    gdn_problem p = test_layout_problem(&l, 5620 + _i);
    char what[80];
    snprintf(what, sizeof what, "a packed batch of %zu sequences, HV/H = %zu", l.sequences, l.HV / l.H);
    check_segments(&p, segments, 3, what);
    gdn_problem_free(&p);
}
END_TEST

/* --batch-invariant refuses a packed batch by name: its P would follow the longest sequence */
START_TEST(segments_refuse_batch_invariant_packed)
{
    static const size_t lengths[2] = {300, 100};
    const gdn_layout l = {.B = 1, .T = 400, .H = 1, .K = 64, .V = 64, .sequences = 2, .lengths = lengths};
    gdn_problem p = test_layout_problem(&l, 5630);
    gdn_problem_round_to_bf16(&p);
    gdn_result r;
    ck_assert_int_eq(gdn_result_alloc(&r, &p), 0);
    gdn_settings s = {.reps = 1, .threads = 1, .batch_invariant = 1};
    ck_assert_int_ne(gdn_stage_run_once(&sequence_parallel_stage, &p, &s, &r), 0);
    ck_assert_msg(strstr(gdn_last_error(), "--batch-invariant with a packed batch") != NULL, "%s", gdn_last_error());
    gdn_result_free(&r);
    gdn_problem_free(&p);
}
END_TEST

START_TEST(segments_refuse_large_keys) { test_refuses_keys_of_129(&sequence_parallel_stage, 2, 5300); }
END_TEST

/* ---- the automatic P: a host function, tested with or without a GPU ---- */

/* Chain blocks an H200 SM holds, as the occupancy query answers for stage 06's blocks of 1, 2,
 * 4 and 8 tiles with two-slot rings (the ring that sets a launch's waves; stage 06's blocks:
 * two n-tiles a warp in 4- and 8-tile blocks, U in bf16, staged stores, as where blocks
 * outnumber SMs): 4, 2, 2, 1 at K = 64, 2, 2, 2, 1 at K = 128 (shared memory and registers;
 * as stage 07 prints them on an H200). */
static const size_t H200_SMS = 132, h200_k64[CHAIN_WIDTHS] = {4, 2, 2, 1}, h200_k128[CHAIN_WIDTHS] = {2, 2, 2, 1};
static const size_t *h200_blocks_per_sm(size_t K) { return K <= 64 ? h200_k64 : h200_k128; }

/* Where B H alone fills the GPU, P = 1: the shapes of stage 06's benchmark. */
START_TEST(automatic_segments_one_where_heads_fill_the_gpu)
{
    const size_t shapes[][5] = {{8, 4096, 16, 128, 128}, {1, 8192, 96, 128, 128}, {4, 4096, 64, 128, 128},
                                {2, 16384, 16, 128, 128}, {1, 4096, 256, 64, 64}};
    for (int i = 0; i < 5; i++) {
        const size_t *s = shapes[i];
        size_t P = sequence_parallel_segments(s[0] * s[2], s[3], s[4], (s[1] + 63) / 64, H200_SMS, h200_blocks_per_sm(s[3]));
        ck_assert_msg(P == 1, "B=%zu T=%zu H=%zu K=%zu V=%zu: P = %zu, not 1", s[0], s[1], s[2], s[3], s[4], P);
    }
}
END_TEST

/* Few heads and long sequences: P is one of the P whose time is within 3% of the best P
 * measured on an H200 (docs/07 "Choosing P": sweeps of P = 1 .. 64 at thirteen shapes; of P =
 * 4 .. 64 at four of them at K = V = 64, with the fold's two-n-tile step compiled for K = V =
 * 64; and of P = 1 .. 8 and 16 at six shapes of 32 to 128 chunks); one chunk: 1;
 * more heads never ask for more segments. (At K = V = 128 the replay's 128 blocks of 8 tiles
 * with output warps are the cut to find: 8 segments at 16 heads, 16 at 8, 32 at 4.) */
START_TEST(automatic_segments_cut_long_sequences)
{
    const size_t shapes[][9] = {/* B, T, H, K, V, then the good P (0: none more) */
                                {1, 16384, 8, 64, 64, 16, 0, 0, 0},    {1, 131072, 8, 64, 64, 16, 32, 0, 0},
                                {1, 65536, 4, 64, 64, 32, 0, 0, 0},    {1, 65536, 16, 64, 64, 8, 16, 0, 0},
                                {1, 65536, 8, 128, 128, 16, 0, 0, 0},  {1, 16384, 1, 64, 64, 12, 16, 0, 0},
                                {1, 65536, 16, 128, 128, 8, 0, 0, 0},  {1, 65536, 4, 128, 128, 32, 0, 0, 0},
                                {1, 65536, 2, 128, 128, 16, 32, 0, 0}, {1, 131072, 2, 128, 128, 48, 64, 0, 0},
                                {1, 131072, 16, 128, 128, 8, 16, 0, 0}, {1, 16384, 8, 128, 128, 16, 0, 0, 0},
                                {1, 32768, 8, 128, 128, 16, 0, 0, 0},  {1, 16384, 16, 128, 128, 1, 8, 0, 0},
                                /* 32 to 128 chunks: where the scan's cost decides P = 1 or not */
                                {1, 4096, 8, 64, 64, 1, 3, 4, 0},      {1, 4096, 16, 64, 64, 1, 8, 0, 0},
                                {1, 4096, 4, 64, 64, 4, 5, 6, 8},      {1, 4096, 2, 64, 64, 5, 6, 8, 0},
                                {1, 8192, 8, 64, 64, 8, 16, 0, 0},     {1, 2048, 8, 64, 64, 1, 0, 0, 0},
                                {1, 4096, 8, 128, 128, 1, 0, 0, 0},    {1, 4096, 4, 128, 128, 1, 3, 0, 0},
                                {1, 8192, 16, 128, 128, 1, 0, 0, 0},   {1, 4096, 16, 128, 128, 1, 0, 0, 0}};
    const int count = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < count; i++) {
        const size_t *s = shapes[i], chunks = (s[1] + 63) / 64;
        size_t P = sequence_parallel_segments(s[0] * s[2], s[3], s[4], chunks, H200_SMS, h200_blocks_per_sm(s[3]));
        ck_assert_msg(P == s[5] || P == s[6] || P == s[7] || P == s[8], "B=%zu T=%zu H=%zu K=%zu: P = %zu, not one of the measured best",
                      s[0], s[1], s[2], s[3], P);
    }
    ck_assert_uint_eq(sequence_parallel_segments(1, 64, 64, 1, H200_SMS, h200_k64), 1);
    /* 16 chunks: cutting them costs more than it saves, as measured (docs/07) */
    ck_assert_uint_eq(sequence_parallel_segments(1, 64, 64, 16, H200_SMS, h200_k64), 1);
    ck_assert_uint_eq(sequence_parallel_segments(8, 64, 64, 16, H200_SMS, h200_k64), 1);
    ck_assert_uint_le(sequence_parallel_segments(1, 64, 64, 3, H200_SMS, h200_k64), 3);
    /* the same with no 8-tile blocks (0 blocks an SM: a width stage 06 does not make, as with
       --precise), where the model must keep to the narrower widths */
    const size_t no_widest[CHAIN_WIDTHS] = {2, 2, 2, 0};
    for (int table = 0; table < 2; table++) {
        size_t previous = 1000;
        for (size_t heads = 1; heads <= 512; heads *= 2) {
            size_t P = sequence_parallel_segments(heads, 128, 128, 1024, H200_SMS, table ? no_widest : h200_k128);
            ck_assert_msg(P >= 1 && P <= previous, "heads %zu: P = %zu, > %zu at half the heads", heads, P, previous);
            previous = P;
        }
        ck_assert_uint_eq(previous, 1);
    }
}
END_TEST

/* A packed batch's P (H200 tables): a row's segments past its real chunks cost no wave, so a long
 * sequence beside a short one is cut as finely as beside nothing but its own heads' busy blocks,
 * finer than the padded rows alone would be; rows alike are cut as rows; and it never asks for
 * fewer segments than its padded rows. */
START_TEST(automatic_segments_for_packed_batches)
{
    static const size_t mixes[][3] = {/* chunks of the long and the short sequence, value heads */
                                      {448, 64, 8}, {112, 16, 8}, {448, 64, 16}, {1024, 1, 2}, {256, 255, 4}};
    for (int i = 0; i < 5; i++) {
        const size_t *m = mixes[i], HV = m[2];
        const size_t P_packed = sequence_parallel_packed_segments(m, 2, HV, 128, 128, H200_SMS, h200_k128);
        const size_t P_rows = sequence_parallel_segments(2 * HV, 128, 128, m[0], H200_SMS, h200_k128);
        const size_t P_alone = sequence_parallel_segments(HV, 128, 128, m[0], H200_SMS, h200_k128);
        ck_assert_msg(P_packed >= P_rows, "%zu + %zu chunks, %zu heads: P = %zu, fewer than the padded rows' %zu", m[0], m[1], HV,
                      P_packed, P_rows);
        /* 28672 + 4096 and 7168 + 1024 tokens with 8 value heads: the padded rows' 16 heads of
           blocks would halve the long sequence's segments; its 8 busy heads keep them near its own */
        if (i < 2)
            ck_assert_msg(P_packed > P_rows && 2 * P_packed > P_alone, "%zu + %zu chunks: P = %zu (padded rows %zu, alone %zu)", m[0],
                          m[1], P_packed, P_rows, P_alone);
    }
    const size_t alike[4] = {64, 64, 64, 64};
    ck_assert_uint_eq(sequence_parallel_packed_segments(alike, 4, 2, 128, 128, H200_SMS, h200_k128),
                      sequence_parallel_segments(8, 128, 128, 64, H200_SMS, h200_k128));
}
END_TEST

/* A packed batch on the host (no GPU needed): 07 sizes its workspace for the rows padded to the
 * longest sequence and nothing more (the inputs are read and o written where the batch lies,
 * so it is what a batch of those rows needs); --batch-invariant refuses it when the workspace is asked,
 * by name; its flops count the real chunks only (padding is not run), so one long sequence and
 * one short one count less than two long ones; and P is at least its padded rows'. */
START_TEST(packed_batches_on_the_host)
{
    static const size_t long_and_short[2] = {2000, 65};
    const gdn_layout packed_layout = {.B = 1, .T = 2065, .H = 2, .HV = 4, .K = 64, .V = 64, .with_h0 = 1, .sequences = 2,
                                      .lengths = long_and_short};
    const gdn_layout rows_layout = {.B = 2, .T = 2000, .H = 2, .HV = 4, .K = 64, .V = 64, .with_h0 = 1};
    gdn_problem packed = test_layout_problem(&packed_layout, 5640), rows = test_layout_problem(&rows_layout, 5641);
    gdn_settings s = {.reps = 1, .threads = 1}, s_rows = {.reps = 1, .threads = 1};
    sequence_parallel_stage.resolve_options(&packed, &s);
    sequence_parallel_stage.resolve_options(&rows, &s_rows);
    ck_assert_msg(s.segments >= s_rows.segments, "P = %zu for the packed batch, %zu for its padded rows", s.segments, s_rows.segments);
    size_t packed_bytes = 0, rows_bytes = 0;
    ck_assert_msg(sequence_parallel_stage.device_workspace_bytes(&packed, &s, &packed_bytes) == 0, "%s", gdn_last_error());
    /* the kernels read q, k, v, g and beta and write o where the packed batch lies: no padded
       copies, the workspace of its rows alone (at its own P, on which the maps' bytes depend) */
    ck_assert_msg(sequence_parallel_stage.device_workspace_bytes(&rows, &s, &rows_bytes) == 0, "%s", gdn_last_error());
    ck_assert_msg(packed_bytes == rows_bytes, "%zu bytes for the packed batch, %zu for its rows at P = %zu", packed_bytes, rows_bytes,
                  s.segments);
    ck_assert_msg(sequence_parallel_stage.counted_flops(&packed, &s) < sequence_parallel_stage.counted_flops(&rows, &s_rows),
                  "the packed batch counts as many flops as its padded rows");
    gdn_settings invariant = {.reps = 1, .threads = 1, .batch_invariant = 1};
    sequence_parallel_stage.resolve_options(&packed, &invariant);
    ck_assert_int_ne(sequence_parallel_stage.device_workspace_bytes(&packed, &invariant, &packed_bytes), 0);
    ck_assert_msg(strstr(gdn_last_error(), "--batch-invariant with a packed batch") != NULL, "%s", gdn_last_error());
    gdn_problem_free(&rows);
    gdn_problem_free(&packed);
}
END_TEST

Suite *sequence_parallel_suite(void)
{
    Suite *suite = suite_create("sequence_parallel");
    TCase *cases = tcase_create("07_sequence_parallel");
    tcase_set_timeout(cases, 600);
    tcase_add_loop_test(cases, segments_on_the_grid, 0, 2 * test_grid_count);
    tcase_add_loop_test(cases, segments_on_more_shapes, 0, 2 * test_bf16_shape_count);
    tcase_add_loop_test(cases, segments_on_long_sequences, 0, 2 * (int)(sizeof long_shapes / sizeof long_shapes[0]));
    tcase_add_loop_test(cases, segments_with_slow_gates, 0, 3 * (int)(sizeof slow_shapes / sizeof slow_shapes[0]));
    tcase_add_loop_test(cases, segments_with_extreme_gates, 0, 3);
    tcase_add_loop_test(cases, segments_on_edge_cases, 0, test_edge_case_count - 1);
    tcase_add_loop_test(cases, segments_take_grouped_heads, 0, 3);
    tcase_add_loop_test(cases, segments_batch_invariant, 0, 2);
    tcase_add_loop_test(cases, segments_take_packed_batches, 0, 3);
    tcase_add_test(cases, segments_refuse_batch_invariant_packed);
    tcase_add_test(cases, segments_refuse_large_keys);
    suite_add_tcase(suite, cases);
    return suite;
}

/* More segments than chunks: 07 clamps P to the chunks (a packed batch: its longest sequence's)
 * and says so in one line on stderr, caught here in a file. No GPU needed. */
START_TEST(segments_clamped_to_the_chunks)
{
    static const size_t lengths[2] = {100, 30};
    const gdn_layout packed_layout = {.B = 1, .T = 130, .H = 1, .HV = 1, .K = 64, .V = 64, .sequences = 2, .lengths = lengths};
    gdn_problem one = test_problem((test_shape){1, 100, 1, 64, 64}, 0, 5710), packed = test_layout_problem(&packed_layout, 5711);
    const gdn_problem *problems[2] = {&one, &packed};
    for (int i = 0; i < 2; i++) {
        char dir[64], path[96], note[256] = "";
        test_make_temp_dir(dir, sizeof dir);
        snprintf(path, sizeof path, "%s/stderr", dir);
        fflush(stderr);
        const int file = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600), saved = dup(STDERR_FILENO);
        ck_assert(file >= 0 && saved >= 0 && dup2(file, STDERR_FILENO) >= 0);
        gdn_settings s = {.reps = 1, .threads = 1, .segments = 7};
        sequence_parallel_stage.resolve_options(problems[i], &s);
        fflush(stderr);
        ck_assert(dup2(saved, STDERR_FILENO) >= 0);
        close(saved);
        close(file);
        FILE *written = fopen(path, "r");
        ck_assert_ptr_nonnull(written);
        const size_t got = fread(note, 1, sizeof note - 1, written);
        note[got] = '\0';
        fclose(written);
        ck_assert_uint_eq(s.segments, 2);
        ck_assert_msg(strcmp(note, "07_sequence_parallel: note: 7 segments for 2 chunks of 64 tokens; clamped to 2\n") == 0,
                      "%s: stderr '%s'", i ? "a packed batch" : "one sequence", note);
        test_remove_dir(dir);
    }
    gdn_problem_free(&one);
    gdn_problem_free(&packed);
}
END_TEST

Suite *segment_choice_suite(void)
{
    Suite *suite = suite_create("segment_choice");
    TCase *cases = tcase_create("07_automatic_segments");
    tcase_add_test(cases, automatic_segments_one_where_heads_fill_the_gpu);
    tcase_add_test(cases, automatic_segments_cut_long_sequences);
    tcase_add_test(cases, automatic_segments_for_packed_batches);
    tcase_add_test(cases, packed_batches_on_the_host);
    tcase_add_test(cases, segments_clamped_to_the_chunks);
    suite_add_tcase(suite, cases);
    return suite;
}
