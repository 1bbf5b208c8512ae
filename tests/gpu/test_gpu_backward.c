/* test_gpu_backward.c -- the GPU backward stages: 10_backward_chunked_cuda against stage 10 on
 * the CPU and the fp64 backward oracle, over the shape grid, chunk sizes, K = V = 128, extreme
 * gates and the edge cases; chunks past 128 refused with one line. Needs a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/backward_oracle.h"
#include "../../steps/10_backward_chunked/backward_chunked.h"
#include "../test_support.h"

extern const gdn_backward_stage backward_chunked_cuda_stage;

/* o, ht and every gradient present within tolerance of reference (in double), each named */
static void assert_tensors_close(const gdn_problem *p, const test_backward_result *b, const double *o, const double *ht,
                                 const gdn_gradients_f64 *g, double tolerance, const char *what)
{
    char name[160];
    snprintf(name, sizeof name, "%s: o", what);
    assert_close(gdn_compare_representable(b->r.o, o, gdn_tokens(p) * p->V), tolerance, name);
    snprintf(name, sizeof name, "%s: ht", what);
    assert_close(gdn_compare_representable(b->r.ht, ht, gdn_state_count(p)), tolerance, name);
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++) {
        if (!gdn_gradient_present(p, i))
            continue;
        snprintf(name, sizeof name, "%s: %s", what, gdn_gradient_shape(p, i).name);
        assert_close(gdn_compare_representable(gdn_gradient_tensor(&b->g, i), gdn_gradient_f64_tensor(g, i),
                                               gdn_gradient_shape(p, i).count),
                     tolerance, name);
    }
}

/* The GPU stage against the oracle and against stage 10 on the CPU at the same chunk size. */
static void check_against_cpu_and_oracle(const gdn_problem *p, int case_number, size_t chunk, const char *what)
{
    gdn_cotangents c;
    ck_assert_int_eq(gdn_cotangents_alloc(&c, p), 0);
    gdn_cotangents_generate(&c, p, 7919u * (uint64_t)case_number + 17u);
    test_backward_result gpu = test_run_backward(&backward_chunked_cuda_stage, p, &c, chunk);
    test_backward_result cpu = test_run_backward(&backward_chunked_stage, p, &c, chunk);
    const size_t o_count = gdn_tokens(p) * p->V, ht_count = gdn_state_count(p);
    double *o = malloc((o_count + ht_count) * sizeof *o);
    gdn_gradients_f64 oracle, cpu64;
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(gdn_gradients_f64_alloc(&oracle, p), 0);
    ck_assert_int_eq(gdn_backward_oracle(p, &c, o, o + o_count, &oracle), 0);
    char name[128];
    snprintf(name, sizeof name, "%s vs oracle", what);
    assert_tensors_close(p, &gpu, o, o + o_count, &oracle, GDN_TOLERANCE_BACKWARD_VS_ORACLE, name);
    /* the CPU stage's tensors, in double */
    ck_assert_int_eq(gdn_gradients_f64_alloc(&cpu64, p), 0);
    for (size_t i = 0; i < o_count; i++)
        o[i] = cpu.r.o[i];
    for (size_t i = 0; i < ht_count; i++)
        o[o_count + i] = cpu.r.ht[i];
    for (int t = 0; t < GDN_GRADIENT_TENSORS; t++)
        if (gdn_gradient_present(p, t))
            for (size_t i = 0; i < gdn_gradient_shape(p, t).count; i++)
                gdn_gradient_f64_tensor(&cpu64, t)[i] = gdn_gradient_tensor(&cpu.g, t)[i];
    snprintf(name, sizeof name, "%s vs 10 on the CPU", what);
    assert_tensors_close(p, &gpu, o, o + o_count, &cpu64, GDN_TOLERANCE_BACKWARD_VS_STAGE, name);
    gdn_gradients_f64_free(&cpu64);
    gdn_gradients_f64_free(&oracle);
    free(o);
    test_backward_result_free(&gpu);
    test_backward_result_free(&cpu);
    gdn_cotangents_free(&c);
}

