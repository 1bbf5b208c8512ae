#ifndef GDN_AFFINE_H
#define GDN_AFFINE_H

#include "../../common/stage.h"

extern const gdn_stage affine_stage;

/* An affine map on K x V states: S -> A S + B, with A K x K and B K x V (row-major).
 * Stored contiguously as A then B (K (K + V) values), so arrays of maps are one block. */
typedef struct {
    real_t *A;
    real_t *B;
} affine_map;

/* The map stored at position index of a block of maps. */
static inline affine_map affine_map_at(real_t *block, size_t index, size_t K, size_t V)
{
    real_t *A = block + index * K * (K + V);
    return (affine_map){A, A + K * K};
}

/* (I, 0): the map that changes nothing. */
void affine_identity(affine_map out, size_t K, size_t V);
/* Token t as a map: A = alpha (I - beta k k^T), B = beta k v^T (docs/02_affine.md eq. 2). */
void affine_token_map(affine_map out, size_t K, size_t V, const real_t *k, const real_t *v, real_t alpha,
                      real_t beta);
/* out = later o earlier = (A2 A1, A2 B1 + B2): apply earlier first, then later (eq. 3).
 * out must not share storage with either input. */
void compose_affine(affine_map out, affine_map later, affine_map earlier, size_t K, size_t V);
/* S_out = A S_in + B. S_out must not share storage with S_in. */
void apply_affine(real_t *S_out, affine_map map, const real_t *S_in, size_t K, size_t V);
/* Token t's output from its prefix map P_t: S_t = P_t(h0) (computed into S when h0 is given;
 * h0 == NULL means a zero state, and S_t is then P_t's B), then o = scale S_t^T q (eq. 1d).
 * Returns S_t. Stage 03 reads its outputs the same way. */
const real_t *affine_read_output(affine_map prefix, const real_t *h0, const real_t *q, real_t scale, real_t *o,
                                real_t *S, size_t K, size_t V);

#endif
