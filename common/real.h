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

/* A log gate as the chunked forms sum it (eq. 9 of docs/05_wy_chunked.md): g below -1000 taken
 * as -1000. Exact: e^-1000 is 0 in float and in double, so every decay that spans such a token is
 * 0 either way. Without it a gate of -1e16 swallows the small gates summed after it (gamma + g
 * rounds to gamma), and the differences gamma_i - gamma_j between later tokens come out 0: their
 * decay 1 instead of e^(g_j+1 + ... + g_i). A NaN stays NaN (the comparison is false). */
#define GDN_GATE_FLOOR (-1000.0)
static inline double gdn_summed_gate(double g) { return g < GDN_GATE_FLOOR ? GDN_GATE_FLOOR : g; }

#endif
