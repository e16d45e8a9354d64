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
 *     so the inner loop is a long dot product of int8 weights with int16 (x + in_offset), 4 channels at a time
 *     (kb_dot4 of kb_dot.h, shared with kb_fc.c);
 *   - smaller windows (1x1 with few channels, first layers) would leave such a loop mostly in its scalar tail, so
 *     the block's 8 weight rows are widened once to int16 and each window is gathered as int16 (x + in_offset, 0
 *     for a padded tap, which adds nothing), both zero-padded to a multiple of 8: whole vectors only.
 * The sums of KB_TILE pixels are requantised together, one channel at a time (vectorised, see conv_tile).
 * Sums are int32, as in TFLite. One term is at most 128 * 255 in magnitude, so partial sums of up to 2^15 terms
 * cannot overflow; they and the bias are combined with wrapping adds, like TFLite's int32 accumulator (the
 * reassociation is exact modulo 2^32). Stack: about 2 kB (small windows), 1 kB (large).
 */
#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_dot.h"

#define KB_CO_BLOCK 4   /* output channels per pass, large windows: kb_dot4's four rows */
#define KB_SMALL_K 64   /* widest window (k_h * k_w * in_c) of the small-window path */
#define KB_SMALL_CO 8   /* output channels per pass, small windows (2 x 4) */
#define KB_TILE 16      /* output pixels requantised together */

/* The in-image taps [*k0, *k1) of a window of k taps, dil apart, starting at image coordinate i0 (empty when the
 * window misses the image, as a patch tile's can). */
static inline void clip_taps(int32_t i0, int32_t k, int32_t dil, int32_t size, int32_t *k0, int32_t *k1)
{
    const int32_t first = i0 >= 0 ? 0 : (-i0 + dil - 1) / dil;                  /* i0 + first * dil >= 0 */
    const int32_t end = i0 >= size ? 0 : i0 + (k - 1) * dil < size ? k : (size - 1 - i0) / dil + 1;
    *k0 = first < k ? first : k;
    *k1 = end > *k0 ? end : *k0;
}

/* The requantisation constants of output channels [co, co + nb). */
static void block_channels(const int32_t *bias, const int32_t *mult, const int32_t *shift, int32_t co, int32_t nb,
                           kb_rq_channel *rq)
{
    for (int32_t j = 0; j < nb; ++j) {
        rq[j] = kb_rq_channel_of(bias[co + j], mult[co + j], shift[co + j]);
    }
}

/* A tile: up to KB_TILE output pixels, consecutive in raster order, and their sums for the channels of a block.
 * The sums are requantised one channel at a time over the tile, every value sharing the channel's constants, which
 * gcc vectorises (kb_rq_row); the bytes are then stored out_cstride apart. */
typedef struct {
    int32_t acc[KB_SMALL_CO][KB_TILE];  /* (channel of the block, pixel of the tile) */
    int32_t iy0[KB_TILE], ix0[KB_TILE]; /* each pixel's window origin (top-left tap, maybe in the padding) */
    int32_t dst[KB_TILE];               /* offset in `out` of each pixel's first channel of the block */
    int32_t n;                          /* pixels in the tile */
    int32_t oy, ox;                     /* the pixel after the tile */
} conv_tile;

/* Fill in the next tile of output pixels for the block at channel co; 0 when every pixel is done. */
static int tile_next(const kb_conv_params *p, int32_t co, conv_tile *tile)
{
    tile->n = 0;
    for (; tile->n < KB_TILE && tile->oy < p->out_h; ++tile->n) {
        tile->iy0[tile->n] = tile->oy * p->stride_h - p->pad_t;
        tile->ix0[tile->n] = tile->ox * p->stride_w - p->pad_l;
        tile->dst[tile->n] = (tile->oy * p->out_row + tile->ox) * p->out_cstride + co;
        if (++tile->ox == p->out_w) {
            tile->ox = 0;
            ++tile->oy;
        }
    }
    return tile->n > 0;
}

/* Requantise the tile's nb channels and store them. */
static void tile_store(const conv_tile *tile, int32_t nb, const kb_rq_channel *rq, const kb_rq_bounds *bd, int8_t *out)
{
    int8_t q[KB_TILE];
    for (int32_t j = 0; j < nb; ++j) {
        kb_rq_row(tile->acc[j], tile->n, &rq[j], bd, q);
        for (int32_t t = 0; t < tile->n; ++t) {
            out[tile->dst[t] + j] = q[t];
        }
    }
}

/* -- large windows: int8 weights, contiguous runs ----------------------------------------------------------------- */

/* acc[j] = the block's window sums for the window with top-left tap (iy0, ix0), padded taps skipped: kb_dot4 per
 * window row, or per tap where a row is not one run. */
