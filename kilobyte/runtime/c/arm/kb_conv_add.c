/* Kilobyte runtime, Cortex-M DSP kernels: a pointwise CONV_2D fused with the residual ADD reading its output, on
 * Armv7E-M SIMD, bit-identical to ../kb_conv_add.c (same function, arguments and contract: `in` never overlaps
 * residual_and_out; the ADD's output is written over the residual).
 *
 * The conv part is arm/kb_conv.c's kb_conv_1x1: output channel pairs outside, pixel pairs inside (pixels in
 * row-major order, across rows), each pair a 2 x 2 block of SMLADs on raw int8 with bias + in_offset * sum(w) as
 * the accumulators' start; a last odd pixel adds the offset while unpacking. Each conv value is requantised to the
 * conv output's int8 (its fused activation included), then added to the residual value with TFLite's int8 ADD:
 * both operands shifted left by left_shift, rescaled, summed, rescaled, offset and clamped. All four rescales use
 * the shorter, equivalent requantisation of kb_arm_simd.h with their shifts split once per call.
 */
/* See arm/kb_conv.c: keeps the unrolled SIMD loops within the registers. Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_simd.h"

/* TFLite's int8 ADD, prepared once per call: the rescales of the conv value (1), the residual (2) and the sum. */
typedef struct {
    kb_arm_rq s1, s2, out;
    int32_t off1, off2, left_shift;
} kb_arm_add;

/* The ADD of conv value y and residual value r (as kb_add.c computes it). */
static inline int8_t add_value(const kb_arm_add *a, int32_t y, int32_t r)
{
    /* (x + offset) is in [-255, 255], so shifting it by 20 stays far inside int32. */
    const int32_t s1 = kb_arm_scale(&a->s1, (y + a->off1) * (1 << a->left_shift));
    const int32_t s2 = kb_arm_scale(&a->s2, (r + a->off2) * (1 << a->left_shift));
    return kb_arm_rq_apply(&a->out, s1 + s2);
}

/* One output channel pair: weights, accumulator starts, the conv's requantisation and the ADD. */
typedef struct {
    const int8_t *w0, *w1;
    int32_t bias0, bias1, base0, base1;  /* starts with the offset added while unpacking / folded in */
    int32_t co, co1;                     /* co1 == co + 1, or co for an odd last channel (stored once) */
    kb_arm_rq rq0, rq1;
    kb_arm_add add;
} kb_pair_add;

/* Conv accumulators (a0, a1) of pixel a -> the ADD over pixel a's residual r (and b's likewise, when rb). */
static inline __attribute__((always_inline)) void store(const kb_pair_add *c, int32_t a0, int32_t a1, int32_t b0,
                                                        int32_t b1, int8_t *ra, int8_t *rb)
{
    const int32_t co = c->co, co1 = c->co1;
    ra[co] = add_value(&c->add, kb_arm_rq_apply(&c->rq0, a0), ra[co]);
    if (rb) {
        rb[co] = add_value(&c->add, kb_arm_rq_apply(&c->rq0, b0), rb[co]);
    }
    if (co1 != co) {
        ra[co1] = add_value(&c->add, kb_arm_rq_apply(&c->rq1, a1), ra[co1]);
        if (rb) {
            rb[co1] = add_value(&c->add, kb_arm_rq_apply(&c->rq1, b1), rb[co1]);
        }
    }
}

static kb_pair_add pair_at(const kb_conv_params *p, const int8_t *w, const int32_t *bias, const int32_t *mult,
                           const int32_t *shift, const kb_add_params *a, int32_t co)
{
    kb_pair_add c;
    c.co = co;
    c.co1 = co + 1 < p->out_c ? co + 1 : co;
    c.w0 = w + co * p->in_c;
    c.w1 = w + c.co1 * p->in_c;
    c.bias0 = bias[co];
    c.bias1 = bias[c.co1];
    c.base0 = kb_arm_base(c.bias0, p->in_offset, c.w0, p->in_c);
    c.base1 = kb_arm_base(c.bias1, p->in_offset, c.w1, p->in_c);
    c.rq0 = kb_arm_rq_of(mult[co], shift[co], p->out_offset, p->act_min, p->act_max);
    c.rq1 = kb_arm_rq_of(mult[c.co1], shift[c.co1], p->out_offset, p->act_min, p->act_max);
    c.add.s1 = kb_arm_rq_of(a->in1_mult, a->in1_shift, 0, 0, 0);
    c.add.s2 = kb_arm_rq_of(a->in2_mult, a->in2_shift, 0, 0, 0);
    c.add.out = kb_arm_rq_of(a->out_mult, a->out_shift, a->out_offset, a->act_min, a->act_max);
    c.add.off1 = a->in1_offset, c.add.off2 = a->in2_offset, c.add.left_shift = a->left_shift;
    return c;
}

void kb_conv_1x1_add(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                     const int32_t *mult, const int32_t *shift, const kb_add_params *a, int8_t *residual_and_out)
{
    const int32_t n = p->in_c, pixels = p->out_h * p->out_w;
    for (int32_t co = 0; co < p->out_c; co += 2) {
        const kb_pair_add c = pair_at(p, w, bias, mult, shift, a, co);
        int32_t y = 0, x = 0;  /* the next pixel */
        for (int32_t k = 0; k + 1 < pixels; k += 2) {
            const int8_t *xa = in + (y * p->in_row + x) * p->in_cstride;
            int8_t *ra = residual_and_out + (y * p->out_row + x) * p->out_cstride;
            if (++x == p->out_w) {
                x = 0, ++y;
            }
            const int8_t *xb = in + (y * p->in_row + x) * p->in_cstride;
            int8_t *rb = residual_and_out + (y * p->out_row + x) * p->out_cstride;
            if (++x == p->out_w) {
                x = 0, ++y;
            }
            int32_t acc[4] = {c.base0, c.base1, c.base0, c.base1};
            kb_dot_2x2(xa, xb, c.w0, c.w1, n, 0, 0, acc);
            store(&c, acc[0], acc[1], acc[2], acc[3], ra, rb);
        }
        if (pixels & 1) {  /* the last pixel, (out_h - 1, out_w - 1) */
            int32_t acc[4] = {c.bias0, c.bias1, 0, 0};
            kb_dot_1x2(in + (y * p->in_row + x) * p->in_cstride, c.w0, c.w1, n, p->in_offset, acc);
            store(&c, acc[0], acc[1], 0, 0, residual_and_out + (y * p->out_row + x) * p->out_cstride, 0);
        }
    }
}
