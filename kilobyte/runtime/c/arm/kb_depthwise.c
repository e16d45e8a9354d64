/* Kilobyte runtime, Cortex-M DSP kernels: int8 DEPTHWISE_CONV_2D (depth multiplier 1) on Armv7E-M SIMD,
 * bit-identical to ../kb_depthwise.c: same functions, arguments, layouts and in-place contract; the scratch a call
 * is handed may hold more than the padded plane (the group path's ring, where the planner granted it).
 *
 *   kb_depthwise           SIMD over channels: 4 channels per 32-bit load; SXTAB16 adds the input offset while
 *                          unpacking, SMLABB/SMLATT multiply-accumulate each channel's lane (a depthwise tap is no
 *                          dot product, so SMLAD would mix channels). Padded taps are skipped, as TFLite does. A 3x3
 *                          window with dilation 1 goes channel group by channel group (dw3_group: weights unpacked
 *                          and requantisation prepared once per group, interior pixels' taps unrolled).
 *   kb_depthwise_3x3       out of place, 3x3, dilation 1, stride 1 or 2, with a granted ring in `scratch`: the group
 *                          path below; without it (or for the channels it does not cover) as kb_depthwise.
 *   kb_depthwise_inplace*  channel by channel through one zero-point-padded plane, as the portable kernels (every
 *                          tap present, the offset folded into bias + in_offset * sum(w)), or, for a 3x3 conv at
 *                          stride 2 or on output rows of at most KB_DWG_S1_MAX_WIDTH pixels whose scratch holds the
 *                          ring, the group path.
 *   the group path         four channels at a time through a ring of three widened window rows (kb_arm_dwg.S: 6
 *                          instructions per 4 MACs, no per-channel set-up but one per group, no per-row work in C):
 *                          what the small maps and stride 2 need, where the plane path's per-channel and per-row
 *                          work dominated (a 3x3 output map: 7.0 -> 3.9 instructions per MAC).
 *   the plane path, 3x3    with horizontal stride 1 or 2 computes two neighbouring outputs per window row from one
 *                          4-byte load:
 *                          [r0 r1 r2 r3] -> [r0, r2], [r1, r3]; with the row's weights as [w0, w2], w0, w1, w2:
 *                            out(x)     = SMLAD([w0, w2], [r0, r2]) + w1 * r1     (SMLABB on [r1, r3])
 *                            stride 1: out(x + 1) = SMLAD([w0, w2], [r1, r3]) + w1 * r2    (SMLABT on [r0, r2])
 *                            stride 2: out(x + 1) = w0 * r2 + w1 * r3 (SMLABT twice) + w2 * r4 (one more byte)
 *                          6 MACs for 1 load, 2 unpacks and 4 (5) multiply-accumulates; no byte outside the two
 *                          windows is read. A 3x3 channel whose requantisation the one-SMMLAR form covers
 *                          (kb_arm_rqs_ok and a bounded accumulator) runs these steps in the assembly of
 *                          kb_arm_dw3.S, the whole channel in one call with the sums and weights in registers;
 *                          the others, and other windows, use the C loops. Every output uses a short
 *                          requantisation of kb_arm_requant.h (kb_arm_rqs where it applies, else kb_arm_rq1).
 */
/* See arm/kb_conv.c: keeps the unrolled SIMD loops within the registers. Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include <string.h>

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_simd.h"
#include "kb_arm_requant.h"
#include "kb_arm_dw3.h"
#include "kb_arm_dwg.h"
#include "kb_arm_window.h"

/* Channels [c, c + 4) of one output pixel: acc[j] += sum over the taps inside the image of w * (x + in_offset).
 * x_c: channel c of input pixel (iy0, ix0), the window's top-left tap (possibly in the padding: never read). */
static inline void taps_x4(const kb_conv_params *p, const int8_t *in, const int8_t *w_c, int32_t iy0, int32_t ix0,
                           const int32_t k[4], int32_t acc[4])
{
    const int32_t off2 = kb_offset2(p->in_offset), c_n = p->in_c, x_step = p->dil_w * p->in_cstride;
    for (int32_t ky = k[0]; ky < k[1]; ++ky) {
        int32_t xi = ((iy0 + ky * p->dil_h) * p->in_row + ix0 + k[2] * p->dil_w) * p->in_cstride;  /* tap offsets */
        int32_t wi = (ky * p->k_w + k[2]) * c_n;
        for (int32_t kx = k[2]; kx < k[3]; ++kx, xi += x_step, wi += c_n) {
            const int32_t xr = kb_ld4(in + xi), wr = kb_ld4(w_c + wi);
            const int32_t xe = __sxtab16(off2, xr), we = __sxtb16(wr);            /* channels c, c + 2 */
            const int32_t xo = kb_sxtab16_odd(off2, xr), wo = kb_sxtb16_odd(wr);  /* channels c + 1, c + 3 */
            acc[0] = __smlabb(xe, we, acc[0]);
            acc[1] = __smlabb(xo, wo, acc[1]);
            acc[2] = __smlatt(xe, we, acc[2]);
            acc[3] = __smlatt(xo, wo, acc[3]);
        }
    }
}

