/* Kilobyte runtime: int8 DEPTHWISE_CONV_2D, depth multiplier 1, with TFLite's reference arithmetic
 * (reference_integer_ops::DepthwiseConvPerChannel).
 *
 * Shapes: in (in_h, in_w, c), pixel stride in_cstride, c = in_c = out_c; w (1, k_h, k_w, c); bias/mult/shift (c,);
 * out (out_h, out_w, c), pixel stride out_cstride.
 *   kb_depthwise            any window, stride, dilation, padding; in and out disjoint; no scratch.
 *   kb_depthwise_inplace*   channel by channel through ONE input plane of scratch, padded with the input zero point:
 *                           scratch holds (in_h + pad_t + pad_b) * (in_w + pad_l + pad_r) bytes. `out` may equal `in`
 *                           (in-place, TinyEngine; then in_cstride == out_cstride): output channel c only writes the
 *                           channel-c slots of the buffer, whose input values are already copied into the plane.
 *                           In place, the buffer must hold max(input, output) bytes (output can be larger with
 *                           big padding).
 *                           _3x3/_5x5/_7x7 (dilation 1) unroll each window row; the plain one takes any window.
 * A padded tap holds the zero point, so its (x + in_offset) is 0: the same as TFLite skipping it. With every tap
 * present, sum w * (x + in_offset) = sum w * x + in_offset * sum w, so the plane loops only multiply-add raw bytes.
 */
#include <string.h>

#include "kilobyte.h"
#include "kb_requant.h"

void kb_depthwise(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                  const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t c_n = p->in_c;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_t;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_l;
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;  /* (c,) */
            for (int32_t c = 0; c < c_n; ++c) {
                int32_t acc = 0;
                for (int32_t ky = 0; ky < p->k_h; ++ky) {
                    const int32_t iy = iy0 + ky * p->dil_h;
                    if (iy < 0 || iy >= p->in_h) {
                        continue;  /* padded row: TFLite skips the tap */
                    }
                    for (int32_t kx = 0; kx < p->k_w; ++kx) {
                        const int32_t ix = ix0 + kx * p->dil_w;
                        if (ix < 0 || ix >= p->in_w) {
                            continue;
                        }
                        const int32_t x = in[(iy * p->in_row + ix) * p->in_cstride + c];
                        acc += w[(ky * p->k_w + kx) * c_n + c] * (x + p->in_offset);
                    }
                }
                acc = kb_wrapping_add(acc, bias[c]);
                y[c] = kb_requantize(acc, mult[c], shift[c], p->out_offset, p->act_min, p->act_max);
            }
        }
    }
}

/* -- in-place machinery ------------------------------------------------------------------------------------------ */

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

/* Copy input channel c, (in_h, in_w) strided by in_cstride, into the plane's interior. */
static void plane_load(const kb_conv_params *p, const int8_t *in, int32_t c, int8_t *plane)
{
    const int32_t pw = plane_width(p);
    for (int32_t y = 0; y < p->in_h; ++y) {
        const int8_t *src = in + y * p->in_row * p->in_cstride + c;
        int8_t *dst = plane + (y + p->pad_t) * pw + p->pad_l;
        for (int32_t x = 0; x < p->in_w; ++x) {
            dst[x] = src[x * p->in_cstride];
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

/* One output channel from the padded plane with a k x k window (k = 3, 5 or 7, a constant after inlining);
 * y_c points at channel c of output pixel 0. */
static inline void plane_conv_kxk(const kb_conv_params *p, const int8_t *plane, const int32_t *taps, int32_t k,
                                  int32_t base, int32_t mult, int32_t shift, int8_t *y_c)
{
    const int32_t pw = plane_width(p);
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int8_t *r = plane + oy * p->stride_h * pw;  /* first window row of this output row */
        int8_t *y = y_c + oy * p->out_row * p->out_cstride;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int8_t *t = r + ox * p->stride_w;  /* top-left tap */
            int32_t acc = 0;
            for (int32_t ky = 0; ky < k; ++ky) {
                const int8_t *row = t + ky * pw;
                const int32_t *wrow = taps + ky * k;
                acc += k == 3 ? row3(row, wrow) : k == 5 ? row5(row, wrow) : row7(row, wrow);
            }
            acc = kb_wrapping_add(acc, base);
            y[ox * p->out_cstride] = kb_requantize(acc, mult, shift, p->out_offset, p->act_min, p->act_max);
        }
    }
}

/* One output channel from the padded plane, any window and dilation; w_c: the channel's taps, in_c apart. */
static void plane_conv_any(const kb_conv_params *p, const int8_t *plane, const int8_t *w_c, int32_t base,
                           int32_t mult, int32_t shift, int8_t *y_c)
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
            acc = kb_wrapping_add(acc, base);
            y[ox * p->out_cstride] = kb_requantize(acc, mult, shift, p->out_offset, p->act_min, p->act_max);
        }
    }
}

/* The channel loop shared by the square variants (k constant after inlining). */
static inline void inplace_kxk(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                               const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch, int32_t k)
{
    int32_t taps[49];  /* channel c's (k, k) weights, widened once */
    plane_clear(p, scratch);
    for (int32_t c = 0; c < p->in_c; ++c) {
        for (int32_t i = 0; i < k * k; ++i) {
            taps[i] = w[i * p->in_c + c];
        }
        const int32_t base = channel_base(p, w, bias, c, k * k);
        plane_load(p, in, c, scratch);
        plane_conv_kxk(p, scratch, taps, k, base, mult[c], shift[c], out + c);
    }
}

void kb_depthwise_inplace_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    inplace_kxk(p, in, w, bias, mult, shift, out, scratch, 3);
}

void kb_depthwise_inplace_5x5(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    inplace_kxk(p, in, w, bias, mult, shift, out, scratch, 5);
}

void kb_depthwise_inplace_7x7(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    inplace_kxk(p, in, w, bias, mult, shift, out, scratch, 7);
}

/* Any window, stride and dilation. */
void kb_depthwise_inplace(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    plane_clear(p, scratch);
    for (int32_t c = 0; c < p->in_c; ++c) {
        const int32_t base = channel_base(p, w, bias, c, p->k_h * p->k_w);
        plane_load(p, in, c, scratch);
        plane_conv_any(p, scratch, w + c, base, mult[c], shift[c], out + c);
    }
}
