/* timing.h -- wall-clock time on the monotonic clock, and the median of runs. */
#ifndef GDN_TIMING_H
#define GDN_TIMING_H

#include <stddef.h>

double gdn_now_seconds(void);
/* Median of count values (sorts them in place). */
double gdn_median(double *values, size_t count);

#endif
