/* test_gpu_backward.c -- the GPU backward stages: 10_backward_chunked_cuda against stage 10 on
 * the CPU and the fp64 backward oracle, over the shape grid, chunk sizes, K = V = 128, extreme
 * gates and the edge cases; chunks past 128 refused with one line. 11_backward_tensor_cores
 * (bf16 inputs, tensor cores) against the oracle and against 10_backward_chunked_cuda, both on
 * the same bf16-rounded inputs, each tensor within the bound FLA's tests give it
 * (gdn_backward_tolerance, common/tolerances.h), over T from 1 to 1000, B 1 and 2, H 1, 3 and 70,
 * K and V 64 and 128 and off the multiples of 16, with and without h0, extreme gates and the
 * edge cases, and against 11a_backward_mma_sync bit for bit over the same cases; 12_backward_fused
 * against the oracle, 10_backward_chunked_cuda and 11 over the same cases; 13_backward_states
 * (12's walk on the states of stage 06's kernels) against the oracle and 12; exact zeros
 * where the algebra gives them; wrong chunks and sizes refused with one line, by the library call
 * and by the binary. Needs a GPU, but for the workspaces' sizes (backward_workspace_suite). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/backward_oracle.h"
#include "../../steps/10_backward_chunked/backward_chunked.h"
#include "../test_support.h"

extern const gdn_backward_stage backward_chunked_cuda_stage, backward_mma_sync_stage, backward_tensor_cores_stage,
    backward_fused_stage, backward_states_stage;
extern const gdn_stage warp_specialized_stage;

/* o, ht and every gradient present of stage's result b within the bound the stage gives each
 * tensor (gdn_backward_tolerance) of reference (in double): the oracle, or with against_stage
 * another stage's result; each named */
static void assert_tensors_close(const gdn_backward_stage *stage, const gdn_problem *p, const test_backward_result *b,
                                 const double *o, const double *ht, const gdn_gradients_f64 *g, int against_stage,
                                 const char *what)
{
    char name[160];
    snprintf(name, sizeof name, "%s: o", what);
    assert_close(gdn_compare_representable(b->r.o, o, gdn_tokens(p) * p->V), gdn_backward_tolerance(stage, "o", against_stage),
                 name);
    snprintf(name, sizeof name, "%s: ht", what);
    assert_close(gdn_compare_representable(b->r.ht, ht, gdn_state_count(p)), gdn_backward_tolerance(stage, "ht", against_stage),
                 name);
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++) {
        if (!gdn_gradient_present(p, i))
            continue;
        const char *tensor = gdn_gradient_shape(p, i).name;
        snprintf(name, sizeof name, "%s: %s", what, tensor);
        assert_close(gdn_compare_representable(gdn_gradient_tensor(&b->g, i), gdn_gradient_f64_tensor(g, i),
                                               gdn_gradient_shape(p, i).count),
                     gdn_backward_tolerance(stage, tensor, against_stage), name);
    }
}

