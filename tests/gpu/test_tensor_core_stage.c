/* test_tensor_core_stage.c -- stage 06's series (06a_tensor_cores, 06b_producer_consumer,
 * 06c_bulk_copies, 06d_warp_chain, 06e_output_warps, then
 * 06_warp_specialized;
 * bf16 inputs, tensor cores) equals the fp64 oracle, 05_wy_chunked_cuda and the sub-stage
 * before it, all run on the same bf16-rounded inputs, within GDN_TOLERANCE_BF16
 * (tolerances.h), over the shape grid and beyond: one token, T not a multiple of the chunk,
 * K = V = 64 and 128, K and V not multiples of 16, B x H from 1 to 256, with and without h0,
 * extreme gates and the edge cases; NaN or Inf never passes (assert_close). And the wgmma
 * layout its output warps assume, on its own (wgmma_layout.cu). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../common/device.h"
#include "../../common/random.h"
#include "../../steps/06_warp_specialized/warp_specialized.h"
#include "../test_support.h"
#include "wgmma_layout.h"

extern const gdn_stage wy_chunked_cuda_stage, tensor_cores_stage, producer_consumer_stage, bulk_copies_stage,
    warp_chain_stage, output_warps_stage, warp_specialized_stage;

/* the sub-stages before 06, in the order a reader meets them; each is checked against the one before */
static const gdn_stage *const series[] = {&tensor_cores_stage, &producer_consumer_stage, &bulk_copies_stage,
                                          &warp_chain_stage, &output_warps_stage};
enum { SERIES = sizeof series / sizeof series[0] };

/* Stage 06 once on p, with or without --precise. */
static gdn_result run_tensor_cores(const gdn_problem *p, int precise)
{
    gdn_settings s = {.reps = 1, .threads = 1, .precise = precise};
    return test_run_settings(&warp_specialized_stage, p, &s);
}

/* Round p's inputs as the stage's driver does, run 05_cuda, the series and 06 (both modes),
 * and compare each sub-stage with the oracle and with the one before it (06a with 05_cuda),
 * and 06 with the oracle, 05_cuda and the last sub-stage. */
static void check_tensor_cores(gdn_problem *p, const char *what)
{
    gdn_problem_round_to_bf16(p);
    gdn_result fp32 = test_run(&wy_chunked_cuda_stage, p, 1, 0, 0);
    gdn_result first = test_run(series[0], p, 1, 0, 0), before = first;
    char label[200];
    snprintf(label, sizeof label, "%s against the oracle, %s", series[0]->name, what);
    assert_close(test_against_oracle(p, &first), GDN_TOLERANCE_BF16, label);
    snprintf(label, sizeof label, "%s against 05_cuda, %s", series[0]->name, what);
    assert_close(test_against_result(p, &first, &fp32), GDN_TOLERANCE_BF16, label);
    for (int i = 1; i < SERIES; i++) {
        gdn_result next = test_run(series[i], p, 1, 0, 0);
        snprintf(label, sizeof label, "%s against the oracle, %s", series[i]->name, what);
        assert_close(test_against_oracle(p, &next), GDN_TOLERANCE_BF16, label);
        snprintf(label, sizeof label, "%s against %s, %s", series[i]->name, series[i - 1]->name, what);
        assert_close(test_against_result(p, &next, &before), GDN_TOLERANCE_BF16, label);
        if (series[i]->options & GDN_OPTION_PRECISE) { /* the sub-stages that offer --precise: it too */
            gdn_settings s = {.reps = 1, .threads = 1, .precise = 1};
            gdn_result precise = test_run_settings(series[i], p, &s);
            snprintf(label, sizeof label, "%s --precise against the oracle, %s", series[i]->name, what);
            assert_close(test_against_oracle(p, &precise), GDN_TOLERANCE_BF16, label);
            gdn_result_free(&precise);
        }
        if (i > 1)
            gdn_result_free(&before);
        before = next;
    }
    for (int precise = 0; precise <= 1; precise++) {
        gdn_result tensor = run_tensor_cores(p, precise);
        snprintf(label, sizeof label, "06%s against the oracle, %s", precise ? " --precise" : "", what);
        assert_close(test_against_oracle(p, &tensor), GDN_TOLERANCE_BF16, label);
        snprintf(label, sizeof label, "06%s against 05_cuda, %s", precise ? " --precise" : "", what);
        assert_close(test_against_result(p, &tensor, &fp32), GDN_TOLERANCE_BF16, label);
        snprintf(label, sizeof label, "06%s against %s, %s", precise ? " --precise" : "", series[SERIES - 1]->name, what);
        assert_close(test_against_result(p, &tensor, &before), GDN_TOLERANCE_BF16, label);
        gdn_result_free(&tensor);
    }
    if (SERIES > 1)
        gdn_result_free(&before);
    gdn_result_free(&first);
    gdn_result_free(&fp32);
}

