/* test_affine.c -- stage 02: equals stage 01; properties of compose_affine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/random.h"
#include "../steps/01_naive_loop/naive_loop.h"
#include "../steps/02_affine/affine.h"
#include "test_support.h"

START_TEST(affine_equals_naive_loop_over_grid)
{
    int with_h0 = _i >= test_grid_count;
    gdn_problem p = test_problem(test_grid[_i % test_grid_count], with_h0, 400 + _i);
    gdn_result loop = test_run(&naive_loop_stage, &p, 2, 0, 0);
    gdn_result affine = test_run(&affine_stage, &p, 2, 0, 0);
    assert_close(test_against_result(&p, &affine, &loop), GDN_TOLERANCE_VS_STAGE, "02 vs 01");
    assert_close(test_against_oracle(&p, &affine), GDN_TOLERANCE_VS_ORACLE, "02 vs oracle");
    gdn_result_free(&loop);
    gdn_result_free(&affine);
    gdn_problem_free(&p);
}
END_TEST

static const double gate_ranges[][2] = {{-20, -10}, {-1e-3, -1e-4}, {-20, -1e-4}};

START_TEST(affine_equals_naive_loop_for_extreme_gates)
{
    test_shape shape = {1, 200, 2, 8, 12};
    gdn_problem p = test_problem(shape, 1, 450 + _i);
    test_set_gates(&p, gate_ranges[_i][0], gate_ranges[_i][1], _i);
    gdn_result loop = test_run(&naive_loop_stage, &p, 2, 0, 0);
    gdn_result affine = test_run(&affine_stage, &p, 2, 0, 0);
    assert_close(test_against_result(&p, &affine, &loop), GDN_TOLERANCE_VS_STAGE, "02 vs 01, extreme gates");
    gdn_result_free(&loop);
    gdn_result_free(&affine);
    gdn_problem_free(&p);
}
END_TEST

/* A block of count random maps (entries N(0, 1/K), so products stay of order 1). */
static real_t *random_maps(size_t count, size_t K, size_t V, uint64_t seed)
{
    size_t values = count * K * (K + V);
    real_t *block = malloc(values * sizeof *block);
    ck_assert_ptr_nonnull(block);
    for (size_t i = 0; i < values; i++)
        block[i] = (real_t)(random_normal(seed, STREAM_TEST, i) / sqrt((double)K));
    return block;
}

static gdn_difference compare_maps(affine_map x, affine_map y, size_t K, size_t V)
{
    size_t count = K * (K + V);
    double *wide = malloc(count * sizeof *wide);
    for (size_t i = 0; i < count; i++)
        wide[i] = y.A[i]; /* A and B are contiguous */
    gdn_difference d = gdn_compare(x.A, wide, count);
    free(wide);
    return d;
}

START_TEST(compose_affine_is_associative)
{
    const size_t K = 12, V = 7;
    real_t *block = random_maps(7, K, V, 500 + (uint64_t)_i);
    affine_map m1 = affine_map_at(block, 0, K, V), m2 = affine_map_at(block, 1, K, V),
               m3 = affine_map_at(block, 2, K, V), left = affine_map_at(block, 3, K, V),
               right = affine_map_at(block, 4, K, V), tmp = affine_map_at(block, 5, K, V);
    compose_affine(tmp, m2, m1, K, V);    /* m2 o m1 */
    compose_affine(right, m3, tmp, K, V); /* m3 o (m2 o m1) */
    compose_affine(tmp, m3, m2, K, V);
    compose_affine(left, tmp, m1, K, V);  /* (m3 o m2) o m1 */
    assert_close(compare_maps(left, right, K, V), GDN_TOLERANCE_VS_STAGE, "(m3 o m2) o m1 vs m3 o (m2 o m1)");
    /* and the identity is neutral on both sides */
    affine_map identity = affine_map_at(block, 6, K, V);
    affine_identity(identity, K, V);
    compose_affine(tmp, identity, m1, K, V);
    assert_close(compare_maps(tmp, m1, K, V), 1e-15, "I o m1");
    compose_affine(tmp, m1, identity, K, V);
    assert_close(compare_maps(tmp, m1, K, V), 1e-15, "m1 o I");
    free(block);
}
END_TEST

/* Exercise 1 of docs/02: at K = V = 1 a map is a pair (a, b), S -> a S + b, and m3 o m2 o m1 is
 * (a3 a2 a1, a3 a2 b1 + a3 b2 + b3) whichever way it is bracketed. Integers from 1 to 9, drawn
 * fresh a case, keep every product and sum exact in float, so the check is equality. */
START_TEST(compose_affine_by_hand_in_one_dimension)
{
    real_t block[2 * 6];
    for (int i = 0; i < 6; i++)
        block[i] = (real_t)(1 + (int)(9 * random_uniform(700 + (uint64_t)_i, STREAM_TEST, (uint64_t)i)));
    const real_t a1 = block[0], b1 = block[1], a2 = block[2], b2 = block[3], a3 = block[4], b3 = block[5];
    affine_map m1 = affine_map_at(block, 0, 1, 1), m2 = affine_map_at(block, 1, 1, 1), m3 = affine_map_at(block, 2, 1, 1);
    affine_map tmp = affine_map_at(block, 3, 1, 1), left = affine_map_at(block, 4, 1, 1), right = affine_map_at(block, 5, 1, 1);
    compose_affine(tmp, m2, m1, 1, 1);
    compose_affine(right, m3, tmp, 1, 1); /* m3 o (m2 o m1) */
    compose_affine(tmp, m3, m2, 1, 1);
    compose_affine(left, tmp, m1, 1, 1);  /* (m3 o m2) o m1 */
    const real_t a = a3 * a2 * a1, b = a3 * a2 * b1 + a3 * b2 + b3;
    ck_assert_msg(left.A[0] == a && left.B[0] == b, "(m3 o m2) o m1 = (%g, %g), by hand (%g, %g)", (double)left.A[0],
                  (double)left.B[0], (double)a, (double)b);
    ck_assert_msg(right.A[0] == a && right.B[0] == b, "m3 o (m2 o m1) = (%g, %g), by hand (%g, %g)", (double)right.A[0],
                  (double)right.B[0], (double)a, (double)b);
}
END_TEST

