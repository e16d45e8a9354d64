/* Kilobyte runtime, Cortex-M DSP kernels: the requantisation of the arm/ kernels (int32 accumulator -> int8 output),
 * TFLite's MultiplyByQuantizedMultiplier, output offset and clamp, bit for bit like kb_requantize (kb_requant.h) but
 * in fewer instructions. Three forms of the same function:
 *   - kb_arm_rq (kb_arm_requantize for one-off calls): TFLite's two roundings, branch-free, ~20 instructions; the
 *     direct conv paths (arm/kb_conv.c, the conv part of arm/kb_conv_add.c), arm/kb_fc.c and arm/kb_depthwise.c;
 *   - kb_arm_rq1 (kb_arm_requantize1): both roundings as one, two SMLALs and a shift, ~13 instructions, SSAT as the
 *     clamp where it is the full int8 range; the two-column conv path and the wide path's C fallback
 *     (arm/kb_conv.c), the in-place depthwise kernels and the ADD's rescales of arm/kb_conv_add.c;
 *   - the one-SMMLAR form of kb_arm_wide.S (5 instructions), exact on a narrower domain that kb_wide_job_ok
 *     (kb_arm_wide.h) checks; derivation there.
 * tests/targets/test_dsp_kernels.py checks each against kb_requantize and numpy on target.
 */
#ifndef KB_ARM_REQUANT_H
#define KB_ARM_REQUANT_H

#include <arm_acle.h>
#include <stdint.h>

/* One output channel's requantisation, the shift split up once per channel (kb_arm_rq_of). */
typedef struct {
    int32_t mult;        /* the fixed-point multiplier: 0 or in [2^30, 2^31), never INT32_MIN */
    int32_t left, right; /* shift = left - right, both >= 0 */
    int32_t mask, half;  /* 2^right - 1 and mask >> 1: RoundingDivideByPOT's remainder mask and threshold */
    int32_t out_offset, act_min, act_max;
} kb_arm_rq;

static inline kb_arm_rq kb_arm_rq_of(int32_t mult, int32_t shift, int32_t out_offset, int32_t act_min,
                                     int32_t act_max)
{
    kb_arm_rq q;
    q.mult = mult;
    q.left = shift > 0 ? shift : 0;
    q.right = q.left - shift;
    q.mask = (int32_t)((1u << q.right) - 1u);
    q.half = q.mask >> 1;
    q.out_offset = out_offset, q.act_min = act_min, q.act_max = act_max;
    return q;
}

/* kb_requantize (kb_requant.h), the same function of its arguments, in fewer instructions (~20, no branch):
 *  - SaturatingRoundingDoublingHighMul(x, mult) = floor((x * mult + 2^30) / 2^31): TFLite's nudge 1 - 2^30 for
 *    negative products followed by truncating division is exactly this floor; its saturating case needs
 *    mult == INT32_MIN, which a generated multiplier never is;
 *  - RoundingDivideByPOT adds 1 when remainder > threshold, i.e. when threshold - remainder is negative (both are
 *    in [0, 2^31), so the difference cannot overflow): its sign bit is the increment;
 *  - a saturating add of the output offset replaces the +-65536 pre-clamp: every value it changes lies outside
 *    [act_min, act_max] either way.
 * tests/targets/test_dsp_kernels.py checks it against kb_requantize on target, on random and edge values.
 * kb_arm_scale is the first step alone (kb_multiply_by_quantized_multiplier), for ADD's rescales. */
static inline int32_t kb_arm_scale(const kb_arm_rq *q, int32_t acc)  /* MultiplyByQuantizedMultiplier */
{
    const int32_t x = (int32_t)((uint32_t)acc << q->left);  /* TFLite's x * 2^left, wrapping */
    const int32_t high = (int32_t)(((int64_t)x * q->mult + (1 << 30)) >> 31);
    const int32_t threshold = q->half - (high >> 31);        /* half + (high < 0) */
    const int32_t round_up = (int32_t)((uint32_t)(threshold - (high & q->mask)) >> 31);
    return (high >> q->right) + round_up;
}

