/* oracle.h -- the fp64 reference every stage is checked against.
 *
 * Stage 01's recurrence (docs/contract.md section 1) computed in double from the problem's
 * inputs, one head at a time. It is written on its own, not shared with stage 01, on
 * purpose: a reference that shares code with what it checks would share its bugs.
 */
#ifndef GDN_ORACLE_H
#define GDN_ORACLE_H

#include "problem.h"

/* o: B*T*H*V doubles, ht: B*H*K*V doubles, both allocated by the caller.
 * Returns 0, or -1 (gdn_last_error) when its scratch cannot be allocated. */
int gdn_oracle(const gdn_problem *p, double *o, double *ht);

#endif
