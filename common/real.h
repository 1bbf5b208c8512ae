/* real.h -- the floating-point type the CPU stages compute in.
 *
 * `make` builds the stages in float (the precision GPU kernels keep their state in);
 * `make PRECISION=double` defines GDN_DOUBLE and builds them in double. In double,
 * two stages that implement the same algebra agree to about 1e-12, which is how the
 * tests prove that a new stage computes the same thing as the one before it.
 */
#ifndef GDN_REAL_H
#define GDN_REAL_H

#include <math.h>

#ifdef GDN_DOUBLE
typedef double real_t;
#define REAL_NAME "double"
#define REAL_DIGITS 17 /* significant digits that name any value of the type */
static inline real_t real_exp(real_t x) { return exp(x); }
#else
typedef float real_t;
#define REAL_NAME "float"
#define REAL_DIGITS 9
static inline real_t real_exp(real_t x) { return expf(x); }
#endif

#endif