/* _i: (grid shape, with or without h0) */
START_TEST(tensor_cores_on_the_grid)
{
    int shape = _i % test_grid_count, with_h0 = _i / test_grid_count;
    gdn_problem p = test_problem(test_grid[shape], with_h0, 4000 + _i);
    check_tensor_cores(&p, "grid");
    gdn_problem_free(&p);
}
END_TEST

/* _i: (shape of test_bf16_shapes, with or without h0) */
START_TEST(tensor_cores_on_more_shapes)
{
    char what[64];
    test_shape shape = test_bf16_shapes[_i % test_bf16_shape_count];
    test_describe_shape(what, sizeof what, shape, _i / test_bf16_shape_count);
    gdn_problem p = test_problem(shape, _i / test_bf16_shape_count, 4100 + _i);
    check_tensor_cores(&p, what);
    gdn_problem_free(&p);
}
END_TEST

/* Extreme gates (test_set_extreme_gates: gates of -1e4, so alpha underflows to 0; no decay at
 * all; beta of exactly 0 or 1) on a problem of `shape`, with h0, seeds from `seed` */
static void check_extreme_gates(test_shape shape, int which, int seed)
{
    gdn_problem p = test_problem(shape, 1, seed);
    test_set_extreme_gates(&p, which, (uint64_t)seed + 1);
    check_tensor_cores(&p, test_extreme_gate_names[which]);
    gdn_problem_free(&p);
}

/* _i: which extreme gates */
START_TEST(tensor_cores_with_extreme_gates)
{
    const test_shape shape = {1, 200, 2, 64, 64};
    check_extreme_gates(shape, _i, 4200 + _i);
}
END_TEST

/* The same gates where the chain's output warps run (96 heads of K = V = 128 on an H200: the
 * chain makes Vnew = Tm Z from v there, its factors beta and beta e^gamma from the transform
 * block, and beta of exactly 0 or gates that underflow reach it only through them). _i: as
 * above */
START_TEST(tensor_cores_with_extreme_gates_where_output_warps_run)
{
    const test_shape shape = {1, 130, 96, 128, 128};
    check_extreme_gates(shape, _i, 4250 + _i);
}
END_TEST

/* Kernel 1 beside the chain (docs/06, the launch rules): SMs - 32 heads of K = V = 128
 * (100 on an H200's 132) is a shape whose output-warp blocks, one a head, leave 32 SMs idle,
 * so that kernel 1 makes the later chunks there while the chain runs and the chain waits for
 * each chunk's flag. 64 chunks, the fewest it runs for (MIN_CHUNKS): the first launch makes
 * 29 of each head's on an H200 (warp_specialized_kernel1_split), the second the rest. _i: with or without h0 */
START_TEST(tensor_cores_with_kernel1_beside_the_chain)
{
    const int sms = gdn_sm_count();
    ck_assert_msg(sms > 32, "the device reports %d SMs", sms);
    const test_shape shape = {1, 4096, (size_t)sms - 32, 128, 128};
    gdn_problem p = test_problem(shape, _i, 4260 + _i);
    check_tensor_cores(&p, _i ? "kernel 1 beside the chain, h0" : "kernel 1 beside the chain");
    gdn_problem_free(&p);
}
END_TEST

/* _i: the edge cases of test_support.c but the first. That one, g = 0 over 65536 tokens with
 * K = V = 4, is outside what bf16 products reach: measured against the oracle on the same bf16
 * inputs, 9.1e-3 (5.7e-3 with --precise), where 5e-3 is the bound. A 4 x 4 state that never
 * forgets, multiplied in sums of 4 terms, averages no rounding away; docs/06_warp_specialized.md
 * ("Precision") has the numbers. It stays in the edge cases of every fp32 and fp64 stage. */