/* Channel c of one output pixel, scalar (the last in_c % 4 channels). */
static inline int32_t taps_x1(const kb_conv_params *p, const int8_t *in, const int8_t *w_c, int32_t iy0,
                              int32_t ix0, const int32_t k[4], int32_t acc)
{
    for (int32_t ky = k[0]; ky < k[1]; ++ky) {
        for (int32_t kx = k[2]; kx < k[3]; ++kx) {
            const int32_t x = in[((iy0 + ky * p->dil_h) * p->in_row + ix0 + kx * p->dil_w) * p->in_cstride];
            acc = kb_wrapping_add(acc, w_c[(ky * p->k_w + kx) * p->in_c] * (x + p->in_offset));
        }
    }
    return acc;
}

/* -- 3x3, dilation 1: channel groups outside, pixels inside ---------------------------------------------------------
 * One group of 4 channels at a time: its nine weight words unpacked once (we: channels c, c + 2; wo: c + 1, c + 3)
 * and its four requantisations prepared once, then every output pixel: an interior one (every tap inside the image)
 * with the nine taps unrolled, one word load, two SXTAB16 (the input offset added) and four SMLAxy each; a border
 * one over the taps inside the image only, as TFLite skips the padded ones. */
typedef struct {
    int32_t we[9], wo[9];
    int32_t bias[4];
    kb_arm_rq1 rq[4];
} kb_dw3_group;

/* acc[0..3] += tap t (weights g) times the input word at x (channels c..c + 3 of one input pixel). */
static inline __attribute__((always_inline)) void tap_x4(const kb_dw3_group *g, int32_t t, const int8_t *x,
                                                         int32_t off2, int32_t acc[4])
{
    const int32_t xr = kb_ld4(x), xe = __sxtab16(off2, xr), xo = kb_sxtab16_odd(off2, xr);
    acc[0] = __smlabb(xe, g->we[t], acc[0]);
    acc[1] = __smlabb(xo, g->wo[t], acc[1]);
    acc[2] = __smlatt(xe, g->we[t], acc[2]);
    acc[3] = __smlatt(xo, g->wo[t], acc[3]);
}

static inline __attribute__((always_inline)) void store_x4(const kb_dw3_group *g, const int32_t acc[4], int8_t *y)
{
    const int8_t q0 = kb_arm_rq1_apply(&g->rq[0], acc[0]), q1 = kb_arm_rq1_apply(&g->rq[1], acc[1]);
    const int8_t q2 = kb_arm_rq1_apply(&g->rq[2], acc[2]), q3 = kb_arm_rq1_apply(&g->rq[3], acc[3]);
    y[0] = q0, y[1] = q1, y[2] = q2, y[3] = q3;
}

/* Channels [c, c + 4) of every output pixel of a 3x3, dilation-1 depthwise conv (p's fields copied first: the int8
 * stores may alias them). */
static void dw3_group(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int8_t *out, int32_t c)
{
    const int32_t c_n = p->in_c, cs = p->in_cstride, row = p->in_row * cs, ocs = p->out_cstride;
    const int32_t out_h = p->out_h, out_w = p->out_w, out_row = p->out_row * ocs, in_h = p->in_h, in_w = p->in_w;
    const int32_t sh = p->stride_h, sw = p->stride_w, pad_t = p->pad_t, pad_l = p->pad_l;
    const int32_t off2 = kb_offset2(p->in_offset);
    int32_t oy_lo, oy_hi, ox_lo, ox_hi;  /* output pixels whose window lies inside the image, per axis */
    interior(out_h, sh, pad_t, 3, 1, in_h, &oy_lo, &oy_hi);
    interior(out_w, sw, pad_l, 3, 1, in_w, &ox_lo, &ox_hi);
    kb_dw3_group g;
    for (int32_t t = 0; t < 9; ++t) {
        const int32_t wr = kb_ld4(w + t * c_n + c);
        g.we[t] = __sxtb16(wr), g.wo[t] = kb_sxtb16_odd(wr);
    }
    for (int32_t j = 0; j < 4; ++j) {
        g.bias[j] = bias[c + j];
        g.rq[j] = kb_arm_rq1_of(mult[c + j], shift[c + j], p->out_offset, p->act_min, p->act_max);
    }
    for (int32_t oy = 0; oy < out_h; ++oy) {
        const int32_t iy0 = oy * sh - pad_t;
        const int interior_row = oy >= oy_lo && oy < oy_hi;
        int8_t *y = out + oy * out_row + c;
        for (int32_t ox = 0; ox < out_w; ++ox, y += ocs) {
            const int32_t ix0 = ox * sw - pad_l, x0 = iy0 * row + ix0 * cs;  /* the top-left tap (maybe padding) */
            int32_t acc[4] = {g.bias[0], g.bias[1], g.bias[2], g.bias[3]};
            if (interior_row && ox >= ox_lo && ox < ox_hi) {
                const int8_t *x = in + c + x0;
                tap_x4(&g, 0, x, off2, acc), tap_x4(&g, 1, x + cs, off2, acc), tap_x4(&g, 2, x + 2 * cs, off2, acc);
                x += row;
                tap_x4(&g, 3, x, off2, acc), tap_x4(&g, 4, x + cs, off2, acc), tap_x4(&g, 5, x + 2 * cs, off2, acc);
                x += row;
                tap_x4(&g, 6, x, off2, acc), tap_x4(&g, 7, x + cs, off2, acc), tap_x4(&g, 8, x + 2 * cs, off2, acc);
            } else {
                int32_t ky0, ky1, kx0, kx1;
                inside(iy0, 3, 1, in_h, &ky0, &ky1);
                inside(ix0, 3, 1, in_w, &kx0, &kx1);
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        tap_x4(&g, 3 * ky + kx, in + c + (x0 + ky * row + kx * cs), off2, acc);
                    }
                }
            }
            store_x4(&g, acc, y);
        }
    }
}

