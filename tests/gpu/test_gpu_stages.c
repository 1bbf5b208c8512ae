/* test_gpu_stages.c -- every GPU stage equals its CPU twin, the GPU stage before it, and the
 * oracle, over the shape grid and beyond: K = V = 128, many heads, extreme gates, every
 * segment count and chunk size, long sequences; and the limits are refused with one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/random.h"
#include "../../steps/01_naive_loop/naive_loop.h"
#include "../../steps/03_parallel_scan/parallel_scan.h"
#include "../../steps/04_two_phase_scan/two_phase_scan.h"
#include "../../steps/05_wy_chunked/wy_chunked.h"
#include "../test_support.h"

extern const gdn_stage naive_loop_cuda_stage, parallel_scan_cuda_stage, two_phase_scan_cuda_stage,
    wy_chunked_cuda_stage;

static const gdn_stage *const gpu_stages[4] = {&naive_loop_cuda_stage, &parallel_scan_cuda_stage,
                                               &two_phase_scan_cuda_stage, &wy_chunked_cuda_stage};
static const gdn_stage *const cpu_twins[4] = {&naive_loop_stage, &parallel_scan_stage, &two_phase_scan_stage,
                                              &wy_chunked_stage};

/* _i: (stage, grid shape, with or without h0). GPU against its CPU twin and the oracle. */
START_TEST(gpu_stage_equals_cpu_twin)
{
    int stage = _i % 4, shape = _i / 4 % test_grid_count, with_h0 = _i / 4 / test_grid_count;
    gdn_problem p = test_problem(test_grid[shape], with_h0, 3000 + _i);
    gdn_result gpu = test_run(gpu_stages[stage], &p, 1, 0, 0);
    gdn_result cpu = test_run(cpu_twins[stage], &p, 2, 0, 0);
    assert_close(test_against_result(&p, &gpu, &cpu), GDN_TOLERANCE_VS_STAGE, gpu_stages[stage]->name);
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, gpu_stages[stage]->name);
    gdn_result_free(&gpu);
    gdn_result_free(&cpu);
    gdn_problem_free(&p);
}
END_TEST

/* _i: (GPU stage 2..4 of the four, grid shape): each equals the GPU stage before it. */
START_TEST(gpu_stage_equals_previous_gpu_stage)
{
    int stage = 1 + _i % 3, shape = _i / 3;
    gdn_problem p = test_problem(test_grid[shape], _i % 2, 3100 + _i);
    gdn_result now = test_run(gpu_stages[stage], &p, 1, 0, 0);
    gdn_result before = test_run(gpu_stages[stage - 1], &p, 1, 0, 0);
    assert_close(test_against_result(&p, &now, &before), GDN_TOLERANCE_VS_STAGE, gpu_stages[stage]->name);
    gdn_result_free(&now);
    gdn_result_free(&before);
    gdn_problem_free(&p);
}
END_TEST

/* Larger heads and many heads: K = V = 128, K != V near the limits, B H = 256, and B H = 80
 * with V = 30 (05_cuda's state chain then takes 8-column tiles, the last one partial); odd K
 * and V (05_cuda's rows of q, k, v and o are then no multiple of 16 bytes: four loads, not one). */
START_TEST(gpu_stages_large_and_many_heads)
{
    static const test_shape shapes[] = {{1, 300, 2, 128, 128}, {2, 150, 1, 100, 72}, {4, 70, 64, 32, 32},
                                        {1, 90, 3, 64, 130}, {2, 77, 40, 64, 30},
                                        {2, 90, 3, 13, 9}};
    test_shape shape = shapes[_i / 4];
    int stage = _i % 4;
    gdn_problem p = test_problem(shape, _i % 2, 3200 + _i);
    gdn_result gpu = test_run(gpu_stages[stage], &p, 1, 0, 0);
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, gpu_stages[stage]->name);
    gdn_result_free(&gpu);
    gdn_problem_free(&p);
}
END_TEST

/* _i: segment count for stage 04 on the GPU, T = 200 over two heads, including 1 and T. */
START_TEST(gpu_two_phase_scan_every_segment_count)
{
    static const size_t segments[] = {1, 2, 7, 64, 199, 200};
    test_shape shape = {1, 200, 2, 32, 24};
    gdn_problem p = test_problem(shape, 1, 3300 + _i);
    gdn_result gpu = test_run(&two_phase_scan_cuda_stage, &p, 1, 0, segments[_i]);
    gdn_result loop = test_run(&naive_loop_cuda_stage, &p, 1, 0, 0);
    assert_close(test_against_result(&p, &gpu, &loop), GDN_TOLERANCE_VS_STAGE, "04_cuda vs 01_cuda");
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, "04_cuda vs oracle");
    gdn_result_free(&gpu);
    gdn_result_free(&loop);
    gdn_problem_free(&p);
}
END_TEST