START_TEST(tensor_cores_on_edge_cases)
{
    ck_assert_str_eq(test_edge_case_names[0], "g = 0 (no decay) over T = 65536"); /* the one left out, below */
    gdn_problem p = test_edge_case(1 + _i, 4300 + _i);
    check_tensor_cores(&p, test_edge_case_names[1 + _i]);
    gdn_problem_free(&p);
}
END_TEST

/* The layout 06's wgmma products assume (tests/gpu/wgmma_layout.cu), on its own: the TMA
 * unit's 128-byte swizzle puts every element where swizzled_offset says, and products from
 * swizzled tiles equal the CPU's of the same bf16 values: m64n64k16 and m64n32k16 with both
 * operands in shared memory (the output warps), m64n64k16 with A from registers scaled by -1
 * and B K-major, m64n128k16 with A from registers and B read N-major (the chain). The sums are
 * fp32 over 64 or 128 terms (about 1e-7 relative); a wrong descriptor field or swizzle
 * misplaces whole rows, an error of order one. _i: the seed. */
START_TEST(wgmma_layout_matches_the_cpu)
{
    wgmma_layout_result r = {.misplaced = -1, .error_64 = NAN, .error_32 = NAN, .error_k_major = NAN, .error_n_major = NAN, .error_n_swapped = NAN};
    ck_assert_msg(wgmma_layout_check(4500 + _i, &r) == 0, "%s", gdn_last_error());
    ck_assert_msg(r.misplaced == 0, "%d of 8192 elements not where swizzled_offset puts them", r.misplaced);
    ck_assert_msg(r.error_64 < 1e-6, "m64n64k16 from swizzled tiles: relative error %.3e > 1e-6", r.error_64); /* NaN fails too */
    ck_assert_msg(r.error_32 < 1e-6, "m64n32k16 from swizzled tiles: relative error %.3e > 1e-6", r.error_32);
    ck_assert_msg(r.error_k_major < 1e-6, "m64n64k16, A from registers (-1), B K-major: relative error %.3e > 1e-6", r.error_k_major);
    ck_assert_msg(r.error_n_major < 1e-6, "m64n128k16, A from registers, B N-major: relative error %.3e > 1e-6 (offsets swapped: %.3e)",
                  r.error_n_major, r.error_n_swapped);
}
END_TEST

/* Where kernel 1 runs beside the chain (host code, no GPU needed), on an H200's 132 SMs. At the
 * three shapes swept in docs/06 (the launch rules) the split lies strictly between two
 * splits measured slower than the best there, one on either side of it: 30 and 38 of 128
 * chunks at 96 heads (best 32 to 34), 78 and 86 of 128 at 110 heads (best 82), 24 and 30 of
 * 64 at 100 heads (best 27). None where the heads leave fewer than 16 SMs idle (117 on: 128, the
 * benchmark's (8, 4096, 16)), or under 64 chunks (about 10 us of launches and events a pass,
 * measured at 3 and 5 chunks); a split always leaves the second launch a chunk at least, and
 * more heads (fewer idle SMs) never move it earlier. */
START_TEST(kernel1_split_where_measured)
{
    const size_t sms = 132;
    const size_t cases[][4] = {/* heads, chunks, the splits measured slower on either side */
                               {96, 128, 30, 38},
                               {110, 128, 78, 86},
                               {100, 64, 24, 30}};
    for (int i = 0; i < 3; i++) {
        const size_t *c = cases[i], split = warp_specialized_kernel1_split(c[0], c[1], sms);
        ck_assert_msg(split > c[2] && split < c[3], "%zu heads of %zu chunks: split at chunk %zu, not between %zu and %zu", c[0], c[1],
                      split, c[2], c[3]);
    }
    ck_assert_uint_eq(warp_specialized_kernel1_split(117, 128, sms), 0);
    ck_assert_uint_eq(warp_specialized_kernel1_split(128, 64, sms), 0);
    ck_assert_uint_eq(warp_specialized_kernel1_split(256, 128, sms), 0);
    ck_assert_uint_eq(warp_specialized_kernel1_split(96, 63, sms), 0);
    size_t previous = 0;
    for (size_t heads = 93; heads <= 116; heads++) {
        const size_t split = warp_specialized_kernel1_split(heads, 4096, sms);
        ck_assert_msg(split >= 1 && split < 4096, "%zu heads: split %zu outside 1 .. 4095", heads, split);
        ck_assert_msg(split >= previous, "%zu heads: split %zu, before %zu at one head fewer", heads, split, previous);
        previous = split;
    }
}
END_TEST

