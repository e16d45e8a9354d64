/* Kilobyte runtime: int8 AVERAGE_POOL_2D and MAX_POOL_2D with TFLite's reference arithmetic
 * (reference_integer_ops::AveragePool / MaxPool). Input and output share scale and zero point (TFLite requires it).
 *
 * Shapes: in (in_h, in_w, c), pixel stride in_cstride, c = in_c = out_c; out (out_h, out_w, c), pixel stride
 * out_cstride. Uses k_h/k_w, stride, padding and act_min/act_max of kb_conv_params (offsets and dilation unused).
 * Padded taps are left out: the average divides by the number of in-image taps, rounding half away from zero.
 * Channels are the inner loop (KB_POOL_CHUNK at a time, contiguous in NHWC), so it vectorises; the window of each
 * output pixel is clipped to the image once.
 */
#include "kilobyte.h"
#include "kb_requant.h"

#define KB_POOL_CHUNK 64  /* channels per pass (int32 sums on the stack) */

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

/* acc (n,) = sum (max_mode: max) of channels [c0, c0 + n) over the in-image window of output pixel (oy, ox). */
static void window_reduce(const kb_conv_params *p, const int8_t *in, int32_t oy, int32_t ox, int32_t c0, int32_t n,
                          int max_mode, int32_t *acc)
{
    int32_t y0, y1, x0, x1;
    window_bounds(p, oy, ox, &y0, &y1, &x0, &x1);
    const int32_t iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l;
    for (int32_t c = 0; c < n; ++c) {
        acc[c] = max_mode ? -128 : 0;
    }
    for (int32_t ky = y0; ky < y1; ++ky) {
        for (int32_t kx = x0; kx < x1; ++kx) {
            const int8_t *x = in + ((iy0 + ky) * p->in_row + ix0 + kx) * p->in_cstride + c0;  /* (n,) */
            if (max_mode) {
                for (int32_t c = 0; c < n; ++c) {
                    acc[c] = x[c] > acc[c] ? x[c] : acc[c];
                }
            } else {
                for (int32_t c = 0; c < n; ++c) {
                    acc[c] += x[c];
                }
            }
        }
    }
}

void kb_avg_pool(const kb_conv_params *p, const int8_t *in, int8_t *out)
{
    int32_t acc[KB_POOL_CHUNK];
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            int32_t y0, y1, x0, x1;
            window_bounds(p, oy, ox, &y0, &y1, &x0, &x1);
            const int32_t count = (y1 - y0) * (x1 - x0);  /* >= 1 for any valid layer */
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;
            for (int32_t c0 = 0; c0 < p->in_c; c0 += KB_POOL_CHUNK) {
                const int32_t n = p->in_c - c0 < KB_POOL_CHUNK ? p->in_c - c0 : KB_POOL_CHUNK;
                window_reduce(p, in, oy, ox, c0, n, 0, acc);
                for (int32_t c = 0; c < n; ++c) {
                    const int32_t a = acc[c];
                    const int32_t v = a > 0 ? (a + count / 2) / count : (a - count / 2) / count;
                    y[c0 + c] = kb_clamp_i8(v, p->act_min, p->act_max);
                }
            }
        }
    }
}

void kb_max_pool(const kb_conv_params *p, const int8_t *in, int8_t *out)
{
    int32_t acc[KB_POOL_CHUNK];
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;
            for (int32_t c0 = 0; c0 < p->in_c; c0 += KB_POOL_CHUNK) {
                const int32_t n = p->in_c - c0 < KB_POOL_CHUNK ? p->in_c - c0 : KB_POOL_CHUNK;
                window_reduce(p, in, oy, ox, c0, n, 1, acc);
                for (int32_t c = 0; c < n; ++c) {
                    y[c0 + c] = kb_clamp_i8(acc[c], p->act_min, p->act_max);
                }
            }
        }
    }
}
