/* gradients.c -- the cotangents and gradients of the backward stages (see gradients.h). */
#include "gradients.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "npy.h"
#include "random.h"

static const char *const gradient_names[GDN_GRADIENT_TENSORS + 1] = {"dq", "dk", "dv", "dg", "dbeta", "dh0", NULL};

gdn_tensor_shape gdn_gradient_shape(const gdn_problem *p, int which)
{
    /* shaped as the input each is the gradient of: q, k [B, T, H, K]; v [B, T, HV, V]; g, beta
     * [B, T, HV]; h0 [N, HV, K, V] */
    const size_t HV = gdn_value_heads(p);
    gdn_tensor_shape s = {gradient_names[which], 4, {p->B, p->T, which < 2 ? p->H : HV, p->K}, 0};
    if (which == 2)
        s.shape[3] = p->V;
    if (which == 3 || which == 4)
        s.ndim = 3;
    if (which == 5)
        s = (gdn_tensor_shape){gradient_names[which], 4, {gdn_sequences(p), HV, p->K, p->V}, 0};
    s.count = 1;
    for (size_t d = 0; d < s.ndim; d++)
        s.count *= s.shape[d];
    return s;
}

int gdn_gradient_present(const gdn_problem *p, int which) { return which != 5 || p->h0 != NULL; }

real_t *gdn_gradient_tensor(const gdn_gradients *g, int which)
{
    real_t *const tensors[GDN_GRADIENT_TENSORS] = {g->dq, g->dk, g->dv, g->dg, g->dbeta, g->dh0};
    return tensors[which];
}

double *gdn_gradient_f64_tensor(const gdn_gradients_f64 *g, int which)
{
    double *const tensors[GDN_GRADIENT_TENSORS] = {g->dq, g->dk, g->dv, g->dg, g->dbeta, g->dh0};
    return tensors[which];
}

/* ---- cotangents ---- */

int gdn_cotangents_alloc(gdn_cotangents *c, const gdn_problem *p)
{
    c->d_o = calloc(gdn_tokens(p) * p->V, sizeof(real_t));
    c->dht = calloc(gdn_state_count(p), sizeof(real_t));
    if (!c->d_o || !c->dht) {
        gdn_cotangents_free(c);
        return gdn_set_error("out of memory for do and dht (%zu values)", gdn_tokens(p) * p->V + gdn_state_count(p));
    }
    return 0;
}

void gdn_cotangents_free(gdn_cotangents *c)
{
    free(c->d_o);
    free(c->dht);
    c->d_o = c->dht = NULL;
}

void gdn_cotangents_generate(gdn_cotangents *c, const gdn_problem *p, uint64_t seed)
{
    const long long o_count = (long long)(gdn_tokens(p) * p->V), ht_count = (long long)gdn_state_count(p);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < o_count; i++)
        c->d_o[i] = (real_t)random_normal(seed, STREAM_DO, (uint64_t)i);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < ht_count; i++)
        c->dht[i] = (real_t)random_normal(seed, STREAM_DHT, (uint64_t)i);
}

int gdn_cotangents_load(gdn_cotangents *c, const gdn_problem *p, const char *dir, int check_values)
{
    const char *names[2] = {"do", "dht"};
    size_t o_shape[4] = {p->B, p->T, gdn_value_heads(p), p->V}, ht_shape[4] = {gdn_sequences(p), gdn_value_heads(p), p->K, p->V};
    const size_t *shapes[2] = {o_shape, ht_shape};
    if (gdn_cotangents_alloc(c, p))
        return -1;
    real_t *tensors[2] = {c->d_o, c->dht};
    for (int i = 0; i < 2; i++) {
        char path[4096];
        npy_array a = {0};
        if (npy_path(path, sizeof path, dir, names[i]) || npy_read_shaped(path, 4, shapes[i], i == 0 ? "o's: [B, T, HV, V]" : "ht's: [N, HV, K, V]", &a))
            goto failed;
        for (size_t j = 0; j < a.count; j++) {
            if (check_values && !isfinite(a.data[j])) {
                gdn_set_error("%s: value %g at flat index %zu is not finite", path, a.data[j], j);
                npy_free(&a);
                goto failed;
            }
            if (isfinite(a.data[j]) && !isfinite((real_t)a.data[j])) { /* as the inputs: it would become Inf */
                gdn_set_error("%s: value %g at flat index %zu is beyond %s's range", path, a.data[j], j, REAL_NAME);
                npy_free(&a);
                goto failed;
            }
            tensors[i][j] = (real_t)a.data[j];
        }
        npy_free(&a);
    }
    return 0;
failed:
    gdn_cotangents_free(c);
    return -1;
}

