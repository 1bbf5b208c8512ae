/* test_naive_loop.c -- stage 01 against the fp64 oracle over the shape grid and gate regimes. */
#include "../steps/01_naive_loop/naive_loop.h"
#include "test_support.h"

/* _i runs over the grid twice: without h0, then with h0. */
START_TEST(naive_loop_equals_oracle_over_grid)
{
    int with_h0 = _i >= test_grid_count;
    gdn_problem p = test_problem(test_grid[_i % test_grid_count], with_h0, 100 + _i);
    gdn_result r = test_run(&naive_loop_stage, &p, 2, 0, 0);
    assert_close(test_against_oracle(&p, &r), GDN_TOLERANCE_VS_ORACLE, "01 vs oracle");
    gdn_result_free(&r);
    gdn_problem_free(&p);
}
END_TEST

/* Gates near 0 (g = -20: alpha = 2e-9, the state is forgotten every token), near 1
 * (g = -1e-4: almost no forgetting, where errors could accumulate), and spread over both. */
static const double gate_ranges[][2] = {{-20, -10}, {-1e-3, -1e-4}, {-20, -1e-4}};

START_TEST(naive_loop_equals_oracle_for_extreme_gates)
{
    test_shape shape = {2, 300, 2, 16, 16};
    gdn_problem p = test_problem(shape, 1, 200 + _i);
    test_set_gates(&p, gate_ranges[_i][0], gate_ranges[_i][1], _i);
    gdn_result r = test_run(&naive_loop_stage, &p, 2, 0, 0);
    assert_close(test_against_oracle(&p, &r), GDN_TOLERANCE_VS_ORACLE, "01 vs oracle, extreme gates");
    gdn_result_free(&r);
    gdn_problem_free(&p);
}
END_TEST

/* One head by hand: T = 1, K = V = 1 is S = alpha s0 + beta (v - alpha s0 k) k, o = scale S q. */
START_TEST(naive_loop_single_token_by_hand)
{
    test_shape shape = {1, 1, 1, 1, 1};
    gdn_problem p = test_problem(shape, 1, 300);
    p.q[0] = 2;
    p.k[0] = 1;
    p.v[0] = 3;
    p.g[0] = (real_t)-0.5;
    p.beta[0] = (real_t)0.25;
    p.h0[0] = 4;
    double alpha = exp(-0.5), decayed = alpha * 4, state = decayed + 0.25 * (3 - decayed);
    gdn_result r = test_run(&naive_loop_stage, &p, 1, 0, 0);
    ck_assert_double_eq_tol(r.ht[0], state, 1e-6 * state);
    ck_assert_double_eq_tol(r.o[0], p.scale * 2 * state, 1e-6 * state);
    gdn_result_free(&r);
    gdn_problem_free(&p);
}
END_TEST

Suite *naive_loop_suite(void)
{
    Suite *suite = suite_create("01_naive_loop");
    TCase *grid = tcase_create("oracle");
    tcase_set_timeout(grid, 60);
    tcase_add_loop_test(grid, naive_loop_equals_oracle_over_grid, 0, 2 * test_grid_count);
    tcase_add_loop_test(grid, naive_loop_equals_oracle_for_extreme_gates, 0, 3);
    tcase_add_test(grid, naive_loop_single_token_by_hand);
    suite_add_tcase(suite, grid);
    return suite;
}
