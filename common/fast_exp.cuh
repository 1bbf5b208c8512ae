/* fast_exp.cuh -- e^x and 2^x by the special-function unit (PTX ex2.approx), for the factors
 * of the gates, exp(gamma_i - gamma_j), that the tensor-core kernels make by the thousand.
 */
#pragma once

constexpr double LOG2_E = 1.4426950408889634; /* log2(e): e^x = 2^(x log2 e) */
/* 2^x by the special-function unit, one instruction (PTX ex2.approx.ftz: relative error about
   2^-22; a result under 2^-126 is flushed to 0, where exp2f spends four more instructions a call
   to keep such values, which neither P nor Tm could use) */
__device__ __forceinline__ static float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* e^x as 2^(x log2 e): a multiply and one 2^x, where expf takes about 18 instructions with its
   branch. The gates' factors e^(gamma_i - gamma_l) are made so in kernels 1 and 3 (x <= 0, the
   difference taken in double and rounded to float first, as for expf) */
__device__ __forceinline__ static float exp_approx(float x) { return exp2_approx(x * (float)LOG2_E); }
