/* Kilobyte runtime, Cortex-M DSP kernels (codegen stage, target-optimised): the Armv7E-M SIMD helpers shared by
 * arm/kb_conv.c, arm/kb_depthwise.c and arm/kb_fc.c, written with GCC's ACLE intrinsics (arm_acle.h).
 *
 * Dot products run on four int8 values per 32-bit load (unaligned LDR is fine on M4/M7). SXTB16 splits a word
 * [b0 b1 b2 b3] into the int16 pairs [b0, b2] ("even") and, rotated by 8, [b1, b3] ("odd"); splitting both operands
 * the same way pairs the right products, so SMLAD adds b0*c0 + b2*c2 and then b1*c1 + b3*c3: 4 MACs for 2 unpacks
 * per operand and 2 SMLADs, with no re-packing. The input offset (-zero point) is either added while unpacking
 * (SXTAB16 with the offset in both halfwords: x + offset stays within int16, |x + offset| <= 255) or, where every
 * tap of a window is present, folded into the accumulator's start as bias + offset * sum(w) (`kb_arm_base`).
 * SMLAD wraps modulo 2^32 like TFLite's int32 accumulator; only the order of additions differs, which modular
 * addition does not see, so results are bit-identical to the portable kernels.
 *
 * GCC 12's arm_acle.h has no __ror, so the rotated forms are one-instruction inline asm.
 */
#ifndef KB_ARM_SIMD_H
#define KB_ARM_SIMD_H

#include <arm_acle.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kb_requant.h"

/* Four int8 values as one word (an unaligned LDR). */
static inline int32_t kb_ld4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Four int8 values as one word, then p += 4 (LDR with post-increment; GCC otherwise prefers offset addressing plus
 * an ADD per pointer in unrolled loops). The memory operand tells GCC which four bytes the asm reads. */
typedef struct {
    int8_t b[4];
} kb_word;

static inline int32_t kb_ld4_inc(const int8_t **p)
{
    int32_t v;
    __asm__("ldr %0, [%1], #4" : "=r"(v), "+r"(*p) : "m"(*(const kb_word *)*p));
    return v;
}

/* [b1, b3] sign-extended to int16: SXTB16 with ROR #8. */
static inline int32_t kb_sxtb16_odd(int32_t x)
{
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}

/* a + [b1, b3] per halfword: SXTAB16 with ROR #8. */
static inline int32_t kb_sxtab16_odd(int32_t a, int32_t x)
{
    int32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(a), "r"(x));
    return r;
}

/* The input offset in both halfwords, the addend of SXTAB16. */
static inline int32_t kb_offset2(int32_t offset)
{
    return (int32_t)(((uint32_t)offset & 0xFFFFu) | ((uint32_t)offset << 16));
}

/* bias + offset * sum(w[0..n)), wrapping: the accumulator's start when all n taps are present. Four weights per
 * USADA8: with the sign bit flipped, w + 128 is an unsigned byte, so sum(w) = usada8 sum - 128 * n. */
static inline int32_t kb_arm_base(int32_t bias, int32_t offset, const int8_t *w, int32_t n)
{
    uint32_t biased = 0;
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        biased = __usada8((uint32_t)kb_ld4(w + i) ^ 0x80808080u, 0u, biased);
    }
    int32_t sum = (int32_t)biased - 128 * i;
    for (; i < n; ++i) {
        sum += w[i];
    }
    return (int32_t)((uint32_t)bias + (uint32_t)offset * (uint32_t)sum);
}

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
 * depthwise kernels (~13 instructions instead of ~20; kb_wide_1x<N> below goes one step further): with
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

/* x's even / odd halves as int16 pairs, plus off2 (the input offset in both halves) when `offset` (a constant). */
static inline __attribute__((always_inline)) int32_t kb_x_even(int32_t x, int32_t off2, int offset)
{
    return offset ? __sxtab16(off2, x) : __sxtb16(x);
}

static inline __attribute__((always_inline)) int32_t kb_x_odd(int32_t x, int32_t off2, int offset)
{
    return offset ? kb_sxtab16_odd(off2, x) : kb_sxtb16_odd(x);
}