/* _i: chunk size for stage 05 on the GPU, with a partial last chunk. */
START_TEST(gpu_wy_chunked_every_chunk_size)
{
    static const size_t chunks[] = {1, 13, 16, 32, 64};
    test_shape shape = {2, 150, 2, 64, 48};
    gdn_problem p = test_problem(shape, _i % 2, 3400 + _i);
    gdn_result gpu = test_run(&wy_chunked_cuda_stage, &p, 1, chunks[_i], 0);
    gdn_result cpu = test_run(&wy_chunked_stage, &p, 2, chunks[_i], 0);
    assert_close(test_against_result(&p, &gpu, &cpu), GDN_TOLERANCE_VS_STAGE, "05_cuda vs 05");
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, "05_cuda vs oracle");
    gdn_result_free(&gpu);
    gdn_result_free(&cpu);
    gdn_problem_free(&p);
}
END_TEST

/* One long head: stage 04's default segment count (from the SM count) and stage 05. */
START_TEST(gpu_long_sequence)
{
    test_shape shape = {1, 6000, 1, 64, 64};
    gdn_problem p = test_problem(shape, 1, 3500 + _i);
    gdn_result gpu = test_run(gpu_stages[2 + _i], &p, 1, 0, 0);
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, gpu_stages[2 + _i]->name);
    gdn_result_free(&gpu);
    gdn_problem_free(&p);
}
END_TEST

/* _i: (stage, case): gates of -1e4 (alpha underflows to 0), no decay at all, and beta of
 * exactly 0 or 1 with gates of both extremes. */
START_TEST(gpu_extreme_gates_and_beta)
{
    int stage = _i % 4, variant = _i / 4;
    test_shape shape = {1, 130, 2, 16, 16};
    gdn_problem p = test_problem(shape, 1, 3600 + _i);
    for (size_t i = 0; i < gdn_tokens(&p); i++) {
        double u = random_uniform(3601, STREAM_TEST, i);
        if (variant == 0)
            p.g[i] = u < 0.1 ? (real_t)-1e4 : p.g[i];
        else if (variant == 1)
            p.g[i] = 0;
        else
            p.beta[i] = u < 0.5 ? 0 : 1, p.g[i] = u < 0.25 || u > 0.9 ? (real_t)-1e4 : 0;
    }
    gdn_result gpu = test_run(gpu_stages[stage], &p, 1, 0, 0);
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, gpu_stages[stage]->name);
    gdn_result_free(&gpu);
    gdn_problem_free(&p);
}
END_TEST

/* _i: (stage, edge case of test_support.c): no decay over 65536 tokens, underflowing gates,
 * beta 0 and 1, zero keys, K or V of 1, one token. */
START_TEST(gpu_stage_equals_oracle_on_edge_case)
{
    int stage = _i % 4, which = _i / 4;
    gdn_problem p = test_edge_case(which, 3900 + _i);
    gdn_result gpu = test_run(gpu_stages[stage], &p, 1, 0, 0);
    char what[160];
    snprintf(what, sizeof what, "%s, %s", gpu_stages[stage]->name, test_edge_case_names[which]);
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, what);
    gdn_result_free(&gpu);
    gdn_problem_free(&p);
}
END_TEST

/* K past the register and shared-memory limits, and a chunk too large, are refused by name. */
START_TEST(gpu_limits_are_refused)
{
    test_shape shape = {1, 4, 1, 129, 8};
    gdn_problem p = test_problem(shape, 0, 3700 + _i);
    gdn_result r;
    ck_assert_int_eq(gdn_result_alloc(&r, &p), 0);
    gdn_settings s = {.reps = 1, .threads = 1, .chunk = 64, .segments = 2};
    ck_assert_int_ne(gdn_stage_run_once(gpu_stages[_i], &p, &s, &r), 0);
    ck_assert_msg(strstr(gdn_last_error(), "K = 129") != NULL, "%s", gdn_last_error());
    gdn_result_free(&r);
    gdn_problem_free(&p);
}
END_TEST

START_TEST(gpu_chunk_limit_is_refused)
{
    test_shape shape = {1, 100, 1, 8, 8};
    gdn_problem p = test_problem(shape, 0, 3800);
    gdn_result r;
    ck_assert_int_eq(gdn_result_alloc(&r, &p), 0);
    gdn_settings s = {.reps = 1, .threads = 1, .chunk = 65};
    ck_assert_int_ne(gdn_stage_run_once(&wy_chunked_cuda_stage, &p, &s, &r), 0);
    ck_assert_msg(strstr(gdn_last_error(), "--chunk 65") != NULL, "%s", gdn_last_error());
    gdn_result_free(&r);
    gdn_problem_free(&p);
}
END_TEST

