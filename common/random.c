#include "random.h"

#include <math.h>

static const uint64_t golden_gamma = 0x9E3779B97F4A7C15ULL; /* 2^64 / golden ratio */

/* SplitMix64's output function: a bijective mix of a 64-bit value. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t counter)
{
    uint64_t start = mix64(seed * golden_gamma + mix64(stream + golden_gamma));
    return mix64(start + (counter + 1) * golden_gamma);
}

double random_uniform(uint64_t seed, uint64_t stream, uint64_t counter)
{
    /* the top 53 bits, plus one: 1 .. 2^53, scaled to (0, 1] */
    return (double)((random_bits(seed, stream, counter) >> 11) + 1) * 0x1.0p-53;
}

double random_normal(uint64_t seed, uint64_t stream, uint64_t n)
{
    const double two_pi = 6.283185307179586476925286766559;
    double u1 = random_uniform(seed, stream, 2 * n);
    double u2 = random_uniform(seed, stream, 2 * n + 1);
    return sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
}
