/* compare.h -- how two results are compared (docs/contract.md section 3).
 *
 * Relative error ||x - ref||_2 / ||ref||_2 over the whole tensor, plus the largest
 * absolute difference. A NaN or an infinity anywhere in x or ref fails the comparison
 * whatever the numbers say, because NaN compares false with every tolerance.
 */
#ifndef GDN_COMPARE_H
#define GDN_COMPARE_H

#include <stddef.h>

#include "real.h"

typedef struct {
    double relative;      /* ||x - ref|| / ||ref|| (or ||x - ref|| when ref is all zeros) */
    double max_absolute;  /* max |x_i - ref_i| */
    size_t non_finite;    /* count of NaN or Inf in x or ref */
} gdn_difference;

gdn_difference gdn_compare(const real_t *x, const double *ref, size_t count);
/* The same against ref rounded to the build's precision, the closest a result can be: the
 * backward stages' comparisons with the fp64 oracle, where a whole gradient may lie below
 * float's range (dg where alpha = e^-200: 1e-87, which float holds as 0). */
gdn_difference gdn_compare_representable(const real_t *x, const double *ref, size_t count);
/* The worse of two comparisons (o and ht are judged together). */
gdn_difference gdn_worse(gdn_difference a, gdn_difference b);
/* Passes when everything is finite and relative <= tolerance. */
int gdn_within(gdn_difference d, double tolerance);

/* The same relative error from parts, for a tensor split over MPI ranks (stage 08): each part's
 * extremes (largest |x - ref|, largest |ref|, count of non-finite values) are added up with a
 * max (the count with a sum), then each part's squares scaled by them (the two sums), and
 * gdn_relative_from gives ||x - ref|| / ||ref|| from the scales and the summed squares. */
void gdn_difference_extremes(const real_t *x, const double *ref, size_t count, double extremes[3]);
void gdn_difference_squares(const real_t *x, const double *ref, size_t count, const double scales[2], double sums[2]);
double gdn_relative_from(const double scales[2], const double sums[2]);

#endif
