#ifndef GDN_NAIVE_LOOP_H
#define GDN_NAIVE_LOOP_H

#include "../../common/stage.h"

extern const gdn_stage naive_loop_stage;

/* 7 K V + 3 V flops per token (the GPU twin counts the same). */
double naive_loop_flops(const gdn_problem *p, const gdn_settings *s);

/* One token of the recurrence on a K x V state S (row-major); writes V outputs to o.
 * scratch holds 2 V values. With q == NULL the state is updated and nothing is read
 * (o is not touched). Stage 04 folds and replays its segments with this same step. */
void naive_loop_token_step(real_t *S, size_t K, size_t V, const real_t *q, const real_t *k, const real_t *v,
                           real_t alpha, real_t beta, real_t scale, real_t *o, real_t *scratch);

#endif
