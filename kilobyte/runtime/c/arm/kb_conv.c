/* Kilobyte runtime, Cortex-M DSP kernels: int8 CONV_2D on Armv7E-M SIMD (SMLAD), bit-identical to ../kb_conv.c.
 *
 * Same functions, arguments and layouts as the portable file (in (in_h, in_w, in_c) with pixel stride in_cstride
 * and row pitch in_row; w OHWI; out with out_cstride and out_row). Direct convolution, no im2col and no scratch:
 * each window row of a dense input (in_cstride == in_c, dilation 1) is one contiguous run of kw * in_c bytes, as
 * is the matching weight row, so a window is kh dot products of that length.
 *   - Output channels go in pairs (the outer loop), with bias + in_offset * sum(w) computed once per pair.
 *   - Inside the image, output pixels go in pairs along a row: a 2 pixel x 2 channel block (kb_dot_2x2) on raw
 *     int8, 16 MACs per 4 loads, 8 unpacks and 8 SMLADs, the offset already in the accumulator.
 *   - Windows that cross the padding (and a row's odd pixel) run one pixel at a time over the taps inside the image,
 *     the offset added while unpacking (kb_dot_1x2), the accumulator starting at the bias: TFLite skips padded taps.
 * An odd last channel runs as a pair with itself and stores once. kb_conv_1x1 pairs pixels across rows.
 */
/* GCC's first scheduling pass hoists the loads of the unrolled dot products and pushes the 2x2 block past the 14
 * allocatable registers (spills in the inner loop); without it the block runs spill-free. Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_simd.h"

/* One output channel pair: weights, accumulator starts and requantisation. A local copy, so that the int8 output
 * stores (which may alias anything) do not force the compiler to reload these from the kernel's arguments. */
typedef struct {
    const int8_t *w0, *w1;  /* (k_h, k_w, in_c) weights of channels co and co1 */
    int32_t bias0, bias1;   /* accumulator starts of a window with padded taps */
    int32_t base0, base1;   /* ... and of a window with every tap inside the image */
    int32_t mult0, mult1, shift0, shift1;
    int32_t co, co1;        /* co1 == co + 1, or co for an odd last channel (stored once) */
    int32_t out_offset, act_min, act_max;
} kb_pair;

static kb_pair pair_at(const kb_conv_params *p, const int8_t *w, const int32_t *bias, const int32_t *mult,
                       const int32_t *shift, int32_t co)
{
    const int32_t w_size = p->k_h * p->k_w * p->in_c;
    kb_pair c;
    c.co = co;
    c.co1 = co + 1 < p->out_c ? co + 1 : co;
    c.w0 = w + co * w_size;
    c.w1 = w + c.co1 * w_size;
    c.bias0 = bias[co];
    c.bias1 = bias[c.co1];
    c.base0 = kb_arm_base(c.bias0, p->in_offset, c.w0, w_size);
    c.base1 = kb_arm_base(c.bias1, p->in_offset, c.w1, w_size);
    c.mult0 = mult[co], c.mult1 = mult[c.co1], c.shift0 = shift[co], c.shift1 = shift[c.co1];
    c.out_offset = p->out_offset, c.act_min = p->act_min, c.act_max = p->act_max;
    return c;
}

/* Requantise a pixel's two accumulators into y (the pixel's (out_c,) outputs). */
static inline void store_pair(const kb_pair *c, const int32_t acc[2], int8_t *y)
{
    y[c->co] = kb_arm_requantize(acc[0], c->mult0, c->shift0, c->out_offset, c->act_min, c->act_max);
    if (c->co1 != c->co) {
        y[c->co1] = kb_arm_requantize(acc[1], c->mult1, c->shift1, c->out_offset, c->act_min, c->act_max);
    }
}

/* Kernel indices i < k with 0 <= start + i * dil < size: [*lo, *hi) (empty when *hi <= *lo). */
static void inside(int32_t start, int32_t k, int32_t dil, int32_t size, int32_t *lo, int32_t *hi)
{
    *lo = start < 0 ? (-start + dil - 1) / dil : 0;
    *hi = start >= size ? 0 : (size - 1 - start) / dil + 1;
    *hi = *hi < k ? *hi : k;
}

/* Output pixels [*lo, *hi) whose window lies inside the image along one axis. */
static void interior(int32_t out, int32_t stride, int32_t pad, int32_t k, int32_t dil, int32_t size, int32_t *lo,
                     int32_t *hi)
{
    *lo = (pad + stride - 1) / stride;
    const int32_t last = size - 1 - (k - 1) * dil + pad;  /* the largest window start that fits, plus pad */
    *hi = last < 0 ? 0 : last / stride + 1;
    *hi = *hi < out ? *hi : out;
    *lo = *lo < *hi ? *lo : *hi;
}

