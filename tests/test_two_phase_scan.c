/* test_two_phase_scan.c -- stage 04 equals stage 03 and the oracle; segment counts; determinism. */
#include <string.h>

#include "../steps/03_parallel_scan/parallel_scan.h"
#include "../steps/04_two_phase_scan/two_phase_scan.h"
#include "test_support.h"

/* _i: grid shape x (with h0 or not) x segments in {1, 2, 3, 5}, threads 1 to 4. */
START_TEST(two_phase_scan_equals_parallel_scan_over_grid)
{
    static const size_t segment_counts[4] = {1, 2, 3, 5};
    int shape = _i % test_grid_count, with_h0 = (_i / test_grid_count) % 2, variant = _i / (2 * test_grid_count);
    gdn_problem p = test_problem(test_grid[shape], with_h0, 1200 + _i);
    size_t segments = segment_counts[variant] < p.T ? segment_counts[variant] : p.T;
    gdn_result scan = test_run(&parallel_scan_stage, &p, 2, 0, 0);
    gdn_result two_phase = test_run(&two_phase_scan_stage, &p, 1 + variant, 0, segments);
    assert_close(test_against_result(&p, &two_phase, &scan), GDN_TOLERANCE_VS_STAGE, "04 vs 03");
    assert_close(test_against_oracle(&p, &two_phase), GDN_TOLERANCE_VS_ORACLE, "04 vs oracle");
    gdn_result_free(&scan);
    gdn_result_free(&two_phase);
    gdn_problem_free(&p);
}
END_TEST

/* P = 1, P = T, P not dividing T, and extreme gates, on a longer sequence. */
START_TEST(two_phase_scan_segment_counts)
{
    static const size_t segment_counts[] = {1, 4, 7, 16, 33, 100, 101};
    test_shape shape = {2, 101, 2, 8, 12};
    gdn_problem p = test_problem(shape, 1, 1300 + _i);
    test_set_gates(&p, -20, -1e-4, _i);
    gdn_result two_phase = test_run(&two_phase_scan_stage, &p, 3, 0, segment_counts[_i]);
    assert_close(test_against_oracle(&p, &two_phase), GDN_TOLERANCE_VS_ORACLE, "04 vs oracle");
    gdn_result_free(&two_phase);
    gdn_problem_free(&p);
}
END_TEST

START_TEST(two_phase_scan_segments_cover_the_sequence)
{
    /* every segment non-empty, in order, first at 0, last ending at T, for many (P, T) */
    for (size_t T = 1; T < 60; T++)
        for (size_t P = 1; P <= T; P++)
            for (double weight = 0.5; weight < 3; weight += 0.7) {
                ck_assert_uint_eq(segment_start(0, P, T, weight), 0);
                ck_assert_uint_eq(segment_start(P, P, T, weight), T);
                for (size_t seg = 0; seg < P; seg++)
                    ck_assert_msg(segment_start(seg, P, T, weight) < segment_start(seg + 1, P, T, weight),
                                  "T=%zu P=%zu: segment %zu empty", T, P, seg);
            }
}
END_TEST

/* Same inputs, same thread count: bit-identical results (the schedule is static). */
START_TEST(two_phase_scan_is_deterministic)
{
    test_shape shape = {1, 500, 3, 16, 16};
    gdn_problem p = test_problem(shape, 1, 1400);
    gdn_result first = test_run(&two_phase_scan_stage, &p, 2, 0, 5);
    for (int run = 0; run < 3; run++) {
        gdn_result again = test_run(&two_phase_scan_stage, &p, 2, 0, 5);
        ck_assert_mem_eq(first.o, again.o, gdn_tokens(&p) * p.V * sizeof(real_t));
        ck_assert_mem_eq(first.ht, again.ht, gdn_state_count(&p) * sizeof(real_t));
        gdn_result_free(&again);
    }
    gdn_result_free(&first);
    gdn_problem_free(&p);
}
END_TEST

Suite *two_phase_scan_suite(void)
{
    Suite *suite = suite_create("04_two_phase_scan");
    TCase *grid = tcase_create("against_03");
    tcase_set_timeout(grid, 120);
    tcase_add_loop_test(grid, two_phase_scan_equals_parallel_scan_over_grid, 0, 8 * test_grid_count);
    tcase_add_loop_test(grid, two_phase_scan_segment_counts, 0, 7);
    tcase_add_test(grid, two_phase_scan_segments_cover_the_sequence);
    tcase_add_test(grid, two_phase_scan_is_deterministic);
    suite_add_tcase(suite, grid);
    return suite;
}
