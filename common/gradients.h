/* gradients.h -- what a backward stage reads besides the problem, and what it writes.
 *
 * A backward pass differentiates a scalar loss L that depends on the forward's outputs. What
 * the pass is given of L is its gradient with respect to those outputs, the cotangents:
 *     d_o = dL/do  [B, T, H, V]   (do.npy; "do" is a C keyword)      dht = dL/dht  [B, H, K, V]
 * and it returns the gradients with respect to every input, each shaped as its input:
 *     dq, dk [B, T, H, K]   dv [B, T, H, V]   dg, dbeta [B, T, H]   dh0 [B, H, K, V] (with h0)
 * (docs/contract.md section 5). Drawn cotangents are N(0, 1), streams STREAM_DO and STREAM_DHT,
 * like every input a function of the seed and the flat index alone.
 */
#ifndef GDN_GRADIENTS_H
#define GDN_GRADIENTS_H

#include <stdint.h>

#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    real_t *d_o;  /* [B, T, H, V] */
    real_t *dht;  /* [B, H, K, V] */
} gdn_cotangents;

typedef struct {
    real_t *dq, *dk, *dv, *dg, *dbeta;
    real_t *dh0;  /* NULL when the problem has no h0 */
} gdn_gradients;

/* The oracle's gradients, in double (backward_oracle.h). */
typedef struct {
    double *dq, *dk, *dv, *dg, *dbeta, *dh0;
} gdn_gradients_f64;

/* The gradients' tensors in file order (dq dk dv dg dbeta dh0): name, shape and count. */
enum { GDN_GRADIENT_TENSORS = 6 };
typedef struct {
    const char *name;
    size_t ndim, shape[4], count;
} gdn_tensor_shape;
gdn_tensor_shape gdn_gradient_shape(const gdn_problem *p, int which);
/* Tensor `which` of g (NULL for dh0 without h0). */
real_t *gdn_gradient_tensor(const gdn_gradients *g, int which);
double *gdn_gradient_f64_tensor(const gdn_gradients_f64 *g, int which);
/* Whether the problem has tensor `which` (dh0 only with h0). */
int gdn_gradient_present(const gdn_problem *p, int which);

int gdn_cotangents_alloc(gdn_cotangents *c, const gdn_problem *p);
void gdn_cotangents_free(gdn_cotangents *c);
/* N(0, 1) from the seed, as docs/contract.md section 5 says. */
void gdn_cotangents_generate(gdn_cotangents *c, const gdn_problem *p, uint64_t seed);
/* do.npy and dht.npy from dir, shaped as p's o and ht; with check_values every value must be
 * finite. A missing file, a wrong shape or a bad value is one line naming the file. */
int gdn_cotangents_load(gdn_cotangents *c, const gdn_problem *p, const char *dir, int check_values);
int gdn_cotangents_save(const gdn_cotangents *c, const gdn_problem *p, const char *dir);

int gdn_gradients_alloc(gdn_gradients *g, const gdn_problem *p);
void gdn_gradients_free(gdn_gradients *g);
int gdn_gradients_f64_alloc(gdn_gradients_f64 *g, const gdn_problem *p);
void gdn_gradients_f64_free(gdn_gradients_f64 *g);
/* NaN everywhere, so that a gradient a stage forgets to write fails the check. */
void gdn_gradients_poison(gdn_gradients *g, const gdn_problem *p);
/* 0 when every gradient is finite; else -1 with the error naming the tensor, its flat index
 * and the value. */
int gdn_gradients_check_finite(const gdn_gradients *g, const gdn_problem *p);
/* dq.npy ... dh0.npy into dir (created if missing); on a failed write none is left behind. */
int gdn_gradients_save(const gdn_gradients *g, const gdn_problem *p, const char *dir);

#ifdef __cplusplus
}
#endif

#endif
