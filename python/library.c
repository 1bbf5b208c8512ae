/* library.c -- the CPU stages as a shared library: the entry points the Python package
 * gdn_steps calls through ctypes (python/gdn_steps/__init__.py, docs/python.md).
 *
 * The idea: a binary reads .npy files, a library reads the caller's memory. Each entry takes
 * the sizes and the tensors' addresses in one gdn_library_call, builds a gdn_problem whose
 * pointers are the caller's tensors (nothing is copied but a packed batch's offsets, int64 to
 * size_t), and runs a stage through the same descriptor and runner a binary uses. Outputs are
 * written in place, poisoned with NaN first; an output that is not finite is an error, never a
 * result. One library per precision: libgdn_steps_float.so and libgdn_steps_double.so (real_t,
 * common/real.h), so float64 tensors run the double build, as torch.autograd.gradcheck needs.
 * Every entry returns 0, or -1 with gdn_library_error() saying why in one line.
 *
 * Cost: the stage's; the call adds a scan of the offsets.
 *
 * Build:  make lib   (python/gdn_steps/libgdn_steps_{float,double}.so; `pip install .` runs it)
 */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/backward_stage.h"
#include "../common/error.h"
#include "../common/stage.h"
#include "../steps/01_naive_loop/naive_loop.h"
#include "../steps/02_affine/affine.h"
#include "../steps/03_parallel_scan/parallel_scan.h"
#include "../steps/04_two_phase_scan/two_phase_scan.h"
#include "../steps/05_wy_chunked/wy_chunked.h"
#include "../steps/09_backward_loop/backward_loop.h"
#include "../steps/10_backward_chunked/backward_chunked.h"
#include "library.h"

static const gdn_stage *const forward_stages[] = {&naive_loop_stage, &affine_stage, &parallel_scan_stage,
                                                  &two_phase_scan_stage, &wy_chunked_stage};
static const gdn_backward_stage *const backward_stages[] = {&backward_loop_stage, &backward_chunked_stage};
enum { FORWARD_STAGES = 5, BACKWARD_STAGES = 2 };

int gdn_library_names(const char *wanted, const char *name)
{
    size_t length = strlen(wanted);
    return strcmp(wanted, name) == 0 || (length >= 2 && length <= 3 && strncmp(wanted, name, length) == 0 && name[length] == '_');
}

const char *gdn_library_error(void) { return gdn_last_error(); }
int gdn_library_real_size(void) { return (int)sizeof(real_t); }

/* Space-separated names, forward stages first. */
const char *gdn_library_stages(void)
{
    static char list[256];
    list[0] = '\0';
    for (int i = 0; i < FORWARD_STAGES + BACKWARD_STAGES; i++) {
        const char *name = i < FORWARD_STAGES ? forward_stages[i]->name : backward_stages[i - FORWARD_STAGES]->name;
        strncat(list, name, sizeof list - strlen(list) - 2);
        strncat(list, " ", sizeof list - strlen(list) - 1);
    }
    return list;
}

int gdn_library_problem(const gdn_library_call *c, gdn_problem *p, gdn_settings *s)
{
    memset(p, 0, sizeof *p);
    if (c->B <= 0 || c->T <= 0 || c->H <= 0 || c->HV <= 0 || c->K <= 0 || c->V <= 0)
        return gdn_set_error("sizes must be positive (B=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld)", (long long)c->B,
                             (long long)c->T, (long long)c->H, (long long)c->HV, (long long)c->K, (long long)c->V);
    if (c->HV % c->H != 0)
        return gdn_set_error("HV=%lld value heads is not a multiple of H=%lld key heads", (long long)c->HV,
                             (long long)c->H);
    if (!c->q || !c->k || !c->v || !c->g || !c->beta)
        return gdn_set_error("q, k, v, g and beta are all needed");
    if (c->offsets && (c->sequences < 1 || c->sequences > c->T))
        return gdn_set_error("cu_seqlens: %lld sequences for T=%lld tokens (1 to T)", (long long)c->sequences,
                             (long long)c->T);
    if (c->threads > 4096 || c->chunk < 0 || c->chunk > 128 || c->segments < 0)
        return gdn_set_error("threads (at most 4096), chunk (0 to 128) or segments (0 or more) out of range: %lld, %lld, "
                             "%lld", (long long)c->threads, (long long)c->chunk, (long long)c->segments);
    /* the sizes' products must fit in a byte count, as for a binary's problem */
    size_t bytes;
    const gdn_layout layout = {.B = (size_t)c->B, .T = (size_t)c->T, .H = (size_t)c->H, .K = (size_t)c->K,
                               .V = (size_t)c->V, .HV = (size_t)c->HV};
    if (gdn_layout_bytes(&layout, &bytes))
        return -1;
    *p = (gdn_problem){.B = (size_t)c->B, .T = (size_t)c->T, .H = (size_t)c->H, .K = (size_t)c->K,
                       .V = (size_t)c->V, .HV = (size_t)c->HV, .scale = c->scale,
                       .q = (real_t *)c->q, .k = (real_t *)c->k, .v = (real_t *)c->v, .g = (real_t *)c->g,
                       .beta = (real_t *)c->beta, .h0 = (real_t *)c->h0};
    if (c->offsets && gdn_problem_set_offsets(p, c->offsets, (size_t)c->sequences + 1, "cu_seqlens"))
        return -1;
    *s = (gdn_settings){.B = p->B, .T = p->T, .H = p->H, .K = p->K, .V = p->V, .reps = 1,
                        .threads = c->threads > 0 ? (int)c->threads : omp_get_max_threads(),
                        .chunk = (size_t)(c->chunk > 0 ? c->chunk : 0),
                        .segments = (size_t)(c->segments > 0 ? c->segments : 0), .precise = c->precise != 0,
                        .batch_invariant = c->batch_invariant != 0};
    omp_set_num_threads(s->threads);
    return 0;
}

