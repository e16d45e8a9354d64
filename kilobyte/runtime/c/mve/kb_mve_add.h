/* Kilobyte runtime, Cortex-M55 Helium (MVE): TFLite's int8 ADD / SUB of n elements in assembly (kb_mve_add.S), for
 * mve/kb_add.c, for parameters that never shift left (TFLite's: the input with the larger scale has multiplier 0.5
 * and shift 0, the other and the output shift right).
 *
 * kb_mve_add_<d1><d2>_<op>(job), d1 / d2 = whether input 1 / 2 shifts right (the output always does), op = add or
 * sub: for i < n,
 *   y[i] = clamp(RDBPOT(SRDHM(s1 +- s2, mo), -ro) + zo, lo + zo, hi + zo),
 *   s_k  = RDBPOT(SRDHM((x_k[i] + off_k) << left_shift, m_k), -r_k)   (RDBPOT skipped where d_k = 0: r_k = 0)
 * with (x + off) << left_shift computed as x * unit + base (VMLAS: unit = 2^left_shift, base = off << left_shift,
 * wrapping as the shift does). The struct's layout is the assembly's (the static asserts). */
#ifndef KB_MVE_ADD_H
#define KB_MVE_ADD_H

#define KB_MVE_ADD_A 0
#define KB_MVE_ADD_B 4
#define KB_MVE_ADD_Y 8
#define KB_MVE_ADD_N 12
#define KB_MVE_ADD_BASE1 16
#define KB_MVE_ADD_BASE2 20
#define KB_MVE_ADD_M1 24
#define KB_MVE_ADD_M2 28
#define KB_MVE_ADD_MO 32
#define KB_MVE_ADD_R1 36
#define KB_MVE_ADD_R2 40
#define KB_MVE_ADD_RO 44
#define KB_MVE_ADD_ZO 48
#define KB_MVE_ADD_LO 52
#define KB_MVE_ADD_HI 56
#define KB_MVE_ADD_UNIT 60

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const int8_t *a, *b;
    int8_t *y;
    int32_t n;
    int32_t base1, base2;       /* off_k << left_shift */
    int32_t m1, m2, mo;         /* multipliers */
    int32_t r1, r2, ro;         /* shifts (<= 0) */
    int32_t zo, lo, hi;         /* output zero point; act_min / act_max less it */
    int32_t unit;               /* 1 << left_shift */
} kb_mve_add_job;

_Static_assert(offsetof(kb_mve_add_job, unit) == KB_MVE_ADD_UNIT, "kb_mve_add_job layout");

typedef void kb_mve_add_fn(const kb_mve_add_job *job);
kb_mve_add_fn kb_mve_add_11_add, kb_mve_add_01_add, kb_mve_add_10_add;
kb_mve_add_fn kb_mve_add_11_sub, kb_mve_add_01_sub, kb_mve_add_10_sub;
#endif

#endif /* KB_MVE_ADD_H */
