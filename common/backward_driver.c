/* backward_driver.c -- the driver every backward stage binary runs (see backward_stage.h).
 *
 * The forward driver's steps (stage.c), with the backward's tensors: the same command line and
 * problem (gdn_stage_setup), and the cotangents do and dht are read
 * from --in's folder or drawn from the seed; one warm-up run, --reps timed runs and their
 * median, one more run whose outputs are checked and saved, each checked run's outputs poisoned
 * with NaN first; o, ht and every gradient must be finite before anything is compared or
 * written; --check-against compares o, ht and every gradient (the worst relative error is reported
 * and judged, and named); --out writes them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_oracle.h"
#include "compare.h"
#include "error.h"
#include "npy.h"
#include "backward_stage.h"
#include "timing.h"
#include "tolerances.h"

/* The host runner: CPU stages compute in place in r and g; the clock is read around backward. */
typedef struct {
    const gdn_backward_stage *stage;
    const gdn_problem *p;
    const gdn_cotangents *c;
    const gdn_settings *s;
} host_context;

static int host_open(const gdn_backward_stage *stage, const gdn_problem *p, const gdn_cotangents *c,
                     const gdn_settings *s, void **context)
{
    if (!stage->backward)
        return gdn_set_error("%s has no CPU backward pass", stage->name);
    host_context *h = calloc(1, sizeof *h);
    if (!h)
        return gdn_set_error("out of memory");
    *h = (host_context){stage, p, c, s};
    *context = h;
    return 0;
}

static int host_run(void *context, int poisoned, gdn_result *r, gdn_gradients *g, double *seconds)
{
    host_context *h = context;
    if (poisoned) {
        gdn_result_poison(r, h->p);
        gdn_gradients_poison(g, h->p);
    }
    const double start = gdn_now_seconds();
    const int status = h->stage->backward(h->p, h->c, h->s, r, g);
    *seconds = gdn_now_seconds() - start;
    return status;
}

static void host_close(void *context) { free(context); }

static const gdn_backward_runner host_runner = {host_open, host_run, host_close};

int gdn_backward_run_once(const gdn_backward_stage *stage, const gdn_problem *p, const gdn_cotangents *c,
                          const gdn_settings *s, gdn_result *r, gdn_gradients *g)
{
    const gdn_backward_runner *runner = stage->runner ? stage->runner : &host_runner;
    void *context = NULL;
    double seconds;
    if (gdn_result_alloc(r, p))
        return -1;
    if (gdn_gradients_alloc(g, p)) {
        gdn_result_free(r);
        return -1;
    }
    if (runner->open(stage, p, c, s, &context)) {
        if (context)
            runner->close(context);
        return -1;
    }
    const int status = runner->run(context, 1, r, g, &seconds);
    runner->close(context);
    return status;
}

double gdn_backward_tolerance(const gdn_backward_stage *stage, const char *tensor, int against_stage)
{
    if (!stage->bf16_inputs)
        return against_stage ? GDN_TOLERANCE_BACKWARD_VS_STAGE : GDN_TOLERANCE_BACKWARD_VS_ORACLE;
    if (!strcmp(tensor, "o") || !strcmp(tensor, "ht"))
        return GDN_TOLERANCE_BF16_BACKWARD_O;
    if (!strcmp(tensor, "dg") || !strcmp(tensor, "dbeta"))
        return GDN_TOLERANCE_BF16_BACKWARD_GATES;
    return GDN_TOLERANCE_BF16_BACKWARD_GRAD;
}

/* The worst of the comparisons (o, ht, each gradient), and which tensor it is: the one furthest
 * past its bound, as a fraction of it (one bound for all: the largest relative error). */
typedef struct {
    gdn_difference d;      /* the worst tensor's */
    const char *worst;
    double tolerance;      /* its bound */
    size_t non_finite;     /* over every tensor */
    const gdn_backward_stage *stage;
    int against_stage;
} backward_difference;

static void take_worse(backward_difference *b, gdn_difference d, const char *name)
{
    const double tolerance = gdn_backward_tolerance(b->stage, name, b->against_stage);
    b->non_finite += d.non_finite;
    /* a NaN or Inf first, then the larger relative error for its bound */
    if (!b->worst || (d.non_finite && !b->d.non_finite) ||
        (!b->d.non_finite && d.relative / tolerance > b->d.relative / b->tolerance))
        b->worst = name, b->d = d, b->tolerance = tolerance;
}

