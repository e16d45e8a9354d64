/* Kilobyte runtime, Cortex-M DSP kernels (codegen stage, target-optimised): the Armv7E-M SIMD primitives the arm/
 * kernels build on, written with GCC's ACLE intrinsics (arm_acle.h): word loads with writeback, the rotated unpacks,
 * the input offset as an SXTAB16 addend, and the accumulator start that folds the offset in. Included by
 * arm/kb_depthwise.c directly and through kb_arm_dot.h and kb_arm_widen.h by arm/kb_conv.c, arm/kb_conv_add.c and
 * arm/kb_fc.c. The other arm/ headers: kb_arm_requant.h (the requantisation forms), kb_arm_dot.h (dot-product
 * blocks in C), kb_arm_widen.h (widening into int16 im2col columns), kb_arm_wide.h (the wide path: its blocks are
 * the assembly of kb_arm_wide.S).
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
#include <stdint.h>
#include <string.h>

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

/* [lo, hi] as int16 halves of a word (lo in the bottom), the operand form of SMLAD and SMLAxy. */
static inline int32_t kb_pack16(int32_t lo, int32_t hi)
{
    return (int32_t)(((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16));
}

/* The input offset in both halfwords, the addend of SXTAB16. */
static inline int32_t kb_offset2(int32_t offset)
{
    return kb_pack16(offset, offset);
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

/* x's even / odd halves as int16 pairs, plus off2 (the input offset in both halves) when `offset` (a constant). */
static inline __attribute__((always_inline)) int32_t kb_x_even(int32_t x, int32_t off2, int offset)
{
    return offset ? __sxtab16(off2, x) : __sxtb16(x);
}

static inline __attribute__((always_inline)) int32_t kb_x_odd(int32_t x, int32_t off2, int offset)
{
    return offset ? kb_sxtab16_odd(off2, x) : kb_sxtb16_odd(x);
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

#endif /* KB_ARM_SIMD_H */