static inline void window_dot4(const kb_conv_params *p, const int8_t *in, const int8_t *const w[KB_CO_BLOCK],
                               int32_t iy0, int32_t ix0, int32_t acc[KB_CO_BLOCK])
{
    int32_t ky0, ky1, kx0, kx1;
    clip_taps(iy0, p->k_h, p->dil_h, p->in_h, &ky0, &ky1);
    clip_taps(ix0, p->k_w, p->dil_w, p->in_w, &kx0, &kx1);
    const int32_t cs = p->in_cstride, n = p->in_c, off = p->in_offset;
    const int run = p->dil_w == 1 && cs == n;  /* a clipped window row is one contiguous run */
    acc[0] = acc[1] = acc[2] = acc[3] = 0;
    for (int32_t ky = ky0; ky < ky1 && kx0 < kx1; ++ky) {
        const int8_t *x = in + ((iy0 + ky * p->dil_h) * p->in_row + ix0 + kx0 * p->dil_w) * cs;  /* tap kx0 */
        const int32_t wk = (ky * p->k_w + kx0) * n;                                             /* its weights */
        if (run) {
            kb_dot4(x, w, wk, (kx1 - kx0) * n, off, acc);
            continue;
        }
        for (int32_t kx = 0; kx < kx1 - kx0; ++kx) {
            kb_dot4(x + kx * p->dil_w * cs, w, wk + kx * n, n, off, acc);
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
    conv_tile tile = {.oy = 0, .ox = 0};
    for (int32_t j = 0; j < KB_CO_BLOCK; ++j) {
        wb[j] = w + (co + (j < nb ? j : nb - 1)) * w_size;
    }
    block_channels(bias, mult, shift, co, nb, rq);
    while (tile_next(p, co, &tile)) {
        for (int32_t t = 0; t < tile.n; ++t) {
            int32_t acc[KB_CO_BLOCK];
            window_dot4(p, in, wb, tile.iy0[t], tile.ix0[t], acc);
            for (int32_t j = 0; j < KB_CO_BLOCK; ++j) {
                tile.acc[j][t] = acc[j];
            }
        }
        tile_store(&tile, nb, rq, &bd, out);
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
        widen(xk, NULL, kx0 * n, off);
        widen(xk + kx1 * n, NULL, len - kx1 * n, off);
        if (kx0 == kx1) {
            continue;
        }
        const int8_t *x = in + (iy * p->in_row + ix0 + kx0 * p->dil_w) * cs;  /* tap kx0 */
        if (p->dil_w == 1 && cs == n) {
            widen(xk + kx0 * n, x, (kx1 - kx0) * n, off);
        } else {
            for (int32_t kx = 0; kx < kx1 - kx0; ++kx) {
                widen(xk + (kx0 + kx) * n, x + kx * p->dil_w * cs, n, off);
            }
        }
    }
}

/* Output channels [co, co + nb), nb <= KB_SMALL_CO, for every output pixel; w_size <= KB_SMALL_K. */
static void conv_block_small(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                             const int32_t *mult, const int32_t *shift, int8_t *out, int32_t co, int32_t nb)
{
    const int32_t w_size = p->k_h * p->k_w * p->in_c, n8 = (w_size + 7) & ~7;
    /* a 1x1 window with no padding lies in the image: its window is the pixel itself */
    const int pointwise = w_size == p->in_c && (p->pad_t | p->pad_b | p->pad_l | p->pad_r) == 0;
    int16_t wk[KB_SMALL_CO * KB_SMALL_K];  /* (8, n8) widened weights; rows past the last channel repeat it */
    int16_t xk[KB_SMALL_K];                /* (n8,) one window */
    kb_rq_channel rq[KB_SMALL_CO];
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    conv_tile tile = {.oy = 0, .ox = 0};
    for (int32_t j = 0; j < KB_SMALL_CO; ++j) {
        const int8_t *w_j = w + (co + (j < nb ? j : nb - 1)) * w_size;
        widen(wk + j * n8, w_j, w_size, 0);
        widen(wk + j * n8 + w_size, NULL, n8 - w_size, 0);
    }
    widen(xk + w_size, NULL, n8 - w_size, 0);
    block_channels(bias, mult, shift, co, nb, rq);
    while (tile_next(p, co, &tile)) {
        for (int32_t t = 0; t < tile.n; ++t) {
            int32_t acc[KB_SMALL_CO];
            if (pointwise) {
                const int8_t *x = in + (tile.iy0[t] * p->in_row + tile.ix0[t]) * p->in_cstride;  /* (in_c,) */
                widen(xk, x, w_size, (int16_t)p->in_offset);
            } else {
                gather_window(p, in, tile.iy0[t], tile.ix0[t], xk);
            }
            dot4_i16(xk, wk, n8, acc);
            dot4_i16(xk, wk + 4 * n8, n8, acc + 4);
            for (int32_t j = 0; j < KB_SMALL_CO; ++j) {
                tile.acc[j][t] = acc[j];
            }
        }
        tile_store(&tile, nb, rq, &bd, out);
    }
}

/* -- entry points ------------------------------------------------------------------------------------------------ */

void kb_conv(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
             const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    (void)scratch;  /* the portable kernels need none */
    const int small = p->k_h * p->k_w * p->in_c <= KB_SMALL_K;
    const int32_t block = small ? KB_SMALL_CO : KB_CO_BLOCK;
    if (p->out_h <= 0 || p->out_w <= 0) {
        return;  /* an empty patch tile */
    }
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
                 const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    kb_conv(p, in, w, bias, mult, shift, out, scratch);
}

void kb_conv_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    kb_conv(p, in, w, bias, mult, shift, out, scratch);
}
