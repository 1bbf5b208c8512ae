/* stage.c -- the driver every stage binary runs (see stage.h). */
#include "stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "compare.h"
#include "error.h"
#include "npy.h"
#include "oracle.h"
#include "timing.h"
#include "tolerances.h"

/* Read o.npy and ht.npy from dir as double references, checking their shapes. */
static int load_reference(const gdn_problem *p, const char *dir, npy_array *o, npy_array *ht)
{
    char path[4096];
    const size_t HV = gdn_value_heads(p);
    size_t o_shape[4] = {p->B, p->T, HV, p->V}, ht_shape[4] = {gdn_sequences(p), HV, p->K, p->V};
    const size_t *shapes[2] = {o_shape, ht_shape};
    npy_array *arrays[2] = {o, ht};
    const char *names[2] = {"o", "ht"}, *meanings[2] = {"o: [B, T, HV, V]", "ht: [N, HV, K, V]"};
    for (int i = 0; i < 2; i++) {
        if (npy_path(path, sizeof path, dir, names[i]) || npy_read_shaped(path, 4, shapes[i], meanings[i], arrays[i]))
            return -1;
    }
    return 0;
}

static gdn_difference compare_result(const gdn_problem *p, const gdn_result *r, const double *o, const double *ht)
{
    return gdn_worse(gdn_compare(r->o, o, gdn_tokens(p) * p->V), gdn_compare(r->ht, ht, gdn_state_count(p)));
}

/* The host runner: CPU stages compute in place in r; the clock is read around forward. */
typedef struct {
    const gdn_stage *stage;
    const gdn_problem *p;
    const gdn_settings *s;
} host_context;

static int host_open(const gdn_stage *stage, const gdn_problem *p, const gdn_settings *s, void **context)
{
    host_context *c = calloc(1, sizeof *c);
    if (!c)
        return gdn_set_error("out of memory");
    *c = (host_context){stage, p, s};
    *context = c;
    return 0;
}

static int host_run(void *context, int poisoned, gdn_result *r, double *seconds)
{
    host_context *c = context;
    if (!c->stage->forward)
        return gdn_set_error("%s has no CPU forward pass", c->stage->name);
    if (poisoned)
        gdn_result_poison(r, c->p);
    double start = gdn_now_seconds();
    int status = c->stage->forward(c->p, c->s, r);
    *seconds = gdn_now_seconds() - start;
    return status;
}

static void host_close(void *context) { free(context); }

static const gdn_runner host_runner = {host_open, host_run, host_close};

int gdn_stage_run_once(const gdn_stage *stage, const gdn_problem *p, const gdn_settings *s, gdn_result *r)
{
    const gdn_runner *runner = stage->runner ? stage->runner : &host_runner;
    void *context = NULL;
    double seconds;
    if (runner->open(stage, p, s, &context)) {
        if (context)
            runner->close(context);
        return -1;
    }
    int status = runner->run(context, 1, r, &seconds);
    runner->close(context);
    return status;
}

static int fail(const char *stage) { fprintf(stderr, "%s: error: %s\n", stage, gdn_last_error()); return 1; }

/* The checks --check-against asks for; adds to checks[] and returns 1 when one fails, or
 * -1 when a reference cannot be computed or read. */