/* Exercise 3 of docs/02: with h0 the counted work adds the apply, 2 K^2 V a token and head, and
 * nothing else */
START_TEST(affine_counts_the_apply_only_with_h0)
{
    const test_shape shape = {2, 33 + 10 * (size_t)_i, 3, 8 + (size_t)_i, 5};
    gdn_problem with = test_problem(shape, 1, 800 + _i), without = test_problem(shape, 0, 800 + _i);
    gdn_settings s = {.B = shape.B, .T = shape.T, .H = shape.H, .K = shape.K, .V = shape.V, .threads = 1};
    const double apply = 2.0 * (double)(shape.K * shape.K * shape.V) * (double)(shape.B * shape.T * shape.H);
    const double difference = affine_stage.counted_flops(&with, &s) - affine_stage.counted_flops(&without, &s);
    ck_assert_msg(difference == apply, "with h0 the count grows by %.0f flops, not the apply's %.0f", difference, apply);
    gdn_problem_free(&with);
    gdn_problem_free(&without);
}
END_TEST

/* Fold a whole head into one map, in order (later o earlier) or reversed, and apply it to h0. */
static void fold_head(const gdn_problem *p, int reversed, real_t *final_state)
{
    const size_t K = p->K, V = p->V;
    real_t *block = malloc(3 * K * (K + V) * sizeof *block);
    ck_assert_ptr_nonnull(block);
    affine_map token = affine_map_at(block, 0, K, V), fold = affine_map_at(block, 1, K, V),
               next = affine_map_at(block, 2, K, V);
    affine_identity(fold, K, V);
    for (size_t t = 0; t < p->T; t++) {
        size_t i = gdn_token(p, 0, t, 0);
        affine_token_map(token, K, V, p->k + i * K, p->v + i * V, (real_t)exp(p->g[i]), p->beta[i]);
        if (reversed)
            compose_affine(next, fold, token, K, V); /* the pitfall: earlier applied after later */
        else
            compose_affine(next, token, fold, K, V);
        affine_map swap = fold;
        fold = next;
        next = swap;
    }
    apply_affine(final_state, fold, p->h0, K, V);
    free(block);
}

START_TEST(folded_sequence_gives_final_state)
{
    test_shape shape = {1, 97, 1, 16, 8};
    gdn_problem p = test_problem(shape, 1, 600);
    gdn_result loop = test_run(&naive_loop_stage, &p, 1, 0, 0);
    real_t final_state[16 * 8];
    fold_head(&p, 0, final_state);
    double wide[16 * 8];
    for (int i = 0; i < 16 * 8; i++)
        wide[i] = loop.ht[i];
    assert_close(gdn_compare(final_state, wide, 16 * 8), GDN_TOLERANCE_VS_STAGE, "fold applied to h0 vs 01's ht");
    gdn_result_free(&loop);
    gdn_problem_free(&p);
}
END_TEST

/* Composition is not commutative: composing in the wrong order gives a state far from the
 * loop's. The test asserts the error is large, so it fails if the order stopped mattering
 * (e.g. if compose_affine ignored its operand order). Gates near 1 keep the memory long. */
START_TEST(wrong_composition_order_is_far_from_loop)
{
    test_shape shape = {1, 40, 1, 16, 8};
    gdn_problem p = test_problem(shape, 1, 700);
    test_set_gates(&p, -0.05, -0.01, 7);
    gdn_result loop = test_run(&naive_loop_stage, &p, 1, 0, 0);
    real_t final_state[16 * 8];
    fold_head(&p, 1, final_state);
    double wide[16 * 8];
    for (int i = 0; i < 16 * 8; i++)
        wide[i] = loop.ht[i];
    gdn_difference d = gdn_compare(final_state, wide, 16 * 8);
    ck_assert_msg(d.non_finite == 0 && d.relative > 0.1, "reversed order should be far off, error %.3e", d.relative);
    gdn_result_free(&loop);
    gdn_problem_free(&p);
}
END_TEST

Suite *affine_suite(void)
{
    Suite *suite = suite_create("02_affine");
    TCase *grid = tcase_create("against_01");
    tcase_set_timeout(grid, 60);
    tcase_add_loop_test(grid, affine_equals_naive_loop_over_grid, 0, 2 * test_grid_count);
    tcase_add_loop_test(grid, affine_equals_naive_loop_for_extreme_gates, 0, 3);
    suite_add_tcase(suite, grid);
    TCase *properties = tcase_create("properties");
    tcase_add_loop_test(properties, compose_affine_is_associative, 0, 3);
    tcase_add_loop_test(properties, compose_affine_by_hand_in_one_dimension, 0, 3);
    tcase_add_loop_test(properties, affine_counts_the_apply_only_with_h0, 0, 3);
    tcase_add_test(properties, folded_sequence_gives_final_state);
    tcase_add_test(properties, wrong_composition_order_is_far_from_loop);
    suite_add_tcase(suite, properties);
    return suite;
}