static inline int8_t kb_arm_rq_apply(const kb_arm_rq *q, int32_t acc)
{
    int32_t v = __qadd(kb_arm_scale(q, acc), q->out_offset);
    v = v < q->act_min ? q->act_min : v;
    v = v > q->act_max ? q->act_max : v;
    return (int8_t)v;
}

/* The same function again in one rounding step, for the two-column conv path, the wide path's C fallback and the
 * depthwise kernels (~13 instructions instead of ~20; kb_arm_wide.S goes one step further): with
 * x = acc << left and r = right >= 1, TFLite's floor((x * mult + 2^30) / 2^31) followed by rounding half away from
 * zero on division by 2^r equals (x * mult + 2^30 + 2^(30 + r) - 2^31 [x < 0]) >> (31 + r) in 64 bits, whose high word
 * is what remains after the first 32 bits of shift (so: two SMLALs and one ASR by r - 1). Rounding away from zero,
 * h / 2^r -> (h + 2^(r - 1) - [h < 0]) >> r, folds into the first floor because adding multiples of 2^31 commutes with
 * it; [h < 0] may be replaced by [x < 0] because x < 0 with h >= 0 means h = 0, which rounds to 0 either way. With
 * r = 0 it is the first step alone, (x * mult + 2^30) >> 31. Checked against kb_requantize on target (see
 * tests/targets/test_dsp_kernels.py) and, over all r, against numpy. */
typedef struct {
    int32_t mult;
    uint32_t round_lo;  /* 2^30 + 2^(30 + right), or 2^30 when right == 0, as a 64-bit value */
    int32_t round_hi;
    int32_t right1;     /* right - 1; -1 when right == 0 */
    int32_t out_offset;
    int32_t left, act_min, act_max;
    int32_t fast;       /* left == 0, right >= 1 and clamp [-128, 127]: kb_arm_rq1_fast applies */
} kb_arm_rq1;

/* The clamp is the full int8 range (no activation, or ReLU with zero point -128): SSAT can do it. */
static inline int kb_arm_full_clamp(int32_t act_min, int32_t act_max)
{
    return act_min == -128 && act_max == 127;
}

/* Whether the requantisation of (shift, clamp) is `fast`: multiplier < 1 (shift < 0) and the full clamp. */
static inline int kb_arm_rq1_is_fast(int32_t shift, int32_t act_min, int32_t act_max)
{
    return shift < 0 && kb_arm_full_clamp(act_min, act_max);
}

static inline kb_arm_rq1 kb_arm_rq1_of(int32_t mult, int32_t shift, int32_t out_offset, int32_t act_min,
                                       int32_t act_max)
{
    kb_arm_rq1 q;
    if (shift < 0) {
        const int32_t right = -shift;  /* 1..31 */
        const uint64_t round = (1ull << 30) + ((uint64_t)(1u << right) << 30);  /* no variable 64-bit shift */
        q.mult = mult, q.left = 0, q.right1 = right - 1;
        q.round_lo = (uint32_t)round, q.round_hi = (int32_t)(round >> 32);
    } else {  /* right == 0: the first rounding alone */
        q.mult = mult, q.left = shift, q.right1 = -1, q.round_lo = 1u << 30, q.round_hi = 0;
    }
    q.out_offset = out_offset, q.act_min = act_min, q.act_max = act_max;
    q.fast = kb_arm_rq1_is_fast(shift, act_min, act_max);
    return q;
}

/* round + x * mult (+ [x < 0] * -2^31 when right >= 1), as the two SMLALs (GCC spends six instructions on the second
 * term written in C), then the high word's shift; `right0` (right == 0) is a constant where inlined. */
static inline __attribute__((always_inline)) int32_t kb_arm_scale1(const kb_arm_rq1 *q, int32_t acc, int right0)
{
    const int32_t x = (int32_t)((uint32_t)acc << q->left), sign = (int32_t)((uint32_t)x >> 31);
    uint32_t lo = q->round_lo;
    int32_t hi = q->round_hi;
    __asm__("smlal %0, %1, %2, %3" : "+r"(lo), "+r"(hi) : "r"(x), "r"(q->mult));
    if (right0) {
        return (int32_t)(((uint32_t)hi << 1) | (lo >> 31));
    }
    __asm__("smlal %0, %1, %2, %3" : "+r"(lo), "+r"(hi) : "r"(sign), "r"(INT32_MIN));
    return hi >> q->right1;
}