/* One 4-value step of the 2x2 block: pixels a, b times channels 0, 1; acc = (a0, a1, b0, b1). */
#define KB_STEP_2X2(xa, xb, w0, w1, off2, offset, acc)                                                          \
    do {                                                                                                        \
        int32_t xr_ = kb_ld4_inc(&xa), wr_ = kb_ld4_inc(&w0), vr_ = kb_ld4_inc(&w1), yr_;                         \
        const int32_t xe_ = kb_x_even(xr_, off2, offset), we_ = __sxtb16(wr_), ve_ = __sxtb16(vr_);            \
        xr_ = kb_x_odd(xr_, off2, offset);                                                                      \
        wr_ = kb_sxtb16_odd(wr_);                                                                               \
        vr_ = kb_sxtb16_odd(vr_);                                                                               \
        acc[0] = __smlad(xr_, wr_, __smlad(xe_, we_, acc[0]));                                                  \
        acc[1] = __smlad(xr_, vr_, __smlad(xe_, ve_, acc[1]));                                                  \
        yr_ = kb_ld4_inc(&xb);                                                                                  \
        xr_ = kb_x_even(yr_, off2, offset);                                                                     \
        yr_ = kb_x_odd(yr_, off2, offset);                                                                      \
        acc[2] = __smlad(yr_, wr_, __smlad(xr_, we_, acc[2]));                                                  \
        acc[3] = __smlad(yr_, vr_, __smlad(xr_, ve_, acc[3]));                                                  \
    } while (0)

/* acc[0..3] += sum_i (xa[i] w0[i], xa[i] w1[i], xb[i] w0[i], xb[i] w1[i]), i < n: two pixels times two output
 * channels. With `offset` (a constant) x[i] + in_offset (off2 = kb_offset2(in_offset)); without, raw int8 values
 * (the caller folded the offset into acc with kb_arm_base, which saves the register that holds off2). */
static inline __attribute__((always_inline)) void kb_dot_2x2(const int8_t *xa, const int8_t *xb, const int8_t *w0,
                                                             const int8_t *w1, int32_t n, int32_t in_offset,
                                                             int offset, int32_t acc[4])
{
    const int32_t off2 = kb_offset2(in_offset), o = offset ? in_offset : 0;
    for (const int8_t *end = w0 + (n & ~15); w0 != end;) {  /* 16 values per iteration: 64 MACs */
        KB_STEP_2X2(xa, xb, w0, w1, off2, offset, acc);
        KB_STEP_2X2(xa, xb, w0, w1, off2, offset, acc);
        KB_STEP_2X2(xa, xb, w0, w1, off2, offset, acc);
        KB_STEP_2X2(xa, xb, w0, w1, off2, offset, acc);
    }
    for (const int8_t *end = w0 + (n & 12); w0 != end;) {
        KB_STEP_2X2(xa, xb, w0, w1, off2, offset, acc);
    }
    for (int32_t i = 0; i < (n & 3); ++i) {  /* acc holds the bias: wrap like SMLAD */
        acc[0] = kb_wrapping_add(acc[0], (xa[i] + o) * w0[i]);
        acc[1] = kb_wrapping_add(acc[1], (xa[i] + o) * w1[i]);
        acc[2] = kb_wrapping_add(acc[2], (xb[i] + o) * w0[i]);
        acc[3] = kb_wrapping_add(acc[3], (xb[i] + o) * w1[i]);
    }
}

/* One 4-value step of the 1x2 block with the input offset added while unpacking (off2 = kb_offset2(offset)). */
#define KB_STEP_1X2(x, w0, w1, off2, acc)                                                                       \
    do {                                                                                                        \
        int32_t xr_ = kb_ld4_inc(&x), wr_ = kb_ld4_inc(&w0), vr_ = kb_ld4_inc(&w1);                             \
        const int32_t xe_ = __sxtab16(off2, xr_), we_ = __sxtb16(wr_), ve_ = __sxtb16(vr_);                    \
        xr_ = kb_sxtab16_odd(off2, xr_);                                                                        \
        wr_ = kb_sxtb16_odd(wr_);                                                                               \
        vr_ = kb_sxtb16_odd(vr_);                                                                               \
        acc[0] = __smlad(xr_, wr_, __smlad(xe_, we_, acc[0]));                                                  \
        acc[1] = __smlad(xr_, vr_, __smlad(xe_, ve_, acc[1]));                                                  \
    } while (0)

