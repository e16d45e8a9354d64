/* Kilobyte runtime: TFLite's fixed-point requantisation, bit for bit, free of undefined behaviour.
 *
 * MultiplyByQuantizedMultiplier is TFLite's double-rounding form (TFLite Micro's default build):
 *   RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * 2^max(shift,0), mult), max(-shift,0)).
 * Where TFLite's C++ relies on int32 wrap-around (x * 2^shift), we compute in uint32 and convert back, which
 * gives the same two's-complement result without signed overflow. Right shifts of negative values are
 * arithmetic on every compiler we target (implementation-defined in C99, not undefined).
 *
 * Besides the one-value helpers, kernels that requantise many values per output channel use kb_rq_channel (the
 * channel's bias, multiplier and split shift, prepared once) with kb_rq_apply (one value) or kb_rq_row (a row of
 * values of one channel, in a form gcc vectorises). All forms compute the same function, bit for bit.
 *
 * Last, kb_const_op: the one requantising loop of kb_add_const (kb_add.c) and kb_mul_const (kb_elementwise.c), here
 * because this header is the one both files include (which is also why it includes kilobyte.h).
 */
#ifndef KB_REQUANT_H
#define KB_REQUANT_H

#include <stdint.h>

#include "kilobyte.h"

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

/* -- many values per channel ------------------------------------------------------------------------------------ */

typedef struct {
    int32_t bias, mult;
    int32_t left, right;  /* max(shift, 0), max(-shift, 0) */
    int32_t mask;         /* 2^right - 1 */
} kb_rq_channel;

typedef struct {
    int32_t lo, hi;       /* act_min - out_offset, act_max - out_offset */
    int32_t out_offset;
} kb_rq_bounds;

static inline kb_rq_channel kb_rq_channel_of(int32_t bias, int32_t mult, int32_t shift)
{
    const int32_t right = shift > 0 ? 0 : -shift;
    kb_rq_channel ch = {bias, mult, shift > 0 ? shift : 0, right, (int32_t)(((uint32_t)1 << right) - 1u)};
    return ch;
}

static inline kb_rq_bounds kb_rq_bounds_of(int32_t out_offset, int32_t act_min, int32_t act_max)
{
    kb_rq_bounds b = {act_min - out_offset, act_max - out_offset, out_offset};
    return b;
}

/* RoundingDivideByPOT by the channel's right shift (kb_rounding_divide_by_pot with its mask prepared). */
static inline int32_t kb_rq_divide(int32_t x, const kb_rq_channel *ch)
{
    const int32_t threshold = (ch->mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> ch->right) + ((x & ch->mask) > threshold ? 1 : 0);
}

/* kb_multiply_by_quantized_multiplier(x, mult, shift) for ch = kb_rq_channel_of(any bias, mult, shift). */
static inline int32_t kb_rq_scale(int32_t x, const kb_rq_channel *ch)
{
    return kb_rq_divide(kb_sat_rounding_doubling_high_mul((int32_t)((uint32_t)x << ch->left), ch->mult), ch);
}

/* kb_requantize(acc + bias (wrapping), mult, shift, out_offset, act_min, act_max), with ch and b prepared. */
static inline int8_t kb_rq_apply(int32_t acc, const kb_rq_channel *ch, const kb_rq_bounds *b)
{
    int32_t v = kb_rq_scale(kb_wrapping_add(acc, ch->bias), ch);
    v = v < b->lo ? b->lo : v;
    v = v > b->hi ? b->hi : v;
    return (int8_t)(v + b->out_offset);
}

/* kb_sat_rounding_doubling_high_mul in a form gcc vectorises with SSE2 (which has no 64-bit arithmetic shift and
 * no signed 32x32->64 multiply): the unsigned product xu * mu, its high word corrected to the signed product's
 * (subtract mu when a < 0 and xu when b < 0, modulo 2^32), then bits 31..62 of (ab + 2^30), which fit in int32. */
