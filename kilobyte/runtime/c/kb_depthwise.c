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
 *
 * kb_depthwise vectorises across channels: for each output pixel, every in-image tap adds w[tap, c] * (x[c] +
 * in_offset) to a chunk of KB_DW_CHUNK channel accumulators (padded taps are skipped, as TFLite does).
 * The in-place kernels vectorise along output rows (see "positions" below). A padded tap holds the zero point, so its
 * (x + in_offset) is 0: the same as TFLite skipping it; with every tap present, sum w * (x + in_offset) = sum w * x +
 * in_offset * sum w, so the row loops multiply-add raw bytes. Each plane row is stored split into stride_w phases
 * (columns r, r + s, r + 2s, ... for r < s = stride_w), so the taps of consecutive output pixels are consecutive
 * bytes for every stride and dilation; a whole row of sums of one channel is requantised at once (kb_rq_row).
 * Sums are int32 and cannot overflow (fewer than 2^16 taps of at most 128 * 255 each); the bias joins with a
 * wrapping add, like TFLite's int32 accumulator. Stack: about 0.5 kB.
 */
#include <string.h>

#include "kilobyte.h"
#include "kb_requant.h"

#define KB_DW_CHUNK 64  /* channels per pass of kb_depthwise (int32 accumulators on the stack) */
#define KB_DW_ROW 64    /* output pixels per pass of the in-place kernels */

/* -- kb_depthwise: channels in the inner loop -------------------------------------------------------------------- */

/* The in-image taps [*k0, *k1) of a window of k taps, dil apart, starting at image coordinate i0 (empty when the
 * window misses the image, as a patch tile's can). */
static inline void clip_taps(int32_t i0, int32_t k, int32_t dil, int32_t size, int32_t *k0, int32_t *k1)
{
    const int32_t first = i0 >= 0 ? 0 : (-i0 + dil - 1) / dil;                  /* i0 + first * dil >= 0 */
    const int32_t end = i0 >= size ? 0 : i0 + (k - 1) * dil < size ? k : (size - 1 - i0) / dil + 1;
    *k0 = first < k ? first : k;
    *k1 = end > *k0 ? end : *k0;
}

/* acc (n,) = sum over the in-image taps of output pixel (iy0, ix0)'s window of w[tap, c] * (x[c] + in_offset), for
 * channels [c0, c0 + n). */
static void pixel_taps(const kb_conv_params *p, const int8_t *in, const int8_t *w, int32_t iy0, int32_t ix0,
                       int32_t c0, int32_t n, int32_t *acc)
{
    int32_t ky0, ky1, kx0, kx1;
    clip_taps(iy0, p->k_h, p->dil_h, p->in_h, &ky0, &ky1);
    clip_taps(ix0, p->k_w, p->dil_w, p->in_w, &kx0, &kx1);
    const int16_t off = (int16_t)p->in_offset;
    memset(acc, 0, (size_t)n * sizeof acc[0]);
    for (int32_t ky = ky0; ky < ky1; ++ky) {
        for (int32_t kx = kx0; kx < kx1; ++kx) {
            const int8_t *x = in + ((iy0 + ky * p->dil_h) * p->in_row + ix0 + kx * p->dil_w) * p->in_cstride + c0;
            const int8_t *wt = w + (ky * p->k_w + kx) * p->in_c + c0;  /* (n,) */
            for (int32_t c = 0; c < n; ++c) {
                acc[c] += wt[c] * (int16_t)(x[c] + off);
            }
        }
    }
}

void kb_depthwise(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                  const int32_t *mult, const int32_t *shift, int8_t *out)
{
    int32_t acc[KB_DW_CHUNK];
    const int32_t out_offset = p->out_offset, act_min = p->act_min, act_max = p->act_max;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;  /* (c,) */
            for (int32_t c0 = 0; c0 < p->in_c; c0 += KB_DW_CHUNK) {
                const int32_t n = p->in_c - c0 < KB_DW_CHUNK ? p->in_c - c0 : KB_DW_CHUNK;
                pixel_taps(p, in, w, oy * p->stride_h - p->pad_t, ox * p->stride_w - p->pad_l, c0, n, acc);
                for (int32_t c = c0; c < c0 + n; ++c) {
                    const int32_t a = kb_wrapping_add(acc[c - c0], bias[c]);
                    y[c] = kb_requantize(a, mult[c], shift[c], out_offset, act_min, act_max);
                }
            }
        }
    }
}

/* A 3x3 window with dilation 1, out of place: the DSP kernels' entry point that may use `scratch` (NULL, or
 * p->scratch_bytes bytes; see kilobyte.h); here the same as kb_depthwise. */
void kb_depthwise_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    (void)scratch;
    kb_depthwise(p, in, w, bias, mult, shift, out);
}

/* -- in-place machinery ------------------------------------------------------------------------------------------ */

static int32_t plane_width(const kb_conv_params *p)
{
    return p->in_w + p->pad_l + p->pad_r;
}

