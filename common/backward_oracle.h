/* backward_oracle.h -- the fp64 reference every backward stage is checked against.
 *
 * The adjoint of eq. 1a-1d (docs/09_backward_loop.md) run backwards in time in double, one
 * head at a time, from the problem's inputs and the cotangents. Like the forward oracle it is
 * written on its own, sharing no code with the stages it checks; the tests check it against
 * central finite differences of the forward oracle (tests/test_backward.c).
 */
#ifndef GDN_BACKWARD_ORACLE_H
#define GDN_BACKWARD_ORACLE_H

#include "gradients.h"

/* o [B T H V], ht [B H K V] and g's tensors (gdn_gradients_f64_alloc), all in double and
 * allocated by the caller. Returns 0, or -1 (gdn_last_error) when its scratch cannot be
 * allocated. */
int gdn_backward_oracle(const gdn_problem *p, const gdn_cotangents *c, double *o, double *ht, gdn_gradients_f64 *g);

#endif
