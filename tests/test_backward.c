/* test_backward.c -- the backward stages: the fp64 backward oracle against central finite
 * differences of the forward oracle; 09 against the oracle, grouped value heads and packed
 * batches included; 10 against 09 for every chunk size the forward allows and against the
 * oracle; extremes; the binaries' cotangent files; the bound each tensor is held to. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/backward_oracle.h"
#include "../common/npy.h"
#include "../common/oracle.h"
#include "../common/random.h"
#include "../steps/09_backward_loop/backward_loop.h"
#include "../steps/10_backward_chunked/backward_chunked.h"
#include "test_support.h"

/* Fresh cotangents for this case, N(0, 1) like the binaries draw them. */
static gdn_cotangents test_cotangents(const gdn_problem *p, int case_number)
{
    gdn_cotangents c;
    ck_assert_int_eq(gdn_cotangents_alloc(&c, p), 0);
    gdn_cotangents_generate(&c, p, 7919u * (uint64_t)case_number + 13u);
    return c;
}

/* o, ht and every gradient present within tolerance of the oracle's rounded to the build's
 * precision (a gradient below float's range is 0 in any float result), each named on failure. */
static void assert_matches_oracle(const gdn_problem *p, const gdn_cotangents *c, const test_backward_result *b, double tolerance,
                                  const char *what)
{
    const size_t o_count = gdn_tokens(p) * p->V, ht_count = gdn_state_count(p);
    double *o = malloc((o_count + ht_count) * sizeof *o);
    gdn_gradients_f64 reference;
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(gdn_gradients_f64_alloc(&reference, p), 0);
    ck_assert_int_eq(gdn_backward_oracle(p, c, o, o + o_count, &reference), 0);
    char name[160];
    snprintf(name, sizeof name, "%s: o", what);
    assert_close(gdn_compare_representable(b->r.o, o, o_count), tolerance, name);
    snprintf(name, sizeof name, "%s: ht", what);
    assert_close(gdn_compare_representable(b->r.ht, o + o_count, ht_count), tolerance, name);
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++) {
        gdn_tensor_shape s = gdn_gradient_shape(p, i);
        ck_assert_msg((gdn_gradient_tensor(&b->g, i) != NULL) == gdn_gradient_present(p, i), "%s: %s %s", what,
                      s.name, gdn_gradient_present(p, i) ? "missing" : "made without h0");
        if (!gdn_gradient_present(p, i))
            continue;
        snprintf(name, sizeof name, "%s: %s", what, s.name);
        assert_close(gdn_compare_representable(gdn_gradient_tensor(&b->g, i), gdn_gradient_f64_tensor(&reference, i),
                                               s.count),
                     tolerance, name);
    }
    gdn_gradients_f64_free(&reference);
    free(o);
}

/* The same against another stage's run (converted to double). */
static void assert_matches_run(const gdn_problem *p, const test_backward_result *b, const test_backward_result *reference,
                               double tolerance, const char *what)
{
    char name[160];
    for (int i = -2; i < GDN_GRADIENT_TENSORS; i++) {
        const real_t *x = i == -2 ? b->r.o : i == -1 ? b->r.ht : gdn_gradient_tensor(&b->g, i);
        const real_t *y = i == -2 ? reference->r.o : i == -1 ? reference->r.ht : gdn_gradient_tensor(&reference->g, i);
        const size_t count = i == -2 ? gdn_tokens(p) * p->V : i == -1 ? gdn_state_count(p) : gdn_gradient_shape(p, i).count;
        if (i >= 0 && !gdn_gradient_present(p, i))
            continue;
        double *y64 = malloc(count * sizeof *y64);
        ck_assert_ptr_nonnull(y64);
        for (size_t j = 0; j < count; j++)
            y64[j] = (double)y[j];
        snprintf(name, sizeof name, "%s: %s", what, i == -2 ? "o" : i == -1 ? "ht" : gdn_gradient_shape(p, i).name);
        assert_close(gdn_compare(x, y64, count), tolerance, name);
        free(y64);
    }
}