/* A packed batch's rows where they lie (no GPU needed), by the kernels' own rules: row b's
 * token t is the batch's token offsets[b] + t, whatever the rows around it; every chunk of a row
 * holds 64 real tokens but its last, which holds the rest of the sequence (the tokens after them
 * are the next sequence's, which kernel 1 must not sum); rows without offsets lie T apart. Fresh
 * lengths each trial, from 1 to 300 tokens, 1 to 6 sequences. */
START_TEST(packed_rows_where_they_lie)
{
    const uint64_t seed = 4500 + (uint64_t)_i;
    size_t offsets[7] = {0}, N = 1 + (size_t)(random_bits(seed, 0, 0) % 6), longest = 0;
    for (size_t n = 0; n < N; n++) {
        const size_t length = 1 + (size_t)(random_bits(seed, 1, n) % 300);
        offsets[n + 1] = offsets[n] + length;
        longest = length > longest ? length : longest;
    }
    const size_t heads = 1 + (size_t)(random_bits(seed, 2, 0) % 8);
    for (size_t b = 0; b < N; b++) {
        const size_t length = offsets[b + 1] - offsets[b], h = (size_t)(random_bits(seed, 3, b) % heads);
        for (size_t t = 0; t < length; t++) {
            const size_t at = warp_specialized_input_token(offsets, b, longest, t, heads, h);
            ck_assert_msg(at == (offsets[b] + t) * heads + h, "row %zu of %zu, token %zu of %zu, head %zu of %zu: index %zu, not %zu", b, N,
                          t, length, h, heads, at, (offsets[b] + t) * heads + h);
        }
        for (size_t t0 = 0; t0 < length; t0 += 64) {
            const int real = warp_specialized_chunk_tokens(offsets, b, longest, t0), expected = (int)(length - t0 < 64 ? length - t0 : 64);
            ck_assert_msg(real == expected, "row %zu of %zu (%zu tokens, rows of %zu): the chunk from token %zu holds %d real tokens, not %d",
                          b, N, length, longest, t0, real, expected);
        }
        /* the same row as one of N rows of `longest` tokens, T apart, every chunk real to the row's end */
        ck_assert_uint_eq(warp_specialized_input_token(NULL, b, longest, 0, heads, h), b * longest * heads + h);
        ck_assert_int_eq(warp_specialized_chunk_tokens(NULL, b, longest, longest - 1), 1);
    }
}
END_TEST

/* The chain from v at K = V = 64 (docs/06, Vnew from v), against the H200 runs that set it
 * (ms, from W and U -> from v): taken where it measures faster, else left; always at K = 128 */
START_TEST(values_pay_where_measured)
{
    /* heads, chunks, the chain steps on the pass's serial path: a head's chunks in stage 06; in
       stage 07, 2 ceil(chunks / P) (sequence_parallel_depth: a fold's and a replay's) */
    const size_t faster[][3] = {{32, 256, 256},  /* 06 (2, 16384, 16): 0.4223 -> 0.3594 ms */
                                {128, 64, 64},   /* 06 (8, 4096, 16): 0.3688 -> 0.3087 */
                                {8, 256, 32},    /* 07 (1, 16384, 8), P = 16: 0.1479 -> 0.1399 */
                                {8, 2048, 256},  /* 07 (1, 131072, 8), P = 16: 0.9661 -> 0.9078 */
                                {4, 1024, 64}},  /* 07 (1, 65536, 4), P = 32: 0.2911 -> 0.2729 */
        slower[][3] = {{8, 256, 256},            /* 06 (1, 16384, 8): 0.1888 -> 0.2033 */
                       {2, 256, 32}};            /* 07 (1, 16384, 2), P = 16: 0.0700 -> 0.0740 */
    for (int i = 0; i < 5; i++)
        ck_assert_msg(warp_specialized_values_pay(64, faster[i][0], faster[i][1], faster[i][2]),
                      "K = 64, %zu heads of %zu chunks, %zu steps deep: measured faster from v, not taken", faster[i][0], faster[i][1],
                      faster[i][2]);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(!warp_specialized_values_pay(64, slower[i][0], slower[i][1], slower[i][2]),
                      "K = 64, %zu heads of %zu chunks, %zu steps deep: measured slower from v, taken", slower[i][0], slower[i][1],
                      slower[i][2]);
        ck_assert(warp_specialized_values_pay(128, slower[i][0], slower[i][1], slower[i][2]));
    }
}
END_TEST

