/* Kilobyte runtime: int8 AVERAGE_POOL_2D and MAX_POOL_2D with TFLite's reference arithmetic
 * (reference_integer_ops::AveragePool / MaxPool). Input and output share scale and zero point (TFLite requires it).
 *
 * Shapes: in (in_h, in_w, c), pixel stride in_cstride, c = in_c = out_c; out (out_h, out_w, c), pixel stride
 * out_cstride. Uses k_h/k_w, stride, padding and act_min/act_max of kb_conv_params (offsets and dilation unused).
 * Padded taps are left out: the average divides by the number of in-image taps, rounding half away from zero.
 */
#include "kilobyte.h"
#include "kb_requant.h"

/* The in-image part [*y0, *y1) x [*x0, *x1) of the window of output pixel (oy, ox), in window coordinates. */
static void window_bounds(const kb_conv_params *p, int32_t oy, int32_t ox, int32_t *y0, int32_t *y1, int32_t *x0,
                          int32_t *x1)
{
    const int32_t iy0 = oy * p->stride_h - p->pad_t;
    const int32_t ix0 = ox * p->stride_w - p->pad_l;
    *y0 = iy0 < 0 ? -iy0 : 0;
    *y1 = p->in_h - iy0 < p->k_h ? p->in_h - iy0 : p->k_h;
    *x0 = ix0 < 0 ? -ix0 : 0;
    *x1 = p->in_w - ix0 < p->k_w ? p->in_w - ix0 : p->k_w;
}

void kb_avg_pool(const kb_conv_params *p, const int8_t *in, int8_t *out)
{
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            int32_t y0, y1, x0, x1;
            window_bounds(p, oy, ox, &y0, &y1, &x0, &x1);
            const int32_t count = (y1 - y0) * (x1 - x0);  /* >= 1 for any valid layer */
            const int32_t iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l;
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;
            for (int32_t c = 0; c < p->in_c; ++c) {
                int32_t acc = 0;
                for (int32_t ky = y0; ky < y1; ++ky) {
                    for (int32_t kx = x0; kx < x1; ++kx) {
                        acc += in[((iy0 + ky) * p->in_row + ix0 + kx) * p->in_cstride + c];
                    }
                }
                acc = acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
                y[c] = kb_clamp_i8(acc, p->act_min, p->act_max);
            }
        }
    }
}

void kb_max_pool(const kb_conv_params *p, const int8_t *in, int8_t *out)
{
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            int32_t y0, y1, x0, x1;
            window_bounds(p, oy, ox, &y0, &y1, &x0, &x1);
            const int32_t iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l;
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;
            for (int32_t c = 0; c < p->in_c; ++c) {
                int32_t best = -128;
                for (int32_t ky = y0; ky < y1; ++ky) {
                    for (int32_t kx = x0; kx < x1; ++kx) {
                        const int32_t v = in[((iy0 + ky) * p->in_row + ix0 + kx) * p->in_cstride + c];
                        best = v > best ? v : best;
                    }
                }
                y[c] = kb_clamp_i8(best, p->act_min, p->act_max);
            }
        }
    }
}