int gdn_cotangents_save(const gdn_cotangents *c, const gdn_problem *p, const char *dir)
{
    size_t o_shape[4] = {p->B, p->T, gdn_value_heads(p), p->V}, ht_shape[4] = {gdn_sequences(p), gdn_value_heads(p), p->K, p->V};
    return gdn_make_dir(dir) || gdn_save_tensor(dir, "do", c->d_o, 4, o_shape) ||
                   gdn_save_tensor(dir, "dht", c->dht, 4, ht_shape)
               ? -1
               : 0;
}

/* ---- gradients ---- */

/* Each tensor the problem has, zeroed, elements of `element` bytes, into tensors[] in file order
 * (NULL for dh0 without h0); on failure none is left allocated. */
static int alloc_tensors(const gdn_problem *p, size_t element, void *tensors[GDN_GRADIENT_TENSORS], const char *whose)
{
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++)
        tensors[i] = NULL;
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++) {
        if (!gdn_gradient_present(p, i))
            continue;
        gdn_tensor_shape s = gdn_gradient_shape(p, i);
        tensors[i] = calloc(s.count ? s.count : 1, element);
        if (!tensors[i]) {
            for (int j = 0; j < i; j++)
                free(tensors[j]);
            return gdn_set_error("out of memory allocating %s%s (%zu values)", whose, s.name, s.count);
        }
    }
    return 0;
}

int gdn_gradients_alloc(gdn_gradients *g, const gdn_problem *p)
{
    void *t[GDN_GRADIENT_TENSORS];
    memset(g, 0, sizeof *g);
    if (alloc_tensors(p, sizeof(real_t), t, ""))
        return -1;
    *g = (gdn_gradients){t[0], t[1], t[2], t[3], t[4], t[5]};
    return 0;
}

void gdn_gradients_free(gdn_gradients *g)
{
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++)
        free(gdn_gradient_tensor(g, i));
    memset(g, 0, sizeof *g);
}

int gdn_gradients_f64_alloc(gdn_gradients_f64 *g, const gdn_problem *p)
{
    void *t[GDN_GRADIENT_TENSORS];
    memset(g, 0, sizeof *g);
    if (alloc_tensors(p, sizeof(double), t, "the oracle's "))
        return -1;
    *g = (gdn_gradients_f64){t[0], t[1], t[2], t[3], t[4], t[5]};
    return 0;
}

void gdn_gradients_f64_free(gdn_gradients_f64 *g)
{
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++)
        free(gdn_gradient_f64_tensor(g, i));
    memset(g, 0, sizeof *g);
}

void gdn_gradients_poison(gdn_gradients *g, const gdn_problem *p)
{
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++) {
        real_t *x = gdn_gradient_tensor(g, i);
        if (!x)
            continue;
        size_t count = gdn_gradient_shape(p, i).count;
        for (size_t j = 0; j < count; j++)
            x[j] = (real_t)NAN;
    }
}

int gdn_gradients_check_finite(const gdn_gradients *g, const gdn_problem *p)
{
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++) {
        const real_t *x = gdn_gradient_tensor(g, i);
        if (!x)
            continue;
        gdn_tensor_shape s = gdn_gradient_shape(p, i);
        for (size_t j = 0; j < s.count; j++)
            if (!isfinite(x[j]))
                return gdn_set_error("%s[%zu] is %g: a gradient that is not finite is never written (inputs too "
                                     "large for the precision, or a fault of the stage)",
                                     s.name, j, (double)x[j]);
    }
    return 0;
}

int gdn_gradients_save(const gdn_gradients *g, const gdn_problem *p, const char *dir)
{
    if (gdn_make_dir(dir))
        return -1;
    for (int i = 0; i < GDN_GRADIENT_TENSORS; i++) {
        if (!gdn_gradient_present(p, i))
            continue;
        gdn_tensor_shape s = gdn_gradient_shape(p, i);
        if (gdn_save_tensor(dir, s.name, gdn_gradient_tensor(g, i), s.ndim, s.shape)) {
            gdn_remove_outputs(dir, gradient_names); /* no folder that holds some gradients and looks whole */
            return -1;
        }
    }
    return 0;
}