/* Grouped value heads (HV a multiple of H): 06 against the oracle and 05_cuda on the same
 * bf16 inputs, on each of its paths: the chain from W and U (K = 100, the threads copy k and
 * q; one key head, where no tensor map fits), from v at K = V = 64 and 128 with kernel 3, the
 * chain with output warps (96 value heads), and --precise. _i: the case. */
START_TEST(tensor_cores_take_grouped_heads)
{
    static const struct {
        gdn_layout l;
        int precise;
        const char *path;
    } cases[] = {
        {{.B = 2, .T = 201, .H = 3, .HV = 6, .K = 100, .V = 72, .with_h0 = 1}, 0, "W and U, threads copy"},
        {{.B = 2, .T = 201, .H = 3, .HV = 12, .K = 64, .V = 64, .with_h0 = 1}, 0, "from v, K = V = 64"},
        {{.B = 1, .T = 300, .H = 2, .HV = 8, .K = 128, .V = 128, .with_h0 = 1}, 0, "from v, K = V = 128, kernel 3"},
        {{.B = 1, .T = 130, .H = 24, .HV = 96, .K = 128, .V = 128, .with_h0 = 1}, 0, "output warps"},
        {{.B = 1, .T = 70, .H = 1, .HV = 4, .K = 128, .V = 128, .with_h0 = 0}, 0, "one key head"},
        {{.B = 1, .T = 300, .H = 2, .HV = 8, .K = 128, .V = 128, .with_h0 = 1}, 1, "--precise"},
    };
    gdn_problem p = test_layout_problem(&cases[_i].l, 4450 + _i);
    gdn_problem_round_to_bf16(&p);
    gdn_settings s = {.reps = 1, .threads = 1, .precise = cases[_i].precise};
    gdn_result tensor = test_run_settings(&warp_specialized_stage, &p, &s);
    gdn_result fp32 = test_run(&wy_chunked_cuda_stage, &p, 1, 0, 0);
    char label[160];
    snprintf(label, sizeof label, "06 HV/H = %zu, %s, against the oracle", cases[_i].l.HV / cases[_i].l.H, cases[_i].path);
    assert_close(test_against_oracle(&p, &tensor), GDN_TOLERANCE_BF16, label);
    snprintf(label, sizeof label, "06 HV/H = %zu, %s, against 05_cuda", cases[_i].l.HV / cases[_i].l.H, cases[_i].path);
    assert_close(test_against_result(&p, &tensor, &fp32), GDN_TOLERANCE_BF16, label);
    gdn_result_free(&fp32);
    gdn_result_free(&tensor);
    gdn_problem_free(&p);
}
END_TEST

/* A packed batch (sequences of different lengths in one row, each with its own state): 06
 * against the oracle on the same bf16 inputs, on the chain from W and U (K = 100), from v and
 * kernel 3 (K = V = 64), with output warps (K = V = 128, 4 x 32 value heads), with grouped value
 * heads and --precise. _i: the case. */
