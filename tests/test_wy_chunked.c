/* test_wy_chunked.c -- stage 05: equals stage 04 and the oracle; its pieces on their own; extremes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/random.h"
#include "../steps/01_naive_loop/naive_loop.h"
#include "../steps/04_two_phase_scan/two_phase_scan.h"
#include "../steps/05_wy_chunked/wy_chunked.h"
#include "test_support.h"

static const size_t chunks[] = {1, 16, 32, 64, 100};
static const size_t lengths[] = {1, 63, 64, 65, 1000};

/* _i: every (chunk, T) pair, half with h0; B = 2, H = 2, K != V. */
START_TEST(wy_chunked_equals_two_phase_scan)
{
    size_t chunk = chunks[_i % 5], T = lengths[(_i / 5) % 5];
    test_shape shape = {2, T, 2, 16, 24};
    gdn_problem p = test_problem(shape, _i % 2, 1500 + _i);
    gdn_result two_phase = test_run(&two_phase_scan_stage, &p, 2, 0, 0);
    gdn_result wy = test_run(&wy_chunked_stage, &p, 2, chunk, 0);
    assert_close(test_against_result(&p, &wy, &two_phase), GDN_TOLERANCE_VS_STAGE, "05 vs 04");
    assert_close(test_against_oracle(&p, &wy), GDN_TOLERANCE_VS_ORACLE, "05 vs oracle");
    gdn_result_free(&two_phase);
    gdn_result_free(&wy);
    gdn_problem_free(&p);
}
END_TEST

START_TEST(wy_chunked_equals_oracle_over_grid)
{
    int with_h0 = _i >= test_grid_count;
    gdn_problem p = test_problem(test_grid[_i % test_grid_count], with_h0, 1600 + _i);
    gdn_result wy = test_run(&wy_chunked_stage, &p, 2, chunks[_i % 5], 0);
    assert_close(test_against_oracle(&p, &wy), GDN_TOLERANCE_VS_ORACLE, "05 vs oracle");
    gdn_result_free(&wy);
    gdn_problem_free(&p);
}
END_TEST

/* Tm (I + M) = I for the stage's own M: beta_i (k_i . k_j) exp(gamma_i - gamma_j), unit keys. */
START_TEST(wy_solve_tril_inverts)
{
    static const size_t sizes[] = {1, 2, 5, 64, 100, 128};
    size_t n = sizes[_i];
    test_shape shape = {1, n, 1, 64, 1};
    gdn_problem p = test_problem(shape, 0, 1700 + _i);
    real_t *M = calloc(n * n, sizeof *M), *Tm = malloc(n * n * sizeof *Tm), *product = calloc(n * n, sizeof *M);
    double *identity = calloc(n * n, sizeof *identity), gamma_i = 0;
    ck_assert(M && Tm && product && identity);
    for (size_t i = 0; i < n; i++) {
        identity[i * n + i] = 1;
        gamma_i += p.g[i];
        double gamma_j = 0;
        for (size_t j = 0; j < i; j++) {
            gamma_j += p.g[j];
            double dot = 0;
            for (size_t c = 0; c < p.K; c++)
                dot += (double)p.k[i * p.K + c] * p.k[j * p.K + c];
            M[i * n + j] = (real_t)(p.beta[i] * dot * exp(gamma_i - gamma_j));
        }
    }
    wy_solve_tril(Tm, M, n);
    for (size_t i = 0; i < n; i++)
        M[i * n + i] = 1; /* now I + M */
    matmul_add(product, n, Tm, n, M, n, n, n, n);
    assert_close(gdn_compare(product, identity, n * n), GDN_TOLERANCE_VS_STAGE, "Tm (I + M) vs I");
    for (size_t i = 0; i < n; i++) /* unit lower triangular */
        for (size_t j = i; j < n; j++)
            ck_assert(Tm[i * n + j] == (i == j ? 1 : 0));
    free(M);
    free(Tm);
    free(product);
    free(identity);
    gdn_problem_free(&p);
}
END_TEST

/* matmul_add against the plain triple loop, for sizes around the tile (8 x 32 floats). */
START_TEST(matmul_add_matches_triple_loop)
{
    static const size_t sizes[][3] = {{1, 1, 1}, {8, 5, 32}, {9, 3, 33}, {17, 64, 65}, {64, 64, 128}, {7, 2, 3}};
    size_t m = sizes[_i][0], k = sizes[_i][1], n = sizes[_i][2];
    real_t *A = malloc(m * k * sizeof *A), *B = malloc(k * n * sizeof *B), *C = malloc(m * n * sizeof *C);
    double *expected = malloc(m * n * sizeof *expected);
    ck_assert(A && B && C && expected);
    for (size_t i = 0; i < m * k; i++)
        A[i] = (real_t)random_normal(1800, STREAM_TEST, i);
    for (size_t i = 0; i < k * n; i++)
        B[i] = (real_t)random_normal(1801, STREAM_TEST, i);
    for (size_t i = 0; i < m * n; i++)
        expected[i] = C[i] = (real_t)random_normal(1802, STREAM_TEST, i);
    for (size_t i = 0; i < m; i++)
        for (size_t l = 0; l < k; l++)
            for (size_t j = 0; j < n; j++)
                expected[i * n + j] += (double)A[i * k + l] * B[l * n + j];
    matmul_add(C, n, A, k, B, n, m, k, n);
    assert_close(gdn_compare(C, expected, m * n), GDN_TOLERANCE_VS_STAGE, "matmul_add vs triple loop");
    free(A);
    free(B);
    free(C);
    free(expected);
}
END_TEST

