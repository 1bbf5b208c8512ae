#ifndef GDN_BACKWARD_LOOP_H
#define GDN_BACKWARD_LOOP_H

#include "../../common/backward_stage.h"

extern const gdn_backward_stage backward_loop_stage;

/* Flops of one backward pass of the loop: the forward twice (once kept, once recomputed) and
 * the step back, 30 K V a token (docs/09_backward_loop.md). */
double backward_loop_flops(const gdn_problem *p, const gdn_settings *s);

#endif
