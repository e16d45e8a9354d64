/* Kilobyte runtime, Cortex-M55 Helium (MVE): TFLite's requantisation of four int32 sums at once, bit for bit with
 * kb_requant.h's kb_rq_apply (double rounding, TFLite Micro's default).
 *
 * Per lane: v = acc + bias (wrapping); v << left (VSHL by register: wraps as TFLite's x * 2^left); VQRDMULH by the
 * multiplier, which is SaturatingRoundingDoublingHighMul exactly ((v * m + 2^30) >> 31, the one overflow case
 * saturated); then RoundingDivideByPOT by `right`: VRSHL by -right rounds ties up ((v + 2^(right-1)) >> right, in
 * full precision), TFLite rounds them away from zero, so a negative v is first lowered by one (saturating: INT32_MIN
 * stays, which rounds the same) — only when right > 0 (v & -right has the sign bit set exactly then). Clamp to the
 * activation range less the zero point, add the zero point. */
#ifndef KB_MVE_REQUANT_H
#define KB_MVE_REQUANT_H

#include <arm_mve.h>
#include <stdint.h>

/* MultiplyByQuantizedMultiplier(v, mult, shift) per lane (the steps above without bias and clamp). */
static inline __attribute__((always_inline)) int32x4_t kb_mve_scale4(int32x4_t v, int32_t mult, int32_t shift)
{
    const int32_t left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    v = vqrdmulhq_n_s32(vshlq_r_s32(v, left), mult);
    v = vqaddq_s32(v, vshrq_n_s32(vandq_s32(v, vdupq_n_s32(-right)), 31));
    return vrshlq_n_s32(v, -right);
}

/* RoundingDivideByPOT by a right shift r > 0 only (neg_right = -r < 0): the fix-up needs no mask then. */
static inline __attribute__((always_inline)) int32x4_t kb_mve_divide(int32x4_t v, int32_t neg_right)
{
    return vrshlq_n_s32(vqaddq_s32(v, vshrq_n_s32(v, 31)), neg_right);
}

/* kb_mve_rq4 for shift < 0 only (a right shift and no left one: TFLite's usual multipliers, below 0.5), in two
 * integer-unit instructions fewer. */
static inline __attribute__((always_inline)) int32x4_t kb_mve_rq4_right(int32x4_t acc, int32_t bias, int32_t mult,
                                                                       int32_t shift, int32_t lo, int32_t hi,
                                                                       int32_t out_offset)
{
    const int32x4_t v = kb_mve_divide(vqrdmulhq_n_s32(vaddq_n_s32(acc, bias), mult), shift);
    return vaddq_n_s32(vminq_s32(vmaxq_s32(v, vdupq_n_s32(lo)), vdupq_n_s32(hi)), out_offset);
}

static inline __attribute__((always_inline)) int32x4_t kb_mve_rq4(int32x4_t acc, int32_t bias, int32_t mult,
                                                                 int32_t shift, int32_t lo, int32_t hi,
                                                                 int32_t out_offset)
{
    int32x4_t v = kb_mve_scale4(vaddq_n_s32(acc, bias), mult, shift);
    v = vminq_s32(vmaxq_s32(v, vdupq_n_s32(lo)), vdupq_n_s32(hi));
    return vaddq_n_s32(v, out_offset);
}


/* Four channels at once: lane i has its own multiplier and shift (mu, sh; bias already added), clamp lo / hi (the
 * activation range less the zero point), zero point out_offset: the same steps, by vector. */
static inline __attribute__((always_inline)) int32x4_t kb_mve_rq_lanes(int32x4_t v, int32x4_t mu, int32x4_t sh,
                                                                      int32x4_t lo, int32x4_t hi,
                                                                      int32_t out_offset)
{
    const int32x4_t zero = vdupq_n_s32(0), neg_right = vminq_s32(sh, zero);
    v = vqrdmulhq_s32(vshlq_s32(v, vmaxq_s32(sh, zero)), mu);
    v = vrshlq_s32(vqaddq_s32(v, vshrq_n_s32(vandq_s32(v, neg_right), 31)), neg_right);
    return vaddq_n_s32(vminq_s32(vmaxq_s32(v, lo), hi), out_offset);
}

#endif /* KB_MVE_REQUANT_H */
