/* Kilobyte runtime: int8 CONV_2D with TFLite's reference arithmetic (reference_integer_ops::ConvPerChannel).
 *
 * Shapes: in (in_h, in_w, in_c), pixel stride in_cstride; w OHWI (out_c, k_h, k_w, in_c); bias (out_c,) int32,
 * always given (zeros when the model has none); mult/shift (out_c,); out (out_h, out_w, out_c), pixel stride
 * out_cstride (== out_c, or the concat output's channel count when writing into a slice). in and out are disjoint.
 * Three entry points, chosen by the code generator, bit-identical and served by one engine:
 *   kb_conv      any window, stride, dilation and padding;
 *   kb_conv_1x1  pointwise, stride 1, no padding: a plain (pixels x in_c) * (in_c x out_c) product;
 *   kb_conv_3x3  dilation 1.
 *
 * Speed without changing a bit. Output channels go in blocks (the outer loop): every input value loaded feeds the
 * whole block, and the block's weights stay in L1 while every output pixel is visited. Padded taps are never
 * visited (each window is clipped to its in-image rows and columns), which is exactly TFLite skipping them. Two
 * inner loops, both written so that gcc -O3 vectorises them into int16 multiply-adds (pmaddwd):
 *   - windows of more than KB_SMALL_K weights: with a dense input (in_cstride == in_c) and dilation 1 in x, a
 *     clipped window row is ONE contiguous run of (kx1 - kx0) * in_c bytes in both the input and the OHWI weights,
 *     so the inner loop is a long dot product of int8 weights with int16 (x + in_offset), 4 channels at a time;
 *   - smaller windows (1x1 with few channels, first layers) would leave such a loop mostly in its scalar tail, so
 *     the block's weights are widened once to int16 and each window is gathered as int16 (x + in_offset, 0 for a
 *     padded tap, which adds nothing), both zero-padded to a multiple of 8: whole vectors only.
 * Sums are int32, as in TFLite. One term is at most 128 * 255 in magnitude, so a run or window of fewer than 2^16
 * terms cannot overflow; runs, windows and the bias are combined with wrapping adds, like TFLite's int32
 * accumulator (the reassociation is exact modulo 2^32).
 */
#include "kilobyte.h"
#include "kb_requant.h"

#define KB_CO_BLOCK 4   /* output channels per pass, large windows */
#define KB_SMALL_K 64   /* widest window (k_h * k_w * in_c) of the small-window path */
#define KB_SMALL_CO 8   /* output channels per pass, small windows (2 x 4) */

/* The in-image taps [*k0, *k1) of a window of k taps, dil apart, starting at image coordinate i0 < size. */
static inline void clip_taps(int32_t i0, int32_t k, int32_t dil, int32_t size, int32_t *k0, int32_t *k1)
{
    *k0 = i0 >= 0 ? 0 : (-i0 + dil - 1) / dil;
    *k1 = i0 + (k - 1) * dil < size ? k : (size - 1 - i0) / dil + 1;
}

/* The requantisation constants of output channels [co, co + nb). */
static void block_channels(const int32_t *bias, const int32_t *mult, const int32_t *shift, int32_t co, int32_t nb,
                           kb_rq_channel *rq)
{
    for (int32_t j = 0; j < nb; ++j) {
        rq[j] = kb_rq_channel_of(bias[co + j], mult[co + j], shift[co + j]);
    }
}

/* y[j] = requantised acc[j] for the nb channels of a block. */
static inline void store_block(const int32_t *acc, int32_t nb, const kb_rq_channel *rq, const kb_rq_bounds *bd,
                               int8_t *y)
{
    for (int32_t j = 0; j < nb; ++j) {
        y[j] = kb_rq_apply(acc[j], &rq[j], bd);
    }
}

/* -- large windows: int8 weights, contiguous runs ----------------------------------------------------------------- */

