#ifndef GDN_WY_CHUNKED_H
#define GDN_WY_CHUNKED_H

#include "../../common/stage.h"

extern const gdn_stage wy_chunked_stage;

/* Flops of the chunked form for --chunk (the GPU twin does the same products). */
double wy_chunked_flops(const gdn_problem *p, const gdn_settings *s);

/* C (m x n, row stride ldc) += A (m x k, stride lda) B (k x n, stride ldb). */
void matmul_add(real_t *C, size_t ldc, const real_t *A, size_t lda, const real_t *B, size_t ldb, size_t m, size_t k,
                size_t n);
/* Tm = (I + M)^-1 for strictly lower triangular M (n x n), by forward substitution (eq. 11). */
void wy_solve_tril(real_t *Tm, const real_t *M, size_t n);

#endif