static int run_checks(const gdn_stage *stage, const gdn_settings *s, const gdn_problem *p, const gdn_result *r,
                      char *checks, size_t size)
{
    int failed = 0;
    size_t used = 0;
    const double oracle_tolerance = stage->bf16_inputs ? GDN_TOLERANCE_BF16 : GDN_TOLERANCE_VS_ORACLE,
                 stage_tolerance = stage->bf16_inputs ? GDN_TOLERANCE_BF16 : GDN_TOLERANCE_VS_STAGE;
    if (s->check_oracle) {
        size_t o_count = gdn_tokens(p) * p->V, ht_count = gdn_state_count(p);
        double *o = malloc((o_count + ht_count) * sizeof *o);
        if (!o || gdn_oracle(p, o, o + o_count)) {
            free(o);
            return o ? -1 : gdn_set_error("out of memory for the oracle's results");
        }
        gdn_difference d = compare_result(p, r, o, o + o_count);
        free(o);
        used += (size_t)snprintf(checks + used, size - used, " err_oracle=%.3e maxabs_oracle=%.3e", d.relative,
                                 d.max_absolute);
        if (!gdn_within(d, oracle_tolerance)) {
            fprintf(stderr, "%s: error: differs from the fp64 oracle: relative %.3e > tolerance %.0e%s\n",
                    stage->name, d.relative, oracle_tolerance, d.non_finite ? " (NaN or Inf in o or ht)" : "");
            failed = 1;
        }
    }
    if (s->check_dir) {
        npy_array o = {0}, ht = {0};
        if (load_reference(p, s->check_dir, &o, &ht)) {
            npy_free(&o);
            npy_free(&ht);
            return -1;
        }
        gdn_difference d = compare_result(p, r, o.data, ht.data);
        npy_free(&o);
        npy_free(&ht);
        snprintf(checks + used, size - used, " err_ref=%.3e maxabs_ref=%.3e", d.relative, d.max_absolute);
        if (!gdn_within(d, stage_tolerance)) {
            fprintf(stderr, "%s: error: differs from %s: relative %.3e > tolerance %.0e%s\n", stage->name,
                    s->check_dir, d.relative, stage_tolerance, d.non_finite ? " (NaN or Inf)" : "");
            failed = 1;
        }
    }
    return failed;
}

int gdn_check_layout(const gdn_stage *stage, const gdn_problem *p)
{
    if (gdn_value_heads(p) != p->H && !(stage->options & GDN_OPTION_VALUE_HEADS))
        return gdn_set_error("%s runs HV = H only; these inputs have grouped value heads (HV=%zu over H=%zu)",
                             stage->name, gdn_value_heads(p), p->H);
    if (p->offsets && !(stage->options & GDN_OPTION_PACKED))
        return gdn_set_error("%s runs B sequences of T tokens only; these inputs are a packed batch of %zu "
                             "sequences (cu_seqlens)", stage->name, p->sequences);
    return 0;
}

const char *gdn_layout_text(const gdn_problem *p, char *text, size_t size)
{
    text[0] = '\0';
    if (gdn_value_heads(p) != p->H)
        snprintf(text, size, " HV=%zu", gdn_value_heads(p));
    if (p->offsets)
        snprintf(text + strlen(text), size - strlen(text), " sequences=%zu", p->sequences);
    return text;
}

/* The problem --B ... --HV --lengths describe, allocated (zeroed). */
static int alloc_drawn(const gdn_settings *s, gdn_problem *p)
{
    gdn_layout l = {.B = s->B, .T = s->T, .H = s->H, .K = s->K, .V = s->V, .HV = s->HV, .with_h0 = s->with_h0};
    size_t *lengths = NULL, count = 0, sum = 0;
    if (s->lengths) {
        if (gdn_parse_lengths(s->lengths, NULL, 0, &count, &sum))
            return -1;
        if (!(lengths = malloc(count * sizeof *lengths)))
            return gdn_set_error("out of memory for %zu lengths", count);
        gdn_parse_lengths(s->lengths, lengths, count, &count, &sum);
        l.B = 1, l.T = sum, l.lengths = lengths, l.sequences = count;
    }
    int status = gdn_problem_alloc_layout(p, &l);
    free(lengths);
    return status;
}