/* acc[j] += sum_i w[j][wo + i] * (x[i] + off), i < n, for the block's 4 weight rows w[j]. */
static inline void dot4(const int8_t *x, const int8_t *const w[KB_CO_BLOCK], int32_t wo, int32_t n, int32_t off,
                        int32_t acc[KB_CO_BLOCK])
{
    const int8_t *w0 = w[0] + wo, *w1 = w[1] + wo, *w2 = w[2] + wo, *w3 = w[3] + wo;
    const int16_t o = (int16_t)off;  /* -zero point, in [-127, 128] */
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int32_t i = 0; i < n; ++i) {
        const int16_t xi = (int16_t)(x[i] + o);  /* in [-255, 255] */
        a0 += w0[i] * xi;
        a1 += w1[i] * xi;
        a2 += w2[i] * xi;
        a3 += w3[i] * xi;
    }
    acc[0] = kb_wrapping_add(acc[0], a0);
    acc[1] = kb_wrapping_add(acc[1], a1);
    acc[2] = kb_wrapping_add(acc[2], a2);
    acc[3] = kb_wrapping_add(acc[3], a3);
}

/* acc[j] = the block's window sums for the window with top-left tap (iy0, ix0), padded taps skipped. */
static inline void window_dot4(const kb_conv_params *p, const int8_t *in, const int8_t *const w[KB_CO_BLOCK],
                               int32_t iy0, int32_t ix0, int32_t acc[KB_CO_BLOCK])
{
    int32_t ky0, ky1, kx0, kx1;
    clip_taps(iy0, p->k_h, p->dil_h, p->in_h, &ky0, &ky1);
    clip_taps(ix0, p->k_w, p->dil_w, p->in_w, &kx0, &kx1);
    const int32_t cs = p->in_cstride, n = p->in_c, off = p->in_offset;
    const int run = p->dil_w == 1 && cs == n;  /* a clipped window row is one contiguous run */
    acc[0] = acc[1] = acc[2] = acc[3] = 0;
    for (int32_t ky = ky0; ky < ky1; ++ky) {
        const int8_t *row = in + ((iy0 + ky * p->dil_h) * p->in_row + ix0) * cs;  /* (k_w taps, dil_w * cs apart) */
        const int32_t wrow = ky * p->k_w * n;                                       /* (k_w, in_c) weights */
        if (run) {
            dot4(row + kx0 * n, w, wrow + kx0 * n, (kx1 - kx0) * n, off, acc);
            continue;
        }
        for (int32_t kx = kx0; kx < kx1; ++kx) {
            dot4(row + kx * p->dil_w * cs, w, wrow + kx * n, n, off, acc);
        }
    }
}

/* Output channels [co, co + nb), nb <= 4, for every output pixel. */
static void conv_block(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, int8_t *out, int32_t co, int32_t nb)
{
    const int32_t w_size = p->k_h * p->k_w * p->in_c;  /* weights per output channel */
    const int8_t *wb[KB_CO_BLOCK];                      /* rows past the last channel repeat it; never stored */
    kb_rq_channel rq[KB_CO_BLOCK];
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    for (int32_t j = 0; j < KB_CO_BLOCK; ++j) {
        wb[j] = w + (co + (j < nb ? j : nb - 1)) * w_size;
    }
    block_channels(bias, mult, shift, co, nb, rq);
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            int32_t acc[KB_CO_BLOCK];
            window_dot4(p, in, wb, oy * p->stride_h - p->pad_t, ox * p->stride_w - p->pad_l, acc);
            store_block(acc, nb, rq, &bd, out + (oy * p->out_row + ox) * p->out_cstride + co);
        }
    }
}

/* -- small windows: int16 weights and windows, whole vectors ------------------------------------------------------ */

