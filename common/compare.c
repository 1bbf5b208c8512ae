#include "compare.h"

#include <math.h>

static gdn_difference compare(const real_t *x, const double *ref, size_t count, int round_reference)
{
    gdn_difference d = {0.0, 0.0, 0};
    double difference_squares = 0.0, reference_squares = 0.0;
    for (size_t i = 0; i < count; i++) {
        double a = (double)x[i], r = round_reference ? (double)(real_t)ref[i] : ref[i];
        if (!isfinite(a) || !isfinite(r)) {
            d.non_finite++;
            continue;
        }
        double delta = fabs(a - r);
        difference_squares += delta * delta;
        reference_squares += r * r;
        if (delta > d.max_absolute)
            d.max_absolute = delta;
    }
    double norm = sqrt(difference_squares);
    d.relative = reference_squares > 0.0 ? norm / sqrt(reference_squares) : norm;
    if (d.non_finite)
        d.relative = d.max_absolute = NAN;
    return d;
}

gdn_difference gdn_compare(const real_t *x, const double *ref, size_t count) { return compare(x, ref, count, 0); }

gdn_difference gdn_compare_representable(const real_t *x, const double *ref, size_t count)
{
    return compare(x, ref, count, 1);
}

gdn_difference gdn_worse(gdn_difference a, gdn_difference b)
{
    gdn_difference d;
    d.non_finite = a.non_finite + b.non_finite;
    d.relative = (d.non_finite) ? NAN : fmax(a.relative, b.relative);
    d.max_absolute = (d.non_finite) ? NAN : fmax(a.max_absolute, b.max_absolute);
    return d;
}

int gdn_within(gdn_difference d, double tolerance) { return d.non_finite == 0 && d.relative <= tolerance; }
