/* test_context_parallel_cuda.c -- stage 08's GPU twin under `mpirun -np N`, N = 1 to 3 (the
 * ranks share this machine's GPUs in turn; several on one GPU are fine): equal to stage 07 run
 * in-process on one GPU and to the fp64 oracle, all on the same bf16-rounded inputs, within
 * GDN_TOLERANCE_BF16. Slow gates, so that every rank's start state depends on the ranks
 * before it; slices of unequal length; P automatic and forced; with and without h0 and
 * --precise; grouped value heads. A sequence with fewer chunks than ranks is refused with one line. */
#include <stdio.h>
#include <string.h>

#include "../../steps/07_sequence_parallel/sequence_parallel.h"
#include "../test_support.h"

static const struct {
    test_shape shape;
    int with_h0;
    const char *options; /* besides --in, --check-against, --out */
} cases[] = {
    {{1, 1000, 2, 64, 64}, 1, ""},                /* 16 chunks: 5 + 5 + 6 for 3 ranks, automatic P */
    {{2, 700, 3, 128, 72}, 0, "--segments 3"},    /* K = 128, V not a multiple of 16 */
    {{1, 2000, 2, 128, 64}, 1, "--segments 4"},   /* K = 128 and V = 64, two heads (docs/06, Vnew from v) */
    {{1, 4100, 1, 32, 40}, 1, "--segments 5 --precise"}, /* one head, the last chunk short */
};
enum { CASES = sizeof cases / sizeof *cases, MOST_RANKS = 3 };

/* p (bf16-rounded) on `launcher`'s ranks with these options, checked by the binary against
 * stage 07 run in-process on one GPU, and what the ranks wrote together against the oracle and
 * 07; `what` names the case in the messages. */
static void assert_ranks_equal_sequence_parallel(const char *launcher, int ranks, const gdn_problem *p, const char *options,
                                                 const char *what)
{
    char dir[64], in[128], reference[128], out[128], arguments[640], text[2048], errors[4096], label[256];
    test_make_temp_dir(dir, sizeof dir);
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(reference, sizeof reference, "%s/reference", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    ck_assert_int_eq(gdn_problem_save(p, in), 0);
    gdn_settings s = {.reps = 1, .threads = 1, .precise = strstr(options, "--precise") != NULL};
    gdn_result whole = test_run_settings(&sequence_parallel_stage, p, &s); /* 07, one GPU, in-process */
    ck_assert_int_eq(gdn_result_save(&whole, p, reference), 0);
    snprintf(arguments, sizeof arguments, "--in %s --reps 1 --check-against %s --out %s %s", in, reference, out, options);
    int status = test_run_program(launcher, "08_context_parallel_cuda", arguments, text, sizeof text, errors,
                                  sizeof errors);
    ck_assert_msg(status == 0, "%s, %d ranks: exit %d: %s", what, ranks, status, errors);
    ck_assert_int_eq((int)test_read_field(text, "ranks="), ranks);
    ck_assert_msg(test_read_field(text, "err_ref=") <= GDN_TOLERANCE_BF16, "%s", text);
    if (gdn_value_heads(p) != p->H)
        ck_assert_int_eq((size_t)test_read_field(text, "HV="), gdn_value_heads(p));
    gdn_result mine = test_read_outputs(out, p); /* what the ranks wrote together */
    snprintf(label, sizeof label, "08 cuda, %d ranks, %s, against the oracle", ranks, what);
    assert_close(test_against_oracle(p, &mine), GDN_TOLERANCE_BF16, label);
    snprintf(label, sizeof label, "08 cuda, %d ranks, %s, against 07", ranks, what);
    assert_close(test_against_result(p, &mine, &whole), GDN_TOLERANCE_BF16, label);
    gdn_result_free(&mine);
    gdn_result_free(&whole);
    test_remove_dir(dir);
}

/* _i: (case, ranks 1 .. MOST_RANKS) */
START_TEST(context_parallel_cuda_equals_sequence_parallel)
{
    const int which = _i / MOST_RANKS, ranks = 1 + _i % MOST_RANKS;
    const char *launcher = test_mpirun_line("08_context_parallel_cuda", ranks, _i == 0);
    if (!launcher)
        return;
    char what[160];
    gdn_problem p = test_problem(cases[which].shape, cases[which].with_h0, 6000 + _i);
    test_set_gates(&p, -0.02, -0.0005, 6000 + _i); /* a slice remembers the ones before it */
    gdn_problem_round_to_bf16(&p);
    snprintf(what, sizeof what, "case %d (%s)", which, cases[which].options);
    assert_ranks_equal_sequence_parallel(launcher, ranks, &p, cases[which].options, what);
    gdn_problem_free(&p);
}
END_TEST

/* Grouped value heads (_i: HV / H 2 or 4 at K = V = 64 and at K = V = 128, on 2 and 3 ranks):
 * a map a value head, the keys of its key head. */
START_TEST(context_parallel_cuda_grouped_value_heads)
{
    const int ratio = _i % 2 ? 4 : 2, ranks = 2 + (_i / 2) % 2, width = _i < 4 ? 64 : 128;
    const char *launcher = test_mpirun_line("08_context_parallel_cuda", ranks, 0);
    if (!launcher)
        return;
    char what[160];
    const gdn_layout l = {.B = 1, .T = 1500, .H = 2, .HV = 2 * (size_t)ratio, .K = (size_t)width, .V = (size_t)width,
                          .with_h0 = 1};
    gdn_problem p = test_layout_problem(&l, 6100 + _i);
    test_set_gates(&p, -0.02, -0.0005, 6100 + _i);
    gdn_problem_round_to_bf16(&p);
    snprintf(what, sizeof what, "HV/H %d, K = V = %d", ratio, width);
    assert_ranks_equal_sequence_parallel(launcher, ranks, &p, "", what);
    gdn_problem_free(&p);
}
END_TEST

/* Fewer chunks than ranks: every rank stops, one line says why, no result line. */
START_TEST(context_parallel_cuda_refuses_empty_slices)
{
    const char *launcher = test_mpirun_line("08_context_parallel_cuda", 3, 0);
    if (!launcher)
        return;
    char text[2048], errors[4096];
    int status = test_run_program(launcher, "08_context_parallel_cuda", "--T 100 --H 2 --reps 1", text, sizeof text,
                                  errors, sizeof errors);
    test_assert_refused(status, text, errors, "08_context_parallel_cuda: error: this rank's slice is empty");
}
END_TEST

Suite *context_parallel_cuda_suite(void)
{
    Suite *suite = suite_create("08_context_parallel_cuda");
    TCase *mpi = tcase_create("mpirun");
    tcase_set_timeout(mpi, 300);
    tcase_add_loop_test(mpi, context_parallel_cuda_equals_sequence_parallel, 0, CASES * MOST_RANKS);
    tcase_add_loop_test(mpi, context_parallel_cuda_grouped_value_heads, 0, 8);
    tcase_add_test(mpi, context_parallel_cuda_refuses_empty_slices);
    suite_add_tcase(suite, mpi);
    return suite;
}