/* Channels [c0, in_c) of every output pixel, any window: four at a time, then one at a time. */
static void channels_from(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *out, int32_t c0)
{
    const int32_t c_n = p->in_c, o = p->out_offset, lo = p->act_min, hi = p->act_max;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_t;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_l;
            int32_t k[4];  /* taps inside the image: rows [k[0], k[1]), columns [k[2], k[3]) */
            inside(iy0, p->k_h, p->dil_h, p->in_h, &k[0], &k[1]);
            inside(ix0, p->k_w, p->dil_w, p->in_w, &k[2], &k[3]);
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;  /* (c,) */
            int32_t c = c0;
            for (; c + 4 <= c_n; c += 4) {
                int32_t acc[4] = {bias[c], bias[c + 1], bias[c + 2], bias[c + 3]};
                taps_x4(p, in + c, w + c, iy0, ix0, k, acc);
                const int8_t q0 = kb_arm_requantize(acc[0], mult[c], shift[c], o, lo, hi);  /* before the stores */
                const int8_t q1 = kb_arm_requantize(acc[1], mult[c + 1], shift[c + 1], o, lo, hi);
                const int8_t q2 = kb_arm_requantize(acc[2], mult[c + 2], shift[c + 2], o, lo, hi);
                const int8_t q3 = kb_arm_requantize(acc[3], mult[c + 3], shift[c + 3], o, lo, hi);
                y[c] = q0, y[c + 1] = q1, y[c + 2] = q2, y[c + 3] = q3;
            }
            for (; c < c_n; ++c) {
                const int32_t acc = taps_x1(p, in + c, w + c, iy0, ix0, k, bias[c]);
                y[c] = kb_arm_requantize(acc, mult[c], shift[c], o, lo, hi);
            }
        }
    }
}

void kb_depthwise(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                  const int32_t *mult, const int32_t *shift, int8_t *out)
{
    int32_t c = 0;
    if (p->k_h == 3 && p->k_w == 3 && p->dil_h == 1 && p->dil_w == 1) {
        for (; c + 4 <= p->in_c; c += 4) {
            dw3_group(p, in, w, bias, mult, shift, out, c);
        }
    }
    if (c < p->in_c) {
        channels_from(p, in, w, bias, mult, shift, out, c);
    }
}

/* -- in-place machinery (as ../kb_depthwise.c) ------------------------------------------------------------------- */

static int32_t plane_width(const kb_conv_params *p)
{
    return p->in_w + p->pad_l + p->pad_r;
}

/* Fill the whole plane with the input zero point; its padding frame then stays valid for every channel. */
static void plane_clear(const kb_conv_params *p, int8_t *plane)
{
    const size_t bytes = (size_t)(p->in_h + p->pad_t + p->pad_b) * (size_t)plane_width(p);
    memset(plane, (int8_t)(-p->in_offset), bytes);
}

/* Copy input channel c, (in_h, in_w) strided by in_cstride, into the plane's interior. p's fields are read once,
 * before the stores: an int8 store may alias *p, so GCC would reload them after every one (2x the instructions). */
static void plane_load(const kb_conv_params *p, const int8_t *in, int32_t c, int8_t *plane)
{
    const int32_t pw = plane_width(p), cs = p->in_cstride, w = p->in_w, h = p->in_h, row = p->in_row * cs;
    const int8_t *src = in + c;
    int8_t *dst = plane + p->pad_t * pw + p->pad_l;
    for (int32_t y = 0; y < h; ++y, src += row, dst += pw) {
        const int8_t *s = src;
        int32_t x = 0;
        for (; x + 4 <= w; x += 4, s += 4 * cs) {  /* four bytes per (unaligned) word store */
            const uint32_t v = (uint32_t)(uint8_t)s[0] | (uint32_t)(uint8_t)s[cs] << 8 |
                               (uint32_t)(uint8_t)s[2 * cs] << 16 | (uint32_t)(uint8_t)s[3 * cs] << 24;
            memcpy(dst + x, &v, 4);
        }
        for (; x < w; ++x, s += cs) {
            dst[x] = *s;
        }
    }
}

