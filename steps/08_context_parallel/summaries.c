/* summaries.c -- composing stage 08's summaries (see summaries.h), with stage 02's maps. */
#include "summaries.h"

#include <string.h>

#include "../02_affine/affine.h"

void combine_summaries(const real_t *earlier, real_t *later, size_t heads, size_t K, size_t V, real_t *scratch)
{
    affine_map combined = affine_map_at(scratch, 0, K, V);
    for (size_t head = 0; head < heads; head++) {
        /* eq. 3 of docs/02_affine.md: (A2, B2) o (A1, B1) = (A2 A1, A2 B1 + B2) */
        compose_affine(combined, affine_map_at(later, head, K, V), affine_map_at((real_t *)earlier, head, K, V), K,
                       V);
        memcpy(later + head * K * (K + V), scratch, K * (K + V) * sizeof(real_t));
    }
}

void identity_summaries(real_t *summary, size_t heads, size_t K, size_t V)
{
    for (size_t head = 0; head < heads; head++)
        affine_identity(affine_map_at(summary, head, K, V), K, V);
}
