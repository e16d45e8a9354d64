/* Kilobyte runtime: TFLite's fixed-point requantisation, bit for bit, free of undefined behaviour.
 *
 * MultiplyByQuantizedMultiplier is TFLite's double-rounding form (TFLite Micro's default build):
 *   RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * 2^max(shift,0), mult), max(-shift,0)).
 * Where TFLite's C++ relies on int32 wrap-around (x * 2^shift), we compute in uint32 and convert back, which
 * gives the same two's-complement result without signed overflow. Right shifts of negative values are
 * arithmetic on every compiler we target (implementation-defined in C99, not undefined).
 */
#ifndef KB_REQUANT_H
#define KB_REQUANT_H

#include <stdint.h>

/* round(a * b / 2^31), ties away from zero; saturates the single overflow case INT32_MIN * INT32_MIN. */
static inline int32_t kb_sat_rounding_doubling_high_mul(int32_t a, int32_t b)
{
    if (a == INT32_MIN && b == INT32_MIN) {
        return INT32_MAX;
    }
    const int64_t ab = (int64_t)a * (int64_t)b;          /* |ab| <= 2^62: exact */
    const int64_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31)); /* C99 division truncates toward zero, as C++ */
}

/* x / 2^exponent rounded to nearest, ties away from zero; 0 <= exponent <= 31. */
static inline int32_t kb_rounding_divide_by_pot(int32_t x, int exponent)
{
    const int32_t mask = (int32_t)(((uint32_t)1 << exponent) - 1u);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/* TFLite MultiplyByQuantizedMultiplier: x * mult * 2^(shift - 31), -31 <= shift <= 30. */
static inline int32_t kb_multiply_by_quantized_multiplier(int32_t x, int32_t mult, int shift)
{
    const int left = shift > 0 ? shift : 0;
    const int right = shift > 0 ? 0 : -shift;
    const int32_t shifted = (int32_t)((uint32_t)x << left); /* TFLite's x * (1 << left), wrapping */
    return kb_rounding_divide_by_pot(kb_sat_rounding_doubling_high_mul(shifted, mult), right);
}

/* a + b with two's-complement wrap-around (the int32 accumulator's behaviour in TFLite), without signed overflow. */
static inline int32_t kb_wrapping_add(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a + (uint32_t)b);
}

/* Clamp to [lo, hi] (a sub-range of int8) and narrow. */
static inline int8_t kb_clamp_i8(int32_t v, int32_t lo, int32_t hi)
{
    if (v < lo) {
        v = lo;
    }
    if (v > hi) {
        v = hi;
    }
    return (int8_t)v;
}

/* The epilogue of conv / depthwise / FC: int32 accumulator (bias included) -> int8 output. */
static inline int8_t kb_requantize(int32_t acc, int32_t mult, int32_t shift, int32_t out_offset, int32_t act_min,
                                   int32_t act_max)
{
    int32_t v = kb_multiply_by_quantized_multiplier(acc, mult, (int)shift);
    /* Pre-clamp so adding the offset cannot overflow; any |v| > 2^16 clamps to the same int8 anyway. */
    if (v > 65536) {
        v = 65536;
    } else if (v < -65536) {
        v = -65536;
    }
    return kb_clamp_i8(v + out_offset, act_min, act_max);
}

#endif /* KB_REQUANT_H */