/* bias + in_offset * (sum of channel c's k taps); weights are (1, k_h, k_w, c_n), so taps are c_n apart. */
static int32_t channel_base(const kb_conv_params *p, const int8_t *w, const int32_t *bias, int32_t c, int32_t k)
{
    int32_t sum = 0;
    for (int32_t i = 0; i < k; ++i) {
        sum += w[i * p->in_c + c];
    }
    return kb_wrapping_add(bias[c], p->in_offset * sum);  /* |in_offset * sum| < 2^23 */
}

/* One channel's accumulator start and requantisation, copied out of the arguments (the int8 stores may alias
 * them): the one-SMMLAR form where its domain holds for every window sum (`smmlar`), else kb_arm_rq1. */
typedef struct {
    int32_t base;
    int32_t smmlar;
    kb_arm_rqs rqs;
    kb_arm_rq1 rq;
} kb_chan;

static inline __attribute__((always_inline)) int8_t chan_out(const kb_chan *q, int32_t acc)
{
    if (q->smmlar) {
        return kb_arm_rqs_apply(&q->rqs, acc + q->base);  /* |acc + base| < 2^30: no wrap */
    }
    return kb_arm_rq1_apply(&q->rq, kb_wrapping_add(acc, q->base));
}

/* A 3x3 window row's weights, packed for two outputs per step. */
typedef struct {
    int32_t w02, w0, w1, w2;  /* w02 = [w0, w2] as an int16 pair */
} kb_row3;

static kb_row3 row3_of(const int32_t *w)
{
    const kb_row3 r = {kb_pack16(w[0], w[2]), w[0], w[1], w[2]};
    return r;
}

/* One window row of outputs x and x + 1, horizontal stride 1: taps r0..r3 from one load (see the file comment). */
static inline void row3_s1(const int8_t *r, const kb_row3 *w, int32_t *a0, int32_t *a1)
{
    const int32_t v = kb_ld4(r), e = __sxtb16(v), o = kb_sxtb16_odd(v);  /* [r0, r2], [r1, r3] */
    *a0 = __smlabb(w->w1, o, __smlad(w->w02, e, *a0));                    /* w0 r0 + w2 r2 + w1 r1 */
    *a1 = __smlabt(w->w1, e, __smlad(w->w02, o, *a1));                    /* w0 r1 + w2 r3 + w1 r2 */
}

/* The same with horizontal stride 2: outputs x and x + 1 see taps r0..r2 and r2..r4. */
static inline void row3_s2(const int8_t *r, const kb_row3 *w, int32_t *a0, int32_t *a1)
{
    const int32_t v = kb_ld4(r), e = __sxtb16(v), o = kb_sxtb16_odd(v);  /* [r0, r2], [r1, r3] */
    *a0 = __smlabb(w->w1, o, __smlad(w->w02, e, *a0));                    /* w0 r0 + w2 r2 + w1 r1 */
    *a1 = __smlabt(w->w1, o, __smlabt(w->w0, e, *a1)) + w->w2 * r[4];     /* w0 r2 + w1 r3 + w2 r4 */
}

/* The single last output of an odd output row of a 3x3 window. */
static inline int32_t window3(const int8_t *r, int32_t pw, const int32_t *taps)
{
    return taps[0] * r[0] + taps[1] * r[1] + taps[2] * r[2] + taps[3] * r[pw] + taps[4] * r[pw + 1] +
           taps[5] * r[pw + 2] + taps[6] * r[2 * pw] + taps[7] * r[2 * pw + 1] + taps[8] * r[2 * pw + 2];
}

/* One output channel of a 3x3 window with horizontal stride 1 or 2 (`s2`, a constant), two outputs per step; an
 * odd last output alone (the C path, for channels kb_arm_dw3.S does not take). taps: the channel's (3, 3) weights
 * as int32; y_c: channel c of output pixel 0. */