/* Grouped value heads and packed batches on the GPU loop: 01_cuda against its CPU twin and the
 * oracle, over HV / H in {1, 2, 3, 4} and three mixes of lengths: two rows of 77 tokens; lengths
 * 1, 63, 64, 65; one sequence of 600 beside 24 short ones. _i: (ratio, mix, with h0). */
START_TEST(gpu_loop_takes_layouts)
{
    static const size_t around_a_chunk[4] = {1, 63, 64, 65};
    const size_t ratio = 1 + _i % 4;
    const int mix = _i / 4 % 3, with_h0 = _i / 12;
    size_t lengths[25];
    gdn_layout l = {.B = 2, .T = 77, .H = 2, .HV = 2 * ratio, .K = 32, .V = 40, .with_h0 = with_h0};
    if (mix > 0) {
        l.sequences = mix == 1 ? 4 : 25, l.lengths = lengths, l.B = 1, l.T = 0;
        for (size_t n = 0; n < l.sequences; n++) {
            lengths[n] = mix == 1 ? around_a_chunk[n] : n == 0 ? 600 : 1 + (n * 37) % 70;
            l.T += lengths[n];
        }
    }
    gdn_problem p = test_layout_problem(&l, 3400 + _i);
    gdn_result gpu = test_run(&naive_loop_cuda_stage, &p, 1, 0, 0);
    gdn_result cpu = test_run(&naive_loop_stage, &p, 2, 0, 0);
    char what[64];
    snprintf(what, sizeof what, "01_cuda HV/H=%zu mix %d h0 %d", ratio, mix, with_h0);
    assert_close(test_against_result(&p, &gpu, &cpu), GDN_TOLERANCE_VS_STAGE, what);
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, what);
    gdn_result_free(&gpu);
    gdn_result_free(&cpu);
    gdn_problem_free(&p);
}
END_TEST

/* Grouped value heads on the GPU's chunked form: 05_cuda against stage 05 and the oracle over
 * HV / H in {1, 2, 3, 4}, with and without h0, T not a multiple of the chunk, K != V.
 * _i: (ratio, with h0). */
START_TEST(gpu_chunked_takes_grouped_heads)
{
    const size_t ratio = 1 + _i % 4;
    gdn_layout l = {.B = 2, .T = 201, .H = 3, .HV = 3 * ratio, .K = 100, .V = 72, .with_h0 = _i / 4};
    gdn_problem p = test_layout_problem(&l, 3500 + _i);
    gdn_result gpu = test_run(&wy_chunked_cuda_stage, &p, 1, 0, 0);
    gdn_result cpu = test_run(&wy_chunked_stage, &p, 2, 0, 0);
    char what[64];
    snprintf(what, sizeof what, "05_cuda HV/H=%zu h0 %d", ratio, _i / 4);
    assert_close(test_against_result(&p, &gpu, &cpu), GDN_TOLERANCE_VS_STAGE, what);
    assert_close(test_against_oracle(&p, &gpu), GDN_TOLERANCE_VS_ORACLE, what);
    gdn_result_free(&gpu);
    gdn_result_free(&cpu);
    gdn_problem_free(&p);
}
END_TEST

Suite *gpu_stages_suite(void)
{
    Suite *suite = suite_create("gpu_stages");
    TCase *twins = tcase_create("twins");
    tcase_set_timeout(twins, 600);
    tcase_add_loop_test(twins, gpu_stage_equals_cpu_twin, 0, 4 * 2 * test_grid_count);
    tcase_add_loop_test(twins, gpu_stage_equals_previous_gpu_stage, 0, 3 * test_grid_count);
    tcase_add_loop_test(twins, gpu_stages_large_and_many_heads, 0, 4 * 6); /* 4 stages x 6 shapes */
    suite_add_tcase(suite, twins);
    TCase *options = tcase_create("options");
    tcase_set_timeout(options, 600);
    tcase_add_loop_test(options, gpu_two_phase_scan_every_segment_count, 0, 6);
    tcase_add_loop_test(options, gpu_wy_chunked_every_chunk_size, 0, 5);
    tcase_add_loop_test(options, gpu_long_sequence, 0, 2);
    tcase_add_loop_test(options, gpu_loop_takes_layouts, 0, 4 * 3 * 2);
    tcase_add_loop_test(options, gpu_chunked_takes_grouped_heads, 0, 4 * 2);
    suite_add_tcase(suite, options);
    TCase *edges = tcase_create("edges");
    tcase_add_loop_test(edges, gpu_extreme_gates_and_beta, 0, 12);
    tcase_add_loop_test(edges, gpu_stage_equals_oracle_on_edge_case, 0, 4 * test_edge_case_count);
    tcase_add_loop_test(edges, gpu_limits_are_refused, 0, 4);
    tcase_add_test(edges, gpu_chunk_limit_is_refused);
    suite_add_tcase(suite, edges);
    return suite;
}
