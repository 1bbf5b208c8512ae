/* test_context_parallel.c -- stage 08: the operand order of its MPI operator, and the binary
 * under `mpirun --oversubscribe -np N` for N = 1 to 4, equal to stage 05 (in-process) over
 * slices of unequal length, fewer chunks than ranks, T = 1 and grouped value heads; errors (a bad input, an output
 * that is not finite, an option it does not offer) end every rank with one line. Where Open MPI
 * or the binary is missing, the mpirun tests say so and pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/random.h"
#include "../steps/02_affine/affine.h"
#include "../steps/05_wy_chunked/wy_chunked.h"
#include "../steps/08_context_parallel/summaries.h"
#include "test_support.h"

/* Two random summaries of 2 heads: combine_summaries(earlier, later) must leave later o earlier
 * in `later` (applied to a state: earlier first, then later), and the swapped call must give
 * a different map, so a reversed MPI operator could not pass the mpirun tests either. */
START_TEST(combine_summaries_applies_earlier_first)
{
    enum { HEADS = 2, K = 5, V = 3, VALUES = HEADS * K * (K + V) };
    real_t earlier[VALUES], later[VALUES], combined[VALUES], reversed[VALUES], scratch[K * (K + V)];
    real_t S[K * V], middle[K * V], expected[K * V], got[K * V];
    for (size_t i = 0; i < VALUES; i++) {
        earlier[i] = reversed[i] = (real_t)random_normal(7, STREAM_TEST, i);
        later[i] = combined[i] = (real_t)random_normal(7, STREAM_TEST + 1, i);
    }
    for (size_t i = 0; i < K * V; i++)
        S[i] = (real_t)random_normal(7, STREAM_TEST + 2, i);
    combine_summaries(earlier, combined, HEADS, K, V, scratch); /* the order the MPI operator uses */
    combine_summaries(later, reversed, HEADS, K, V, scratch);   /* the classic bug */
    double right = 0, wrong = 0;
    for (size_t head = 0; head < HEADS; head++) {
        apply_affine(middle, affine_map_at(earlier, head, K, V), S, K, V);
        apply_affine(expected, affine_map_at(later, head, K, V), middle, K, V);
        apply_affine(got, affine_map_at(combined, head, K, V), S, K, V);
        for (size_t i = 0; i < K * V; i++)
            right = fmax(right, fabs((double)got[i] - expected[i]) / (1 + fabs(expected[i])));
        apply_affine(got, affine_map_at(reversed, head, K, V), S, K, V);
        for (size_t i = 0; i < K * V; i++)
            wrong = fmax(wrong, fabs((double)got[i] - expected[i]) / (1 + fabs(expected[i])));
    }
    ck_assert_msg(right < 1e-5, "combine_summaries(earlier, later) is off by %g", right);
    ck_assert_msg(wrong > 1e-2, "the reversed order should differ, differs by %g only", wrong);
    ck_assert_uint_eq(summary_values(HEADS, K, V), VALUES);
}
END_TEST

static const struct {
    test_shape shape;
    int with_h0;
    size_t chunk;
} cases[] = {
    {{2, 200, 2, 16, 24}, 1, 64}, /* 4 chunks: unequal slices for 3 ranks */
    {{1, 300, 1, 32, 32}, 0, 16}, /* 19 chunks, the last one short */
    {{1, 64, 2, 8, 16}, 1, 64},   /* one chunk: every rank but the last has none */
    {{1, 1, 1, 8, 8}, 1, 64},     /* T = 1, fewer tokens than ranks */
};
enum { CASES = sizeof cases / sizeof *cases };

/* _i: (ranks 1..4, case). The binary reads the problem, checks itself against stage 05's
 * result and writes o.npy with MPI-IO; the file is compared here too. */
