/* random.h -- the seeded generator every binary draws its inputs from.
 *
 * Counter-based: the n-th number of stream s for seed x is a pure function of
 * (x, s, n), so an element's value does not depend on the order, the thread or the
 * device that draws it, and a CPU and a GPU binary given the same seed see the same
 * inputs. The bits are SplitMix64 (Steele, Lea and Flood, 2014): the n-th output of
 * the SplitMix64 sequence whose starting value is derived from (seed, stream).
 * Normals use Box-Muller with the cosine branch only, one normal per counter pair.
 *
 * The integer bits are identical everywhere. The normals go through log, sqrt and
 * cos in double; glibc's versions are accurate to within an ulp, and the result is
 * rounded to float, so a different libm could change an input in its last float bit
 * only in rare ties. docs/contract.md section 3 fixes what each tensor is drawn from.
 */
#ifndef GDN_RANDOM_H
#define GDN_RANDOM_H

#include <stdint.h>

/* One stream per input tensor, so that adding h0 does not change q, k, v, g or beta. */
enum random_stream {
    STREAM_Q = 1,
    STREAM_K = 2,
    STREAM_V = 3,
    STREAM_G = 4,
    STREAM_BETA = 5,
    STREAM_H0 = 6,
    STREAM_DO = 7,  /* the backward stages' cotangents (gradients.h) */
    STREAM_DHT = 8,
    STREAM_TEST = 100 /* tests draw their own extra values from streams >= 100 */
};

uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t counter);
/* Uniform in (0, 1]: never 0, so log() of it is finite. */
double random_uniform(uint64_t seed, uint64_t stream, uint64_t counter);
/* Standard normal N(0, 1), from counters 2n and 2n + 1. */
double random_normal(uint64_t seed, uint64_t stream, uint64_t n);

#endif
