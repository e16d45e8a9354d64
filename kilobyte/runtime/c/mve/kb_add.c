/* Kilobyte runtime, Cortex-M55 Helium (MVE) kernels: int8 ADD and SUB, bit-identical to ../kb_add.c (same functions,
 * arguments and layouts; TFLite's reference arithmetic: both inputs plus their offsets shifted left by left_shift,
 * rescaled to a common scale, summed, rescaled to the output, clamped).
 *
 * Four elements per step in int32 lanes: VLDRB.S32 widens each input, every rescale is VQRDMULH and the rounding
 * shift (kb_mve_requant.h's steps); the last step is predicated (VCTP32), the result narrowed by VSTRB.32. TFLite's
 * parameters never shift left, so the usual call (the output and one input or both shifting right) runs in
 * assembly (kb_mve_add.S: x * 2^20 + off * 2^20 in one VMLAS, no branch in the loop), the other combinations of
 * right shifts in row_fast; add_row is the general case.
 * `out` may be `in1` or `in2` with the same stride: a step reads its four elements before it writes them.
 * kb_add_const is the portable one (kb_const_op in kb_requant.h).
 */
#include <arm_mve.h>

#include "kilobyte.h"
#include "kb_mve_add.h"
#include "kb_requant.h"
#include "kb_mve_requant.h"

/* One rescale (kb_mve_scale4) with its parts prepared: left shift, multiplier, -right shift. */
typedef struct {
    int32_t left, mult, neg_right;
} kb_scale;

static kb_scale scale_of(int32_t mult, int32_t shift)
{
    const kb_scale s = {shift > 0 ? shift : 0, mult, shift > 0 ? 0 : shift};
    return s;
}

static inline __attribute__((always_inline)) int32x4_t scaled(int32x4_t v, kb_scale s)
{
    v = vqrdmulhq_n_s32(vshlq_r_s32(v, s.left), s.mult);
    v = vqaddq_s32(v, vshrq_n_s32(vandq_s32(v, vdupq_n_s32(s.neg_right)), 31));
    return vrshlq_n_s32(v, s.neg_right);
}

/* RoundingDivideByPOT by -neg_right: kb_mve_divide when it shifts (`shifts`, a constant per copy), else nothing. */
static inline __attribute__((always_inline)) int32x4_t divided(int32x4_t v, int32_t neg_right, int shifts)
{
    return shifts ? kb_mve_divide(v, neg_right) : v;
}

/* The common case, in fewer integer-unit instructions: no rescale shifts left (shift <= 0; the input with the larger
 * scale has multiplier 0.5, shift 0) and left_shift <= 30, so (x + off) << left_shift is one VMLA (x * 2^s +
 * off * 2^s, wrapping as the shift does); d1, d2, dout: whether each rescale shifts right (constants per copy). */
static int fast_ok(const kb_add_params *p)
{
    return p->in1_shift <= 0 && p->in2_shift <= 0 && p->out_shift <= 0 && p->left_shift <= 30;
}

static inline __attribute__((always_inline)) void row_fast(const kb_add_params *p, int neg, const int8_t *a,
                                                           const int8_t *b, int32_t n, int8_t *y, int d1, int d2,
                                                           int dout)
{
    const int32_t ls = p->left_shift, m1 = p->in1_mult, m2 = p->in2_mult, mo = p->out_mult;
    const int32_t r1 = p->in1_shift, r2 = p->in2_shift, ro = p->out_shift, zo = p->out_offset;
    const int32x4_t base1 = vdupq_n_s32((int32_t)((uint32_t)p->in1_offset << ls));
    const int32x4_t base2 = vdupq_n_s32((int32_t)((uint32_t)p->in2_offset << ls));
    const int32x4_t lo = vdupq_n_s32(p->act_min - zo), hi = vdupq_n_s32(p->act_max - zo);
    const int32_t unit = (int32_t)(1u << ls);
    for (int32_t i = 0; i < n; i += 4) {
        const mve_pred16_t k = vctp32q((uint32_t)(n - i));
        const int32x4_t sa = divided(vqrdmulhq_n_s32(vmlaq_n_s32(base1, vldrbq_z_s32(a + i, k), unit), m1), r1, d1);
        const int32x4_t sb = divided(vqrdmulhq_n_s32(vmlaq_n_s32(base2, vldrbq_z_s32(b + i, k), unit), m2), r2, d2);
        const int32x4_t v = divided(vqrdmulhq_n_s32(neg ? vsubq_s32(sa, sb) : vaddq_s32(sa, sb), mo), ro, dout);
        vstrbq_p_s32(y + i, vaddq_n_s32(vminq_s32(vmaxq_s32(v, lo), hi), zo), k);
    }
}

#define KB_ADD_FAST(d1, d2, dout)                                                                                  \
    static void add_fast_##d1##d2##dout(const kb_add_params *p, int neg, const int8_t *a, const int8_t *b,         \
                                        int32_t n, int8_t *y)                                                      \
    {                                                                                                              \
        row_fast(p, neg, a, b, n, y, d1, d2, dout);                                                                \
    }