START_TEST(tensor_cores_take_packed_batches)
{
    static size_t around_a_chunk[4] = {1, 63, 64, 65}, mixed[6] = {300, 1, 129, 64, 17, 200}, four[4] = {700, 64, 190, 5};
    static const struct {
        gdn_layout l;
        int precise;
        const char *path;
    } cases[] = {
        {{.H = 3, .HV = 3, .K = 100, .V = 72, .with_h0 = 1, .sequences = 4, .lengths = around_a_chunk}, 0, "W and U"},
        {{.H = 2, .HV = 8, .K = 64, .V = 64, .with_h0 = 1, .sequences = 6, .lengths = mixed}, 0, "from v, grouped"},
        {{.H = 8, .HV = 32, .K = 128, .V = 128, .with_h0 = 1, .sequences = 4, .lengths = four}, 0, "output warps, grouped"},
        {{.H = 2, .HV = 4, .K = 128, .V = 128, .with_h0 = 0, .sequences = 6, .lengths = mixed}, 1, "--precise"},
    };
    gdn_layout l = cases[_i].l;
    l.B = 1, l.T = 0;
    for (size_t n = 0; n < l.sequences; n++)
        l.T += l.lengths[n];
    gdn_problem p = test_layout_problem(&l, 4470 + _i);
    gdn_problem_round_to_bf16(&p);
    gdn_settings s = {.reps = 1, .threads = 1, .precise = cases[_i].precise};
    gdn_result packed = test_run_settings(&warp_specialized_stage, &p, &s);
    char label[120];
    snprintf(label, sizeof label, "06, a packed batch of %zu sequences, %s, against the oracle", l.sequences, cases[_i].path);
    assert_close(test_against_oracle(&p, &packed), GDN_TOLERANCE_BF16, label);
    gdn_result_free(&packed);
    gdn_problem_free(&p);
}
END_TEST

/* --batch-invariant with a packed batch: a sequence alone and as the first of a packed batch
 * of other lengths (run as rows padded to the longest), the same bits, in both modes */
START_TEST(tensor_cores_batch_invariant_packed)
{
    static const size_t lengths[3] = {300, 1000, 17};
    const gdn_layout packed_layout = {.B = 1, .T = 1317, .H = 2, .K = 128, .V = 128, .with_h0 = 1, .sequences = 3, .lengths = lengths};
    const test_shape alone_shape = {1, 300, 2, 128, 128};
    gdn_problem alone = test_problem(alone_shape, 1, 4480), packed = test_layout_problem(&packed_layout, 4481);
    const size_t T = 300, H = 2, K = 128, V = 128; /* sequence 0 is positions 0 .. 299: alone's rows, as they lie */
    memcpy(packed.q, alone.q, T * H * K * sizeof(real_t));
    memcpy(packed.k, alone.k, T * H * K * sizeof(real_t));
    memcpy(packed.v, alone.v, T * H * V * sizeof(real_t));
    memcpy(packed.g, alone.g, T * H * sizeof(real_t));
    memcpy(packed.beta, alone.beta, T * H * sizeof(real_t));
    memcpy(packed.h0, alone.h0, H * K * V * sizeof(real_t));
    gdn_problem_round_to_bf16(&alone);
    gdn_problem_round_to_bf16(&packed);
    for (int precise = 0; precise <= 1; precise++) {
        gdn_settings s = {.reps = 1, .threads = 1, .precise = precise, .batch_invariant = 1};
        gdn_result by_itself = test_run_settings(&warp_specialized_stage, &alone, &s);
        s = (gdn_settings){.reps = 1, .threads = 1, .precise = precise, .batch_invariant = 1};
        gdn_result in_batch = test_run_settings(&warp_specialized_stage, &packed, &s);
        long where;
        ck_assert_msg(test_same_bits_as_alone(&packed, &in_batch, &alone, &by_itself, &where),
                      "06 --batch-invariant%s: the sequence's bits differ in the packed batch at %ld", precise ? " --precise" : "", where);
        gdn_result_free(&in_batch);
        gdn_result_free(&by_itself);
    }
    gdn_problem_free(&packed);
    gdn_problem_free(&alone);
}
END_TEST

/* --batch-invariant: one sequence's o and ht, alone and inside a batch, to the bit, in both
 * modes, where the default mode takes another path in the batch (each case says which;
 * --precise takes neither the chain from v nor output warps by default, so its half checks the
 * choices that move work, not those that round). _i: the case. */