/* acc[j] = sum_i w[j * n8 + i] * x[i], i < n8 (a multiple of 8), j < 4. */
static inline void dot4_i16(const int16_t *x, const int16_t *w, int32_t n8, int32_t *acc)
{
    const int16_t *w0 = w, *w1 = w + n8, *w2 = w1 + n8, *w3 = w2 + n8;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int32_t i = 0; i < n8; ++i) {
        a0 += w0[i] * x[i];
        a1 += w1[i] * x[i];
        a2 += w2[i] * x[i];
        a3 += w3[i] * x[i];
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* dst[i] = src[i] + off (n values), or 0 when src is NULL (a padded tap). */
static inline void widen(int16_t *dst, const int8_t *src, int32_t n, int16_t off)
{
    if (src == NULL) {
        for (int32_t i = 0; i < n; ++i) {
            dst[i] = 0;
        }
        return;
    }
    for (int32_t i = 0; i < n; ++i) {
        dst[i] = (int16_t)(src[i] + off);
    }
}

/* xk = the window with top-left tap (iy0, ix0) as (k_h, k_w, in_c) values x + in_offset, 0 for padded taps. */
static void gather_window(const kb_conv_params *p, const int8_t *in, int32_t iy0, int32_t ix0, int16_t *xk)
{
    const int32_t n = p->in_c, cs = p->in_cstride, len = p->k_w * n;  /* len: one window row */
    const int16_t off = (int16_t)p->in_offset;
    int32_t kx0, kx1;
    clip_taps(ix0, p->k_w, p->dil_w, p->in_w, &kx0, &kx1);
    for (int32_t ky = 0; ky < p->k_h; ++ky, xk += len) {
        const int32_t iy = iy0 + ky * p->dil_h;
        if (iy < 0 || iy >= p->in_h) {
            widen(xk, NULL, len, off);
            continue;
        }
        const int8_t *row = in + (iy * p->in_row + ix0) * cs;
        widen(xk, NULL, kx0 * n, off);
        if (p->dil_w == 1 && cs == n) {
            widen(xk + kx0 * n, row + kx0 * n, (kx1 - kx0) * n, off);
        } else {
            for (int32_t kx = kx0; kx < kx1; ++kx) {
                widen(xk + kx * n, row + kx * p->dil_w * cs, n, off);
            }
        }
        widen(xk + kx1 * n, NULL, len - kx1 * n, off);
    }
}

/* Output channels [co, co + nb), nb <= KB_SMALL_CO, for every output pixel; w_size <= KB_SMALL_K. */
static void conv_block_small(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                             const int32_t *mult, const int32_t *shift, int8_t *out, int32_t co, int32_t nb)
{
    const int32_t w_size = p->k_h * p->k_w * p->in_c, n8 = (w_size + 7) & ~7;
    const int pointwise = w_size == p->in_c && (p->pad_t | p->pad_b | p->pad_l | p->pad_r) == 0;  /* 1x1, all
                                                                          in the image: no clipping */
    int16_t wk[KB_SMALL_CO * KB_SMALL_K];  /* (8, n8) widened weights; rows past the last channel repeat it */
    int16_t xk[KB_SMALL_K];                /* (n8,) one window */
    int32_t acc[KB_SMALL_CO];
    kb_rq_channel rq[KB_SMALL_CO];
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    for (int32_t j = 0; j < KB_SMALL_CO; ++j) {
        const int8_t *w_j = w + (co + (j < nb ? j : nb - 1)) * w_size;
        widen(wk + j * n8, w_j, w_size, 0);
        widen(wk + j * n8 + w_size, NULL, n8 - w_size, 0);
    }
    widen(xk + w_size, NULL, n8 - w_size, 0);
    block_channels(bias, mult, shift, co, nb, rq);
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l;
            if (pointwise) {
                widen(xk, in + (iy0 * p->in_row + ix0) * p->in_cstride, w_size, (int16_t)p->in_offset);
            } else {
                gather_window(p, in, iy0, ix0, xk);
            }
            dot4_i16(xk, wk, n8, acc);
            dot4_i16(xk, wk + 4 * n8, n8, acc + 4);
            store_block(acc, nb, rq, &bd, out + (oy * p->out_row + ox) * p->out_cstride + co);
        }
    }
}

/* -- entry points ------------------------------------------------------------------------------------------------ */

void kb_conv(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
             const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int small = p->k_h * p->k_w * p->in_c <= KB_SMALL_K;
    const int32_t block = small ? KB_SMALL_CO : KB_CO_BLOCK;
    for (int32_t co = 0; co < p->out_c; co += block) {
        const int32_t nb = p->out_c - co < block ? p->out_c - co : block;
        if (small) {
            conv_block_small(p, in, w, bias, mult, shift, out, co, nb);
        } else {
            conv_block(p, in, w, bias, mult, shift, out, co, nb);
        }
    }
}

void kb_conv_1x1(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out)
{
    kb_conv(p, in, w, bias, mult, shift, out);
}

void kb_conv_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out)
{
    kb_conv(p, in, w, bias, mult, shift, out);
}