static inline __attribute__((always_inline)) void plane_conv_3x3_x2(const kb_conv_params *p, const int8_t *plane,
                                                                    const int32_t *taps, const kb_chan *q,
                                                                    int s2, int8_t *y_c)
{
    const int32_t pw = plane_width(p), ocs = p->out_cstride, sw = s2 ? 2 : 1;
    const kb_row3 w0 = row3_of(taps), w1 = row3_of(taps + 3), w2 = row3_of(taps + 6);
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int8_t *row = plane + oy * p->stride_h * pw;  /* first window row of this output row */
        int8_t *y = y_c + oy * p->out_row * ocs;
        int32_t ox = 0;
        for (; ox + 2 <= p->out_w; ox += 2, y += 2 * ocs) {
            const int8_t *r = row + ox * sw;
            int32_t a0 = 0, a1 = 0;
            if (s2) {
                row3_s2(r, &w0, &a0, &a1);
                row3_s2(r + pw, &w1, &a0, &a1);
                row3_s2(r + 2 * pw, &w2, &a0, &a1);
            } else {
                row3_s1(r, &w0, &a0, &a1);
                row3_s1(r + pw, &w1, &a0, &a1);
                row3_s1(r + 2 * pw, &w2, &a0, &a1);
            }
            y[0] = chan_out(q, a0);
            y[ocs] = chan_out(q, a1);
        }
        if (ox < p->out_w) {
            y[0] = chan_out(q, window3(row + ox * sw, pw, taps));
        }
    }
}

static void plane_conv_3x3_s1(const kb_conv_params *p, const int8_t *plane, const int32_t *taps, const kb_chan *q,
                              int8_t *y_c)
{
    plane_conv_3x3_x2(p, plane, taps, q, 0, y_c);
}

static void plane_conv_3x3_s2(const kb_conv_params *p, const int8_t *plane, const int32_t *taps, const kb_chan *q,
                              int8_t *y_c)
{
    plane_conv_3x3_x2(p, plane, taps, q, 1, y_c);
}

static inline int32_t row3(const int8_t *r, const int32_t *w)
{
    return w[0] * r[0] + w[1] * r[1] + w[2] * r[2];
}

static inline int32_t row5(const int8_t *r, const int32_t *w)
{
    return w[0] * r[0] + w[1] * r[1] + w[2] * r[2] + w[3] * r[3] + w[4] * r[4];
}

static inline int32_t row7(const int8_t *r, const int32_t *w)
{
    return w[0] * r[0] + w[1] * r[1] + w[2] * r[2] + w[3] * r[3] + w[4] * r[4] + w[5] * r[5] + w[6] * r[6];
}

/* One output channel with a k x k window, any stride (k = 3, 5 or 7, a constant after inlining: the rows unroll). */
static inline __attribute__((always_inline)) void plane_conv_kxk(const kb_conv_params *p, const int8_t *plane,
                                                                 const int32_t *taps, int32_t k, const kb_chan *q,
                                                                 int8_t *y_c)
{
    const int32_t pw = plane_width(p);
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int8_t *r = plane + oy * p->stride_h * pw;
        int8_t *y = y_c + oy * p->out_row * p->out_cstride;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int8_t *t = r + ox * p->stride_w;  /* top-left tap */
            int32_t acc = 0;
            for (int32_t ky = 0; ky < k; ++ky) {
                acc += k == 3 ? row3(t + ky * pw, taps + 3 * ky) : k == 5 ? row5(t + ky * pw, taps + 5 * ky)
                                                                          : row7(t + ky * pw, taps + 7 * ky);
            }
            y[ox * p->out_cstride] = chan_out(q, acc);
        }
    }
}

/* One output channel from the padded plane, any window and dilation; w_c: the channel's taps, in_c apart. */
static void plane_conv_any(const kb_conv_params *p, const int8_t *plane, const int8_t *w_c, const kb_chan *q,
                           int8_t *y_c)
{
    const int32_t pw = plane_width(p);
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        int8_t *y = y_c + oy * p->out_row * p->out_cstride;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int8_t *t = plane + oy * p->stride_h * pw + ox * p->stride_w;
            int32_t acc = 0;
            for (int32_t ky = 0; ky < p->k_h; ++ky) {
                for (int32_t kx = 0; kx < p->k_w; ++kx) {
                    acc += w_c[(ky * p->k_w + kx) * p->in_c] * t[ky * p->dil_h * pw + kx * p->dil_w];
                }
            }
            y[ox * p->out_cstride] = chan_out(q, acc);
        }
    }
}

/* Whether the one-SMMLAR requantisation (kb_arm_rqs) is exact for every output of a channel whose accumulator starts
 * at `base` and adds `taps` products of plane bytes and weights (each at most 128 * 128 in magnitude). */
static int rqs_covers(const kb_conv_params *p, int32_t shift, int32_t base, int32_t taps)
{
    if (taps > (1 << 16) || !kb_arm_rqs_ok(shift, p->out_offset)) {
        return 0;
    }
    const int32_t lim = KB_ARM_RQS_MAX_ACC - taps * 16384;
    return base > -lim && base < lim;
}

static kb_chan chan_at(const kb_conv_params *p, const int8_t *w, const int32_t *bias, const int32_t *mult,
                       const int32_t *shift, int32_t c)
{
    kb_chan q;
    const int32_t taps = p->k_h * p->k_w;
    q.base = channel_base(p, w, bias, c, taps);
    q.smmlar = rqs_covers(p, shift[c], q.base, taps);
    if (q.smmlar) {
        q.rqs = kb_arm_rqs_of(mult[c], shift[c], p->out_offset, p->act_min, p->act_max);
    } else {
        q.rq = kb_arm_rq1_of(mult[c], shift[c], p->out_offset, p->act_min, p->act_max);
    }
    return q;
}

