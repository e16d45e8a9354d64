/* Kilobyte runtime, Cortex-M DSP kernels: a pointwise CONV_2D fused with the residual ADD reading its output, on
 * Armv7E-M SIMD, bit-identical to ../kb_conv_add.c (same function, arguments and contract: `in` never overlaps
 * residual_and_out; the ADD's output is written over the residual).
 *
 * The conv part is arm/kb_conv.c's kb_conv_1x1: output channel pairs outside, pixel pairs inside (pixels in
 * row-major order, across rows), each pair a 2 x 2 block of SMLADs on raw int8 with bias + in_offset * sum(w) as
 * the accumulators' start; a last odd pixel adds the offset while unpacking. Each conv value is requantised to the
 * conv output's int8 (its fused activation included), then added to the residual value with TFLite's int8 ADD:
 * both operands shifted left by left_shift, rescaled, summed, rescaled, offset and clamped. The conv's requantisation
 * uses kb_arm_rq (kb_arm_requant.h), the ADD's three rescales its one-rounding kb_arm_rq1, all split once per call.
 *
 * When the conv's input dies here (p->in_consumed, from the plan) the pixels after the first ~13 take arm/kb_conv.c's
 * wide path instead, its columns in the input pixels already read (conv_add_wide below): the dot products at
 * ~0.77 instructions per MAC, the ADD (~50 instructions per value, TFLite's three rescales) in C.
 */
/* See arm/kb_conv.c: keeps the unrolled SIMD loops within the registers. Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_simd.h"
#include "kb_arm_requant.h"
#include "kb_arm_dot.h"
#include "kb_arm_widen.h"
#include "kb_arm_wide.h"

/* TFLite's int8 ADD, prepared once per call: the rescales of the conv value (1), the residual (2) and the sum, in
 * kb_arm_rq1's one-rounding form. */
typedef struct {
    kb_arm_rq1 s1, s2, out;
    int32_t off1, off2, left_shift;
} kb_arm_add;

static kb_arm_add add_of(const kb_add_params *a)
{
    kb_arm_add d;
    d.s1 = kb_arm_rq1_of(a->in1_mult, a->in1_shift, 0, 0, 0);
    d.s2 = kb_arm_rq1_of(a->in2_mult, a->in2_shift, 0, 0, 0);
    d.out = kb_arm_rq1_of(a->out_mult, a->out_shift, a->out_offset, a->act_min, a->act_max);
    d.off1 = a->in1_offset, d.off2 = a->in2_offset, d.left_shift = a->left_shift;
    return d;
}

static inline __attribute__((always_inline)) int32_t rescale(const kb_arm_rq1 *q, int32_t x)
{
    return q->right1 < 0 ? kb_arm_scale1(q, x, 1) : kb_arm_scale1(q, x, 0);
}

/* The ADD of conv value y and residual value r (as kb_add.c computes it). */
static inline __attribute__((always_inline)) int8_t add_value(const kb_arm_add *a, int32_t y, int32_t r)
{
    /* (x + offset) is in [-255, 255], so shifting it by 20 stays far inside int32. */
    const int32_t s1 = rescale(&a->s1, (y + a->off1) * (1 << a->left_shift));
    const int32_t s2 = rescale(&a->s2, (r + a->off2) * (1 << a->left_shift));
    return kb_arm_rq1_apply(&a->out, s1 + s2);
}

/* One output channel pair: weights, accumulator starts and the conv's requantisation. */
typedef struct {
    const int8_t *w0, *w1;
    int32_t bias0, bias1, base0, base1;  /* starts with the offset added while unpacking / folded in */
    int32_t co, co1;                     /* co1 == co + 1, or co for an odd last channel (stored once) */
    kb_arm_rq rq0, rq1;
} kb_pair_add;

/* Conv accumulators (a0, a1) of pixel a -> the ADD over pixel a's residual r (and b's likewise, when rb). */
static inline __attribute__((always_inline)) void store(const kb_pair_add *c, const kb_arm_add *add, int32_t a0,
                                                        int32_t a1, int32_t b0, int32_t b1, int8_t *ra, int8_t *rb)
{
    const int32_t co = c->co, co1 = c->co1;
    ra[co] = add_value(add, kb_arm_rq_apply(&c->rq0, a0), ra[co]);
    if (rb) {
        rb[co] = add_value(add, kb_arm_rq_apply(&c->rq0, b0), rb[co]);
    }
    if (co1 != co) {
        ra[co1] = add_value(add, kb_arm_rq_apply(&c->rq1, a1), ra[co1]);
        if (rb) {
            rb[co1] = add_value(add, kb_arm_rq_apply(&c->rq1, b1), rb[co1]);
        }
    }
}

static kb_pair_add pair_at(const kb_conv_params *p, const int8_t *w, const int32_t *bias, const int32_t *mult,
                           const int32_t *shift, int32_t co)
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
    return c;
}

