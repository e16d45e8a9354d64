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

/* a * b / 2^31 rounded to nearest; saturates the single overflow case INT32_MIN * INT32_MIN.
 * TFLite adds a nudge of 2^30 (ab >= 0) or 1 - 2^30 (ab < 0) and divides truncating toward zero. For ab < 0 the
 * truncation is the floor of (ab + 1 - 2^30 + 2^31 - 1) / 2^31 = (ab + 2^30) / 2^31, the same expression as for
 * ab >= 0, so one add and one arithmetic shift give TFLite's result for every input (ties go up: -0.5 -> 0). */
static inline int32_t kb_sat_rounding_doubling_high_mul(int32_t a, int32_t b)
{
    if (a == INT32_MIN && b == INT32_MIN) {
        return INT32_MAX;
    }
    const int64_t ab = (int64_t)a * (int64_t)b;           /* |ab| <= 2^62: exact */
    return (int32_t)((ab + ((int64_t)1 << 30)) >> 31);   /* in [-2^31 + 1, 2^31 - 1] */
}

/* x / 2^exponent rounded to nearest, ties away from zero; 0 <= exponent <= 31. TFLite adds 1 when the remainder
 * exceeds half (half + 1 for x < 0); equivalently floor((2x + 2^exponent - [x < 0]) / 2^(exponent + 1)), one bit
 * wider so that exponent 0 needs no special case (2x + 1 - 1 is even, so the - [x < 0] never changes a tie there). */
static inline int32_t kb_rounding_divide_by_pot(int32_t x, int exponent)
{
    const int64_t twice = 2 * (int64_t)x + ((int64_t)1 << exponent) - (x < 0 ? 1 : 0);
    return (int32_t)(twice >> (exponent + 1));
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

/* The epilogue of conv / depthwise / FC: int32 accumulator (bias included) -> int8 output. Clamping to
 * [act_min - out_offset, act_max - out_offset] before adding the offset is the same as clamping after it, and the
 * sum cannot overflow (the bounds are within +-255). */
static inline int8_t kb_requantize(int32_t acc, int32_t mult, int32_t shift, int32_t out_offset, int32_t act_min,
                                   int32_t act_max)
{
    int32_t v = kb_multiply_by_quantized_multiplier(acc, mult, (int)shift);
    const int32_t lo = act_min - out_offset, hi = act_max - out_offset;
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    return (int8_t)(v + out_offset);
}

/* kb_requantize for kernels that requantise many values per channel: the channel's constants are prepared once
 * (kb_rq_channel_of) and the clamp bounds shifted once (kb_rq_bounds_of), so the per-value work is the arithmetic
 * alone; kb_rq_apply(acc, ...) == kb_requantize(acc + bias (wrapping), mult, shift, out_offset, act_min, act_max). */
typedef struct {
    int64_t half;          /* 2^right: kb_rounding_divide_by_pot's rounding term, one bit wider */
    int32_t bias, mult;
    int32_t left, right1;  /* max(shift, 0), max(-shift, 0) + 1 */
} kb_rq_channel;

typedef struct {
    int32_t lo, hi;        /* act_min - out_offset, act_max - out_offset */
    int32_t out_offset;
} kb_rq_bounds;

static inline kb_rq_channel kb_rq_channel_of(int32_t bias, int32_t mult, int32_t shift)
{
    const int32_t right = shift > 0 ? 0 : -shift;
    kb_rq_channel ch = {(int64_t)1 << right, bias, mult, shift > 0 ? shift : 0, right + 1};
    return ch;
}

static inline kb_rq_bounds kb_rq_bounds_of(int32_t out_offset, int32_t act_min, int32_t act_max)
{
    kb_rq_bounds b = {act_min - out_offset, act_max - out_offset, out_offset};
    return b;
}

/* kb_multiply_by_quantized_multiplier(x, mult, shift) with ch = kb_rq_channel_of(any bias, mult, shift). */
static inline int32_t kb_rq_scale(int32_t x, const kb_rq_channel *ch)
{
    const int32_t hm = kb_sat_rounding_doubling_high_mul((int32_t)((uint32_t)x << ch->left), ch->mult);
    return (int32_t)((2 * (int64_t)hm + ch->half - (hm < 0 ? 1 : 0)) >> ch->right1);  /* RoundingDivideByPOT */
}

static inline int8_t kb_rq_apply(int32_t acc, const kb_rq_channel *ch, const kb_rq_bounds *b)
{
    int32_t v = kb_rq_scale(kb_wrapping_add(acc, ch->bias), ch);
    v = v < b->lo ? b->lo : v;
    v = v > b->hi ? b->hi : v;
    return (int8_t)(v + b->out_offset);
}

#endif /* KB_REQUANT_H */