/* acc[0..1] += sum_i (w0[i], w1[i]) * (x[i] + offset), i < n: one pixel (or FC input) times two channels. */
static inline __attribute__((always_inline)) void kb_dot_1x2(const int8_t *x, const int8_t *w0, const int8_t *w1,
                                                             int32_t n, int32_t offset, int32_t acc[2])
{
    const int32_t off2 = kb_offset2(offset);
    for (const int8_t *end = w0 + (n & ~7); w0 != end;) {
        KB_STEP_1X2(x, w0, w1, off2, acc);
        KB_STEP_1X2(x, w0, w1, off2, acc);
    }
    if (n & 4) {
        KB_STEP_1X2(x, w0, w1, off2, acc);
    }
    for (int32_t i = 0; i < (n & 3); ++i) {
        acc[0] = kb_wrapping_add(acc[0], w0[i] * (x[i] + offset));
        acc[1] = kb_wrapping_add(acc[1], w1[i] * (x[i] + offset));
    }
}

/* Two int16 words (8 bytes, word-aligned) at p + off: LDRD. The memory operand tells GCC which bytes the asm reads. */
typedef struct {
    int8_t b[16];
} kb_cols4;

static inline __attribute__((always_inline)) void kb_ld2_at8(const int8_t *p, int32_t *a, int32_t *b)
{
    __asm__("ldrd %0, %1, [%2, #8]" : "=r"(*a), "=r"(*b) : "r"(p), "m"(*(const kb_cols4 *)p));
}

/* ... at p, then p += 16 (the next group of the interleaved columns). Early clobbers: LDRD with writeback must not
 * load into its base register. */
static inline __attribute__((always_inline)) void kb_ld2_inc16(const int8_t **p, int32_t *a, int32_t *b)
{
    __asm__("ldrd %0, %1, [%2], #16" : "=&r"(*a), "=&r"(*b), "+r"(*p) : "m"(*(const kb_cols4 *)*p));
}

/* One 4-value step on two pre-widened columns (the kb_cols layout of arm/kb_conv.c: per group of 4 values, column
 * a's (x0, x2), (x1, x3), then column b's) times channels 0, 1: 2 weight loads, 2 LDRDs, 4 unpacks, 8 SMLADs for
 * 16 MACs. Each weight word is unpacked and used for both columns before the next one is loaded, which keeps the
 * block within the registers (4 accumulators, 4 column words, 2 weight halves, 3 pointers and the loop end). */
#define KB_STEP_COLS(x, w0, w1, acc)                                                                            \
    do {                                                                                                        \
        int32_t a0_, a1_, b0_, b1_, wr_, we_;                                                                   \
        kb_ld2_at8(x, &b0_, &b1_);                                                                              \
        kb_ld2_inc16(&x, &a0_, &a1_);                                                                           \
        wr_ = kb_ld4_inc(&w0);                                                                                  \
        we_ = __sxtb16(wr_);                                                                                    \
        wr_ = kb_sxtb16_odd(wr_);                                                                               \
        acc[0] = __smlad(a1_, wr_, __smlad(a0_, we_, acc[0]));                                                  \
        acc[2] = __smlad(b1_, wr_, __smlad(b0_, we_, acc[2]));                                                  \
        wr_ = kb_ld4_inc(&w1);                                                                                  \
        we_ = __sxtb16(wr_);                                                                                    \
        wr_ = kb_sxtb16_odd(wr_);                                                                               \
        acc[1] = __smlad(a1_, wr_, __smlad(a0_, we_, acc[1]));                                                  \
        acc[3] = __smlad(b1_, wr_, __smlad(b0_, we_, acc[3]));                                                  \
    } while (0)

/* acc (a0, a1, b0, b1) += the two columns at x (n values each, the offset already added) times w0, w1. The n & 3
 * tail values follow the groups in order, column a's then column b's. */
