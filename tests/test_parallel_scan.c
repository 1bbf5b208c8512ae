/* test_parallel_scan.c -- stage 03 equals stage 02 over the grid, with 1 to 4 threads. */
#include "../steps/02_affine/affine.h"
#include "../steps/03_parallel_scan/parallel_scan.h"
#include "test_support.h"

/* _i: grid shape x (with h0 or not) x threads 1..4; the grid has T = 1, 7, 33, 64, 50, 129. */
START_TEST(parallel_scan_equals_affine_over_grid)
{
    int shape = _i % test_grid_count, with_h0 = (_i / test_grid_count) % 2, threads = 1 + _i / (2 * test_grid_count);
    gdn_problem p = test_problem(test_grid[shape], with_h0, 1000 + _i);
    gdn_result affine = test_run(&affine_stage, &p, 1, 0, 0);
    gdn_result scan = test_run(&parallel_scan_stage, &p, threads, 0, 0);
    assert_close(test_against_result(&p, &scan, &affine), GDN_TOLERANCE_VS_STAGE, "03 vs 02");
    assert_close(test_against_oracle(&p, &scan), GDN_TOLERANCE_VS_ORACLE, "03 vs oracle");
    gdn_result_free(&affine);
    gdn_result_free(&scan);
    gdn_problem_free(&p);
}
END_TEST

/* Every length from 1 to 40 (powers of two and not), 3 threads: each shape of the scan tree. */
START_TEST(parallel_scan_every_short_length)
{
    test_shape shape = {1, (size_t)_i, 1, 6, 5};
    gdn_problem p = test_problem(shape, 1, 1100 + _i);
    test_set_gates(&p, -0.2, -1e-3, _i); /* long memory: a missing prefix term shows */
    gdn_result scan = test_run(&parallel_scan_stage, &p, 3, 0, 0);
    assert_close(test_against_oracle(&p, &scan), GDN_TOLERANCE_VS_ORACLE, "03 vs oracle");
    gdn_result_free(&scan);
    gdn_problem_free(&p);
}
END_TEST

/* Exercise 3 of docs/03: the compositions the scan counts (scan_compositions, read back out of
 * parallel_scan_flops at K = V = 1, where a token costs 8 flops and a composition 4, both exact)
 * are 2 T - 2 - log2 T for T a power of two and never more than 2 T. _i: H from 1 to 3. */
START_TEST(parallel_scan_counts_its_compositions)
{
    for (size_t T = 1; T <= 1100; T++) {
        const test_shape shape = {1, T, 1 + (size_t)_i, 1, 1};
        gdn_problem p = test_problem(shape, 0, 900 + _i);
        gdn_settings s = {.B = 1, .T = T, .H = shape.H, .K = 1, .V = 1, .threads = 1};
        const double count = (parallel_scan_flops(&p, &s) / (double)shape.H - 8.0 * (double)T) / 4.0;
        ck_assert_msg(count >= 0 && count <= 2.0 * (double)T, "T = %zu: %.1f compositions, more than 2 T", T, count);
        if ((T & (T - 1)) == 0) {
            double log2T = 0;
            for (size_t t = T; t > 1; t /= 2)
                log2T++;
            ck_assert_msg(count == 2.0 * (double)T - 2.0 - log2T, "T = %zu: %.1f compositions, not 2 T - 2 - log2 T = %.0f", T,
                          count, 2.0 * (double)T - 2.0 - log2T);
        }
        gdn_problem_free(&p);
    }
}
END_TEST

Suite *parallel_scan_suite(void)
{
    Suite *suite = suite_create("03_parallel_scan");
    TCase *grid = tcase_create("against_02");
    tcase_set_timeout(grid, 120);
    tcase_add_loop_test(grid, parallel_scan_equals_affine_over_grid, 0, 8 * test_grid_count);
    tcase_add_loop_test(grid, parallel_scan_every_short_length, 1, 41);
    tcase_add_loop_test(grid, parallel_scan_counts_its_compositions, 0, 3);
    suite_add_tcase(suite, grid);
    return suite;
}
