/* summaries.h -- stage 08's per-process summaries and the one place their order is fixed.
 *
 * A summary is, for every head (b, h) in order, the affine map S -> A S + B that a process's
 * slice of the sequence applies to the state: A (K x K) then B (K x V), stage 02's layout
 * (affine_map_at). Kept free of MPI so that the tests can check the order without mpirun.
 */
#ifndef GDN_SUMMARIES_H
#define GDN_SUMMARIES_H

#include <stddef.h>

#include "../../common/real.h"

/* Values in one summary: heads maps of K (K + V). */
static inline size_t summary_values(size_t heads, size_t K, size_t V) { return heads * K * (K + V); }

/* later <- later o earlier, head by head: the slice covering `earlier` comes first in the
 * sequence. MPI passes the lower ranks' summary as invec and expects inoutvec = invec op
 * inoutvec, so the reduction operator calls this with (invec, inoutvec). scratch holds one
 * map, K (K + V) values. Swapping the arguments is the classic bug: the tests catch it. */
void combine_summaries(const real_t *earlier, real_t *later, size_t heads, size_t K, size_t V, real_t *scratch);

/* Every head's map set to the identity (I, 0): what an empty slice applies. */
void identity_summaries(real_t *summary, size_t heads, size_t K, size_t V);

#endif