#ifdef GDN_DOUBLE
/* L = sum do . o + sum dht . ht by the forward oracle, in double */
static double oracle_loss(const gdn_problem *p, const gdn_cotangents *c, double *o, double *ht)
{
    ck_assert_int_eq(gdn_oracle(p, o, ht), 0);
    double loss = 0;
    for (size_t i = 0; i < gdn_tokens(p) * p->V; i++)
        loss += (double)c->d_o[i] * o[i];
    for (size_t i = 0; i < gdn_state_count(p); i++)
        loss += (double)c->dht[i] * ht[i];
    return loss;
}

/* The backward oracle, and stage 09's double build, are the gradient of that loss: each input
 * nudged by +-1e-6 in turn, the central difference (L+ - L-) / 2e-6 (error: 1e-12 from the third
 * derivative, 1e-10 |L| from rounding) matches each to 1e-6 relative over each tensor. Shapes: a
 * few tokens, and 70 tokens, one past the stretch of 64 kept states; three value heads on one
 * key head; a packed batch of 3, 1 and 5 tokens with two value heads a key head; gates and
 * betas drawn, and h0. _i: the shape, then the oracle (0-3) or stage 09 (4-7). */
START_TEST(backward_oracle_is_the_gradient)
{
    static const size_t lengths[3] = {3, 1, 5};
    static const gdn_layout layouts[] = {
        {.B = 1, .T = 9, .H = 2, .K = 3, .V = 4, .with_h0 = 1},
        {.B = 1, .T = 70, .H = 1, .K = 4, .V = 3, .with_h0 = 1},
        {.B = 1, .T = 9, .H = 1, .HV = 3, .K = 3, .V = 4, .with_h0 = 1},
        {.B = 1, .T = 9, .H = 2, .HV = 4, .K = 3, .V = 2, .lengths = lengths, .sequences = 3, .with_h0 = 1}};
    gdn_problem p = test_layout_problem(&layouts[_i % 4], 2000 + _i);
    gdn_cotangents c = test_cotangents(&p, 2000 + _i);
    const size_t o_count = gdn_tokens(&p) * p.V, ht_count = gdn_state_count(&p);
    double *o = malloc((o_count + ht_count) * sizeof *o);
    double *finite = malloc(gdn_tokens(&p) * (p.K + p.V) * sizeof *finite + ht_count * sizeof *finite);
    gdn_gradients_f64 g;
    ck_assert(o && finite);
    ck_assert_int_eq(gdn_gradients_f64_alloc(&g, &p), 0);
    ck_assert_int_eq(gdn_backward_oracle(&p, &c, o, o + o_count, &g), 0);
    test_backward_result loop = test_run_backward(&backward_loop_stage, &p, &c, 0);
    const char *checked = _i < 4 ? "the oracle's" : "09's";
    real_t *inputs[GDN_GRADIENT_TENSORS] = {p.q, p.k, p.v, p.g, p.beta, p.h0};
    for (int t = 0; t < GDN_GRADIENT_TENSORS; t++) {
        gdn_tensor_shape s = gdn_gradient_shape(&p, t);
        for (size_t i = 0; i < s.count; i++) {
            const real_t x = inputs[t][i], h = 1e-6;
            inputs[t][i] = x + h;
            const double up = oracle_loss(&p, &c, o, o + o_count);
            inputs[t][i] = x - h;
            const double down = oracle_loss(&p, &c, o, o + o_count);
            inputs[t][i] = x;
            finite[i] = (up - down) / (2 * h);
        }
        const double *gradient = _i < 4 ? gdn_gradient_f64_tensor(&g, t) : gdn_gradient_tensor(&loop.g, t);
        gdn_difference d = gdn_compare(finite, gradient, s.count);
        ck_assert_msg(gdn_within(d, 1e-6), "%s: finite differences %.3e from %s gradient", s.name, d.relative,
                      checked);
    }
    test_backward_result_free(&loop);
    gdn_gradients_f64_free(&g);
    free(o);
    free(finite);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST
#endif

/* 09 against the oracle over the shape grid, with and without h0 */
START_TEST(backward_loop_equals_oracle_over_grid)
{
    const int with_h0 = _i >= test_grid_count;
    gdn_problem p = test_problem(test_grid[_i % test_grid_count], with_h0, 2100 + _i);
    gdn_cotangents c = test_cotangents(&p, 2100 + _i);
    test_backward_result b = test_run_backward(&backward_loop_stage, &p, &c, 0);
    char what[128];
    test_describe_shape(what, sizeof what, test_grid[_i % test_grid_count], with_h0);
    assert_matches_oracle(&p, &c, &b, GDN_TOLERANCE_BACKWARD_VS_ORACLE, what);
    test_backward_result_free(&b);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

/* 10 against 09 and the oracle for every chunk size the forward allows (1 to 128): 130 tokens,
 * so that the last chunk is partial for every size that does not divide 130 */
START_TEST(backward_chunked_equals_loop_every_chunk)
{
    const size_t chunk = (size_t)_i + 1;
    gdn_problem p = test_problem((test_shape){1, 130, 2, 8, 6}, _i % 2, 2200 + _i);
    gdn_cotangents c = test_cotangents(&p, 2200 + _i);
    test_backward_result loop = test_run_backward(&backward_loop_stage, &p, &c, 0);
    test_backward_result chunked = test_run_backward(&backward_chunked_stage, &p, &c, chunk);
    char what[64];
    snprintf(what, sizeof what, "10 (chunk %zu) vs 09", chunk);
    assert_matches_run(&p, &chunked, &loop, GDN_TOLERANCE_BACKWARD_VS_STAGE, what);
    snprintf(what, sizeof what, "10 (chunk %zu) vs oracle", chunk);
    assert_matches_oracle(&p, &c, &chunked, GDN_TOLERANCE_BACKWARD_VS_ORACLE, what);
    test_backward_result_free(&loop);
    test_backward_result_free(&chunked);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

/* 10 over the grid at chunks 16 and 64, K != V and h0 included */
START_TEST(backward_chunked_equals_oracle_over_grid)
{
    const int with_h0 = _i % 2, shape = _i / 2 % test_grid_count;
    const size_t chunk = _i / (2 * test_grid_count) ? 64 : 16;
    gdn_problem p = test_problem(test_grid[shape], with_h0, 2400 + _i);
    gdn_cotangents c = test_cotangents(&p, 2400 + _i);
    test_backward_result b = test_run_backward(&backward_chunked_stage, &p, &c, chunk);
    char what[128];
    test_describe_shape(what, sizeof what, test_grid[shape], with_h0);
    assert_matches_oracle(&p, &c, &b, GDN_TOLERANCE_BACKWARD_VS_ORACLE, what);
    test_backward_result_free(&b);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

/* Extreme gates (a tenth at -1e4, none at all, beta 0 or 1 with g -1e4 or 0) over 300 tokens, and
 * the edge cases every forward stage runs (g = 0 over 65536 tokens, zero keys, K or V of 1, ...):
 * 09 and 10 (chunks 16 and 64) against the oracle */
START_TEST(backward_extremes_equal_oracle)
{
    const int extremes = 3, which = _i % (extremes + test_edge_case_count);
    gdn_problem p;
    const char *name;
    if (which < extremes) {
        p = test_problem((test_shape){1, 300, 2, 16, 12}, 1, 2500 + _i);
        test_set_extreme_gates(&p, which, 2500 + (uint64_t)_i);
        name = test_extreme_gate_names[which];
    } else {
        p = test_edge_case(which - extremes, 2500 + _i);
        name = test_edge_case_names[which - extremes];
    }
    gdn_cotangents c = test_cotangents(&p, 2500 + _i);
    const gdn_backward_stage *stage = _i < extremes + test_edge_case_count ? &backward_loop_stage : &backward_chunked_stage;
    const size_t chunk = _i >= 2 * (extremes + test_edge_case_count) ? 64 : 16;
    test_backward_result b = test_run_backward(stage, &p, &c, chunk);
    char what[160];
    snprintf(what, sizeof what, "%s (chunk %zu): %s", stage->name, chunk, name);
    assert_matches_oracle(&p, &c, &b, GDN_TOLERANCE_BACKWARD_VS_ORACLE, what);
    test_backward_result_free(&b);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

/* Gates far past e^g = 0 (a few of -1e30, one -inf): 10's chunk sums take them as -1000
 * (real.h, gdn_summed_gate), exact; summed as they are they would swallow the later gates of
 * their chunk, or make NaN. Against the oracle, chunks 16 and 64. */
START_TEST(backward_gates_past_the_sums_reach)
{
    gdn_problem p = test_problem((test_shape){1, 150, 2, 16, 12}, 1, 2550 + _i);
    for (size_t i = 0; i < gdn_tokens(&p); i++)
        if (random_uniform(2551 + (uint64_t)_i, STREAM_TEST, i) < 0.05)
            p.g[i] = (real_t)-1e30;
    p.g[gdn_tokens(&p) / 2] = -INFINITY;
    gdn_cotangents c = test_cotangents(&p, 2550 + _i);
    test_backward_result b = test_run_backward(&backward_chunked_stage, &p, &c, _i ? 16 : 64);
    assert_matches_oracle(&p, &c, &b, GDN_TOLERANCE_BACKWARD_VS_ORACLE, "10: gates of -1e30 and -inf");
    test_backward_result_free(&b);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

/* A problem and its cotangents in a folder, as bin/make_problem writes them. */
static void save_backward_problem(const gdn_problem *p, const gdn_cotangents *c, const char *dir)
{
    ck_assert_int_eq(gdn_problem_save(p, dir), 0);
    ck_assert_int_eq(gdn_cotangents_save(c, p, dir), 0);
}

/* --in/--out: bin/09 writes o, ht and every gradient equal bit for bit to the in-process run, and
 * dh0.npy only with h0; bin/10 checked against that folder and the oracle passes. */
START_TEST(backward_binaries_round_trip)
{
    const int with_h0 = _i;
    gdn_problem p = test_problem((test_shape){2, 37, 2, 8, 6}, with_h0, 2600 + _i);
    gdn_cotangents c = test_cotangents(&p, 2600 + _i);
    char in[64], out[64], arguments[512], text[2048], errors[2048], path[256];
    test_make_temp_dir(in, sizeof in);
    test_make_temp_dir(out, sizeof out);
    save_backward_problem(&p, &c, in);
    snprintf(arguments, sizeof arguments, "--in %s --out %s --reps 1 --threads 2 --check-against oracle", in, out);
    int status = test_run_program("", "09_backward_loop", arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%s", errors);
    ck_assert(test_read_field(text, "err_oracle=") <= GDN_TOLERANCE_BACKWARD_VS_ORACLE);
    test_backward_result b = test_run_backward(&backward_loop_stage, &p, &c, 0);
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++) {
        gdn_tensor_shape s = gdn_gradient_shape(&p, i);
        snprintf(path, sizeof path, "%s/%s.npy", out, s.name);
        if (!gdn_gradient_present(&p, i)) {
            ck_assert_msg(access(path, F_OK) != 0, "%s written without h0", path);
            continue;
        }
        npy_array a;
        ck_assert_msg(npy_read(path, &a) == 0, "%s", gdn_last_error());
        ck_assert_uint_eq(a.count, s.count);
        const real_t *x = gdn_gradient_tensor(&b.g, i);
        for (size_t j = 0; j < a.count; j++)
            ck_assert_msg(a.data[j] == (double)x[j], "%s[%zu]: file %.9g, in process %.9g", s.name, j, a.data[j], x[j]);
        npy_free(&a);
    }
    gdn_result files = test_read_outputs(out, &p);
    for (size_t j = 0; j < gdn_tokens(&p) * p.V; j++)
        ck_assert_msg(files.o[j] == b.r.o[j], "o[%zu]: file %.9g, in process %.9g", j, files.o[j], b.r.o[j]);
    for (size_t j = 0; j < gdn_state_count(&p); j++)
        ck_assert_msg(files.ht[j] == b.r.ht[j], "ht[%zu]: file %.9g, in process %.9g", j, files.ht[j], b.r.ht[j]);
    gdn_result_free(&files);
    snprintf(arguments, sizeof arguments, "--in %s --check-against %s --check-against oracle --reps 1 --chunk 16", in,
             out);
    status = test_run_program("", "10_backward_chunked", arguments, text, sizeof text, errors, sizeof errors);
    ck_assert_msg(status == 0, "%s", errors);
    ck_assert(test_read_field(text, "err_ref=") <= GDN_TOLERANCE_BACKWARD_VS_STAGE);
    ck_assert(test_read_field(text, "err_oracle=") <= GDN_TOLERANCE_BACKWARD_VS_ORACLE);
    test_backward_result_free(&b);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
    test_remove_dir(in);
    test_remove_dir(out);
}
END_TEST

/* Bad cotangent files: one line naming the file and the fault, exit status 1, nothing written */
START_TEST(backward_binaries_refuse_bad_cotangents)
{
    static const char *const messages[] = {
        "do.npy: cannot open: No such file or directory", "dht.npy: shape (1, 2, 4, 5) does not match the problem's (1, 2, 4, 4)",
        "do.npy: value nan at flat index 3 is not finite",
        "do.npy: value 1e+300 at flat index 5 is beyond float's range"}; /* the last in the float build only */
    gdn_problem p = test_problem((test_shape){1, 8, 2, 4, 4}, 0, 2700 + _i);
    gdn_cotangents c = test_cotangents(&p, 2700 + _i);
    char in[64], arguments[256], text[1024], errors[1024], path[160];
    test_make_temp_dir(in, sizeof in);
    save_backward_problem(&p, &c, in);
    if (_i == 0) {
        snprintf(path, sizeof path, "%s/do.npy", in);
        ck_assert_int_eq(remove(path), 0);
    } else if (_i == 1) {
        snprintf(path, sizeof path, "%s/dht.npy", in);
        size_t wrong[4] = {1, 2, 4, 5};
        real_t values[40] = {0};
        ck_assert_int_eq(npy_write(path, values, 4, wrong), 0);
    } else if (_i == 2) {
        c.d_o[3] = (real_t)NAN;
        ck_assert_int_eq(gdn_cotangents_save(&c, &p, in), 0);
    } else { /* a float64 do.npy past float's range, as the inputs' check names it */
        double values[64] = {0};
        values[5] = 1e300;
        snprintf(path, sizeof path, "%s/do.npy", in);
        test_write_npy_bytes(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 8, 2, 4), }", values, sizeof values);
    }
    snprintf(arguments, sizeof arguments, "--in %s --reps 1 --out %s/out", in, in);
    int status = test_run_program("", "09_backward_loop", arguments, text, sizeof text, errors, sizeof errors);
    test_assert_refused(status, text, errors, messages[_i]);
    snprintf(path, sizeof path, "%s/out", in);
    ck_assert_msg(access(path, F_OK) != 0, "%s written", path);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
    test_remove_dir(in);
}
END_TEST

/* A save that fails part way leaves no folder that looks whole: where dq.npy cannot be written
 * (a folder of that name is in the way), o.npy and ht.npy, written before it, are removed too. */
START_TEST(backward_failed_save_leaves_no_outputs)
{
    gdn_problem p = test_problem((test_shape){1, 8, 2, 4, 4}, 0, 2750);
    gdn_cotangents c = test_cotangents(&p, 2750);
    char in[64], arguments[256], text[1024], errors[1024], path[160];
    test_make_temp_dir(in, sizeof in);
    save_backward_problem(&p, &c, in);
    snprintf(path, sizeof path, "%s/out", in);
    ck_assert_int_eq(gdn_make_dir(path), 0);
    snprintf(path, sizeof path, "%s/out/dq.npy", in);
    ck_assert_int_eq(gdn_make_dir(path), 0);
    snprintf(arguments, sizeof arguments, "--in %s --reps 1 --out %s/out", in, in);
    int status = test_run_program("", "09_backward_loop", arguments, text, sizeof text, errors, sizeof errors);
    test_assert_refused(status, text, errors, "/out/dq.npy: cannot create");
    const char *names[3] = {"o.npy", "ht.npy", "dk.npy"};
    snprintf(path, sizeof path, "%s/out", in);
    test_assert_not_written(path, names, 3, "a failed save");
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
    test_remove_dir(in);
}
END_TEST

/* Grouped value heads read one key head: the backward oracle gives, bit for bit, what it gives
 * on the plain problem whose q and k are repeated for every value head, dq and dk summed over
 * each key head's value heads in order. _i: ratio 2-4, with and without h0. */
START_TEST(backward_oracle_grouped_equals_keys_repeated)
{
    const size_t ratio = 2 + (size_t)_i % 3, H = 2;
    const gdn_layout grouped = {.B = 2, .T = 70, .H = H, .HV = H * ratio, .K = 5, .V = 4, .with_h0 = _i / 3};
    const gdn_layout repeated = {.B = 2, .T = 70, .H = H * ratio, .K = 5, .V = 4, .with_h0 = _i / 3};
    gdn_problem p = test_layout_problem(&grouped, 2600 + _i), plain;
    ck_assert_int_eq(gdn_problem_alloc_layout(&plain, &repeated), 0);
    const size_t HV = p.HV, K = p.K, positions = p.B * p.T;
    for (size_t position = 0; position < positions; position++)
        for (size_t h = 0; h < HV; h++) { /* FLA's rule written out: value head h reads key head h / ratio */
            memcpy(plain.q + (position * HV + h) * K, p.q + (position * H + h / ratio) * K, K * sizeof(real_t));
            memcpy(plain.k + (position * HV + h) * K, p.k + (position * H + h / ratio) * K, K * sizeof(real_t));
        }
    memcpy(plain.v, p.v, gdn_tokens(&p) * p.V * sizeof(real_t));
    memcpy(plain.g, p.g, gdn_tokens(&p) * sizeof(real_t));
    memcpy(plain.beta, p.beta, gdn_tokens(&p) * sizeof(real_t));
    if (p.h0)
        memcpy(plain.h0, p.h0, gdn_state_count(&p) * sizeof(real_t));
    gdn_cotangents c = test_cotangents(&p, 2600 + _i);
    const size_t o_count = gdn_tokens(&p) * p.V, ht_count = gdn_state_count(&p);
    double *out = malloc(2 * (o_count + ht_count) * sizeof *out), *plain_out = out + o_count + ht_count;
    gdn_gradients_f64 g, plain_g;
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(gdn_gradients_f64_alloc(&g, &p), 0);
    ck_assert_int_eq(gdn_gradients_f64_alloc(&plain_g, &plain), 0);
    ck_assert_int_eq(gdn_backward_oracle(&p, &c, out, out + o_count, &g), 0);
    ck_assert_int_eq(gdn_backward_oracle(&plain, &c, plain_out, plain_out + o_count, &plain_g), 0);
    ck_assert_msg(memcmp(out, plain_out, (o_count + ht_count) * sizeof *out) == 0, "o or ht differ");
    for (int t = 2; t < GDN_GRADIENT_TENSORS; t++) /* dv, dg, dbeta, dh0: one value head each */
        if (gdn_gradient_present(&p, t))
            ck_assert_msg(memcmp(gdn_gradient_f64_tensor(&g, t), gdn_gradient_f64_tensor(&plain_g, t),
                                 gdn_gradient_shape(&p, t).count * sizeof(double)) == 0,
                          "%s differs", gdn_gradient_shape(&p, t).name);
    for (size_t position = 0; position < positions; position++)
        for (size_t key_head = 0; key_head < H; key_head++)
            for (size_t i = 0; i < K; i++) {
                double dq = 0.0, dk = 0.0;
                for (size_t h = key_head * ratio; h < (key_head + 1) * ratio; h++)
                    dq += plain_g.dq[(position * HV + h) * K + i], dk += plain_g.dk[(position * HV + h) * K + i];
                ck_assert(dq == g.dq[(position * H + key_head) * K + i] && dk == g.dk[(position * H + key_head) * K + i]);
            }
    ck_assert(g.dq[0] != 0.0 && isfinite(g.dq[0]));
    gdn_gradients_f64_free(&g);
    gdn_gradients_f64_free(&plain_g);
    free(out);
    gdn_cotangents_free(&c);
    gdn_problem_free(&plain);
    gdn_problem_free(&p);
}
END_TEST

/* Stage 09 against the oracle on grouped value heads and packed batches: HV / H from 1 to 4,
 * lengths around the stretch of 64 kept states and one long sequence beside short ones, with and
 * without h0. _i: 16 cases. */
START_TEST(backward_loop_layouts_equal_oracle)
{
    static const size_t around[4] = {1, 63, 64, 65}, mixed[6] = {200, 1, 7, 33, 2, 70};
    const size_t ratio = 1 + (size_t)_i % 4;
    gdn_layout l = {.B = 1, .T = 193, .H = 2, .HV = 2 * ratio, .K = 8, .V = 6, .lengths = around, .sequences = 4,
                    .with_h0 = _i / 8};
    if (_i / 4 % 2)
        l.T = 313, l.lengths = mixed, l.sequences = 6;
    gdn_problem p = test_layout_problem(&l, 2700 + _i);
    gdn_cotangents c = test_cotangents(&p, 2700 + _i);
    test_backward_result loop = test_run_backward(&backward_loop_stage, &p, &c, 0);
    char what[80];
    snprintf(what, sizeof what, "HV/H=%zu, %zu sequences, h0=%d", ratio, l.sequences, l.with_h0);
    assert_matches_oracle(&p, &c, &loop, GDN_TOLERANCE_BACKWARD_VS_ORACLE, what);
    test_backward_result_free(&loop);
    gdn_cotangents_free(&c);
    gdn_problem_free(&p);
}
END_TEST

/* The bound of each tensor (gdn_backward_tolerance): one for all of a float or double stage,
 * FLA's per-tensor bounds for a stage on bf16 inputs, against the oracle and against a stage */
START_TEST(backward_tolerances_per_tensor)
{
    static const char *const names[] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    static const double bf16_bounds[] = {GDN_TOLERANCE_BF16_BACKWARD_O,    GDN_TOLERANCE_BF16_BACKWARD_O,
                                         GDN_TOLERANCE_BF16_BACKWARD_GRAD, GDN_TOLERANCE_BF16_BACKWARD_GRAD,
                                         GDN_TOLERANCE_BF16_BACKWARD_GRAD, GDN_TOLERANCE_BF16_BACKWARD_GATES,
                                         GDN_TOLERANCE_BF16_BACKWARD_GATES, GDN_TOLERANCE_BF16_BACKWARD_GRAD};
    const gdn_backward_stage bf16_stage = {.name = "bf16", .bf16_inputs = 1};
    ck_assert(GDN_TOLERANCE_BF16_BACKWARD_O == 5e-3 && GDN_TOLERANCE_BF16_BACKWARD_GRAD == 8e-3 &&
              GDN_TOLERANCE_BF16_BACKWARD_GATES == 2e-2); /* FLA's test_chunk (common/tolerances.h) */
    for (int i = 0; i < 8; i++)
        for (int against_stage = 0; against_stage <= 1; against_stage++) {
            ck_assert_double_eq(gdn_backward_tolerance(&backward_chunked_stage, names[i], against_stage),
                                against_stage ? GDN_TOLERANCE_BACKWARD_VS_STAGE : GDN_TOLERANCE_BACKWARD_VS_ORACLE);
            ck_assert_double_eq(gdn_backward_tolerance(&bf16_stage, names[i], against_stage), bf16_bounds[i]);
        }
}
END_TEST

Suite *backward_suite(void)
{
    Suite *suite = suite_create("backward");
    TCase *oracle = tcase_create("oracle");
    tcase_set_timeout(oracle, 120);
#ifdef GDN_DOUBLE /* finite differences need the double build's inputs: a float input nudged by 1e-6 rounds */
    tcase_add_loop_test(oracle, backward_oracle_is_the_gradient, 0, 8);
#endif
    tcase_add_loop_test(oracle, backward_loop_equals_oracle_over_grid, 0, 2 * test_grid_count);
    tcase_add_loop_test(oracle, backward_oracle_grouped_equals_keys_repeated, 0, 6);
    tcase_add_loop_test(oracle, backward_loop_layouts_equal_oracle, 0, 16);
    tcase_add_test(oracle, backward_tolerances_per_tensor);
    suite_add_tcase(suite, oracle);
    TCase *chunked = tcase_create("chunked");
    tcase_set_timeout(chunked, 120);
    tcase_add_loop_test(chunked, backward_chunked_equals_loop_every_chunk, 0, 128);
    tcase_add_loop_test(chunked, backward_chunked_equals_oracle_over_grid, 0, 4 * test_grid_count);
    tcase_add_loop_test(chunked, backward_extremes_equal_oracle, 0, 3 * (3 + test_edge_case_count));
    tcase_add_loop_test(chunked, backward_gates_past_the_sums_reach, 0, 2);
    suite_add_tcase(suite, chunked);
    TCase *binaries = tcase_create("binaries");
    tcase_set_timeout(binaries, 60);
    tcase_add_loop_test(binaries, backward_binaries_round_trip, 0, 2);
    tcase_add_loop_test(binaries, backward_binaries_refuse_bad_cotangents, 0, sizeof(real_t) == 4 ? 4 : 3);
    tcase_add_test(binaries, backward_failed_save_leaves_no_outputs);
    suite_add_tcase(suite, binaries);
    return suite;
}