/* The common case (q->fast): SSAT is the clamp. */
static inline __attribute__((always_inline)) int8_t kb_arm_rq1_fast(const kb_arm_rq1 *q, int32_t acc)
{
    return (int8_t)__ssat(__qadd(kb_arm_scale1(q, acc, 0), q->out_offset), 8);
}

static inline int8_t kb_arm_rq1_apply(const kb_arm_rq1 *q, int32_t acc)
{
    if (q->fast) {
        return kb_arm_rq1_fast(q, acc);
    }
    int32_t v = __qadd(q->right1 < 0 ? kb_arm_scale1(q, acc, 1) : kb_arm_scale1(q, acc, 0), q->out_offset);
    v = v < q->act_min ? q->act_min : v;
    v = v > q->act_max ? q->act_max : v;
    return (int8_t)v;
}

/* The one-SMMLAR form of kb_arm_wide.S (derivation there), in C and for any clamp, where its domain holds:
 *     out = clamp(SMMLAR(2 * acc, mult, ((1 + 2 * out_offset) << (r - 1)) - [acc < 0]) >> r, act_min, act_max)
 * with r = -shift in 1..KB_ARM_RQS_MAX_RIGHT, an int8 out_offset and |acc| < 2^30 (the caller's bound: see
 * kb_arm_rqs_ok). The value before the clamp is TFLite's requantised value + out_offset exactly (no saturation can
 * occur in that domain), so any [act_min, act_max] within int8 clamps it as TFLite does. 5 instructions + the clamp
 * (SSAT where it is the full int8 range). tests/targets/test_dsp_kernels.py checks the form in numpy over the
 * domain and the kernels that use it on target. */
#define KB_ARM_RQS_MAX_RIGHT 23
#define KB_ARM_RQS_MAX_ACC (1 << 30)

typedef struct {
    int32_t mult, k, right, act_min, act_max, full;
} kb_arm_rqs;

/* Whether (shift, out_offset) lie in the one-SMMLAR form's domain; the caller bounds |acc| < KB_ARM_RQS_MAX_ACC. */
static inline int kb_arm_rqs_ok(int32_t shift, int32_t out_offset)
{
    return shift <= -1 && shift >= -KB_ARM_RQS_MAX_RIGHT && out_offset >= -128 && out_offset <= 127;
}

static inline kb_arm_rqs kb_arm_rqs_of(int32_t mult, int32_t shift, int32_t out_offset, int32_t act_min,
                                       int32_t act_max)
{
    kb_arm_rqs q;
    q.mult = mult, q.right = -shift;
    q.k = (1 + 2 * out_offset) * (1 << (q.right - 1));  /* |k| < 2^30: no overflow, no negative shift */
    q.act_min = act_min, q.act_max = act_max, q.full = kb_arm_full_clamp(act_min, act_max);
    return q;
}

static inline __attribute__((always_inline)) int8_t kb_arm_rqs_apply(const kb_arm_rqs *q, int32_t acc)
{
    int32_t v;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(v) : "r"((int32_t)((uint32_t)acc << 1)), "r"(q->mult),
            "r"(q->k + (acc >> 31)));
    v >>= q->right;
    if (q->full) {
        return (int8_t)__ssat(v, 8);
    }
    v = v < q->act_min ? q->act_min : v;
    v = v > q->act_max ? q->act_max : v;
    return (int8_t)v;
}

static inline int8_t kb_arm_requantize1(int32_t acc, int32_t mult, int32_t shift, int32_t out_offset,
                                        int32_t act_min, int32_t act_max)
{
    const kb_arm_rq1 q = kb_arm_rq1_of(mult, shift, out_offset, act_min, act_max);
    return kb_arm_rq1_apply(&q, acc);
}

/* kb_requantize's arguments, one call (where nothing is shared between outputs). */
static inline int8_t kb_arm_requantize(int32_t acc, int32_t mult, int32_t shift, int32_t out_offset,
                                       int32_t act_min, int32_t act_max)
{
    const kb_arm_rq q = kb_arm_rq_of(mult, shift, out_offset, act_min, act_max);
    return kb_arm_rq_apply(&q, acc);
}

#endif /* KB_ARM_REQUANT_H */