/* Where plane column j lives inside its row: the row holds stride_w phases, phase r = columns r, r + s, ... */
static int32_t plane_col(const kb_conv_params *p, int32_t j)
{
    const int32_t s = p->stride_w, pw = plane_width(p), r = j % s;
    return r * (pw / s) + (r < pw % s ? r : pw % s) + j / s;  /* phases before r hold pw / s (+1 for r < pw % s) */
}

/* Fill the whole plane with the input zero point; its padding frame then stays valid for every channel. */
static void plane_clear(const kb_conv_params *p, int8_t *plane)
{
    const size_t bytes = (size_t)(p->in_h + p->pad_t + p->pad_b) * (size_t)plane_width(p);
    memset(plane, (int8_t)(-p->in_offset), bytes);
}

/* Copy input phase r (columns x0, x0 + s, ... of each input row) of channel c into its place in the plane rows. */
static void plane_load_phase(const kb_conv_params *p, const int8_t *in, int32_t c, int32_t r, int8_t *plane)
{
    const int32_t pw = plane_width(p), s = p->stride_w, cs = p->in_cstride;
    const int32_t x0 = ((r - p->pad_l) % s + s) % s;           /* first input column in plane phase r */
    const int32_t n = (p->in_w - x0 + s - 1) / s, step = s * cs;  /* its columns, and their distance in bytes */
    int8_t *d = plane + p->pad_t * pw + plane_col(p, p->pad_l + x0);
    for (int32_t y = 0; y < p->in_h; ++y, d += pw) {
        const int8_t *x = in + (y * p->in_row + x0) * cs + c;
        int32_t i = 0;
        for (; i + 4 <= n; i += 4, x += 4 * step) {  /* unrolled: the loop is load/store bound */
            d[i] = x[0];
            d[i + 1] = x[step];
            d[i + 2] = x[2 * step];
            d[i + 3] = x[3 * step];
        }
        for (; i < n; ++i, x += step) {
            d[i] = *x;
        }
    }
}

/* Copy input channel c, (in_h, in_w) strided by in_cstride, into the plane's interior (phase-split rows). */
static void plane_load(const kb_conv_params *p, const int8_t *in, int32_t c, int8_t *plane)
{
    for (int32_t r = 0; r < p->stride_w; ++r) {
        plane_load_phase(p, in, c, r, plane);
    }
}

/* bias + in_offset * (sum of channel c's k taps); weights are (1, k_h, k_w, c_n), so taps are c_n apart. */
static int32_t channel_base(const kb_conv_params *p, const int8_t *w, const int32_t *bias, int32_t c, int32_t k)
{
    int32_t sum = 0;
    for (int32_t i = 0; i < k; ++i) {
        sum += w[i * p->in_c + c];
    }
    return kb_wrapping_add(bias[c], p->in_offset * sum);  /* |in_offset * sum| < 2^31 for k < 2^16 */
}

/* The in-place kernels walk "positions" f = oy * R + ox, R = stride_h * plane width (total: up to the last output
 * pixel): consecutive positions read consecutive plane bytes for every tap, so a span of positions is one vector
 * loop, even across output rows. Positions with ox >= out_w are computed and never stored. Where a row has many of
 * them (stride_h > 1), spans stop after the row's out_w valid ones, rounded up to whole 16-byte vectors, and the
 * walk skips to the next row; every position read stays below `total`, so every plane byte read is in bounds. */
#define KB_DW_SKIP 16  /* junk positions per row above which the walk skips them */

/* A position f = oy * R + ox of the walk (R = stride_h * plane width), with its output row and column. */
typedef struct {
    int32_t f, oy, ox;
} dw_pos;

/* Length of the span starting at `at` (total: the positions up to the last output pixel). */
static int32_t span_len(const kb_conv_params *p, const dw_pos *at, int32_t total)
{
    const int32_t r = p->stride_h * plane_width(p);
    int32_t n = total - at->f < KB_DW_ROW ? total - at->f : KB_DW_ROW;
    if (r - p->out_w > KB_DW_SKIP) {
        const int32_t valid = (p->out_w - at->ox + 15) & ~15;  /* valid positions left in the row, rounded up */
        n = n < valid ? n : valid;
    }
    return n;
}

/* Move `at` past a span of n positions, and over a skipped row tail. */
static void span_next(const kb_conv_params *p, dw_pos *at, int32_t n)
{
    const int32_t r = p->stride_h * plane_width(p);
    at->f += n;
    for (at->ox += n; at->ox >= r; at->ox -= r) {
        ++at->oy;
    }
    if (r - p->out_w > KB_DW_SKIP && at->ox >= p->out_w) {
        at->f += r - at->ox;
        at->ox = 0;
        ++at->oy;
    }
}

/* Requantise acc (n,) of the span at `at` (all at once, vectorised) and store its valid positions into channel
 * c_out (pointer to channel c of output pixel 0), one output row at a time. */
