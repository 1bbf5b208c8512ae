#include "half.h"

#include <string.h>

static uint32_t float_bits(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

static float bits_float(uint32_t bits)
{
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

uint16_t float_to_bf16(float x)
{
    uint32_t bits = float_bits(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u)        /* NaN: keep it quiet and NaN */
        return (uint16_t)((bits >> 16) | 0x0040u);
    /* add 0x7fff plus the lowest kept bit: ties round to even, carries ripple into the exponent */
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

float bf16_to_float(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

uint16_t float_to_fp16(float x)
{
    uint32_t bits = float_bits(x);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u)                    /* NaN */
        return sign | 0x7e00u;
    if (magnitude >= 0x477ff000u)                   /* >= 65520 rounds past 65504: infinity */
        return sign | 0x7c00u;
    if (magnitude < 0x38800000u) {                  /* below 2^-14: fp16 subnormal or zero */
        /* the value in units of 2^-24, rounded to nearest even */
        uint32_t exponent = magnitude >> 23;
        if (exponent < 102)                         /* below 2^-25: rounds to zero */
            return sign;
        uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - exponent;            /* 14 .. 24 */
        uint32_t kept = mantissa >> shift, rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (kept & 1u)))
            kept++;
        return sign | (uint16_t)kept;
    }
    /* normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits */
    uint32_t rebased = magnitude - ((127u - 15u) << 23);
    uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
    return sign | (uint16_t)((rebased + rounding) >> 13);
}

float fp16_to_float(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
    if (exponent == 0x1f)                           /* infinity or NaN */
        return bits_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {                            /* zero or subnormal: mantissa x 2^-24 */
        float value = (float)mantissa * 0x1p-24f;
        return sign ? -value : value;
    }
    return bits_float(sign | ((exponent + 127u - 15u) << 23) | (mantissa << 13));
}