/* Only the combinations the assembly leaves (assembly_for): the output not shifting right, or neither input. */
KB_ADD_FAST(0, 0, 0)
KB_ADD_FAST(0, 0, 1)
KB_ADD_FAST(0, 1, 0)
KB_ADD_FAST(1, 0, 0)
KB_ADD_FAST(1, 1, 0)
typedef void kb_add_row(const kb_add_params *, int, const int8_t *, const int8_t *, int32_t, int8_t *);
static kb_add_row *const fast_rows[8] = {add_fast_000, add_fast_001, add_fast_010, NULL,
                                         add_fast_100, NULL, add_fast_110, NULL};

/* The general case (a rescale that shifts left): every rescale in full. Constants in locals (the int8 stores could
 * alias the params struct). */
static void add_row(const kb_add_params *p, int neg, const int8_t *a, const int8_t *b, int32_t n, int8_t *y)
{
    const kb_scale s1 = scale_of(p->in1_mult, p->in1_shift), s2 = scale_of(p->in2_mult, p->in2_shift);
    const kb_scale so = scale_of(p->out_mult, p->out_shift);
    const int32_t off1 = p->in1_offset, off2 = p->in2_offset, ls = p->left_shift, zo = p->out_offset;
    const int32x4_t lo = vdupq_n_s32(p->act_min - zo), hi = vdupq_n_s32(p->act_max - zo);
    for (int32_t i = 0; i < n; i += 4) {
        const mve_pred16_t k = vctp32q((uint32_t)(n - i));
        const int32x4_t sa = scaled(vshlq_r_s32(vaddq_n_s32(vldrbq_z_s32(a + i, k), off1), ls), s1);
        const int32x4_t sb = scaled(vshlq_r_s32(vaddq_n_s32(vldrbq_z_s32(b + i, k), off2), ls), s2);
        int32x4_t v = scaled(neg ? vsubq_s32(sa, sb) : vaddq_s32(sa, sb), so);
        vstrbq_p_s32(y + i, vaddq_n_s32(vminq_s32(vmaxq_s32(v, lo), hi), zo), k);
    }
}

/* The assembly for the usual parameters (kb_mve_add.h): the output shifts right and at least one input does. */
static kb_mve_add_fn *assembly_for(const kb_add_params *p, int neg)
{
    if (!fast_ok(p) || p->out_shift >= 0 || (p->in1_shift == 0 && p->in2_shift == 0)) {
        return NULL;
    }
    static kb_mve_add_fn *const fns[2][3] = {{kb_mve_add_11_add, kb_mve_add_01_add, kb_mve_add_10_add},
                                             {kb_mve_add_11_sub, kb_mve_add_01_sub, kb_mve_add_10_sub}};
    return fns[neg][p->in1_shift == 0 ? 1 : p->in2_shift == 0 ? 2 : 0];
}

static void add_or_sub(const kb_add_params *p, int neg, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    kb_mve_add_fn *fn = assembly_for(p, neg);
    if (fn != NULL) {
        kb_mve_add_job job = {.base1 = (int32_t)((uint32_t)p->in1_offset << p->left_shift),
                              .base2 = (int32_t)((uint32_t)p->in2_offset << p->left_shift),
                              .m1 = p->in1_mult, .m2 = p->in2_mult, .mo = p->out_mult, .r1 = p->in1_shift,
                              .r2 = p->in2_shift, .ro = p->out_shift, .zo = p->out_offset,
                              .lo = p->act_min - p->out_offset, .hi = p->act_max - p->out_offset,
                              .unit = (int32_t)(1u << p->left_shift)};
        const int dense = p->in1_cstride == p->c && p->in2_cstride == p->c && p->out_cstride == p->c;
        for (int32_t px = 0; px < (dense ? 1 : p->pixels); ++px) {
            job.a = in1 + px * p->in1_cstride, job.b = in2 + px * p->in2_cstride, job.y = out + px * p->out_cstride;
            job.n = dense ? p->pixels * p->c : p->c;
            fn(&job);
        }
        return;
    }
    kb_add_row *row = add_row;
    if (fast_ok(p)) {
        row = fast_rows[(p->in1_shift < 0) << 2 | (p->in2_shift < 0) << 1 | (p->out_shift < 0)];
    }
    if (p->in1_cstride == p->c && p->in2_cstride == p->c && p->out_cstride == p->c) {
        row(p, neg, in1, in2, p->pixels * p->c, out);
        return;
    }
    for (int32_t px = 0; px < p->pixels; ++px) {
        row(p, neg, in1 + px * p->in1_cstride, in2 + px * p->in2_cstride, p->c, out + px * p->out_cstride);
    }
}
void kb_add(const kb_add_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    add_or_sub(p, 0, in1, in2, out);
}

void kb_sub(const kb_add_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    add_or_sub(p, 1, in1, in2, out);
}

void kb_add_const(const kb_const_params *p, const int8_t *in, const int32_t *terms, int8_t *out)
{
    kb_const_op(p, in, terms, out, 0);
}