static inline __attribute__((always_inline)) void kb_dot_2x2_cols(const int8_t *x, const int8_t *w0,
                                                                  const int8_t *w1, int32_t n, int32_t acc[4])
{
    for (const int8_t *end = w0 + (n & ~15); w0 != end;) {  /* 16 values per iteration: 64 MACs */
        KB_STEP_COLS(x, w0, w1, acc);
        KB_STEP_COLS(x, w0, w1, acc);
        KB_STEP_COLS(x, w0, w1, acc);
        KB_STEP_COLS(x, w0, w1, acc);
    }
    for (const int8_t *end = w0 + (n & 12); w0 != end;) {
        KB_STEP_COLS(x, w0, w1, acc);
    }
    const int32_t t = n & 3;
    for (int32_t i = 0; i < t; ++i) {  /* acc holds the bias: wrap like SMLAD */
        int16_t xa, xb;
        memcpy(&xa, x + 2 * i, 2);
        memcpy(&xb, x + 2 * (t + i), 2);
        acc[0] = kb_wrapping_add(acc[0], xa * w0[i]);
        acc[1] = kb_wrapping_add(acc[1], xa * w1[i]);
        acc[2] = kb_wrapping_add(acc[2], xb * w0[i]);
        acc[3] = kb_wrapping_add(acc[3], xb * w1[i]);
    }
}

/* acc (a0, a1) += column a alone (same layout; column b's slots unused) times w0, w1: an odd last pixel. */
static inline __attribute__((always_inline)) void kb_dot_1x2_cols(const int8_t *x, const int8_t *w0,
                                                                  const int8_t *w1, int32_t n, int32_t acc[2])
{
    const int32_t t = n & 3;
    for (const int8_t *end = w0 + (n & ~3); w0 != end;) {
        int32_t a0, a1, wr, we;
        kb_ld2_inc16(&x, &a0, &a1);
        wr = kb_ld4_inc(&w0);
        we = __sxtb16(wr);
        wr = kb_sxtb16_odd(wr);
        acc[0] = __smlad(a1, wr, __smlad(a0, we, acc[0]));
        wr = kb_ld4_inc(&w1);
        we = __sxtb16(wr);
        wr = kb_sxtb16_odd(wr);
        acc[1] = __smlad(a1, wr, __smlad(a0, we, acc[1]));
    }
    for (int32_t i = 0; i < t; ++i) {
        int16_t xa;
        memcpy(&xa, x + 2 * i, 2);
        acc[0] = kb_wrapping_add(acc[0], xa * w0[i]);
        acc[1] = kb_wrapping_add(acc[1], xa * w1[i]);
    }
}

/* -- widening int8 into int16 im2col columns (the column layout is arm/kb_conv.c's) ---------------------------- */

/* Two words at *dst (one STRD), then *dst += step bytes (Thumb's STRD post-increments by constants only). */
static inline __attribute__((always_inline)) void kb_st2_inc(int8_t **dst, int32_t a, int32_t b, int32_t step)
{
    __asm__("strd %1, %2, [%3]" : "=m"(*(kb_cols4 *)*dst) : "r"(a), "r"(b), "r"(*dst));
    *dst += step;
}

/* len (a multiple of 4) values at src, plus the offset in both halves of off2, into whole groups of a column from
 * dst on (group after group 8 * ncols bytes apart); returns the next group's address. Per group one LDR, two
 * SXTAB16 and one STRD that post-increments by the step, a constant for each column count (KB_WIDEN_RUN). */
#define KB_WIDEN_RUN(name, step)                                                                                \
    static inline __attribute__((always_inline)) int8_t *name(const int8_t *src, int32_t len, int32_t off2,    \
                                                              int8_t *dst)                                      \
    {                                                                                                           \
        const int8_t *end = src + len;                                                                          \
        for (const int8_t *end16 = src + (len & ~15); src != end16;) { /* four groups per iteration */         \
            const int32_t x0 = kb_ld4_inc(&src), x1 = kb_ld4_inc(&src), x2 = kb_ld4_inc(&src);                  \
            const int32_t x3 = kb_ld4_inc(&src);                                                                \
            KB_ST2_INC(dst, __sxtab16(off2, x0), kb_sxtab16_odd(off2, x0), step);                               \
            KB_ST2_INC(dst, __sxtab16(off2, x1), kb_sxtab16_odd(off2, x1), step);                               \
            KB_ST2_INC(dst, __sxtab16(off2, x2), kb_sxtab16_odd(off2, x2), step);                               \
            KB_ST2_INC(dst, __sxtab16(off2, x3), kb_sxtab16_odd(off2, x3), step);                               \
        }                                                                                                       \
        while (src != end) {                                                                                    \
            const int32_t x = kb_ld4_inc(&src);                                                                 \
            KB_ST2_INC(dst, __sxtab16(off2, x), kb_sxtab16_odd(off2, x), step);                                 \
        }                                                                                                       \
        return dst;                                                                                             \
    }
