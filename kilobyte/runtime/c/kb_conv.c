/* Kilobyte runtime: int8 CONV_2D with TFLite's reference arithmetic (reference_integer_ops::ConvPerChannel).
 *
 * Shapes: in (in_h, in_w, in_c), pixel stride in_cstride; w OHWI (out_c, k_h, k_w, in_c); bias (out_c,) int32,
 * always given (zeros when the model has none); mult/shift (out_c,); out (out_h, out_w, out_c), pixel stride
 * out_cstride (== out_c, or the concat output's channel count when writing into a slice).
 * Three bit-identical variants, chosen by the code generator:
 *   kb_conv      any window, stride, dilation and padding;
 *   kb_conv_1x1  pointwise, stride 1, no padding: a plain (pixels x in_c) * (in_c x out_c) product;
 *   kb_conv_3x3  dilation 1: 9 unrolled taps where the window lies inside the image, the general path on borders.
 */
#include "kilobyte.h"
#include "kb_requant.h"

/* sum_i w[i] * (x[i] + in_offset), i < n. */
static inline int32_t dot_offset(const int8_t *x, const int8_t *w, int32_t n, int32_t in_offset)
{
    int32_t acc = 0;
    for (int32_t i = 0; i < n; ++i) {
        acc += w[i] * (x[i] + in_offset);
    }
    return acc;
}

/* Window sum of one output channel (w_co: its (k_h, k_w, in_c) weights) for the window whose top-left tap is
 * input pixel (iy0, ix0); taps outside the image are skipped, as TFLite does. */
static int32_t window_sum(const kb_conv_params *p, const int8_t *in, const int8_t *w_co, int32_t iy0, int32_t ix0)
{
    int32_t acc = 0;
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        const int32_t iy = iy0 + ky * p->dil_h;
        if (iy < 0 || iy >= p->in_h) {
            continue;
        }
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            const int32_t ix = ix0 + kx * p->dil_w;
            if (ix < 0 || ix >= p->in_w) {
                continue;
            }
            const int8_t *x = in + (iy * p->in_row + ix) * p->in_cstride;  /* (in_c,) */
            const int8_t *wk = w_co + (ky * p->k_w + kx) * p->in_c;       /* (in_c,) */
            acc += dot_offset(x, wk, p->in_c, p->in_offset);
        }
    }
    return acc;
}

/* Window sum of a 3x3 window inside the image (dilation 1), the 9 taps unrolled. */
static inline int32_t window_sum_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w_co, int32_t iy0,
                                     int32_t ix0)
{
    const int32_t n = p->in_c, cs = p->in_cstride, o = p->in_offset;
    const int8_t *x0 = in + (iy0 * p->in_row + ix0) * cs;  /* window rows, each 3 pixels cs apart */
    const int8_t *x1 = x0 + p->in_row * cs;
    const int8_t *x2 = x1 + p->in_row * cs;
    const int8_t *w0 = w_co, *w1 = w_co + 3 * n, *w2 = w_co + 6 * n;  /* weight rows, each (3, n) */
    int32_t acc = 0;
    for (int32_t i = 0; i < n; ++i) {
        acc += w0[i] * (x0[i] + o) + w0[n + i] * (x0[cs + i] + o) + w0[2 * n + i] * (x0[2 * cs + i] + o);
        acc += w1[i] * (x1[i] + o) + w1[n + i] * (x1[cs + i] + o) + w1[2 * n + i] * (x1[2 * cs + i] + o);
        acc += w2[i] * (x2[i] + o) + w2[n + i] * (x2[cs + i] + o) + w2[2 * n + i] * (x2[2 * cs + i] + o);
    }
    return acc;
}

void kb_conv(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
             const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t w_size = p->k_h * p->k_w * p->in_c;  /* weights per output channel */
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_t;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_l;
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;  /* (out_c,) */
            for (int32_t co = 0; co < p->out_c; ++co) {
                const int32_t acc = kb_wrapping_add(window_sum(p, in, w + co * w_size, iy0, ix0), bias[co]);
                y[co] = kb_requantize(acc, mult[co], shift[co], p->out_offset, p->act_min, p->act_max);
            }
        }
    }
}

void kb_conv_1x1(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out)
{
    for (int32_t oy = 0; oy < p->out_h; ++oy) {  /* out (out_h, out_w) == in (in_h, in_w) */
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int8_t *x = in + (oy * p->in_row + ox) * p->in_cstride;  /* (in_c,) */
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;     /* (out_c,) */
            const int8_t *w_co = w;  /* (in_c,) row of the (out_c, in_c) weights */
            for (int32_t co = 0; co < p->out_c; ++co, w_co += p->in_c) {
                const int32_t acc = kb_wrapping_add(dot_offset(x, w_co, p->in_c, p->in_offset), bias[co]);
                y[co] = kb_requantize(acc, mult[co], shift[co], p->out_offset, p->act_min, p->act_max);
            }
        }
    }
}

void kb_conv_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t w_size = 9 * p->in_c;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_t;
        const int row_inside = iy0 >= 0 && iy0 + 3 <= p->in_h;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_l;
            const int inside = row_inside && ix0 >= 0 && ix0 + 3 <= p->in_w;
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;
            for (int32_t co = 0; co < p->out_c; ++co) {
                const int8_t *w_co = w + co * w_size;
                const int32_t taps = inside ? window_sum_3x3(p, in, w_co, iy0, ix0) : window_sum(p, in, w_co, iy0, ix0);
                const int32_t acc = kb_wrapping_add(taps, bias[co]);
                y[co] = kb_requantize(acc, mult[co], shift[co], p->out_offset, p->act_min, p->act_max);
            }
        }
    }
}