static inline int32_t kb_srdhm_v(int32_t a, int32_t b)
{
    const uint32_t au = (uint32_t)a, bu = (uint32_t)b;
    const uint64_t p = (uint64_t)au * bu;
    const uint32_t high = (uint32_t)(p >> 32) - (a < 0 ? bu : 0u) - (b < 0 ? au : 0u);
    const uint32_t low = (uint32_t)p + (1u << 30);
    const uint32_t carry = low < (1u << 30) ? 1u : 0u;
    const int32_t h = (int32_t)(((high + carry) << 1) | (low >> 31));
    return a == INT32_MIN && b == INT32_MIN ? INT32_MAX : h;
}

/* kb_rq_scale for loops that gcc should vectorise (every value with the same ch). */
static inline int32_t kb_rq_scale_v(int32_t x, const kb_rq_channel *ch)
{
    return kb_rq_divide(kb_srdhm_v((int32_t)((uint32_t)x << ch->left), ch->mult), ch);
}

/* out[i] = kb_rq_apply(acc[i], ch, b), i < n: whole 16-value groups in the form gcc -O3 vectorises (all values
 * share the channel's constants), the rest one by one in the scalar form, which is cheaper there. */
static inline void kb_rq_row(const int32_t *acc, int32_t n, const kb_rq_channel *ch, const kb_rq_bounds *b,
                             int8_t *out)
{
    const kb_rq_channel c = *ch;  /* locals: the int8 stores below may not alias them */
    const kb_rq_bounds d = *b;
    const int32_t n16 = n & ~15;
    for (int32_t i = 0; i < n16; ++i) {
        int32_t v = kb_rq_scale_v(kb_wrapping_add(acc[i], c.bias), &c);
        v = v < d.lo ? d.lo : v;
        v = v > d.hi ? d.hi : v;
        out[i] = (int8_t)(v + d.out_offset);
    }
    for (int32_t i = n16; i < n; ++i) {
        out[i] = kb_rq_apply(acc[i], &c, &d);
    }
}

/* kb_add_const and kb_mul_const (kb_const_params): the loop over rows x cols pixels of c elements, each element read
 * before it is written (out may be in), and the output's clamp and offset. `mul` (a constant where this is inlined)
 * chooses the arithmetic: ADD / SUB rescale the activation (negated when it is subtracted) and add the prepared term;
 * MUL rescales the product of the two. */
static inline __attribute__((always_inline)) void kb_const_op(const kb_const_params *p, const int8_t *in,
                                                              const int32_t *terms, int8_t *out, int mul)
{
    const kb_const_params q = *p;  /* locals: the int8 stores may not alias them */
    const kb_rq_channel si = kb_rq_channel_of(0, q.in_mult, q.in_shift);
    const kb_rq_channel so = kb_rq_channel_of(0, q.out_mult, q.out_shift);
    const kb_rq_bounds bd = kb_rq_bounds_of(q.out_offset, q.act_min, q.act_max);
    for (int32_t r = 0; r < q.rows; ++r) {
        for (int32_t col = 0; col < q.cols; ++col) {
            const int8_t *x = in + r * q.in_row + col * q.in_col;
            const int32_t *t = terms + r * q.k_row + col * q.k_col;
            int8_t *y = out + r * q.out_row + col * q.out_col;
            for (int32_t i = 0; i < q.c; ++i) {
                int32_t v;
                if (mul) {  /* both factors are in [-255, 255] */
                    v = kb_rq_scale_v((x[i * q.in_c] + q.in_offset) * t[i * q.k_c], &so);
                } else {  /* (x + offset) << 20 and its rescale stay below 2^28 in magnitude, as do the terms */
                    const int32_t sx = kb_rq_scale_v((x[i * q.in_c] + q.in_offset) * (1 << q.left_shift), &si);
                    v = kb_rq_scale_v(((sx ^ q.neg) - q.neg) + t[i * q.k_c], &so);
                }
                v = v < bd.lo ? bd.lo : v;
                v = v > bd.hi ? bd.hi : v;
                y[i] = (int8_t)(v + bd.out_offset);
            }
        }
    }
}

#endif /* KB_REQUANT_H */
