/* test_edge_cases.c -- every CPU stage against the oracle on the numerical edge cases:
 * no decay over 65536 tokens, gates whose exp underflows, beta of 0 and 1, zero keys, K or
 * V of 1, a single token (test_edge_case in test_support.c). NaN never passes. */
#include "../steps/01_naive_loop/naive_loop.h"
#include "../steps/02_affine/affine.h"
#include "../steps/03_parallel_scan/parallel_scan.h"
#include "../steps/04_two_phase_scan/two_phase_scan.h"
#include "../steps/05_wy_chunked/wy_chunked.h"
#include <stdio.h>
#include <string.h>

#include "test_support.h"

static const gdn_stage *const stages[] = {&naive_loop_stage, &affine_stage, &parallel_scan_stage,
                                          &two_phase_scan_stage, &wy_chunked_stage};
enum { STAGES = sizeof stages / sizeof *stages };

/* _i: (stage, case) */
START_TEST(stage_equals_oracle_on_edge_case)
{
    int stage = _i % STAGES, which = _i / STAGES;
    gdn_problem p = test_edge_case(which, 4000 + _i);
    gdn_result r = test_run(stages[stage], &p, 2, 0, 0);
    char what[160];
    snprintf(what, sizeof what, "%s, %s", stages[stage]->name, test_edge_case_names[which]);
    assert_close(test_against_oracle(&p, &r), GDN_TOLERANCE_VS_ORACLE, what);
    gdn_result_free(&r);
    gdn_problem_free(&p);
}
END_TEST

/* Index arithmetic is size_t throughout: a token index past 2^32 is exact (no problem that
 * large fits in memory here, so the helpers are checked on a problem with no data). */
START_TEST(indices_past_32_bits_are_exact)
{
    gdn_problem p = {.B = 3, .T = (size_t)1 << 31, .H = 5, .K = 128, .V = 64};
    size_t b = 2, t = ((size_t)1 << 31) - 1, h = 4;
    ck_assert_uint_eq(gdn_token(&p, b, t, h), (b * p.T + t) * p.H + h);
    ck_assert(gdn_token(&p, b, t, h) * p.K > ((size_t)1 << 35)); /* q offsets of 2^35 and up */
    ck_assert_uint_eq(gdn_tokens(&p), (size_t)3 * 5 << 31);
    size_t bytes;
    ck_assert_int_eq(gdn_problem_bytes(p.B, p.T, p.H, p.K, p.V, 1, &bytes), 0);
    ck_assert_int_ne(gdn_memory_check(bytes, "a tall problem"), 0); /* refused before any allocation */
    ck_assert_ptr_nonnull(strstr(gdn_last_error(), "bytes"));
    ck_assert_int_ne(gdn_problem_bytes((size_t)1 << 40, (size_t)1 << 40, 1, 1, 1, 0, &bytes), 0); /* overflow */
}
END_TEST

Suite *edge_cases_suite(void)
{
    Suite *suite = suite_create("edge_cases");
    TCase *cases = tcase_create("numerical");
    tcase_set_timeout(cases, 120);
    tcase_add_loop_test(cases, stage_equals_oracle_on_edge_case, 0, STAGES * test_edge_case_count);
    tcase_add_test(cases, indices_past_32_bits_are_exact);
    suite_add_tcase(suite, cases);
    return suite;
}