/* kb_arm_dw3.S's job, the fields every channel shares, and the function for the layer's stride. */
static void (*dw3_call(const kb_conv_params *p, kb_dw3_job *j))(const int8_t *, int8_t *, const kb_dw3_job *)
{
    j->pw = plane_width(p), j->ocs = p->out_cstride;
    j->act_min = p->act_min, j->act_max = p->act_max;
    j->rows = p->out_h, j->pairs = p->out_w / 2, j->odd = p->out_w & 1;
    j->row_step = p->stride_h * j->pw, j->y_row = p->out_row * p->out_cstride;
    j->full = kb_arm_full_clamp(p->act_min, p->act_max);
    return p->stride_w == 1 ? kb_dw3_s1 : kb_dw3_s2;
}

/* Channel c's fields of the job (its 3x3 weights packed as kb_arm_dw3.h says, accumulator start, one-SMMLAR
 * requantisation), read once from the (1, 3, 3, in_c) weights; 0 when the one-SMMLAR form does not cover the channel
 * (rqs_covers): it then takes the C path. */
static int dw3_channel(const kb_conv_params *p, const int8_t *w, const int32_t *bias, const int32_t *mult,
                       const int32_t *shift, int32_t c, kb_dw3_job *j)
{
    const int32_t n = p->in_c;
    const int8_t *t = w + c;
    const int32_t t0 = t[0], t1 = t[n], t2 = t[2 * n], t3 = t[3 * n], t4 = t[4 * n], t5 = t[5 * n], t6 = t[6 * n],
                  t7 = t[7 * n], t8 = t[8 * n];
    const int32_t base = kb_wrapping_add(bias[c], p->in_offset * (t0 + t1 + t2 + t3 + t4 + t5 + t6 + t7 + t8));
    if (!rqs_covers(p, shift[c], base, 9)) {
        return 0;
    }
    j->w02[0] = kb_pack16(t0, t2), j->w02[1] = kb_pack16(t3, t5), j->w02[2] = kb_pack16(t6, t8);
    j->w1_01 = kb_pack16(t1, t4);
    j->w1_2 = t7;
    j->base = base;
    const kb_arm_rqs q = kb_arm_rqs_of(mult[c], shift[c], p->out_offset, p->act_min, p->act_max);
    j->k = q.k, j->mult = q.mult, j->right = q.right;
    return 1;
}

/* -- 3x3, four channels at a time through three widened window rows (kb_arm_dwg.S) -----------------------------------
 * The scratch holds a ring of three window rows of KB_DWG_RING_PIXELS(p) pixels each (the padding columns included),
 * each pixel two int16-pair words of the group's four channels (kb_arm_dwg.h). kb_arm_dwg.S runs a whole group:
 * before each output row it widens in the input rows new to its windows (one at stride 1, two at stride 2; a padding
 * row as the zero point) and rotates the three rows. C prepares what the assembly reads: per layer (group_layer,
 * the padding columns: ring_clear) and per group (group_job: weights, sums' start, requantisation). */
#define KB_DWG_RING_PIXELS(p) ((p)->in_w + (p)->pad_l + (p)->pad_r)
/* At stride 1 the plane path's SMLAD pairs (kb_arm_dw3.S: two outputs of a row per step) take fewer cycles once
 * output rows are wider than this; on narrower ones its per-row and per-channel work makes the group path cheaper
 * (modelled M4 cycles per MAC, plane vs group: 3x3 10.2 vs 7.1, 6x6 5.7 vs 5.4, 25x5 5.6 vs 5.1, 8x8 4.9 vs 5.1,
 * 12x12 4.3 vs 4.8). ops/conv_kernels.py mirrors the rule (depthwise_ring_bytes: the ring is granted only where it
 * is used). */
#define KB_DWG_S1_MAX_WIDTH 7

/* Whether the group path may run: a square stride of 2, or 1 (in place: on output rows of at most KB_DWG_S1_MAX_WIDTH
 * pixels, else the plane path is faster), the ring in the scratch (word-aligned: LDRD), and, when
 * the output overlaps the input, every output row writing only input rows already in the ring (an in-place conv
 * with the input's pixel stride). */