/* A window with padded taps (or an unpaired pixel): one pixel, the taps inside the image only. */
static void conv_single(const kb_conv_params *p, const int8_t *in, const kb_pair *c, int32_t oy, int32_t ox, int8_t *out)
{
    const int32_t iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l;
    const int32_t cs = p->in_cstride, n = p->in_c;
    int32_t ky0, ky1, kx0, kx1;
    inside(iy0, p->k_h, p->dil_h, p->in_h, &ky0, &ky1);
    inside(ix0, p->k_w, p->dil_w, p->in_w, &kx0, &kx1);
    const int run = cs == n && p->dil_w == 1;  /* a window row's taps are one contiguous run */
    int32_t acc[2] = {c->bias0, c->bias1};
    for (int32_t ky = ky0; ky < ky1; ++ky) {
        const int32_t row = (iy0 + ky * p->dil_h) * p->in_row + ix0;  /* pixel index of tap (ky, 0) */
        const int32_t wk = ky * p->k_w * n;
        if (run) {
            kb_dot_1x2(in + (row + kx0) * cs, c->w0 + wk + kx0 * n, c->w1 + wk + kx0 * n, (kx1 - kx0) * n,
                       p->in_offset, acc);
            continue;
        }
        for (int32_t kx = kx0; kx < kx1; ++kx) {
            kb_dot_1x2(in + (row + kx * p->dil_w) * cs, c->w0 + wk + kx * n, c->w1 + wk + kx * n, n, p->in_offset,
                       acc);
        }
    }
    store_pair(c, acc, out + (oy * p->out_row + ox) * p->out_cstride);
}

/* Output pixels (oy, ox) and (oy, ox + 1), both windows inside the image. */
static void conv_pair(const kb_conv_params *p, const int8_t *in, const kb_pair *c, int32_t oy, int32_t ox, int8_t *out)
{
    const int32_t cs = p->in_cstride, n = p->in_c;
    const int8_t *xa = in + ((oy * p->stride_h - p->pad_t) * p->in_row + ox * p->stride_w - p->pad_l) * cs;
    const int8_t *xb = xa + p->stride_w * cs;
    const int32_t row_step = p->dil_h * p->in_row * cs;
    const int run = cs == n && p->dil_w == 1;
    int32_t acc[4] = {c->base0, c->base1, c->base0, c->base1};  /* (pixel a: co, co1), (pixel b: co, co1) */
    for (int32_t ky = 0; ky < p->k_h; ++ky, xa += row_step, xb += row_step) {
        const int32_t wk = ky * p->k_w * n;
        if (run) {
            kb_dot_2x2(xa, xb, c->w0 + wk, c->w1 + wk, p->k_w * n, acc);
            continue;
        }
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            const int32_t dx = kx * p->dil_w * cs;
            kb_dot_2x2(xa + dx, xb + dx, c->w0 + wk + kx * n, c->w1 + wk + kx * n, n, acc);
        }
    }
    int8_t *ya = out + (oy * p->out_row + ox) * p->out_cstride;
    store_pair(c, acc, ya);
    store_pair(c, acc + 2, ya + p->out_cstride);
}

static void conv_any(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                     const int32_t *mult, const int32_t *shift, int8_t *out)
{
    int32_t oy_lo, oy_hi, ox_lo, ox_hi;  /* output pixels whose whole window is inside the image */
    interior(p->out_h, p->stride_h, p->pad_t, p->k_h, p->dil_h, p->in_h, &oy_lo, &oy_hi);
    interior(p->out_w, p->stride_w, p->pad_l, p->k_w, p->dil_w, p->in_w, &ox_lo, &ox_hi);
    for (int32_t co = 0; co < p->out_c; co += 2) {
        const kb_pair c = pair_at(p, w, bias, mult, shift, co);
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int row_inside = oy >= oy_lo && oy < oy_hi;
            const int32_t lo = row_inside ? ox_lo : p->out_w, hi = row_inside ? ox_hi : p->out_w;
            int32_t ox = 0;
            for (; ox < lo; ++ox) {
                conv_single(p, in, &c, oy, ox, out);
            }
            for (; ox + 1 < hi; ox += 2) {
                conv_pair(p, in, &c, oy, ox, out);
            }
            for (; ox < p->out_w; ++ox) {
                conv_single(p, in, &c, oy, ox, out);
            }
        }
    }
}

void kb_conv(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
             const int32_t *mult, const int32_t *shift, int8_t *out)
{
    conv_any(p, in, w, bias, mult, shift, out);
}

void kb_conv_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out)
{
    conv_any(p, in, w, bias, mult, shift, out);  /* the dense window rows already make 3x3 three runs of 3 * in_c */
}

/* Pointwise, stride 1, no padding: pixels in row-major order, paired across rows; out (h, w) == in (h, w). */
void kb_conv_1x1(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t n = p->in_c, pixels = p->out_h * p->out_w;
    for (int32_t co = 0; co < p->out_c; co += 2) {
        const kb_pair c = pair_at(p, w, bias, mult, shift, co);
        int32_t y = 0, x = 0;  /* the next pixel */
        for (int32_t k = 0; k + 1 < pixels; k += 2) {
            const int8_t *xa = in + (y * p->in_row + x) * p->in_cstride;
            int8_t *ya = out + (y * p->out_row + x) * p->out_cstride;
            if (++x == p->out_w) {
                x = 0, ++y;
            }
            const int8_t *xb = in + (y * p->in_row + x) * p->in_cstride;
            int8_t *yb = out + (y * p->out_row + x) * p->out_cstride;
            if (++x == p->out_w) {
                x = 0, ++y;
            }
            int32_t acc[4] = {c.base0, c.base1, c.base0, c.base1};
            kb_dot_2x2(xa, xb, c.w0, c.w1, n, acc);
            store_pair(&c, acc, ya);
            store_pair(&c, acc + 2, yb);
        }
        if (pixels & 1) {  /* the last pixel, (out_h - 1, out_w - 1) */
            int32_t acc[2] = {c.bias0, c.bias1};
            kb_dot_1x2(in + (y * p->in_row + x) * p->in_cstride, c.w0, c.w1, n, p->in_offset, acc);
            store_pair(&c, acc, out + (y * p->out_row + x) * p->out_cstride);
        }
    }
}