int gdn_stage_setup(int argc, char **argv, const gdn_stage *stage, gdn_settings *s, gdn_problem *p)
{
    memset(p, 0, sizeof *p);
    int parsed = gdn_parse_command_line(argc, argv, stage, s);
    if (parsed != 0)
        return parsed > 0 ? 1 : (fail(stage->name), -1);
    omp_set_num_threads(s->threads);
    if (s->in_dir ? gdn_problem_load(p, s->in_dir, s->check_inputs) : alloc_drawn(s, p))
        return fail(stage->name), -1;
    if (gdn_check_layout(stage, p)) {
        gdn_problem_free(p);
        return fail(stage->name), -1;
    }
    if (!s->in_dir)
        gdn_problem_generate(p, s->seed);
    if (s->scale > 0.0)
        p->scale = s->scale;
    if (stage->bf16_inputs)
        gdn_problem_round_to_bf16(p);
    if (stage->resolve_options)
        stage->resolve_options(p, s);
    return 0;
}

int gdn_stage_main(int argc, char **argv, const gdn_stage *stage)
{
    gdn_settings s;
    gdn_problem p = {0};
    gdn_result r = {0};
    const gdn_runner *runner = stage->runner ? stage->runner : &host_runner;
    void *context = NULL;
    double *times = NULL;
    int status = 1; /* until everything below has worked */
    const int setup = gdn_stage_setup(argc, argv, stage, &s, &p);
    if (setup != 0)
        return setup > 0 ? 0 : 1;
    if (gdn_result_alloc(&r, &p))
        goto failed;

    /* One warm-up run (first touch of memory, thread start-up, GPU clocks), then reps timed
     * runs, then one more run whose outputs are checked and saved. Outputs are poisoned with NaN
     * before the warm-up and before the checked run, so an output a stage forgets to write
     * cannot pass. The timed runs are not poisoned: poisoning from this one thread would leave
     * every output line in its cache and bill the stage's threads for fetching them back. */
    times = malloc((size_t)s.reps * sizeof *times);
    if (!times) {
        gdn_set_error("out of memory");
        goto failed;
    }
    if (runner->open(stage, &p, &s, &context))
        goto failed;
    for (int rep = -1; rep <= s.reps; rep++) {
        double seconds;
        if (runner->run(context, rep < 0 || rep == s.reps, &r, &seconds))
            goto failed;
        if (rep >= 0 && rep < s.reps)
            times[rep] = seconds;
    }
    runner->close(context);
    context = NULL;
    double median_seconds = gdn_median(times, (size_t)s.reps);

    /* An output that is not finite is an error before anything is compared or written: an
     * o.npy of NaN would look like a result. The error names the first such value and its
     * likely cause (problem.h). The runner has copied a GPU stage's outputs into r. */
    if (gdn_result_check_finite(&p, &r))
        goto failed;
    char checks[512] = "";
    int check = run_checks(stage, &s, &p, &r, checks, sizeof checks);
    if (check < 0 || (s.out_dir && gdn_result_save(&r, &p, s.out_dir)))
        goto failed;

    char options[96] = "";
    if (stage->options & GDN_OPTION_CHUNK)
        snprintf(options, sizeof options, " chunk=%zu", s.chunk);
    if (stage->options & GDN_OPTION_SEGMENTS)
        snprintf(options + strlen(options), sizeof options - strlen(options), " segments=%zu", s.segments);
    if (stage->options & GDN_OPTION_PRECISE)
        snprintf(options + strlen(options), sizeof options - strlen(options), " precise=%d", s.precise);
    char layout[64];
    double flops = stage->counted_flops(&p, &s);
    printf("result stage=%s precision=%s B=%zu T=%zu H=%zu K=%zu V=%zu%s h0=%d threads=%d%s reps=%d "
           "median_ms=%.4f gflops=%.3f%s\n",
           stage->name, REAL_NAME, p.B, p.T, p.H, p.K, p.V, gdn_layout_text(&p, layout, sizeof layout), p.h0 != NULL, s.threads, options, s.reps,
           1e3 * median_seconds, flops / median_seconds * 1e-9, checks);
    status = check; /* 0, or 1 when a check failed (said on stderr above) */
    goto finish;
failed:
    fail(stage->name);
finish:
    if (context)
        runner->close(context);
    free(times);
    gdn_result_free(&r);
    gdn_problem_free(&p);
    return status;
}
