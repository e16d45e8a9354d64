/* Kilobyte runtime, Cortex-M DSP kernels: the dot-product blocks written in C (ACLE intrinsics and the primitives
 * of kb_arm_simd.h), two output channels at a time, as inlined loops GCC keeps within the registers:
 *   - on int8 inputs: kb_dot_2x2 (2 pixels x 2 channels: arm/kb_conv.c's direct path, arm/kb_conv_add.c) and
 *     kb_dot_1x2 (1 pixel or an FC input x 2 channels: those and arm/kb_fc.c);
 *   - on pre-widened int16 im2col columns (kb_arm_widen.h): kb_dot_2x2_cols and kb_dot_1x2_cols, arm/kb_conv.c's
 *     two-column path.
 * The wider blocks (1 channel x 3..6 columns) need every register and are assembly: kb_arm_wide.h, kb_arm_wide.S.
 * All of them wrap modulo 2^32 like the portable kernels' int32 sums (see kb_arm_simd.h).
 */
#ifndef KB_ARM_DOT_H
#define KB_ARM_DOT_H

#include <arm_acle.h>
#include <stdint.h>
#include <string.h>

#include "kb_requant.h"
#include "kb_arm_simd.h"

/* The 2x2 blocks' callers walk the output pixels in pairs, row by row: xp / yp point at pixel (y, x) of in / out
 * (kb_conv_params steps), then (y, x) moves on to the next pixel. A macro rather than a function: the hot 1x1 loops
 * compile exactly as if written out (an inline function with pointer arguments changes their register allocation). */
#define KB_PIXEL_NEXT(p, in, out, y, x, xp, yp)                                                                        \
    const int8_t *xp = (in) + ((y) * (p)->in_row + (x)) * (p)->in_cstride;                                          \
    int8_t *yp = (out) + ((y) * (p)->out_row + (x)) * (p)->out_cstride;                                             \
    if (++(x) == (p)->out_w) {                                                                                         \
        (x) = 0, ++(y);                                                                                                \
    }

/* -- on int8 inputs ------------------------------------------------------------------------------------------------ */

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

/* -- on pre-widened int16 columns ---------------------------------------------------------------------------------- */

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

#endif /* KB_ARM_DOT_H */