START_TEST(tensor_cores_batch_invariant)
{
    static const struct {
        test_shape alone, batch;
        const char *paths;
    } cases[] = {
        {{1, 1000, 2, 128, 128}, {1, 1000, 96, 128, 128}, "alone: from v, kernel 3; in 96 heads: output warps"},
        {{1, 1000, 2, 64, 64}, {8, 1000, 16, 64, 64}, "alone: W and U; in 8 x 16 heads: from v"},
        {{1, 300, 1, 128, 128}, {4, 300, 8, 128, 128}, "alone: one head, no tensor maps; in 4 x 8 heads: from v"},
    };
    gdn_problem alone = test_problem(cases[_i].alone, 1, 4460 + 2 * _i), batch = test_problem(cases[_i].batch, 1, 4461 + 2 * _i);
    test_embed_alone(&batch, &alone);
    gdn_problem_round_to_bf16(&alone);
    gdn_problem_round_to_bf16(&batch);
    for (int precise = 0; precise <= 1; precise++) {
        gdn_settings s = {.reps = 1, .threads = 1, .precise = precise, .batch_invariant = 1};
        gdn_result by_itself = test_run_settings(&warp_specialized_stage, &alone, &s);
        s = (gdn_settings){.reps = 1, .threads = 1, .precise = precise, .batch_invariant = 1};
        gdn_result in_batch = test_run_settings(&warp_specialized_stage, &batch, &s);
        char label[160];
        snprintf(label, sizeof label, "06 --batch-invariant%s alone against the oracle (%s)", precise ? " --precise" : "", cases[_i].paths);
        assert_close(test_against_oracle(&alone, &by_itself), GDN_TOLERANCE_BF16, label);
        long where;
        ck_assert_msg(test_same_bits_as_alone(&batch, &in_batch, &alone, &by_itself, &where),
                      "06 --batch-invariant%s: the sequence's bits differ in the batch at %ld (%s)", precise ? " --precise" : "", where,
                      cases[_i].paths);
        gdn_result_free(&in_batch);
        gdn_result_free(&by_itself);
    }
    gdn_problem_free(&batch);
    gdn_problem_free(&alone);
}
END_TEST

START_TEST(tensor_cores_refuse_large_keys)
{
    test_refuses_keys_of_129(&tensor_cores_stage, 0, 4400);
    test_refuses_keys_of_129(&producer_consumer_stage, 0, 4402);
    test_refuses_keys_of_129(&bulk_copies_stage, 0, 4404);
    test_refuses_keys_of_129(&warp_chain_stage, 0, 4405);
    test_refuses_keys_of_129(&output_warps_stage, 0, 4406);
    test_refuses_keys_of_129(&warp_specialized_stage, 0, 4401);
}
END_TEST

Suite *tensor_core_stage_suite(void)
{
    Suite *suite = suite_create("tensor_core_stage");
    TCase *cases = tcase_create("06_warp_specialized");
    tcase_set_timeout(cases, 600);
    tcase_add_loop_test(cases, tensor_cores_on_the_grid, 0, 2 * test_grid_count);
    tcase_add_loop_test(cases, tensor_cores_on_more_shapes, 0, 2 * test_bf16_shape_count);
    tcase_add_loop_test(cases, tensor_cores_with_extreme_gates, 0, 3);
    tcase_add_loop_test(cases, tensor_cores_with_extreme_gates_where_output_warps_run, 0, 3);
    tcase_add_loop_test(cases, tensor_cores_with_kernel1_beside_the_chain, 0, 2);
    tcase_add_loop_test(cases, tensor_cores_on_edge_cases, 0, test_edge_case_count - 1);
    tcase_add_loop_test(cases, tensor_cores_take_grouped_heads, 0, 6);
    tcase_add_loop_test(cases, tensor_cores_take_packed_batches, 0, 4);
    tcase_add_loop_test(cases, tensor_cores_batch_invariant, 0, 3);
    tcase_add_test(cases, tensor_cores_batch_invariant_packed);
    tcase_add_test(cases, tensor_cores_refuse_large_keys);
    tcase_add_loop_test(cases, wgmma_layout_matches_the_cpu, 0, 3);
    suite_add_tcase(suite, cases);
    return suite;
}

Suite *warp_specialized_choice_suite(void)
{
    Suite *suite = suite_create("warp_specialized_choices");
    TCase *cases = tcase_create("06_host_choices");
    tcase_add_test(cases, kernel1_split_where_measured);
    tcase_add_test(cases, values_pay_where_measured);
    tcase_add_loop_test(cases, packed_rows_where_they_lie, 0, 20);
    suite_add_tcase(suite, cases);
    return suite;
}