/* The W/U form reproduces the loop's state at every chunk end: run both on the first t tokens. */
START_TEST(wy_state_at_chunk_ends_equals_loop)
{
    const size_t chunk = 16;
    test_shape full_shape = {1, 5 * chunk, 1, 16, 8};
    gdn_problem full = test_problem(full_shape, 1, 1900);
    for (size_t end = chunk; end <= full.T; end += chunk) {
        gdn_problem prefix = full; /* B = H = 1: the first `end` tokens are the first rows */
        prefix.T = end;
        gdn_result loop = test_run(&naive_loop_stage, &prefix, 1, 0, 0);
        gdn_result wy = test_run(&wy_chunked_stage, &prefix, 1, chunk, 0);
        double *state = malloc(prefix.K * prefix.V * sizeof *state);
        for (size_t i = 0; i < prefix.K * prefix.V; i++)
            state[i] = loop.ht[i];
        assert_close(gdn_compare(wy.ht, state, prefix.K * prefix.V), GDN_TOLERANCE_VS_STAGE, "state at a chunk end");
        free(state);
        gdn_result_free(&loop);
        gdn_result_free(&wy);
    }
    gdn_problem_free(&full);
}
END_TEST

/* Gates of -1e4 (alpha underflows to 0) and exactly 0 (no decay), and beta of 0 and 1. */
START_TEST(wy_chunked_extreme_gates_and_beta)
{
    test_shape shape = {1, 130, 2, 16, 16};
    gdn_problem p = test_problem(shape, 1, 2000 + _i);
    for (size_t i = 0; i < gdn_tokens(&p); i++) {
        double u = random_uniform(2001, STREAM_TEST, i);
        if (_i == 0) /* a few gates of -1e4 among ordinary ones */
            p.g[i] = u < 0.1 ? (real_t)-1e4 : p.g[i];
        else if (_i == 1) /* no decay at all */
            p.g[i] = 0;
        else /* beta exactly 0 or 1, gates of both extremes */
            p.beta[i] = u < 0.5 ? 0 : 1, p.g[i] = u < 0.25 || u > 0.9 ? (real_t)-1e4 : 0;
    }
    gdn_result wy = test_run(&wy_chunked_stage, &p, 2, 64, 0);
    assert_close(test_against_oracle(&p, &wy), GDN_TOLERANCE_VS_ORACLE, "05 vs oracle, extreme gates");
    gdn_result_free(&wy);
    gdn_problem_free(&p);
}
END_TEST

/* Gates far past e^g = 0: a few of -1e30 and one -inf among ordinary ones. The decay across
 * such a token is 0 for the loop and the oracle; the chunked sums take them as -1000 (real.h,
 * gdn_summed_gate), which is exact. Summed as they are, -1e30 swallows every later gate of its
 * chunk, and -inf makes gamma_i - gamma_j NaN. */
START_TEST(wy_chunked_gates_past_the_sums_reach)
{
    test_shape shape = {1, 130, 2, 16, 16};
    gdn_problem p = test_problem(shape, 1, 2100 + _i);
    for (size_t i = 0; i < gdn_tokens(&p); i++)
        if (random_uniform(2101 + (uint64_t)_i, STREAM_TEST, i) < 0.05)
            p.g[i] = (real_t)-1e30;
    p.g[gdn_tokens(&p) / 2] = -INFINITY;
    gdn_result wy = test_run(&wy_chunked_stage, &p, 2, _i ? 16 : 64, 0);
    assert_close(test_against_oracle(&p, &wy), GDN_TOLERANCE_VS_ORACLE, "05 vs oracle, gates of -1e30 and -inf");
    gdn_result_free(&wy);
    gdn_problem_free(&p);
}
END_TEST

Suite *wy_chunked_suite(void)
{
    Suite *suite = suite_create("05_wy_chunked");
    TCase *grid = tcase_create("against_04");
    tcase_set_timeout(grid, 120);
    tcase_add_loop_test(grid, wy_chunked_equals_two_phase_scan, 0, 50);
    tcase_add_loop_test(grid, wy_chunked_equals_oracle_over_grid, 0, 2 * test_grid_count);
    suite_add_tcase(suite, grid);
    TCase *pieces = tcase_create("pieces");
    tcase_add_loop_test(pieces, wy_solve_tril_inverts, 0, 6);
    tcase_add_loop_test(pieces, matmul_add_matches_triple_loop, 0, 6);
    tcase_add_test(pieces, wy_state_at_chunk_ends_equals_loop);
    tcase_add_loop_test(pieces, wy_chunked_extreme_gates_and_beta, 0, 3);
    tcase_add_loop_test(pieces, wy_chunked_gates_past_the_sums_reach, 0, 2);
    suite_add_tcase(suite, pieces);
    return suite;
}