/* Pixels [k0, k1) (row-major), output channel pairs outside, pixel pairs inside. */
static void conv_add_pairs(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                           const int32_t *mult, const int32_t *shift, const kb_add_params *a,
                           int8_t *residual_and_out, int32_t k0, int32_t k1)
{
    const int32_t n = p->in_c;
    const kb_arm_add add = add_of(a);
    for (int32_t co = 0; co < p->out_c; co += 2) {
        const kb_pair_add c = pair_at(p, w, bias, mult, shift, co);
        int32_t y = k0 / p->out_w, x = k0 % p->out_w;  /* the next pixel */
        int32_t k = k0;
        for (; k + 1 < k1; k += 2) {
            KB_PIXEL_NEXT(p, in, residual_and_out, y, x, xa, ra)
            KB_PIXEL_NEXT(p, in, residual_and_out, y, x, xb, rb)
            int32_t acc[4] = {c.base0, c.base1, c.base0, c.base1};
            kb_dot_2x2(xa, xb, c.w0, c.w1, n, 0, 0, acc);
            store(&c, &add, acc[0], acc[1], acc[2], acc[3], ra, rb);
        }
        if (k < k1) {  /* an odd last pixel */
            int32_t acc[4] = {c.bias0, c.bias1, 0, 0};
            kb_dot_1x2(in + (y * p->in_row + x) * p->in_cstride, c.w0, c.w1, n, p->in_offset, acc);
            store(&c, &add, acc[0], acc[1], 0, 0, residual_and_out + (y * p->out_row + x) * p->out_cstride, 0);
        }
    }
}

/* The wide path of arm/kb_conv.c, where the input dies here (p->in_consumed; a dense input): from the first pixel k0
 * whose consumed input pixels [0, k0) hold six int16 columns and six pixels' conv values, blocks of up to six pixels
 * are widened there, kb_wide_1x<N> computes every channel's int8 conv value into the values area, and the ADD
 * then runs over the block's residual pixels. Returns k0 (pixels when the path does not apply). */
static int32_t wide_start(const kb_conv_params *p, const int32_t *bias, const int32_t *shift)
{
    const int32_t n = p->in_c, pixels = p->out_h * p->out_w;
    if (!p->in_consumed || p->out_c < KB_COLS_MIN_OUT_C || p->in_cstride != n || p->in_row != p->in_w ||
        !kb_wide_job_ok(bias, shift, p->out_c, n, p->out_offset, p->act_min, p->act_max)) {
        return pixels;
    }
    const int32_t need = 3 + KB_WIDE_COLS * (2 * n + p->out_c);  /* 3: aligning the columns to a word */
    const int32_t k0 = (need + n - 1) / n;
    return k0 + 3 <= pixels ? k0 : pixels;
}

/* Pixels k0 .. in wide blocks; returns the first pixel left (fewer than 3) for the pair path. Not inlined, so that
 * its frame and conv_add_pairs's are never on the stack together. */
static __attribute__((noinline)) int32_t conv_add_wide(const kb_conv_params *p, const int8_t *in, const int8_t *w,
                                                       const int32_t *bias, const int32_t *mult,
                                                       const int32_t *shift, const kb_add_params *a,
                                                       int8_t *residual_and_out, int32_t k0)
{
    typedef void kb_wide_fn(const int8_t *cols, const int8_t *w, int32_t groups, kb_wide_job *job);
    static kb_wide_fn *const wide[KB_WIDE_COLS + 1] = {0, 0, 0, kb_wide_1x3, kb_wide_1x4, kb_wide_1x5, kb_wide_1x6};
    const int32_t n = p->in_c, out_c = p->out_c, pixels = p->out_h * p->out_w, off2 = kb_offset2(p->in_offset);
    int8_t *cols = (int8_t *)(((uintptr_t)in + 3) & ~(uintptr_t)3), *values = cols + KB_WIDE_COLS * 2 * n;
    const kb_arm_add add = add_of(a);
    kb_wide_job job = {bias, mult, shift, 0, out_c, 1 + 2 * p->out_offset, {0}};
    int32_t k = k0;
    while (pixels - k >= 3) {
        const int32_t m = kb_wide_block(pixels - k);
        for (int32_t i = 0; i < m; ++i) {
            widen_run(in + (k + i) * n, n, off2, cols + 8 * i, m);
            job.y[i] = values + i * out_c;
        }
        job.co = 0;
        wide[m](cols, w, n >> 2, &job);
        for (int32_t i = 0; i < m; ++i, ++k) {
            int8_t *r = residual_and_out + ((k / p->out_w) * p->out_row + k % p->out_w) * p->out_cstride;
            const int8_t *v = values + i * out_c;
            for (int32_t co = 0; co < out_c; ++co) {
                r[co] = add_value(&add, v[co], r[co]);
            }
        }
    }
    return k;
}

void kb_conv_1x1_add(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                     const int32_t *mult, const int32_t *shift, const kb_add_params *a, int8_t *residual_and_out)
{
    const int32_t pixels = p->out_h * p->out_w, k0 = wide_start(p, bias, shift);
    conv_add_pairs(p, in, w, bias, mult, shift, a, residual_and_out, 0, k0);
    if (k0 < pixels) {
        const int32_t k1 = conv_add_wide(p, in, w, bias, mult, shift, a, residual_and_out, k0);
        conv_add_pairs(p, in, w, bias, mult, shift, a, residual_and_out, k1, pixels);
    }
}