/* against the fp64 backward oracle */
static int against_oracle(const gdn_problem *p, const gdn_cotangents *c, const gdn_result *r, const gdn_gradients *g,
                          backward_difference *b)
{
    const size_t o_count = gdn_tokens(p) * p->V, ht_count = gdn_state_count(p);
    double *o = malloc((o_count + ht_count) * sizeof *o);
    gdn_gradients_f64 reference;
    if (!o)
        return gdn_set_error("out of memory for the backward oracle's o and ht");
    if (gdn_gradients_f64_alloc(&reference, p)) {
        free(o);
        return -1;
    }
    int status = gdn_backward_oracle(p, c, o, o + o_count, &reference);
    if (status == 0) {
        take_worse(b, gdn_compare_representable(r->o, o, o_count), "o");
        take_worse(b, gdn_compare_representable(r->ht, o + o_count, ht_count), "ht");
        for (int i = 0; i < GDN_GRADIENT_TENSORS; i++)
            if (gdn_gradient_present(p, i))
                take_worse(b, gdn_compare_representable(gdn_gradient_tensor(g, i), gdn_gradient_f64_tensor(&reference, i),
                                                        gdn_gradient_shape(p, i).count),
                           gdn_gradient_shape(p, i).name);
    }
    gdn_gradients_f64_free(&reference);
    free(o);
    return status;
}

/* against dir's o, ht and gradients, written by another backward stage's --out */
static int against_folder(const gdn_problem *p, const gdn_result *r, const gdn_gradients *g, const char *dir,
                          backward_difference *b)
{
    static const char *const names[2] = {"o", "ht"};
    for (int i = 0; i < 2 + GDN_GRADIENT_TENSORS; i++) {
        gdn_tensor_shape s = {names[i % 2], 4, {p->B, p->T, gdn_value_heads(p), p->V}, gdn_tokens(p) * p->V};
        const real_t *x = r->o;
        if (i == 1)
            s = (gdn_tensor_shape){"ht", 4, {gdn_sequences(p), gdn_value_heads(p), p->K, p->V}, gdn_state_count(p)},
            x = r->ht;
        if (i >= 2) {
            if (!gdn_gradient_present(p, i - 2))
                continue;
            s = gdn_gradient_shape(p, i - 2);
            x = gdn_gradient_tensor(g, i - 2);
        }
        char path[4096];
        npy_array a = {0};
        if (npy_path(path, sizeof path, dir, s.name) || npy_read_shaped(path, s.ndim, s.shape, s.name, &a))
            return -1;
        take_worse(b, gdn_compare(x, a.data, s.count), s.name);
        npy_free(&a);
    }
    return 0;
}

static int fail(const char *stage) { fprintf(stderr, "%s: error: %s\n", stage, gdn_last_error()); return 1; }