static void store_span(const kb_conv_params *p, const int32_t *acc, const dw_pos *at, int32_t n,
                       const kb_rq_channel *ch, const kb_rq_bounds *bd, int8_t *c_out)
{
    const int32_t r = p->stride_h * plane_width(p), out_w = p->out_w, cs = p->out_cstride;
    int8_t q[KB_DW_ROW];
    kb_rq_row(acc, n, ch, bd, q);
    for (int32_t i = 0, ox = at->ox, oy = at->oy; i < n; i += r - ox, ox = 0, ++oy) {
        const int32_t valid = out_w - ox < n - i ? out_w - ox : n - i;  /* <= 0 in a row's junk tail */
        for (int32_t j = 0; j < valid; ++j) {
            c_out[(oy * p->out_row + ox + j) * cs] = q[i + j];
        }
    }
}

/* acc (n,) = sum over the k x k taps (k = 3, 5 or 7, a constant after inlining; dilation 1) of the span at f0;
 * col[kx]: where tap column kx lies in a plane row (plane_col). */
static inline void span_kxk(const kb_conv_params *p, const int8_t *plane, const int16_t *taps, const int32_t *col,
                            int32_t k, int32_t f0, int32_t n, int32_t *acc)
{
    const int32_t pw = plane_width(p);
    const int8_t *t[7];  /* t[kx][i]: tap kx of position f0 + i, in the current window row */
    for (int32_t i = 0; i < n; ++i) {
        acc[i] = 0;
    }
    for (int32_t ky = 0; ky < k; ++ky) {
        for (int32_t kx = 0; kx < k; ++kx) {
            t[kx] = plane + f0 + ky * pw + col[kx];
        }
        const int16_t *wr = taps + ky * k;
        for (int32_t i = 0; i < n; ++i) {
            int32_t sum = 0;
            for (int32_t kx = 0; kx < k; ++kx) {
                sum += wr[kx] * t[kx][i];
            }
            acc[i] += sum;
        }
    }
}

/* The channel loop shared by the square variants (k constant after inlining). */
static inline void inplace_kxk(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                               const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch, int32_t k)
{
    int16_t taps[49];          /* channel c's (k, k) weights */
    int32_t col[7], acc[KB_DW_ROW];  /* plane_col of each tap column; one span */
    const int32_t total = (p->out_h - 1) * p->stride_h * plane_width(p) + p->out_w;  /* positions up to the last */
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    if (p->out_h <= 0 || p->out_w <= 0) {
        return;  /* an empty patch tile */
    }
    for (int32_t kx = 0; kx < k; ++kx) {
        col[kx] = plane_col(p, kx);
    }
    plane_clear(p, scratch);
    for (int32_t c = 0; c < p->in_c; ++c) {
        for (int32_t i = 0; i < k * k; ++i) {
            taps[i] = w[i * p->in_c + c];
        }
        const kb_rq_channel ch = kb_rq_channel_of(channel_base(p, w, bias, c, k * k), mult[c], shift[c]);
        plane_load(p, in, c, scratch);
        for (dw_pos at = {0, 0, 0}; at.f < total;) {
            const int32_t n = span_len(p, &at, total);
            span_kxk(p, scratch, taps, col, k, at.f, n, acc);
            store_span(p, acc, &at, n, &ch, &bd, out + c);
            span_next(p, &at, n);
        }
    }
}

KB_DEPTHWISE_INPLACE_KXK(3)
KB_DEPTHWISE_INPLACE_KXK(5)
KB_DEPTHWISE_INPLACE_KXK(7)

/* acc (n,) = all taps of the span at f0; any window and dilation; w_c: channel c's taps, in_c apart. */
static void span_any(const kb_conv_params *p, const int8_t *plane, const int8_t *w_c, int32_t f0, int32_t n,
                     int32_t *acc)
{
    const int32_t pw = plane_width(p);
    for (int32_t i = 0; i < n; ++i) {
        acc[i] = 0;
    }
    for (int32_t kx = 0; kx < p->k_w; ++kx) {
        const int8_t *t0 = plane + f0 + plane_col(p, kx * p->dil_w);  /* tap column kx, window row 0 */
        for (int32_t ky = 0; ky < p->k_h; ++ky) {
            const int8_t *t = t0 + ky * p->dil_h * pw;
            const int16_t wv = w_c[(ky * p->k_w + kx) * p->in_c];
            for (int32_t i = 0; i < n; ++i) {
                acc[i] += wv * t[i];
            }
        }
    }
}

/* Any window, stride and dilation. */
void kb_depthwise_inplace(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    int32_t acc[KB_DW_ROW];
    const int32_t total = (p->out_h - 1) * p->stride_h * plane_width(p) + p->out_w;
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    if (p->out_h <= 0 || p->out_w <= 0) {
        return;  /* an empty patch tile */
    }
    plane_clear(p, scratch);
    for (int32_t c = 0; c < p->in_c; ++c) {
        const kb_rq_channel ch = kb_rq_channel_of(channel_base(p, w, bias, c, p->k_h * p->k_w), mult[c], shift[c]);
        plane_load(p, in, c, scratch);
        for (dw_pos at = {0, 0, 0}; at.f < total;) {
            const int32_t n = span_len(p, &at, total);
            span_any(p, scratch, w + c, at.f, n, acc);
            store_span(p, acc, &at, n, &ch, &bd, out + c);
            span_next(p, &at, n);
        }
    }
}