/* _i: grid shape, with and without h0, at chunks 16 and 64 */
START_TEST(gpu_backward_equals_cpu_over_grid)
{
    const int shape = _i % test_grid_count, with_h0 = _i / test_grid_count % 2;
    const size_t chunk = _i / (2 * test_grid_count) ? 64 : 16;
    gdn_problem p = test_problem(test_grid[shape], with_h0, 5000 + _i);
    char what[128];
    test_describe_shape(what, sizeof what, test_grid[shape], with_h0);
    check_against_cpu_and_oracle(&p, 5000 + _i, chunk, what);
    gdn_problem_free(&p);
}
END_TEST

/* every chunk size class: 1, 7, 32, 63, 64, 100, 128, over 130 tokens; and K = V = 128, K != V */
START_TEST(gpu_backward_chunks_and_large_heads)
{
    static const size_t chunks[] = {1, 7, 32, 63, 64, 100, 128};
    static const test_shape shapes[] = {{1, 130, 2, 8, 6}, {1, 300, 2, 128, 128}, {2, 150, 3, 100, 72}};
    const int shape = _i < 7 ? 0 : _i - 6;
    gdn_problem p = test_problem(shapes[shape], 1, 5100 + _i);
    char what[128];
    snprintf(what, sizeof what, "chunk %zu, K=%zu V=%zu", _i < 7 ? chunks[_i] : 64, p.K, p.V);
    check_against_cpu_and_oracle(&p, 5100 + _i, _i < 7 ? chunks[_i] : 64, what);
    gdn_problem_free(&p);
}
END_TEST

/* the extreme gates and the edge cases of the forward suites */
START_TEST(gpu_backward_extremes)
{
    gdn_problem p;
    const char *name;
    if (_i < 3) {
        p = test_problem((test_shape){1, 300, 2, 16, 12}, 1, 5200 + _i);
        test_set_extreme_gates(&p, _i, 5200 + (uint64_t)_i);
        name = test_extreme_gate_names[_i];
    } else {
        p = test_edge_case(_i - 3, 5200 + _i);
        name = test_edge_case_names[_i - 3];
    }
    check_against_cpu_and_oracle(&p, 5200 + _i, 64, name);
    gdn_problem_free(&p);
}
END_TEST

START_TEST(gpu_backward_refuses_chunks_past_128)
{
    gdn_problem p = test_problem((test_shape){1, 300, 1, 8, 8}, 0, 5300);
    gdn_cotangents c;
    ck_assert_int_eq(gdn_cotangents_alloc(&c, &p), 0);
    gdn_cotangents_generate(&c, &p, 5300);
    gdn_settings s = {.reps = 1, .threads = 1, .chunk = 129};
    gdn_result r;
    gdn_gradients g;
    ck_assert_int_ne(gdn_backward_run_once(&backward_chunked_cuda_stage, &p, &c, &s, &r, &g), 0);
    ck_assert_msg(strstr(gdn_last_error(), "--chunk 129") != NULL, "%s", gdn_last_error());
    gdn_result_free(&r);
    gdn_gradients_free(&g);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

Suite *gpu_backward_suite(void)
{
    Suite *suite = suite_create("gpu_backward");
    TCase *cases = tcase_create("backward");
    tcase_set_timeout(cases, 300);
    tcase_add_loop_test(cases, gpu_backward_equals_cpu_over_grid, 0, 4 * test_grid_count);
    tcase_add_loop_test(cases, gpu_backward_chunks_and_large_heads, 0, 9);
    tcase_add_loop_test(cases, gpu_backward_extremes, 0, 3 + test_edge_case_count);
    tcase_add_test(cases, gpu_backward_refuses_chunks_past_128);
    suite_add_tcase(suite, cases);
    return suite;
}
