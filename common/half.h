/* half.h -- 16-bit floating-point formats, converted with round-to-nearest-even.
 *
 * bf16 (bfloat16): 1 sign, 8 exponent, 7 mantissa bits: float32 with the low 16 bits rounded
 * away, so the same range as float32 and 3 significant decimal digits.
 * fp16 (IEEE 754 binary16): 1 sign, 5 exponent, 10 mantissa bits: range 6e-8 (subnormal) to
 * 65504, about 3.3 decimal digits.
 * Round-to-nearest-even, as the hardware does: a value exactly halfway between two
 * representable ones goes to the one with an even last bit. NaN stays NaN; values beyond
 * the largest finite fp16 round to infinity. Used by the precision study (plots/) and by the
 * GPU stages, which take bf16 inputs.
 */
#ifndef GDN_HALF_H
#define GDN_HALF_H

#include <stdint.h>

uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t bits);
uint16_t float_to_fp16(float x);
float fp16_to_float(uint16_t bits);

#endif
