/* test_half.c -- round-to-nearest-even conversions to bf16 and fp16, against known bit patterns
 * (IEEE 754 binary16 values; cross-checked with NumPy's float16 cast), ties, and round trips. */
#include <math.h>
#include <stdint.h>

#include "../common/half.h"
#include "test_support.h"

static const struct {
    float value;
    uint16_t fp16;
} fp16_cases[] = {
    {1.0f, 0x3c00},          {-2.0f, 0xc000},        {65504.0f, 0x7bff}, /* largest finite */
    {65519.0f, 0x7bff},      {65520.0f, 0x7c00},     /* halfway to the next binade: infinity */
    {0x1p-24f, 0x0001},      /* smallest subnormal */ {0x1p-25f, 0x0000}, /* half of it: tie to even zero */
    {0x1.8p-24f, 0x0002},    /* 1.5 units: tie to even 2 */ {6.103515625e-05f, 0x0400}, /* smallest normal */
    {0.1f, 0x2e66},          {1.0f / 3, 0x3555},     {3.0e-5f, 0x01f7},  /* subnormal */
    {1.00048828125f, 0x3c00}, /* 1 + 2^-11: tie, to even */ {1.00146484375f, 0x3c02}, /* 1 + 3 2^-11: tie, up to even */
    {1.0009765625f, 0x3c01}, {-0.0f, 0x8000},         {1e5f, 0x7c00},
};

START_TEST(fp16_known_bit_patterns)
{
    uint16_t got = float_to_fp16(fp16_cases[_i].value);
    ck_assert_msg(got == fp16_cases[_i].fp16, "%.9g: got 0x%04x, want 0x%04x", fp16_cases[_i].value, got,
                  fp16_cases[_i].fp16);
}
END_TEST

static const struct {
    float value;
    uint16_t bf16;
} bf16_cases[] = {
    {1.0f, 0x3f80},
    {1.00390625f, 0x3f80},  /* 1 + 2^-8: tie, stays on even 0x3f80 */
    {1.01171875f, 0x3f82},  /* 1 + 3 2^-8: tie, up to even 0x3f82 */
    {3.14159265f, 0x4049},  /* 0x40490fdb */
    {0.1f, 0x3dcd},         /* 0x3dcccccd: low half above the tie, rounds up */
    {-1.5f, 0xbfc0},
    {3.4028235e38f, 0x7f80}, /* FLT_MAX rounds to infinity */
    {1e-40f, 0x0001},       /* float subnormal 0x000116c2 */
};

START_TEST(bf16_known_bit_patterns)
{
    uint16_t got = float_to_bf16(bf16_cases[_i].value);
    ck_assert_msg(got == bf16_cases[_i].bf16, "%.9g: got 0x%04x, want 0x%04x", bf16_cases[_i].value, got,
                  bf16_cases[_i].bf16);
}
END_TEST

/* Every 16-bit pattern survives a trip through float and back; NaN stays NaN. */
START_TEST(half_round_trips_every_pattern)
{
    for (uint32_t bits = 0; bits < 65536; bits++) {
        float as_fp16 = fp16_to_float((uint16_t)bits), as_bf16 = bf16_to_float((uint16_t)bits);
        if (isnan(as_fp16))
            ck_assert(isnan(fp16_to_float(float_to_fp16(as_fp16))));
        else
            ck_assert_msg(float_to_fp16(as_fp16) == bits, "fp16 0x%04x", bits);
        if (isnan(as_bf16))
            ck_assert(isnan(bf16_to_float(float_to_bf16(as_bf16))));
        else
            ck_assert_msg(float_to_bf16(as_bf16) == bits, "bf16 0x%04x", bits);
    }
    ck_assert_float_eq(fp16_to_float(0x7bff), 65504.0f);
    ck_assert_float_eq(fp16_to_float(0x0001), 0x1p-24f);
    ck_assert(isinf(fp16_to_float(0x7c00)));
}
END_TEST

Suite *half_suite(void)
{
    Suite *suite = suite_create("half");
    TCase *cases = tcase_create("rounding");
    tcase_add_loop_test(cases, fp16_known_bit_patterns, 0, (int)(sizeof fp16_cases / sizeof *fp16_cases));
    tcase_add_loop_test(cases, bf16_known_bit_patterns, 0, (int)(sizeof bf16_cases / sizeof *bf16_cases));
    tcase_add_test(cases, half_round_trips_every_pattern);
    suite_add_tcase(suite, cases);
    return suite;
}