static int groups_apply(const kb_conv_params *p, const int8_t *in, const int8_t *out, const int8_t *scratch,
                        int in_place)
{
    if (p->dil_h != 1 || p->dil_w != 1 || p->stride_h != p->stride_w || p->stride_h > 2 || p->in_c < 4 ||
        (in_place && p->stride_h == 1 && p->out_w > KB_DWG_S1_MAX_WIDTH) ||
        p->scratch_bytes < KB_DWG_RING_PIXEL_BYTES * KB_DWG_RING_PIXELS(p) || ((uintptr_t)scratch & 3u) != 0) {
        return 0;
    }
    const uintptr_t i0 = (uintptr_t)in, o0 = (uintptr_t)out;
    const uintptr_t i1 = i0 + (uintptr_t)(((p->in_h - 1) * p->in_row + p->in_w) * p->in_cstride);
    const uintptr_t o1 = o0 + (uintptr_t)(((p->out_h - 1) * p->out_row + p->out_w) * p->out_cstride);
    if (o1 <= i0 || o0 >= i1) {
        return 1;
    }
    if (o0 != i0 || p->out_cstride != p->in_cstride) {
        return 0;
    }
    for (int32_t oy = 0; oy < p->out_h; ++oy) {  /* the input row holding output row oy's last pixel */
        if ((oy * p->out_row + p->out_w - 1) / p->in_row > oy * p->stride_h - p->pad_t + 2) {
            return 0;
        }
    }
    return 1;
}

/* The group of channels [c, c + 4): its doubled weights as int16 pairs, doubled sums' start (channel_base's
 * bias + in_offset * sum(w), the sums taken from the unpacked lanes) and one-SMMLAR requantisation; 0 when that form
 * does not cover one of the four (rqs_covers): they then take the plane path (in place) or kb_depthwise's. */
static int group_job(const kb_conv_params *p, const int8_t *w, const int32_t *bias, const int32_t *mult,
                     const int32_t *shift, int32_t c, kb_dwg_job *j)
{
    const int32_t n = p->in_c, in_offset = p->in_offset;
    const int8_t *wc = w + c;
    int32_t se = 0, so = 0;  /* the taps' sums per lane: [c, c + 2], [c + 1, c + 3]; |sum| <= 9 * 128 */
    int32_t *d = &j->w[0][0];
#pragma GCC unroll 9
    for (int32_t t = 0; t < 9; ++t, wc += n, d += 2) {
        const int32_t wr = kb_ld4(wc), we = __sxtb16(wr), wo = kb_sxtb16_odd(wr);
        d[0] = __sadd16(we, we), d[1] = __sadd16(wo, wo);
        se = __sadd16(se, we), so = __sadd16(so, wo);
    }
    const int32_t sums[4] = {(int16_t)se, (int16_t)so, se >> 16, so >> 16};
    for (int32_t k = 0; k < 4; ++k) {
        const int32_t base = kb_wrapping_add(bias[c + k], in_offset * sums[k]);
        if (!rqs_covers(p, shift[c + k], base, 9)) {
            return 0;
        }
        const kb_arm_rqs q = kb_arm_rqs_of(mult[c + k], shift[c + k], p->out_offset, p->act_min, p->act_max);
        j->base[k] = 2 * base;
        j->rq[k].k = q.k, j->rq[k].mult = q.mult, j->rq[k].right = q.right;
    }
    return 1;
}

/* The job's fields every group shares (kb_arm_dwg.h), the ring in `scratch`. */
static void group_layer(const kb_conv_params *p, int32_t *ring, kb_dwg_job *j)
{
    j->rq[3].spare = p->out_cstride;
    j->min4 = (int32_t)((uint32_t)(uint8_t)p->act_min * 0x01010101u);
    j->max4 = (int32_t)((uint32_t)(uint8_t)p->act_max * 0x01010101u);
    j->full = kb_arm_full_clamp(p->act_min, p->act_max);
    j->in_row = p->in_row * p->in_cstride, j->cs = p->in_cstride, j->in_w = p->in_w, j->in_h = p->in_h;
    j->first = -p->pad_t, j->out_h = p->out_h, j->y_row = p->out_row * p->out_cstride;
    j->row_bytes = 8 * p->stride_w * p->out_w, j->lead = 8 * p->pad_l, j->z2 = kb_offset2(-p->in_offset);
    j->ring = ring, j->ring_row = KB_DWG_RING_PIXEL_BYTES / 3 * KB_DWG_RING_PIXELS(p);
}

/* Fill the ring's padding columns with the zero point; the assembly never writes them. */
static void ring_clear(const kb_dwg_job *j)
{
    const int32_t z2 = j->z2, lead = j->lead / 4, tail = (j->lead + 8 * j->in_w) / 4, words = j->ring_row / 4;
    int32_t *row = j->ring;
    for (int32_t r = 0; r < 3; ++r, row += words) {
        for (int32_t i = 0; i < lead; ++i) {
            row[i] = z2;
        }
        for (int32_t i = tail; i < words; ++i) {
            row[i] = z2;
        }
    }
}

/* One channel through the padded plane (the plane holds its zero-point frame): kb_arm_dw3.S for a 3x3 channel its
 * requantisation covers (dw3 set), else the C paths. */