/* reference's o, ht and gradients in double, into o (o then ht) and g */
static void widen(const gdn_problem *p, const test_backward_result *reference, double *o, gdn_gradients_f64 *g)
{
    const size_t o_count = gdn_tokens(p) * p->V, ht_count = gdn_state_count(p);
    for (size_t i = 0; i < o_count; i++)
        o[i] = reference->r.o[i];
    for (size_t i = 0; i < ht_count; i++)
        o[o_count + i] = reference->r.ht[i];
    for (int t = 0; t < GDN_GRADIENT_TENSORS; t++)
        if (gdn_gradient_present(p, t))
            for (size_t i = 0; i < gdn_gradient_shape(p, t).count; i++)
                gdn_gradient_f64_tensor(g, t)[i] = gdn_gradient_tensor(&reference->g, t)[i];
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
    assert_tensors_close(&backward_chunked_cuda_stage, p, &gpu, o, o + o_count, &oracle, 0, name);
    /* the CPU stage's tensors, in double */
    ck_assert_int_eq(gdn_gradients_f64_alloc(&cpu64, p), 0);
    widen(p, &cpu, o, &cpu64);
    snprintf(name, sizeof name, "%s vs 10 on the CPU", what);
    assert_tensors_close(&backward_chunked_cuda_stage, p, &gpu, o, o + o_count, &cpu64, 1, name);
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

/* ---- 11a_backward_mma_sync and 11_backward_tensor_cores ---- */

/* every output of two runs the same, bit for bit: 11's chain blocks carry 64 columns where
 * 11a's carry 16, and each element's sums are the same products in the same order */
static void assert_same_bits(const gdn_problem *p, const test_backward_result *a, const test_backward_result *b, const char *what)
{
    const size_t tokens = gdn_tokens(p), states = gdn_state_count(p);
    const real_t *x[8] = {a->r.o, a->r.ht, a->g.dq, a->g.dk, a->g.dv, a->g.dg, a->g.dbeta, a->g.dh0};
    const real_t *y[8] = {b->r.o, b->r.ht, b->g.dq, b->g.dk, b->g.dv, b->g.dg, b->g.dbeta, b->g.dh0};
    const size_t counts[8] = {tokens * p->V, states, tokens * p->K, tokens * p->K, tokens * p->V, tokens, tokens, states};
    static const char *const names[8] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    for (int t = 0; t < 8; t++) {
        if (!x[t] && !y[t]) /* dh0 without h0 */
            continue;
        ck_assert_msg(x[t] && y[t], "%s: %s of one run only", what, names[t]);
        for (size_t i = 0; i < counts[t]; i++)
            ck_assert_msg(memcmp(&x[t][i], &y[t][i], sizeof x[t][i]) == 0, "%s: %s[%zu] = %.9g (11) against %.9g (11a)", what,
                          names[t], i, (double)x[t][i], (double)y[t][i]);
    }
}

/* 11 on p's inputs rounded to bf16 (as its binary's driver rounds them), against the oracle and
 * against 10_backward_chunked_cuda (fp32) on the same rounded inputs, each tensor within its
 * bound, and against 11a bit for bit; 12 (its rounding placed apart from 11's: dv, not -W, is
 * the chain's operand) against the oracle, 10_cuda and 11, each within the same bounds; the
 * cotangents drawn fresh from the case number; 13 (06's solve and states, rounded apart from 11's:
 * tf32 joins, Vnew from v or from U and W in bf16) against the oracle and 12 within the same
 * bounds */
static void check_tensor_cores(gdn_problem *p, int case_number, const char *what)
{
    gdn_problem_round_to_bf16(p);
    gdn_cotangents c;
    ck_assert_int_eq(gdn_cotangents_alloc(&c, p), 0);
    gdn_cotangents_generate(&c, p, 7919u * (uint64_t)case_number + 29u);
    test_backward_result tensor = test_run_backward(&backward_tensor_cores_stage, p, &c, 0);
    test_backward_result narrow = test_run_backward(&backward_mma_sync_stage, p, &c, 0);
    test_backward_result fused = test_run_backward(&backward_fused_stage, p, &c, 0);
    test_backward_result states = test_run_backward(&backward_states_stage, p, &c, 0);
    test_backward_result fp32 = test_run_backward(&backward_chunked_cuda_stage, p, &c, 64);
    const size_t o_count = gdn_tokens(p) * p->V, ht_count = gdn_state_count(p);
    double *o = malloc((o_count + ht_count) * sizeof *o);
    gdn_gradients_f64 reference;
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(gdn_gradients_f64_alloc(&reference, p), 0);
    ck_assert_int_eq(gdn_backward_oracle(p, &c, o, o + o_count, &reference), 0);
    char name[200];
    snprintf(name, sizeof name, "11 vs 11a, %s", what);
    assert_same_bits(p, &tensor, &narrow, name);
    snprintf(name, sizeof name, "11 vs oracle, %s", what);
    assert_tensors_close(&backward_tensor_cores_stage, p, &tensor, o, o + o_count, &reference, 0, name);
    snprintf(name, sizeof name, "12 vs oracle, %s", what);
    assert_tensors_close(&backward_fused_stage, p, &fused, o, o + o_count, &reference, 0, name);
    snprintf(name, sizeof name, "13 vs oracle, %s", what);
    assert_tensors_close(&backward_states_stage, p, &states, o, o + o_count, &reference, 0, name);
    widen(p, &fp32, o, &reference);
    snprintf(name, sizeof name, "11 vs 10_cuda, %s", what);
    assert_tensors_close(&backward_tensor_cores_stage, p, &tensor, o, o + o_count, &reference, 1, name);
    snprintf(name, sizeof name, "12 vs 10_cuda, %s", what);
    assert_tensors_close(&backward_fused_stage, p, &fused, o, o + o_count, &reference, 1, name);
    widen(p, &tensor, o, &reference);
    snprintf(name, sizeof name, "12 vs 11, %s", what);
    assert_tensors_close(&backward_fused_stage, p, &fused, o, o + o_count, &reference, 1, name);
    widen(p, &fused, o, &reference);
    snprintf(name, sizeof name, "13 vs 12, %s", what);
    assert_tensors_close(&backward_states_stage, p, &states, o, o + o_count, &reference, 1, name);
    gdn_gradients_f64_free(&reference);
    free(o);
    test_backward_result_free(&tensor);
    test_backward_result_free(&narrow);
    test_backward_result_free(&fused);
    test_backward_result_free(&states);
    test_backward_result_free(&fp32);
    gdn_cotangents_free(&c);
}

/* T past and short of the chunk of 64 (1, 63, 65, 77, 130, 200, 1000), B 1 and 2, H 1 and 3, K = V
 * = 64 and 128, K != V both ways, K and V off the multiples of 16 (padded tiles, a chain's
 * partial 16-column block). T = 1 runs six heads: a tensor of one token of one head (dbeta, dg)
 * is one number, whose relative error is that of one sum of cancelling terms (tolerances.h).
 * The last three, 140 heads each, give 11 at least as many (head, 64 columns) blocks as an H100
 * or H200 has SMs, so that its chains run on blocks of 64 columns: V = 96 (a partial second
 * block), K = 100 and V = 40 (keys staged element by element, one partial block, warps past KP),
 * K = 64 (half the warps without state rows); the others run 11a's blocks of 16 columns, both
 * chains in one launch. */
static const test_shape tensor_core_shapes[] = {
    {2, 1, 3, 64, 64},     {1, 63, 1, 64, 64},  {2, 65, 3, 128, 128}, {1, 200, 3, 64, 128}, {2, 200, 1, 128, 64},
    {1, 1000, 1, 128, 128}, {2, 1000, 3, 64, 64}, {1, 130, 2, 40, 72},  {2, 77, 2, 100, 24},  {2, 130, 70, 128, 96},
    {2, 77, 70, 100, 40},  {2, 200, 70, 64, 128}, {2, 130, 12, 64, 64}, /* 24 heads at K = V = 64: 06's chain from v in 13 */
};
enum { TENSOR_CORE_SHAPES = sizeof tensor_core_shapes / sizeof tensor_core_shapes[0] };

/* _i: (shape, with or without h0) */
START_TEST(gpu_backward_tensor_cores_over_shapes)
{
    const test_shape shape = tensor_core_shapes[_i % TENSOR_CORE_SHAPES];
    const int with_h0 = _i / TENSOR_CORE_SHAPES;
    gdn_problem p = test_problem(shape, with_h0, 5400 + _i);
    char what[128];
    test_describe_shape(what, sizeof what, shape, with_h0);
    check_tensor_cores(&p, 5400 + _i, what);
    gdn_problem_free(&p);
}
END_TEST

/* _i < 3: the extreme gates (a tenth of the gates -1e4; g = 0 throughout; beta exactly 0 or 1
 * with g -1e4 or 0) at K = 64, V = 128 over four chunks; then the edge cases of test_support.c
 * but the first. That one, g = 0 over 65536 tokens with K = V = 4, is outside what bf16 products
 * reach, as for stage 06 (test_tensor_core_stage.c): a 4 x 4 state that never forgets averages
 * no rounding away. */
START_TEST(gpu_backward_tensor_cores_extremes)
{
    gdn_problem p;
    const char *name;
    if (_i < 3) {
        p = test_problem((test_shape){2, 230, 3, 64, 128}, 1, 5500 + _i);
        test_set_extreme_gates(&p, _i, 5500 + (uint64_t)_i);
        name = test_extreme_gate_names[_i];
    } else {
        ck_assert_str_eq(test_edge_case_names[0], "g = 0 (no decay) over T = 65536"); /* the one left out */
        p = test_edge_case(_i - 2, 5500 + _i);
        name = test_edge_case_names[_i - 2];
    }
    check_tensor_cores(&p, 5500 + _i, name);
    gdn_problem_free(&p);
}
END_TEST

/* beta = 0 and no h0: nothing is ever written, so S = 0, and o, ht, dq, dk, dv and dg are exactly
 * 0 (every product meets a zero operand, no poison or padding leaks in); dbeta is not, and is
 * checked against the oracle */
START_TEST(gpu_backward_tensor_cores_exact_zeros) /* _i: 11, 12, then 13 */
{
    const gdn_backward_stage *stage = _i == 0 ? &backward_tensor_cores_stage : _i == 1 ? &backward_fused_stage : &backward_states_stage;
    gdn_problem p = test_problem((test_shape){2, 150, 3, 64, 72}, 0, 5600);
    for (size_t i = 0; i < gdn_tokens(&p); i++)
        p.beta[i] = 0;
    gdn_problem_round_to_bf16(&p);
    gdn_cotangents c;
    ck_assert_int_eq(gdn_cotangents_alloc(&c, &p), 0);
    gdn_cotangents_generate(&c, &p, 5600);
    test_backward_result b = test_run_backward(stage, &p, &c, 0);
    const real_t *zeros[6] = {b.r.o, b.r.ht, b.g.dq, b.g.dk, b.g.dv, b.g.dg};
    const size_t counts[6] = {gdn_tokens(&p) * p.V, gdn_state_count(&p), gdn_tokens(&p) * p.K, gdn_tokens(&p) * p.K,
                              gdn_tokens(&p) * p.V, gdn_tokens(&p)};
    static const char *const names[6] = {"o", "ht", "dq", "dk", "dv", "dg"};
    for (int t = 0; t < 6; t++)
        for (size_t i = 0; i < counts[t]; i++)
            ck_assert_msg(zeros[t][i] == 0, "%s: %s[%zu] = %g, not 0", stage->name, names[t], i, (double)zeros[t][i]);
    const size_t o_count = gdn_tokens(&p) * p.V;
    double *o = malloc((o_count + gdn_state_count(&p)) * sizeof *o);
    gdn_gradients_f64 reference;
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(gdn_gradients_f64_alloc(&reference, &p), 0);
    ck_assert_int_eq(gdn_backward_oracle(&p, &c, o, o + o_count, &reference), 0);
    double norm = 0;
    for (size_t i = 0; i < gdn_tokens(&p); i++)
        norm += reference.dbeta[i] * reference.dbeta[i];
    ck_assert_msg(norm > 1, "dbeta is not zero where beta is: |dbeta|^2 = %g", norm);
    assert_close(gdn_compare_representable(b.g.dbeta, reference.dbeta, gdn_tokens(&p)),
                 gdn_backward_tolerance(stage, "dbeta", 0), "dbeta with beta = 0");
    gdn_gradients_f64_free(&reference);
    free(o);
    test_backward_result_free(&b);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

/* _i: a chunk other than 64 (32, then 128), K = 129, V = 129: refused by the library call with one
 * line naming the value; 4: the binary refuses --chunk 32 the same way, exit status non-zero and
 * no result line; 5: the binary's own check against the oracle, each tensor within its bound */
START_TEST(gpu_backward_tensor_cores_refuses_bad_sizes) /* _i: six cases of 11, then of 12, then of 13 */
{
    const gdn_backward_stage *stage = _i < 6 ? &backward_tensor_cores_stage : _i < 12 ? &backward_fused_stage : &backward_states_stage;
    const int j = _i % 6;
    if (j >= 4) {
        char out[4096], err[4096];
        const char *arguments = j == 4 ? "--B 1 --T 100 --H 2 --K 64 --V 64 --chunk 32 --reps 1 --check-against oracle"
                                        : "--B 1 --T 200 --H 2 --K 64 --V 96 --h0 --reps 1 --check-against oracle";
        const int status = test_run_program("", stage->name, arguments, out, sizeof out, err, sizeof err);
        if (j == 4)
            test_assert_refused(status, out, err, "--chunk 32");
        else {
            ck_assert_msg(status == 0, "%s", err);
            ck_assert_msg(test_read_field(out, "err_oracle=") < GDN_TOLERANCE_BF16_BACKWARD_GATES, "%s", out);
            ck_assert_msg(strstr(out, "chunk=64") != NULL, "%s", out);
        }
        return;
    }
    static const test_shape shapes[4] = {{1, 100, 1, 16, 16}, {1, 100, 1, 16, 16}, {1, 10, 1, 129, 8}, {1, 10, 1, 8, 129}};
    static const size_t chunks[4] = {32, 128, 0, 0};
    static const char *const messages[4] = {"--chunk 32", "--chunk 128", "K = 129", "V = 129"};
    gdn_problem p = test_problem(shapes[j], 0, 5700 + j);
    gdn_problem_round_to_bf16(&p);
    gdn_cotangents c;
    ck_assert_int_eq(gdn_cotangents_alloc(&c, &p), 0);
    gdn_cotangents_generate(&c, &p, 5700);
    gdn_settings s = {.reps = 1, .threads = 1, .chunk = chunks[j]};
    stage->resolve_options(&p, &s);
    gdn_result r;
    gdn_gradients g;
    ck_assert_int_ne(gdn_backward_run_once(stage, &p, &c, &s, &r, &g), 0);
    ck_assert_msg(strstr(gdn_last_error(), messages[j]) != NULL, "%s", gdn_last_error());
    ck_assert_msg(strchr(gdn_last_error(), '\n') == NULL, "more than one line: %s", gdn_last_error());
    gdn_result_free(&r);
    gdn_gradients_free(&g);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

/* The workspaces on the host (no GPU needed). 13's walk reads gamma in 06's workspace and its
 * Tm, S0 and Vnew from 06's layouts, so 13 needs stage 06's workspace and nothing more: exactly
 * that many bytes, and fewer than 12's (11's arrays for its passes), at every shape. */
START_TEST(backward_states_workspace_on_the_host)
{
    static const test_shape shapes[] = {{8, 4096, 16, 128, 128}, {1, 777, 5, 64, 100}, {3, 130, 2, 100, 64}};
    const test_shape shape = shapes[_i];
    const gdn_problem p = {.B = shape.B, .T = shape.T, .H = shape.H, .K = shape.K, .V = shape.V};
    gdn_settings s = {.reps = 1, .threads = 1}, forward_settings = {.reps = 1, .threads = 1};
    backward_states_stage.resolve_options(&p, &s);
    warp_specialized_stage.resolve_options(&p, &forward_settings);
    size_t states = 0, fused = 0, forward = 0;
    ck_assert_msg(backward_states_stage.device_workspace_bytes(&p, &s, &states) == 0, "%s", gdn_last_error());
    ck_assert_msg(backward_fused_stage.device_workspace_bytes(&p, &s, &fused) == 0, "%s", gdn_last_error());
    ck_assert_msg(warp_specialized_stage.device_workspace_bytes(&p, &forward_settings, &forward) == 0, "%s", gdn_last_error());
    ck_assert_msg(forward > 0, "06 at (%zu, %zu, %zu, %zu, %zu): no workspace", p.B, p.T, p.H, p.K, p.V);
    ck_assert_msg(states == forward, "13 at (%zu, %zu, %zu, %zu, %zu): %zu bytes, not 06's %zu", p.B, p.T, p.H, p.K, p.V, states,
                  forward);
    ck_assert_msg(states < fused, "13: %zu bytes, not fewer than 12's %zu", states, fused);
}
END_TEST

Suite *backward_workspace_suite(void)
{
    Suite *suite = suite_create("backward_workspace");
    TCase *cases = tcase_create("13_backward_states");
    tcase_add_loop_test(cases, backward_states_workspace_on_the_host, 0, 3);
    suite_add_tcase(suite, cases);
    return suite;
}

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
    TCase *tensor_cores = tcase_create("tensor_cores");
    tcase_set_timeout(tensor_cores, 300);
    tcase_add_loop_test(tensor_cores, gpu_backward_tensor_cores_over_shapes, 0, 2 * TENSOR_CORE_SHAPES);
    tcase_add_loop_test(tensor_cores, gpu_backward_tensor_cores_extremes, 0, 3 + test_edge_case_count - 1);
    tcase_add_loop_test(tensor_cores, gpu_backward_tensor_cores_exact_zeros, 0, 3);
    tcase_add_loop_test(tensor_cores, gpu_backward_tensor_cores_refuses_bad_sizes, 0, 18);
    suite_add_tcase(suite, tensor_cores);
    return suite;
}