#define KB_ST2_INC(dst, a, b, step) \
    __asm__("strd %2, %3, [%0], #" #step : "+r"(dst), "=m"(*(kb_cols4 *)dst) : "r"(a), "r"(b))
KB_WIDEN_RUN(widen_run2, 16)
KB_WIDEN_RUN(widen_run3, 24)
KB_WIDEN_RUN(widen_run4, 32)
KB_WIDEN_RUN(widen_run5, 40)
KB_WIDEN_RUN(widen_run6, 48)

static inline __attribute__((always_inline)) int8_t *widen_run(const int8_t *src, int32_t len, int32_t off2,
                                                               int8_t *dst, int32_t ncols)
{
    switch (ncols) {
    case 2:
        return widen_run2(src, len, off2, dst);
    case 3:
        return widen_run3(src, len, off2, dst);
    case 4:
        return widen_run4(src, len, off2, dst);
    case 5:
        return widen_run5(src, len, off2, dst);
    default:
        return widen_run6(src, len, off2, dst);
    }
}

#define KB_WIDE_COLS 6  /* the wide path's columns (pixels per block) */

/* Widening a block costs about as much as the unpacking it saves on KB_COLS_MIN_OUT_C output channels; below that
 * the direct paths are faster. */
#define KB_COLS_MIN_OUT_C 16

/* Pixels in the next block when `left` >= 3 are still to do: 6, but a last 7 or 8 go as 4 + 3 or 4 + 4 (a block of
 * 1 or 2 would need the slower two-column kernels). */
static inline int32_t kb_wide_block(int32_t left)
{
    return left == 7 || left == 8 ? 4 : left < KB_WIDE_COLS ? left : KB_WIDE_COLS;
}

/* -- 1 channel x N pixels on N interleaved columns (N = 3..6), in assembly ----------------------------------------
 * The kb_cols layout of arm/kb_conv.c with N columns: per group of 4 values, N pairs of words, column c's
 * (x0, x2), (x1, x3) at bytes 8 * (N * g + c). One weight word, split once (SXTB16), serves all N columns; LDM loads
 * two columns' words per instruction. A 4-value step is 3 + ceil(N / 2) + 2N instructions for 4N MACs (18 for 24 at
 * N = 6), four steps per loop iteration plus 3 for the loop test. The block needs N accumulators, 2 weight halves,
 * 4 column words and 2 pointers: with N = 6 every allocatable register (r0-r12, lr), so it is written by hand and the
 * loop end lives on the stack. GCC would not keep 14 values in registers through the loop.
 *
 * kb_dot_1x<N>_cols(cols, w, groups, acc): acc[0..N) = acc[0] + sum over 4 * groups values of column c times w
 * (the caller stores the bias in acc[0]; the n & 3 tail values are the caller's). AAPCS: r0 cols, r1 w, r2 groups,
 * r3 acc; r4-r11 and lr saved. SMLAD wraps like the portable kernels' int32 sums (see the top of this file).
 * These blocks and kb_wide_1x<N> below are weak, not static: every file that includes this header and uses them
 * (arm/kb_conv.c, arm/kb_conv_add.c) emits them, and the linker keeps one copy. */
#define KB_NAKED_ARGS /* the assembly reads them from r0-r3 (GCC's -Wextra would call them unused) */        \
    const int8_t *cols __attribute__((unused)), const int8_t *w __attribute__((unused)),                        \
    int32_t groups __attribute__((unused))
#define KB_W_STEP "ldr lr, [r1], #4\n\tsxtb16 r12, lr\n\tsxtb16 lr, lr, ror #8\n\t"
#define KB_COLS_2(a, b)                                                                                         \
    "ldmia r0!, {r8-r11}\n\tsmlad " a ", r8, r12, " a "\n\tsmlad " a ", r9, lr, " a "\n\t"                       \
    "smlad " b ", r10, r12, " b "\n\tsmlad " b ", r11, lr, " b "\n\t"
#define KB_COLS_1(a) "ldrd r8, r9, [r0], #8\n\tsmlad " a ", r8, r12, " a "\n\tsmlad " a ", r9, lr, " a "\n\t"

#define KB_DOT_1XN(name, arg, broadcast, step, finish)                                                          \
    __attribute__((naked, weak)) void name(KB_NAKED_ARGS, arg __attribute__((unused)))                          \
    {                                                                                                           \
        __asm__ volatile(                                                                                       \
            "push {r4-r11, lr}\n\t"                                                                             \
            "add r12, r1, r2, lsl #2\n\t"  /* the end of the weights */                                        \
            "and r2, r2, #3\n\t"                                                                                \
            "add lr, r1, r2, lsl #2\n\t"   /* the end of the groups & 3 single steps */                        \
            "push {r2, r3, r12, lr}\n\t"   /* sp + 4: acc, sp + 8: end, sp + 12: end of single steps */        \
            "ldr r2, [r3]\n\t" broadcast                                                                        \
            "b 2f\n"                                                                                            \
            "1:\n\t" step                                                                                       \
            "2:\n\t"                                                                                            \
            "ldr r8, [sp, #12]\n\t"                                                                             \
            "cmp r1, r8\n\t"                                                                                    \
            "bne 1b\n\t"                                                                                        \
            "b 4f\n"                                                                                            \
            "3:\n\t" step step step step                                                                        \
            "4:\n\t"                                                                                            \
            "ldr r8, [sp, #8]\n\t"                                                                              \
            "cmp r1, r8\n\t"                                                                                    \
            "bne 3b\n\t" finish                                                                                 \
            "add sp, sp, #16\n\t"                                                                               \
            "pop {r4-r11, pc}\n");                                                                              \
    }

#define KB_STORE(accs) "ldr r8, [sp, #4]\n\tstmia r8, {" accs "}\n\t"
#define KB_BROADCAST6 "mov r3, r2\n\tmov r4, r2\n\tmov r5, r2\n\tmov r6, r2\n\tmov r7, r2\n\t"
#define KB_BROADCAST5 "mov r3, r2\n\tmov r4, r2\n\tmov r5, r2\n\tmov r6, r2\n\t"
#define KB_BROADCAST4 "mov r3, r2\n\tmov r4, r2\n\tmov r5, r2\n\t"
#define KB_BROADCAST3 "mov r3, r2\n\tmov r4, r2\n\t"
#define KB_STEP6 KB_W_STEP KB_COLS_2("r2", "r3") KB_COLS_2("r4", "r5") KB_COLS_2("r6", "r7")
#define KB_STEP5 KB_W_STEP KB_COLS_2("r2", "r3") KB_COLS_2("r4", "r5") KB_COLS_1("r6")
#define KB_STEP4 KB_W_STEP KB_COLS_2("r2", "r3") KB_COLS_2("r4", "r5")
#define KB_STEP3 KB_W_STEP KB_COLS_2("r2", "r3") KB_COLS_1("r4")

KB_DOT_1XN(kb_dot_1x6_cols, int32_t *acc, KB_BROADCAST6, KB_STEP6, KB_STORE("r2-r7"))
KB_DOT_1XN(kb_dot_1x5_cols, int32_t *acc, KB_BROADCAST5, KB_STEP5, KB_STORE("r2-r6"))
KB_DOT_1XN(kb_dot_1x4_cols, int32_t *acc, KB_BROADCAST4, KB_STEP4, KB_STORE("r2-r5"))
KB_DOT_1XN(kb_dot_1x3_cols, int32_t *acc, KB_BROADCAST3, KB_STEP3, KB_STORE("r2-r4"))

/* -- every output channel of N pixels in one call, requantised in registers -----------------------------------------
 * kb_wide_1x<N>(cols, w, groups, job) runs the kb_dot_1x<N>_cols block for channels job->co .. job->out_c - 1 (their
 * weights follow each other from w on: groups words each) and stores each result requantised, pixel c's at
 * job->y[c][co]. The requantisation is TFLite's (two roundings, then + out_offset, clamp [-128, 127]) as one SMMLAR
 * (see kb_wide_job_ok for when it is exact): with r = -shift,
 *     out = SSAT8((SMMLAR(2 * acc, mult, ((1 + 2 * out_offset) << (r - 1)) - [acc < 0])) >> r)
 * where SMMLAR(a, b, c) = (c * 2^32 + a * b + 2^31) >> 32. It is kb_arm_rq1's one-rounding form, numerator and
 * shift doubled so that the low word's constant is exactly SMMLAR's 2^31, the out_offset moved inside the shift
 * (floor(v / 2^r) + o == floor((v + o * 2^r) / 2^r)): 5 instructions per output, 2 more for the store. The channel
 * loop, the bias and the requantisation constants live in the assembly too, about 30 instructions per channel
 * besides the outputs. The dot loop is the same 4-value step unrolled 8 times and entered at step (-groups) & 7
 * (the entry address computed once per call), so one 3-instruction loop test serves 32 values; it runs to the
 * constant end of the columns (r0), so the weight pointer (r1) simply carries on into the next channel. */
typedef struct {
    const int32_t *bias, *mult, *shift;
    int32_t co;      /* the next channel; advanced by the call to out_c */
    int32_t out_c;   /* > co */
    int32_t k1;      /* 1 + 2 * out_offset */
    int8_t *y[6];    /* pixel c's output, channel 0 */
} kb_wide_job;

_Static_assert(offsetof(kb_wide_job, bias) == 0 && offsetof(kb_wide_job, mult) == 4 &&
               offsetof(kb_wide_job, shift) == 8 && offsetof(kb_wide_job, co) == 12 &&
               offsetof(kb_wide_job, out_c) == 16 && offsetof(kb_wide_job, k1) == 20 &&
               offsetof(kb_wide_job, y) == 24, "kb_wide_job layout used by KB_WIDE");

/* Largest right shift and the accumulator bound under which kb_wide_1x<N> is exact: 2 * acc fits int32 and the
 * SMMLAR result, |2 * acc * mult / 2^32| < 2^30 plus |(1 + 2 * out_offset) << (r - 1)| < 2^(r + 7) <= 2^30, too. */
#define KB_WIDE_MAX_RIGHT 23
#define KB_WIDE_MAX_ACC (1 << 30)

/* Whether kb_wide_1x<N> computes every channel of a conv exactly: reduction n (no n & 3 tail), the full clamp, and
 * an int8 out_offset, per channel a right shift 1..KB_WIDE_MAX_RIGHT and a bias that keeps |acc| < KB_WIDE_MAX_ACC
 * for any input: |bias| + n * 255 * 128 (|x + in_offset| <= 255, |w| <= 128). Checked by the kernel at each call
 * (~5 instructions per channel) rather than by the code generator, so that the kernel stays exact for any caller. */
static inline int kb_wide_job_ok(const int32_t *bias, const int32_t *shift, int32_t out_c, int32_t n,
                                 int32_t out_offset, int32_t act_min, int32_t act_max)
{
    if ((n & 3) || !kb_arm_full_clamp(act_min, act_max) || n >= KB_WIDE_MAX_ACC / (255 * 128) || out_offset < -128 ||
        out_offset > 127) {
        return 0;
    }
    const int32_t lim = KB_WIDE_MAX_ACC - n * 255 * 128;  /* |bias| < lim */
    for (int32_t co = 0; co < out_c; ++co) {
        if (shift[co] > -1 || shift[co] < -KB_WIDE_MAX_RIGHT || bias[co] >= lim || bias[co] <= -lim) {
            return 0;
        }
    }
    return 1;
}

#define KB_WIDE_RQ(a, off)                                                                                      \
    "add lr, r9, " a ", asr #31\n\tlsl " a ", " a ", #1\n\tsmmlar lr, " a ", r10, lr\n\tasr lr, lr, r11\n\t"   \
    "ssat lr, #8, lr\n\tldr r8, [r0, #" off "]\n\tstrb lr, [r8, r12]\n\t"
#define KB_WIDE_RQ3 KB_WIDE_RQ("r2", "24") KB_WIDE_RQ("r3", "28") KB_WIDE_RQ("r4", "32")
#define KB_WIDE_RQ4 KB_WIDE_RQ3 KB_WIDE_RQ("r5", "36")
#define KB_WIDE_RQ5 KB_WIDE_RQ4 KB_WIDE_RQ("r6", "40")
#define KB_WIDE_RQ6 KB_WIDE_RQ5 KB_WIDE_RQ("r7", "44")

#define KB_WIDE(name, group_bytes, step_bytes, broadcast, step, requantise)                                    \
    __attribute__((naked, weak)) void name(KB_NAKED_ARGS, kb_wide_job *job __attribute__((unused)))             \
    {                                                                                                           \
        __asm__ volatile(                                                                                       \
            "push {r4-r11, lr}\n\t"                                                                             \
            "mov r12, #" group_bytes "\n\t"                                                                     \
            "mla r12, r2, r12, r0\n\t"     /* the end of the columns */                                        \
            "adr r9, 6f\n\t"               /* no groups: straight to the requantisation */                     \
            "cmp r2, #0\n\t"                                                                                    \
            "beq 8f\n\t"                                                                                        \
            "rsb lr, r2, #0\n\t"           /* else into the 8-step loop at step (-groups) & 7 */               \
            "and lr, lr, #7\n\t"                                                                                \
            "mov r8, #" step_bytes "\n\t"                                                                       \
            "adr r9, 3f\n\t"                                                                                    \
            "mla r9, lr, r8, r9\n"                                                                              \
            "8:\n\t"                                                                                            \
            "orr r9, r9, #1\n\t"                                                                                \
            "push {r0, r3, r9, r12}\n"     /* sp: cols, sp + 4: job, sp + 8: entry, sp + 12: end */            \
            "5:\n\t"                       /* channel job->co */                                               \
            "ldr r0, [sp, #4]\n\t"                                                                              \
            "ldr r8, [r0, #12]\n\t"                                                                             \
            "ldr r9, [r0]\n\t"                                                                                  \
            "ldr r2, [r9, r8, lsl #2]\n\t" broadcast                                                            \
            "ldr r0, [sp]\n\t"                                                                                  \
            "ldr r8, [sp, #8]\n\t"                                                                              \
            "bx r8\n"                                                                                           \
            "3:\n\t" step                                                                                       \
            "7:\n\t" step step step step step step step                                                         \
            ".if 7b - 3b != " step_bytes "\n\t.error \"" #name ": step size\"\n\t.endif\n\t"                   \
            "ldr r8, [sp, #12]\n\t"                                                                             \
            "cmp r0, r8\n\t"                                                                                    \
            "bne 3b\n"                                                                                          \
            "6:\n\t"                                                                                            \
            "ldr r0, [sp, #4]\n\t"         /* r12 co, r10 mult, r11 right, r9 the constant */                  \
            "ldr r12, [r0, #12]\n\t"                                                                            \
            "ldrd r8, r9, [r0, #4]\n\t"                                                                         \
            "ldr r10, [r8, r12, lsl #2]\n\t"                                                                    \
            "ldr r11, [r9, r12, lsl #2]\n\t"                                                                    \
            "ldr r9, [r0, #20]\n\t"                                                                             \
            "rsb r11, r11, #0\n\t"                                                                              \
            "sub r8, r11, #1\n\t"                                                                               \
            "lsl r9, r9, r8\n\t" requantise                                                                     \
            "add r12, r12, #1\n\t"                                                                              \
            "str r12, [r0, #12]\n\t"                                                                            \
            "ldr r8, [r0, #16]\n\t"                                                                             \
            "cmp r12, r8\n\t"                                                                                   \
            "bne 5b\n\t"                                                                                        \
            "add sp, sp, #16\n\t"                                                                               \
            "pop {r4-r11, pc}\n");                                                                              \
    }

/* step_bytes: a 4-value step's code (all 32-bit instructions), checked by the assembler */
KB_WIDE(kb_wide_1x6, "48", "72", KB_BROADCAST6, KB_STEP6, KB_WIDE_RQ6)
KB_WIDE(kb_wide_1x5, "40", "64", KB_BROADCAST5, KB_STEP5, KB_WIDE_RQ5)
KB_WIDE(kb_wide_1x4, "32", "52", KB_BROADCAST4, KB_STEP4, KB_WIDE_RQ4)
KB_WIDE(kb_wide_1x3, "24", "44", KB_BROADCAST3, KB_STEP3, KB_WIDE_RQ3)

#endif /* KB_ARM_SIMD_H */