static inline __attribute__((always_inline)) void plane_channel(const kb_conv_params *p, const int8_t *in,
                                                                const int8_t *w, const int32_t *bias,
                                                                const int32_t *mult, const int32_t *shift,
                                                                int8_t *out, int8_t *plane, int32_t k, int32_t c,
                                                                void (*dw3)(const int8_t *, int8_t *,
                                                                            const kb_dw3_job *),
                                                                kb_dw3_job *job)
{
    if (dw3 != NULL && dw3_channel(p, w, bias, mult, shift, c, job)) {
        plane_load(p, in, c, plane);
        dw3(plane, out + c, job);
        return;
    }
    int32_t taps[49];  /* channel c's (k, k) weights, widened once */
    for (int32_t i = 0; i < k * k; ++i) {
        taps[i] = w[i * p->in_c + c];
    }
    const kb_chan q = chan_at(p, w, bias, mult, shift, c);
    plane_load(p, in, c, plane);
    if (k == 3 && p->stride_w == 1) {
        plane_conv_3x3_s1(p, plane, taps, &q, out + c);
    } else if (k == 3 && p->stride_w == 2) {
        plane_conv_3x3_s2(p, plane, taps, &q, out + c);
    } else {
        plane_conv_kxk(p, plane, taps, k, &q, out + c);
    }
}

/* The channel loop shared by the square variants (k constant after inlining): a 3x3 conv four channels at a time
 * through the ring where groups_apply holds (its scratch granted: scratch_bytes), the other channels one at a time
 * through the padded plane — 3x3 ones with horizontal stride 1 or 2 through kb_arm_dw3.S where its requantisation
 * applies, the rest through the C paths. Ring and plane share the scratch: whichever a channel needs is set up
 * again after the other was used. */
static inline __attribute__((always_inline)) void inplace_kxk(const kb_conv_params *p, const int8_t *in,
                                                              const int8_t *w, const int32_t *bias,
                                                              const int32_t *mult, const int32_t *shift, int8_t *out,
                                                              int8_t *scratch, int32_t k)
{
    enum { NONE, PLANE, RING } state = NONE;
    kb_dw3_job job;
    void (*dw3)(const int8_t *, int8_t *, const kb_dw3_job *) = NULL;
    if (k == 3 && (p->stride_w == 1 || p->stride_w == 2)) {
        dw3 = dw3_call(p, &job);
    }
    int32_t c = 0;
    if (k == 3 && groups_apply(p, in, out, scratch, 1)) {
        void (*group)(const kb_dwg_job *, int8_t *) = p->stride_w == 1 ? kb_dwg_s1 : kb_dwg_s2;
        kb_dwg_job g;
        group_layer(p, (int32_t *)(void *)scratch, &g);
        for (; c + 4 <= p->in_c; c += 4) {
            if (group_job(p, w, bias, mult, shift, c, &g)) {
                if (state != RING) {
                    ring_clear(&g), state = RING;
                }
                g.in = in + c;
                group(&g, out + c);
                continue;
            }
            for (int32_t i = c; i < c + 4; ++i) {
                if (state != PLANE) {
                    plane_clear(p, scratch), state = PLANE;
                }
                plane_channel(p, in, w, bias, mult, shift, out, scratch, k, i, dw3, &job);
            }
        }
    }
    for (; c < p->in_c; ++c) {
        if (state != PLANE) {
            plane_clear(p, scratch), state = PLANE;
        }
        plane_channel(p, in, w, bias, mult, shift, out, scratch, k, c, dw3, &job);
    }
}

/* Out of place, 3x3, dilation 1: the group path where groups_apply holds (its ring granted in `scratch`), the
 * channels it does not cover (requantisation, in_c % 4) as kb_depthwise. */
void kb_depthwise_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    if (scratch == NULL || !groups_apply(p, in, out, scratch, 0)) {
        kb_depthwise(p, in, w, bias, mult, shift, out);
        return;
    }
    void (*group)(const kb_dwg_job *, int8_t *) = p->stride_w == 1 ? kb_dwg_s1 : kb_dwg_s2;
    kb_dwg_job g;
    group_layer(p, (int32_t *)(void *)scratch, &g);
    ring_clear(&g);
    int32_t c = 0;
    for (; c + 4 <= p->in_c; c += 4) {
        if (group_job(p, w, bias, mult, shift, c, &g)) {
            g.in = in + c;
            group(&g, out + c);
        } else {
            dw3_group(p, in, w, bias, mult, shift, out, c);
        }
    }
    if (c < p->in_c) {
        channels_from(p, in, w, bias, mult, shift, out, c);
    }
}

KB_DEPTHWISE_INPLACE_KXK(3)
KB_DEPTHWISE_INPLACE_KXK(5)
KB_DEPTHWISE_INPLACE_KXK(7)

/* Any window, stride and dilation. */
void kb_depthwise_inplace(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    plane_clear(p, scratch);
    for (int32_t c = 0; c < p->in_c; ++c) {
        const kb_chan q = chan_at(p, w, bias, mult, shift, c);
        plane_load(p, in, c, scratch);
        plane_conv_any(p, scratch, w + c, &q, out + c);
    }
}