START_TEST(context_parallel_equals_wy_chunked)
{
    int ranks = 1 + _i % 4, which = _i / 4;
    const char *launcher = test_mpirun_line("08_context_parallel", ranks, 0);
    if (!launcher)
        return;
    char dir[64], in[128], reference[128], out[128], arguments[512], text[2048], errors[4096];
    test_make_temp_dir(dir, sizeof dir);
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(reference, sizeof reference, "%s/reference", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    gdn_problem p = test_problem(cases[which].shape, cases[which].with_h0, 5000 + _i);
    /* slow gates: with the generator's (about -0.8 a token) a slice forgets its start within
     * a hundred tokens, A ~ 0, and a wrong composition of A would go unseen */
    test_set_gates(&p, -0.02, -0.0005, 5000 + _i);
    ck_assert_int_eq(gdn_problem_save(&p, in), 0);
    gdn_result r = test_run(&wy_chunked_stage, &p, 1, cases[which].chunk, 0);
    ck_assert_int_eq(gdn_result_save(&r, &p, reference), 0);
    snprintf(arguments, sizeof arguments, "--in %s --chunk %zu --reps 1 --threads 1 --check-against %s --out %s", in,
             cases[which].chunk, reference, out);
    int status = test_run_program(launcher, "08_context_parallel", arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%d ranks: exit %d: %s", ranks, status, errors);
    ck_assert_msg(test_read_field(text, "err_ref=") <= GDN_TOLERANCE_VS_STAGE, "%s", text);
    ck_assert_int_eq((int)test_read_field(text, "ranks="), ranks);
    /* the file the ranks wrote together equals stage 05's result */
    gdn_result mine = test_read_outputs(out, &p);
    assert_close(test_against_result(&p, &mine, &r), GDN_TOLERANCE_VS_STAGE, "08's o.npy and ht.npy vs 05");
    gdn_result_free(&mine);
    gdn_result_free(&r);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* Drawn, not read, on `launcher`'s ranks: each rank draws only its slice (of every value head),
 * and the whole equals stage 05 on the whole problem drawn in one piece. */
static void assert_drawn_equals_wy_chunked(const char *launcher, const gdn_layout *l, uint64_t seed, int reps)
{
    char dir[64], value_heads[32] = "", arguments[512], text[2048], errors[4096];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p;
    ck_assert_int_eq(gdn_problem_alloc_layout(&p, l), 0);
    gdn_problem_generate(&p, seed);
    gdn_result r = test_run(&wy_chunked_stage, &p, 1, 16, 0);
    ck_assert_int_eq(gdn_result_save(&r, &p, dir), 0);
    if (l->HV && l->HV != l->H)
        snprintf(value_heads, sizeof value_heads, " --HV %zu", l->HV);
    snprintf(arguments, sizeof arguments,
             "--B %zu --T %zu --H %zu%s --K %zu --V %zu --h0 --seed %llu --chunk 16 --reps %d --threads 1 --check-against %s",
             l->B, l->T, l->H, value_heads, l->K, l->V, (unsigned long long)seed, reps, dir);
    int status = test_run_program(launcher, "08_context_parallel", arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "drawn: exit %d: %s", status, errors);
    ck_assert_msg(test_read_field(text, "err_ref=") <= GDN_TOLERANCE_VS_STAGE, "drawn: %s", text);
    gdn_result_free(&r);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}

START_TEST(context_parallel_draws_the_same_problem)
{
    const char *launcher = test_mpirun_line("08_context_parallel", 3, 0);
    if (!launcher)
        return;
    const gdn_layout l = {.B = 2, .T = 150, .H = 2, .K = 8, .V = 12, .with_h0 = 1};
    assert_drawn_equals_wy_chunked(launcher, &l, 5, 2);
}
END_TEST

/* p into DIR/in and r into DIR/reference, then stage 08 on p checked against r (chunk 16, one
 * thread a rank): its exit status, stdout and stderr */
static int against_reference(const char *launcher, const char *dir, const gdn_problem *p, const gdn_result *r, char *text,
                             size_t text_size, char *errors, size_t errors_size)
{
    char in[128], reference[128], arguments[512];
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(reference, sizeof reference, "%s/reference", dir);
    ck_assert_int_eq(gdn_problem_save(p, in), 0);
    ck_assert_int_eq(gdn_result_save(r, p, reference), 0);
    snprintf(arguments, sizeof arguments, "--in %s --chunk 16 --reps 1 --threads 1 --check-against %s", in, reference);
    return test_run_program(launcher, "08_context_parallel", arguments, text, text_size, errors, errors_size);
}

/* Grouped value heads (_i: HV / H from 2 to 4, on 2 and 3 ranks): a summary is a value head's,
 * its keys read from its key head, so the slices' maps compose as for HV = H; read and drawn,
 * both equal stage 05 on the whole problem, and what the ranks wrote equals the oracle.
 * Slow gates, as above, so that the maps' A parts carry weight. */
START_TEST(context_parallel_grouped_value_heads)
{
    const int ratio = 2 + _i / 2, ranks = 2 + _i % 2;
    const char *launcher = test_mpirun_line("08_context_parallel", ranks, 0);
    if (!launcher)
        return;
    char dir[64], arguments[512], text[2048], errors[4096];
    test_make_temp_dir(dir, sizeof dir);
    const gdn_layout l = {.B = 2, .T = 150, .H = 2, .HV = 2 * (size_t)ratio, .K = 16, .V = 24, .with_h0 = 1};
    gdn_problem p = test_layout_problem(&l, 5400 + _i);
    test_set_gates(&p, -0.02, -0.0005, 5400 + _i);
    gdn_result r = test_run(&wy_chunked_stage, &p, 1, 16, 0);
    int status = against_reference(launcher, dir, &p, &r, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "HV/H %d, %d ranks: exit %d: %s", ratio, ranks, status, errors);
    ck_assert_msg(test_read_field(text, "err_ref=") <= GDN_TOLERANCE_VS_STAGE, "%s", text);
    ck_assert_int_eq((int)test_read_field(text, "HV="), 2 * ratio);
    /* a map a value head: B HV K (K + V) values cross (docs/08, exercise 5) */
    ck_assert_int_eq((size_t)test_read_field(text, "summary_bytes="), l.B * l.HV * l.K * (l.K + l.V) * sizeof(real_t));
    /* the file the ranks wrote together is [B, T, HV, V] and equals stage 05's result */
    char out[128];
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(arguments, sizeof arguments, "--in %s/in --chunk 16 --reps 1 --threads 1 --out %s", dir, out);
    status = test_run_program(launcher, "08_context_parallel", arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "exit %d: %s", status, errors);
    gdn_result mine = test_read_outputs(out, &p);
    assert_close(test_against_result(&p, &mine, &r), GDN_TOLERANCE_VS_STAGE, "08's o.npy and ht.npy vs 05, grouped");
    assert_close(test_against_oracle(&p, &mine), GDN_TOLERANCE_VS_ORACLE, "08's o.npy and ht.npy vs the oracle, grouped");
    gdn_result_free(&mine);
    gdn_result_free(&r);
    gdn_problem_free(&p);
    test_remove_dir(dir);
    assert_drawn_equals_wy_chunked(launcher, &l, 9 + (uint64_t)_i, 1); /* drawn by the ranks, grouped */
}
END_TEST

/* p saved to a folder and read by stage 08 on `launcher`'s ranks: refused by every rank, in one
 * line from the binary that holds `expected`, and no result line */
static void assert_ranks_refuse(const char *launcher, const gdn_problem *p, const char *expected)
{
    char dir[64], arguments[256], text[2048], errors[4096];
    test_make_temp_dir(dir, sizeof dir);
    ck_assert_int_eq(gdn_problem_save(p, dir), 0);
    snprintf(arguments, sizeof arguments, "--in %s --reps 1 --threads 1", dir);
    int status = test_run_program(launcher, "08_context_parallel", arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(strstr(errors, "08_context_parallel: error: ") != NULL, "%s", errors);
    test_assert_refused(status, text, errors, expected);
    test_remove_dir(dir);
}

/* A packed batch (cu_seqlens.npy beside the inputs) is refused by every rank with one line:
 * a slice of its one row would cut across sequences. */
START_TEST(context_parallel_refuses_a_packed_batch)
{
    const char *launcher = test_mpirun_line("08_context_parallel", 2, 0);
    if (!launcher)
        return;
    const size_t lengths[3] = {100, 37, 64};
    const gdn_layout l = {.B = 1, .T = 201, .H = 2, .K = 8, .V = 8, .lengths = lengths, .sequences = 3};
    gdn_problem p = test_layout_problem(&l, 5500);
    assert_ranks_refuse(launcher, &p,
                        "08_context_parallel runs B sequences of T tokens only; these inputs are a packed batch of 3 sequences");
    gdn_problem_free(&p);
}
END_TEST

/* _i: the numerical edge cases of test_support.c on 3 ranks, against stage 05 in-process
 * (which the edge-case suite checks against the oracle). */
START_TEST(context_parallel_edge_cases)
{
    const char *launcher = test_mpirun_line("08_context_parallel", 3, 0);
    if (!launcher)
        return;
    char dir[64], text[2048], errors[4096];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p = test_edge_case(_i, 5200 + _i);
    gdn_result r = test_run(&wy_chunked_stage, &p, 1, 16, 0);
    int status = against_reference(launcher, dir, &p, &r, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%s: exit %d: %s", test_edge_case_names[_i], status, errors);
    ck_assert_msg(test_read_field(text, "err_ref=") <= GDN_TOLERANCE_VS_STAGE, "%s: %s", test_edge_case_names[_i], text);
    gdn_result_free(&r);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* A reference folder whose o.npy holds a NaN: the check fails, and says that the reference is not
 * finite (the outputs are, checked before), not a relative error that is within the tolerance. */
START_TEST(context_parallel_reference_with_nan_is_named)
{
    const char *launcher = test_mpirun_line("08_context_parallel", 3, 0);
    if (!launcher)
        return;
    char dir[64], text[2048], errors[4096];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p = test_problem((test_shape){1, 96, 2, 8, 8}, 0, 5150);
    gdn_result r = test_run(&wy_chunked_stage, &p, 1, 16, 0);
    r.o[17] = (real_t)NAN;
    int status = against_reference(launcher, dir, &p, &r, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status != 0, "exit 0: %s", text);
    ck_assert_msg(strstr(errors, "holds 1 NaN or Inf values in o.npy and ht.npy where the outputs are finite") != NULL,
                  "got '%s'", errors);
    gdn_result_free(&r);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* A reference whose ht holds 1e300 (its square is inf in double) fails the check with an error
 * near 1, summed over the ranks as scaled squares (common/compare.h), not inf / inf = NaN; and
 * the result line says h0=1 when the ranks with tokens are fewer than the ranks (T <= chunk). */
START_TEST(context_parallel_reference_of_1e300_fails)
{
    const char *launcher = test_mpirun_line("08_context_parallel", 3, 0);
    if (!launcher)
        return;
    char dir[64], path[128], arguments[512], text[2048], errors[4096];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p = test_problem((test_shape){1, 40, 2, 8, 8}, 1, 5160);
    gdn_result r = test_run(&wy_chunked_stage, &p, 1, 16, 0);
    ck_assert_int_eq(against_reference(launcher, dir, &p, &r, text, sizeof text, errors, sizeof errors), 0);
    double huge[2 * 8 * 8];
    for (int i = 0; i < 2 * 8 * 8; i++)
        huge[i] = 1e300;
    snprintf(path, sizeof path, "%s/reference/ht.npy", dir);
    test_write_npy_bytes(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 8, 8), }", huge, sizeof huge);
    snprintf(arguments, sizeof arguments, "--in %s/in --chunk 64 --reps 1 --threads 1 --check-against %s/reference", dir, dir);
    int status = test_run_program(launcher, "08_context_parallel", arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status != 0, "exit 0: %s", text);
    ck_assert_msg(strstr(errors, "relative 1.000e+00 > tolerance") != NULL, "got '%s'", errors);
    ck_assert_msg(strstr(text, " h0=1 ") != NULL, "got '%s'", text);
    gdn_result_free(&r);
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* A bad input (a NaN in q) stops all three ranks with one line, and no result line. */
START_TEST(context_parallel_errors_are_collective)
{
    const char *launcher = test_mpirun_line("08_context_parallel", 3, 1);
    if (!launcher)
        return;
    gdn_problem p = test_problem((test_shape){1, 200, 2, 8, 8}, 0, 5100);
    p.q[130 * 8 + 3] = (real_t)NAN;
    assert_ranks_refuse(launcher, &p, "q.npy: element 1043 (b=0, t=65, h=0) is nan");
    gdn_problem_free(&p);
}
END_TEST

/* Finite inputs whose state overflows (every key entry 1e20, as in test_binaries.c) on 3
 * ranks: one line naming the first value of o that is not finite and the cause, no result
 * line, and no o.npy or ht.npy written. */
START_TEST(context_parallel_non_finite_output_is_an_error)
{
    const char *launcher = test_mpirun_line("08_context_parallel", 3, 0);
    if (!launcher)
        return;
    char dir[64], arguments[256], path[160], text[2048], errors[4096];
    test_make_temp_dir(dir, sizeof dir);
    gdn_problem p = test_problem((test_shape){1, 200, 2, 8, 8}, 0, 5300);
    for (size_t i = 0; i < gdn_tokens(&p) * p.K; i++)
        p.k[i] = (real_t)1e20;
    ck_assert_int_eq(gdn_problem_save(&p, dir), 0);
    snprintf(arguments, sizeof arguments, "--in %s --reps 1 --threads 1 --chunk 16 --out %s/out", dir, dir);
    int status = test_run_program(launcher, "08_context_parallel", arguments, text, sizeof text, errors, sizeof errors);
    test_assert_refused(status, text, errors, "08_context_parallel: error: o at (b=0, t=");
    ck_assert_msg(strstr(errors, "from finite inputs: beta |k|^2 reaches") != NULL, "%s", errors);
    const char *files[2] = {"o.npy", "ht.npy"};
    snprintf(path, sizeof path, "%s/out", dir);
    test_assert_not_written(path, files, 2, "08_context_parallel");
    gdn_problem_free(&p);
    test_remove_dir(dir);
}
END_TEST

/* Under mpirun the oracle is not offered (it needs the whole problem in one process): --help
 * says how to run and what --check-against takes, and 'oracle' is refused in one line. */
START_TEST(context_parallel_help_says_what_it_accepts)
{
    const char *launcher = test_mpirun_line("08_context_parallel", 2, 0);
    if (!launcher)
        return;
    char text[8192], errors[4096];
    int status = test_run_program(launcher, "08_context_parallel", "--help", text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%s", errors);
    ck_assert_msg(strstr(text, "usage: mpirun -np N bin/08_context_parallel") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "mpirun --oversubscribe -np N") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "--check-against DIR") != NULL && strstr(text, "'oracle'") == NULL, "%s", text);
    status = test_run_program(launcher, "08_context_parallel", "--T 64 --check-against oracle", text, sizeof text,
                              errors, sizeof errors);
    test_assert_refused(status, text, errors, "--check-against oracle is not offered under MPI");
}
END_TEST

Suite *context_parallel_suite(void)
{
    Suite *suite = suite_create("08_context_parallel");
    TCase *order = tcase_create("order");
    tcase_add_test(order, combine_summaries_applies_earlier_first);
    suite_add_tcase(suite, order);
    TCase *mpi = tcase_create("mpirun");
    tcase_set_timeout(mpi, 120);
    tcase_add_loop_test(mpi, context_parallel_equals_wy_chunked, 0, 4 * CASES);
    tcase_add_test(mpi, context_parallel_draws_the_same_problem);
    tcase_add_loop_test(mpi, context_parallel_grouped_value_heads, 0, 6);
    tcase_add_test(mpi, context_parallel_refuses_a_packed_batch);
    tcase_add_loop_test(mpi, context_parallel_edge_cases, 0, test_edge_case_count);
    tcase_add_test(mpi, context_parallel_errors_are_collective);
    tcase_add_test(mpi, context_parallel_reference_with_nan_is_named);
    tcase_add_test(mpi, context_parallel_reference_of_1e300_fails);
    tcase_add_test(mpi, context_parallel_non_finite_output_is_an_error);
    tcase_add_test(mpi, context_parallel_help_says_what_it_accepts);
    suite_add_tcase(suite, mpi);
    return suite;
}
