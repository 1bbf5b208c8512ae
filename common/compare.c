#include "compare.h"

#include <math.h>

/* The norms are taken in two passes so that no square overflows: the first finds the largest
 * |x_i - ref_i| and |ref_i|, the second sums the squares of each divided by its largest. A
 * reference of 1e300 (a corrupt file) then gives a relative error near 1, not inf / inf = NaN,
 * which every tolerance test would read as a pass or a fail depending on how it is written. */
static double reference_value(const double *ref, size_t i, int round_reference)
{
    return round_reference ? (double)(real_t)ref[i] : ref[i];
}

static void extremes(const real_t *x, const double *ref, size_t count, int round_reference, double out[3])
{
    for (size_t i = 0; i < count; i++) {
        double a = (double)x[i], r = reference_value(ref, i, round_reference), delta = fabs(a - r);
        if (!isfinite(a) || !isfinite(r) || !isfinite(delta)) { /* 1e308 - (-1e308) overflows too */
            out[2] += 1;
            continue;
        }
        out[0] = fmax(out[0], delta);
        out[1] = fmax(out[1], fabs(r));
    }
}

static void squares(const real_t *x, const double *ref, size_t count, int round_reference, const double scales[2],
                    double out[2])
{
    for (size_t i = 0; i < count; i++) {
        double a = (double)x[i], r = reference_value(ref, i, round_reference), delta = fabs(a - r);
        if (!isfinite(a) || !isfinite(r) || !isfinite(delta))
            continue;
        if (scales[0] > 0)
            out[0] += (delta / scales[0]) * (delta / scales[0]);
        if (scales[1] > 0)
            out[1] += (r / scales[1]) * (r / scales[1]);
    }
}

void gdn_difference_extremes(const real_t *x, const double *ref, size_t count, double out[3])
{
    extremes(x, ref, count, 0, out);
}

void gdn_difference_squares(const real_t *x, const double *ref, size_t count, const double scales[2], double out[2])
{
    squares(x, ref, count, 0, scales, out);
}

double gdn_relative_from(const double scales[2], const double sums[2])
{
    const double difference = scales[0] * sqrt(sums[0]);
    if (difference == 0)
        return 0;
    return scales[1] > 0 ? (scales[0] / scales[1]) * sqrt(sums[0] / sums[1]) : difference;
}

static gdn_difference compare(const real_t *x, const double *ref, size_t count, int round_reference)
{
    double extreme[3] = {0, 0, 0}, sums[2] = {0, 0};
    extremes(x, ref, count, round_reference, extreme);
    squares(x, ref, count, round_reference, extreme, sums);
    gdn_difference d = {gdn_relative_from(extreme, sums), extreme[0], (size_t)extreme[2]};
    if (d.non_finite)
        d.relative = d.max_absolute = NAN;
    return d;
}

gdn_difference gdn_compare(const real_t *x, const double *ref, size_t count) { return compare(x, ref, count, 0); }

gdn_difference gdn_compare_representable(const real_t *x, const double *ref, size_t count)
{
    return compare(x, ref, count, 1);
}

/* NaN is the worst of all: fmax alone would drop it */
static double worse(double a, double b) { return isnan(a) || isnan(b) ? NAN : fmax(a, b); }

gdn_difference gdn_worse(gdn_difference a, gdn_difference b)
{
    gdn_difference d;
    d.non_finite = a.non_finite + b.non_finite;
    d.relative = (d.non_finite) ? NAN : worse(a.relative, b.relative);
    d.max_absolute = (d.non_finite) ? NAN : worse(a.max_absolute, b.max_absolute);
    return d;
}

int gdn_within(gdn_difference d, double tolerance) { return d.non_finite == 0 && d.relative <= tolerance; }
