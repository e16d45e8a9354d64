/* Kilobyte runtime, Cortex-M DSP kernels: widening int8 input values into int16 im2col columns, the input offset
 * added (SXTAB16), for the column paths of arm/kb_conv.c and arm/kb_conv_add.c. The columns are then read by
 * kb_dot_2x2_cols / kb_dot_1x2_cols (kb_arm_dot.h) and the assembly of kb_arm_wide.S, once per output channel.
 *
 * Column layout (arm/kb_conv.c has the whole of it, the n & 3 tail values included): N columns interleaved by
 * groups of 4 values; group g of column c is two words at bytes 8 * (N * g + c), the int16 pairs (x0, x2), (x1, x3),
 * which are the pairs SXTB16 makes of a weight word. Whole groups are written here: one word in, two words out.
 */
#ifndef KB_ARM_WIDEN_H
#define KB_ARM_WIDEN_H

#include <arm_acle.h>
#include <stdint.h>

#include "kb_arm_simd.h"

/* Widening a block costs about as much as the unpacking it saves on KB_COLS_MIN_OUT_C output channels; below that
 * the direct paths are faster. */
#define KB_COLS_MIN_OUT_C 16

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

#endif /* KB_ARM_WIDEN_H */