int gdn_backward_stage_main(int argc, char **argv, const gdn_backward_stage *stage)
{
    /* the command line and the problem as a forward stage has them, --help told of the cotangents */
    const gdn_stage as_forward = {.name = stage->name,
                                  .idea = stage->idea,
                                  .options = stage->options | GDN_OPTION_BACKWARD,
                                  .resolve_options = stage->resolve_options,
                                  .bf16_inputs = stage->bf16_inputs};
    gdn_settings settings;
    gdn_problem problem;
    const int setup = gdn_stage_setup(argc, argv, &as_forward, &settings, &problem);
    if (setup != 0)
        return setup > 0 ? 0 : 1;
    const gdn_settings *s = &settings;
    const gdn_problem *p = &problem;
    const gdn_backward_runner *runner = stage->runner ? stage->runner : &host_runner;
    void *context = NULL;
    gdn_cotangents c = {0};
    gdn_result r = {0};
    gdn_gradients g = {0};
    double *times = malloc((size_t)s->reps * sizeof *times);
    int status = 1;
    char checks[512] = "";
    size_t used = 0;
    if (!times) {
        gdn_set_error("out of memory");
        goto failed;
    }
    /* the cotangents and gradients take as much again as the problem and its outputs: one line
       here, not the kernel's out-of-memory kill when their pages are first touched */
    size_t problem_bytes;
    static const size_t one_length = 1; /* any non-NULL lengths: only their count is read */
    const gdn_layout sizes = {.B = p->B, .T = p->T, .H = p->H, .K = p->K, .V = p->V, .HV = gdn_value_heads(p),
                              .with_h0 = p->h0 != NULL, .lengths = p->offsets ? &one_length : NULL,
                              .sequences = p->sequences};
    if (gdn_layout_bytes(&sizes, &problem_bytes) ||
        gdn_memory_check(problem_bytes > SIZE_MAX / 2 ? SIZE_MAX : 2 * problem_bytes,
                         "the problem, its outputs, cotangents and gradients"))
        goto failed;
    if (s->in_dir ? gdn_cotangents_load(&c, p, s->in_dir, s->check_inputs) : gdn_cotangents_alloc(&c, p))
        goto failed;
    if (!s->in_dir)
        gdn_cotangents_generate(&c, p, s->seed);
    if (gdn_result_alloc(&r, p) || gdn_gradients_alloc(&g, p) || runner->open(stage, p, &c, s, &context))
        goto failed;
    /* warm-up (poisoned), reps timed runs, the checked run (poisoned) */
    for (int rep = -1; rep <= s->reps; rep++) {
        double seconds;
        if (runner->run(context, rep < 0 || rep == s->reps, &r, &g, &seconds))
            goto failed;
        if (rep >= 0 && rep < s->reps)
            times[rep] = seconds;
    }
    runner->close(context);
    context = NULL;
    const double median_seconds = gdn_median(times, (size_t)s->reps);
    if (gdn_result_check_finite(p, &r) || gdn_gradients_check_finite(&g, p))
        goto failed;
    int check_failed = 0;
    for (int which = 0; which < 2; which++) {
        backward_difference b = {{0, 0, 0}, NULL, 1.0, 0, stage, which};
        if (which == 0 ? !s->check_oracle : !s->check_dir)
            continue;
        if (which == 0 ? against_oracle(p, &c, &r, &g, &b) : against_folder(p, &r, &g, s->check_dir, &b))
            goto failed;
        const char *key = which == 0 ? "oracle" : "ref";
        used += (size_t)snprintf(checks + used, sizeof checks - used, " err_%s=%.3e worst_%s=%s", key, b.d.relative,
                                 key, b.worst);
        if (b.non_finite || !gdn_within(b.d, b.tolerance)) {
            fprintf(stderr, "%s: error: %s differs from %s: relative %.3e > tolerance %.0e%s\n", stage->name, b.worst,
                    which == 0 ? "the fp64 backward oracle" : s->check_dir, b.d.relative, b.tolerance,
                    b.d.non_finite ? " (NaN or Inf)" : "");
            check_failed = 1;
        }
    }
    if (s->out_dir && (gdn_result_save(&r, p, s->out_dir) || gdn_gradients_save(&g, p, s->out_dir))) {
        gdn_remove_outputs(s->out_dir, (const char *const[]){"o", "ht", NULL}); /* no forward result that looks whole */
        goto failed;
    }
    const double flops = stage->counted_flops(p, s);
    char options[32] = "";
    if (stage->options & GDN_OPTION_CHUNK)
        snprintf(options, sizeof options, " chunk=%zu", s->chunk);
    char layout[64];
    printf("result stage=%s precision=%s B=%zu T=%zu H=%zu K=%zu V=%zu%s h0=%d threads=%d%s reps=%d median_ms=%.4f "
           "gflops=%.3f%s\n",
           stage->name, REAL_NAME, p->B, p->T, p->H, p->K, p->V, gdn_layout_text(p, layout, sizeof layout),
           p->h0 != NULL, s->threads, options, s->reps, 1e3 * median_seconds, flops / median_seconds * 1e-9, checks);
    status = check_failed;
    goto finish;
failed:
    fail(stage->name);
finish:
    if (context)
        runner->close(context);
    free(times);
    gdn_cotangents_free(&c);
    gdn_result_free(&r);
    gdn_gradients_free(&g);
    gdn_problem_free(&problem);
    return status;
}
