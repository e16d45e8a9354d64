/* Kilobyte runtime, Cortex-M55 Helium (MVE) kernels: int8 ADD and SUB, bit-identical to ../kb_add.c (same functions,
 * arguments and layouts; TFLite's reference arithmetic: both inputs plus their offsets shifted left by left_shift,
 * rescaled to a common scale, summed, rescaled to the output, clamped).
 *
 * Four elements per step in int32 lanes: VLDRB.S32 widens each input, and every rescale is kb_mve_scale4 (VQRDMULH
 * and the rounding shift, kb_mve_requant.h); the last step is predicated (VCTP32), the result narrowed by VSTRB.32.
 * `out` may be `in1` or `in2` with the same stride: a step reads its four elements before it writes them.
 * kb_add_const is the portable one (kb_const_op in kb_requant.h).
 */
#include <arm_mve.h>

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_mve_requant.h"

static void add_row(const kb_add_params *p, int neg, const int8_t *a, const int8_t *b, int32_t n, int8_t *y)
{
    const int32_t lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset, ls = p->left_shift;
    for (int32_t i = 0; i < n; i += 4) {
        const mve_pred16_t k = vctp32q((uint32_t)(n - i));
        const int32x4_t xa = vshlq_r_s32(vaddq_n_s32(vldrbq_z_s32(a + i, k), p->in1_offset), ls);
        const int32x4_t xb = vshlq_r_s32(vaddq_n_s32(vldrbq_z_s32(b + i, k), p->in2_offset), ls);
        const int32x4_t sa = kb_mve_scale4(xa, p->in1_mult, p->in1_shift);
        const int32x4_t sb = kb_mve_scale4(xb, p->in2_mult, p->in2_shift);
        int32x4_t v = kb_mve_scale4(neg ? vsubq_s32(sa, sb) : vaddq_s32(sa, sb), p->out_mult, p->out_shift);
        v = vaddq_n_s32(vminq_s32(vmaxq_s32(v, vdupq_n_s32(lo)), vdupq_n_s32(hi)), p->out_offset);
        vstrbq_p_s32(y + i, v, k);
    }
}

static void add_or_sub(const kb_add_params *p, int neg, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    if (p->in1_cstride == p->c && p->in2_cstride == p->c && p->out_cstride == p->c) {
        add_row(p, neg, in1, in2, p->pixels * p->c, out);
        return;
    }
    for (int32_t px = 0; px < p->pixels; ++px) {
        add_row(p, neg, in1 + px * p->in1_cstride, in2 + px * p->in2_cstride, p->c, out + px * p->out_cstride);
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