/* Stage 04's segments, at most the longest sequence's tokens: the binary clamps them saying so
 * on stderr, which a library must not write to. */
static void quiet_segments(const gdn_problem *p, gdn_settings *s)
{
    if (s->segments > gdn_longest_sequence(p))
        s->segments = gdn_longest_sequence(p);
}

int gdn_library_check_options(const gdn_stage *stage, const gdn_library_call *c)
{
    if (c->precise && !(stage->options & GDN_OPTION_PRECISE))
        return gdn_set_error("%s has no precise mode (stage 06 and 07 have)", stage->name);
    if (c->batch_invariant && !(stage->options & GDN_OPTION_BATCH_INVARIANT))
        return gdn_set_error("%s has no batch-invariant mode (stage 06 and 07 have)", stage->name);
    return 0;
}

void gdn_library_release(gdn_problem *p)
{
    free(p->offsets);
    p->offsets = NULL;
}

int gdn_library_forward(const char *stage_name, const gdn_library_call *c, real_t *o, real_t *ht)
{
    const gdn_stage *stage = NULL;
    for (int i = 0; i < FORWARD_STAGES; i++)
        if (gdn_library_names(stage_name, forward_stages[i]->name))
            stage = forward_stages[i];
    if (!stage)
        return gdn_set_error("no forward stage '%s' in this library (it has %s)", stage_name, gdn_library_stages());
    if (!o || !ht)
        return gdn_set_error("o and ht are both needed");
    gdn_problem p = {0}; /* released whatever fails */
    gdn_settings s;
    gdn_result r = {o, ht};
    int status = gdn_library_check_options(stage, c) || gdn_library_problem(c, &p, &s) || gdn_check_layout(stage, &p) ? -1 : 0;
    if (status == 0) {
        quiet_segments(&p, &s);
        if (stage->resolve_options)
            stage->resolve_options(&p, &s);
        status = gdn_stage_run_once(stage, &p, &s, &r) || gdn_result_check_finite(&p, &r) ? -1 : 0;
    }
    gdn_library_release(&p);
    return status;
}

int gdn_library_backward(const char *stage_name, const gdn_library_call *c, const real_t *d_o, const real_t *dht,
                         real_t *o, real_t *ht, real_t *dq, real_t *dk, real_t *dv, real_t *dg, real_t *dbeta,
                         real_t *dh0)
{
    if (!d_o || !dht || !o || !ht || !dq || !dk || !dv || !dg || !dbeta || (c->h0 && !dh0))
        return gdn_set_error("do, dht, o, ht and every gradient (dh0 with h0) are needed");
    const gdn_backward_stage *stage = NULL;
    for (int i = 0; i < BACKWARD_STAGES; i++)
        if (gdn_library_names(stage_name, backward_stages[i]->name))
            stage = backward_stages[i];
    if (!stage)
        return gdn_set_error("no backward stage '%s' in this library (it has %s)", stage_name, gdn_library_stages());
    gdn_problem p = {0}; /* released whatever fails */
    gdn_settings s;
    if (gdn_library_problem(c, &p, &s)) {
        gdn_library_release(&p);
        return -1;
    }
    const gdn_stage layouts = {.name = stage->name, .options = stage->options};
    if (gdn_check_layout(&layouts, &p)) {
        gdn_library_release(&p);
        return -1;
    }
    if (stage->resolve_options)
        stage->resolve_options(&p, &s);
    gdn_cotangents cotangents = {(real_t *)d_o, (real_t *)dht};
    gdn_result r = {o, ht};
    gdn_gradients g = {dq, dk, dv, dg, dbeta, p.h0 ? dh0 : NULL};
    gdn_result_poison(&r, &p);
    gdn_gradients_poison(&g, &p);
    int status = stage->backward(&p, &cotangents, &s, &r, &g) || gdn_result_check_finite(&p, &r) ||
                         gdn_gradients_check_finite(&g, &p)
                     ? -1
                     : 0;
    gdn_library_release(&p);
    return status;
}
