/* Kilobyte runtime, Cortex-M DSP kernels: int8 CONV_2D on Armv7E-M SIMD (SMLAD), bit-identical to ../kb_conv.c.
 *
 * Same functions, arguments and layouts as the portable file (in (in_h, in_w, in_c) with pixel stride in_cstride
 * and row pitch in_row; w OHWI; out with out_cstride and out_row). Two paths:
 *   - with out_c >= KB_COLS_MIN_OUT_C and scratch, or without scratch where a dense output's unwritten part holds
 *     the first block's columns (a 1x1 conv at the memory peak, which the planner grants no scratch):
 *     conv_wide below, blocks of 3-6 output pixels widened once into
 *     int16 im2col columns for all output channels, then 1 channel x N pixels per weight load, the channel loop and
 *     the requantisation in assembly (kb_arm_wide.S), ~0.77 instructions per MAC in the dot loop. The columns live
 *     in the scratch when the planner granted six (from free bytes), else in input rows already read (when the
 *     input dies here) or in the not yet written part of a dense output (block_cols); pixels where none holds
 *     three columns run on the scratch's two columns (conv_cols, 2 channels x 2 pixels, ~1.0 in the loop), or
 *     without scratch directly (direct_pixels);
 *   - otherwise direct convolution, described here.
 * Direct: each window row of a dense input (in_cstride == in_c, dilation 1) is one contiguous run of kw * in_c bytes, as
 * is the matching weight row, so a window is kh dot products of that length (else kh * kw of length in_c).
 * Output channels go in pairs (the outer loop); output pixels go in pairs that see the same taps, each pair a
 * 2 pixel x 2 channel block (kb_dot_2x2: 16 MACs per 4 loads, 8 unpacks and 8 SMLADs):
 *   - pixels whose whole window is inside the image: on raw int8, the input offset folded into the accumulator's
 *     start, bias + in_offset * sum(w), computed once per channel pair;
 *   - the rest of the interior columns (top and bottom rows) pair along the row, the edge columns pair down the
 *     column: the offset is added while unpacking and the accumulator starts at the bias, over the taps inside the
 *     image only (TFLite skips padded taps);
 *   - corners and odd pixels run alone (kb_dot_1x2). An odd last channel runs paired with itself, stored once.
 * kb_conv_1x1 pairs pixels in row-major order, across rows.
 */
/* GCC's first scheduling pass hoists the loads of the unrolled dot products and pushes the 2x2 block past the 14
 * allocatable registers (spills in the inner loop); without it the block runs spill-free. Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_simd.h"
#include "kb_arm_requant.h"
#include "kb_arm_dot.h"
#include "kb_arm_widen.h"
#include "kb_arm_wide.h"
#include "kb_arm_window.h"

/* One output channel pair: weights, accumulator starts and requantisation, computed once per pair. */
typedef struct {
    const int8_t *w0, *w1;  /* (k_h, k_w, in_c) weights of channels co and co1 */
    int32_t bias0, bias1;   /* accumulator starts of a window with padded taps */
    int32_t base0, base1;   /* ... and of a window with every tap inside the image */
    int32_t co, co1;        /* co1 == co + 1, or co for an odd last channel (stored once) */
    kb_arm_rq rq0, rq1;
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
    c.rq0 = kb_arm_rq_of(mult[co], shift[co], p->out_offset, p->act_min, p->act_max);
    c.rq1 = kb_arm_rq_of(mult[c.co1], shift[c.co1], p->out_offset, p->act_min, p->act_max);
    return c;
}

/* Requantise (a0, a1) into pixel a's outputs and, with yb, (b0, b1) into pixel b's (y: a pixel's (out_c,)).
 * Accumulators go by value: an address taken here would keep the dot products' accumulators in memory. */
static inline __attribute__((always_inline)) void store(const kb_pair *c, int32_t a0, int32_t a1, int32_t b0,
                                                        int32_t b1, int8_t *ya, int8_t *yb)
{
    const int32_t co = c->co, co1 = c->co1;
    const kb_arm_rq q0 = c->rq0;  /* a local copy: loaded once for both pixels, whatever the int8 stores alias */
    ya[co] = kb_arm_rq_apply(&q0, a0);
    if (yb) {
        yb[co] = kb_arm_rq_apply(&q0, b0);
    }
    if (co1 != co) {
        const kb_arm_rq q1 = c->rq1;
        ya[co1] = kb_arm_rq_apply(&q1, a1);
        if (yb) {
            yb[co1] = kb_arm_rq_apply(&q1, b1);
        }
    }
}

/* Taps of a window inside the image: rows [ky0, ky1), columns [kx0, kx1). */
typedef struct {
    int32_t ky0, ky1, kx0, kx1;
} kb_taps;

static kb_taps taps_at(const kb_conv_params *p, int32_t oy, int32_t ox)
{
    kb_taps t;
    inside(oy * p->stride_h - p->pad_t, p->k_h, p->dil_h, p->in_h, &t.ky0, &t.ky1);
    inside(ox * p->stride_w - p->pad_l, p->k_w, p->dil_w, p->in_w, &t.kx0, &t.kx1);
    return t;
}

/* Input pixel index (y * in_row + x) of the top-left tap of output pixel (oy, ox)'s window (maybe padding). */
static inline int32_t origin(const kb_conv_params *p, int32_t oy, int32_t ox)
{
    return (oy * p->stride_h - p->pad_t) * p->in_row + ox * p->stride_w - p->pad_l;
}

/* acc (a0, a1, b0, b1) += taps t of the windows at input pixels a and b (`offset`: a constant, see kb_dot_2x2). */
static inline __attribute__((always_inline)) void window_2x2(const kb_conv_params *p, const int8_t *in,
                                                             const kb_pair *c, const kb_taps *t, int32_t a,
                                                             int32_t b, int offset, int32_t acc[4])
{
    const int32_t cs = p->in_cstride, n = p->in_c;
    if (cs == n && p->dil_w == 1) {  /* each window row's taps are one run of len bytes */
        const int32_t len = (t->kx1 - t->kx0) * n, x_step = p->dil_h * p->in_row * cs, w_step = p->k_w * n;
        int32_t x0 = (t->ky0 * p->dil_h * p->in_row + t->kx0) * cs, wk = (t->ky0 * p->k_w + t->kx0) * n;
        for (int32_t ky = t->ky0; ky < t->ky1; ++ky, x0 += x_step, wk += w_step) {
            kb_dot_2x2(in + (a * cs + x0), in + (b * cs + x0), c->w0 + wk, c->w1 + wk, len, p->in_offset, offset,
                       acc);
        }
        return;
    }
    for (int32_t ky = t->ky0; ky < t->ky1; ++ky) {
        const int32_t row = ky * p->dil_h * p->in_row, wk = ky * p->k_w * n;
        for (int32_t kx = t->kx0; kx < t->kx1; ++kx) {
            const int32_t k = row + kx * p->dil_w, wkx = wk + kx * n;
            kb_dot_2x2(in + (a + k) * cs, in + (b + k) * cs, c->w0 + wkx, c->w1 + wkx, n, p->in_offset, offset,
                       acc);
        }
    }
}

/* Output pixels a = (ay, ax) and b = (by, bx), whose windows see the same taps t; `full`: every tap. */
static void conv_two(const kb_conv_params *p, const int8_t *in, const kb_pair *c, const kb_taps *t, int full,
                     int32_t ay, int32_t ax, int32_t by, int32_t bx, int8_t *out)
{
    const int32_t a = origin(p, ay, ax), b = origin(p, by, bx);
    int32_t acc[4];
    if (full) {  /* two instances of the block: with and without the offset register */
        acc[0] = acc[2] = c->base0, acc[1] = acc[3] = c->base1;
        window_2x2(p, in, c, t, a, b, 0, acc);
    } else {
        acc[0] = acc[2] = c->bias0, acc[1] = acc[3] = c->bias1;
        window_2x2(p, in, c, t, a, b, 1, acc);
    }
    store(c, acc[0], acc[1], acc[2], acc[3], out + (ay * p->out_row + ax) * p->out_cstride,
          out + (by * p->out_row + bx) * p->out_cstride);
}

/* Output pixel (oy, ox) alone, over the taps inside the image. */
static void conv_one(const kb_conv_params *p, const int8_t *in, const kb_pair *c, int32_t oy, int32_t ox,
                     int8_t *out)
{
    const kb_taps t = taps_at(p, oy, ox);
    const int32_t cs = p->in_cstride, n = p->in_c, a = origin(p, oy, ox);
    int32_t acc[4] = {c->bias0, c->bias1, 0, 0};
    if (cs == n && p->dil_w == 1) {  /* each window row's taps are one run of len bytes */
        const int32_t len = (t.kx1 - t.kx0) * n, x_step = p->dil_h * p->in_row * cs, w_step = p->k_w * n;
        int32_t x0 = (a + t.ky0 * p->dil_h * p->in_row + t.kx0) * cs, wk = (t.ky0 * p->k_w + t.kx0) * n;
        for (int32_t ky = t.ky0; ky < t.ky1; ++ky, x0 += x_step, wk += w_step) {
            kb_dot_1x2(in + x0, c->w0 + wk, c->w1 + wk, len, p->in_offset, acc);
        }
    } else {
        for (int32_t ky = t.ky0; ky < t.ky1; ++ky) {
            const int32_t row = a + ky * p->dil_h * p->in_row, wk = ky * p->k_w * n;
            for (int32_t kx = t.kx0; kx < t.kx1; ++kx) {
                kb_dot_1x2(in + (row + kx * p->dil_w) * cs, c->w0 + wk + kx * n, c->w1 + wk + kx * n, n,
                           p->in_offset, acc);
            }
        }
    }
    store(c, acc[0], acc[1], 0, 0, out + (oy * p->out_row + ox) * p->out_cstride, 0);
}

/* Output column ox, whose windows cross the left or right padding: pairs down the interior rows [oy_lo, oy_hi). */
static void edge_column(const kb_conv_params *p, const int8_t *in, const kb_pair *c, int32_t ox, int32_t oy_lo,
                        int32_t oy_hi, int8_t *out)
{
    const kb_taps t = taps_at(p, oy_lo, ox);
    int32_t oy = 0;
    for (; oy < oy_lo; ++oy) {
        conv_one(p, in, c, oy, ox, out);
    }
    for (; oy + 1 < oy_hi; oy += 2) {
        conv_two(p, in, c, &t, 0, oy, ox, oy + 1, ox, out);
    }
    for (; oy < p->out_h; ++oy) {
        conv_one(p, in, c, oy, ox, out);
    }
}

static void conv_any(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                     const int32_t *mult, const int32_t *shift, int8_t *out)
{
    int32_t oy_lo, oy_hi, ox_lo, ox_hi;  /* output pixels whose window lies inside the image, per axis */
    interior(p->out_h, p->stride_h, p->pad_t, p->k_h, p->dil_h, p->in_h, &oy_lo, &oy_hi);
    interior(p->out_w, p->stride_w, p->pad_l, p->k_w, p->dil_w, p->in_w, &ox_lo, &ox_hi);
    for (int32_t co = 0; co < p->out_c; co += 2) {
        const kb_pair c = pair_at(p, w, bias, mult, shift, co);
        for (int32_t oy = 0; oy < p->out_h; ++oy) {  /* interior columns: pairs along each row */
            const kb_taps t = taps_at(p, oy, ox_lo);
            const int full = t.ky0 == 0 && t.ky1 == p->k_h;
            int32_t ox = ox_lo;
            for (; ox + 1 < ox_hi; ox += 2) {
                conv_two(p, in, &c, &t, full, oy, ox, oy, ox + 1, out);
            }
            if (ox < ox_hi) {
                conv_one(p, in, &c, oy, ox, out);
            }
        }
        for (int32_t ox = 0; ox < ox_lo; ++ox) {
            edge_column(p, in, &c, ox, oy_lo, oy_hi, out);
        }
        for (int32_t ox = ox_hi; ox < p->out_w; ++ox) {
            edge_column(p, in, &c, ox, oy_lo, oy_hi, out);
        }
    }
}

/* -- with scratch: pre-widened im2col columns ---------------------------------------------------------------------
 * Output pixels go in blocks (row-major, across rows); each block's windows are widened once into columns as
 * int16 x + in_offset (0 for a padded tap, which TFLite skips) and then serve every output channel, so the ~1.1
 * instructions per value of widening are shared by all out_c channels and the inner loops need no activation
 * unpacking. Two block shapes:
 *   - wide (conv_wide, 3-6 columns where block_cols finds room): 1 channel x 3..6 pixels,
 *     kb_wide_1x<N> of kb_arm_wide.S, 18 instructions per 24 MACs at N = 6;
 *   - two columns (conv_cols, the KB_CONV_SCRATCH bytes every planned conv scratch holds): 2 channels x 2 pixels,
 *     kb_dot_2x2_cols, 16 instructions per 16 MACs.
 * Column layout with N columns: value k < n & ~3 of column c at int16 index 4N * (k >> 2) + 4 * c +
 * {0, 2, 1, 3}[k & 3] (an LDRD / LDM yields the pairs SXTB16 makes of a weight word); the n & 3 tail values at
 * N * (n & ~3) + c * (n & 3) + (k & 3). N columns of n values are exactly 2 * N * n bytes. */
static int32_t col_index(int32_t k, int32_t n, int32_t c, int32_t ncols)
{
    const int32_t body = n & ~3;
    return k < body ? 4 * ncols * (k >> 2) + 4 * c + ((k & 1) << 1) + ((k >> 1) & 1)
                    : ncols * body + c * (n & 3) + k - body;
}

/* One tap's in_c values (src NULL: a padded tap, zeros) into column c of ncols at values [k0, k0 + in_c). */
static inline __attribute__((always_inline)) void widen_tap(const int8_t *src, int32_t in_c, int32_t offset,
                                                            int32_t k0, int32_t n, int32_t c, int32_t ncols,
                                                            int8_t *cols)
{
    int32_t i = 0;
    if (((k0 | in_c) & 3) == 0) {  /* whole groups: one word in, two words out, pointers post-incremented */
        const int32_t off2 = kb_offset2(offset), step = 8 * ncols;
        int8_t *dst = cols + 2 * (ncols * k0 + 4 * c);
        i = in_c;
        if (src) {
            widen_run(src, in_c, off2, dst, ncols);
        } else {
            for (int32_t g = 0; g < in_c; g += 4) {
                kb_st2_inc(&dst, 0, 0, step);
            }
        }
    }
    for (; i < in_c; ++i) {
        const int16_t v = (int16_t)(src ? src[i] + offset : 0);
        memcpy(cols + 2 * col_index(k0 + i, n, c, ncols), &v, 2);
    }
}

#define KB_GATHER_MAX 256  /* the most values gather_window takes (a 7x7 window of 3 channels is 147) */

/* len bytes from src to dst, a word at a time (unaligned loads and stores), then the last 0-3 bytes; and len copies
 * of v: inline, since a library call per window row costs more than the row (a stem's rows are 3-12 bytes). */
static inline __attribute__((always_inline)) void copy_run(int8_t *dst, const int8_t *src, int32_t len)
{
    int32_t i = 0;
    for (; i + 4 <= len; i += 4) {
        const int32_t v = kb_ld4(src + i);
        memcpy(dst + i, &v, 4);
    }
    for (; i < len; ++i) {
        dst[i] = src[i];
    }
}

static inline __attribute__((always_inline)) void fill_run(int8_t *dst, int8_t v, int32_t len)
{
    for (int32_t i = 0; i < len; ++i) {
        dst[i] = v;
    }
}

/* Output pixel (oy, ox)'s window (top-left tap (iy0, ix0), columns [kx0, kx1) inside the image) into column c of
 * ncols, nn (whole groups, at most KB_GATHER_MAX) values: its bytes gathered into a buffer — the zero point for a
 * padded tap and for the values from kh*kw*in_c on, so that with the input offset added they are 0 — then widened a
 * word at a time. widen_window's per-value path costs ~30 instructions a value where a window row is not whole
 * groups (a 3-channel stem). */
static void gather_window(const kb_conv_params *p, const int8_t *in, int32_t iy0, int32_t ix0, int32_t kx0,
                          int32_t kx1, int32_t nn, int32_t c, int32_t ncols, int8_t *cols)
{
    int32_t buf[KB_GATHER_MAX / 4];  /* word-aligned */
    int8_t *b = (int8_t *)buf;
    const int32_t cin = p->in_c, cs = p->in_cstride, row_bytes = p->k_w * cin, n = p->k_h * row_bytes;
    const int8_t zp = (int8_t)(-p->in_offset);  /* x + in_offset == 0 */
    const int run = cs == cin && p->dil_w == 1;
    for (int32_t ky = 0; ky < p->k_h; ++ky, b += row_bytes) {
        const int32_t iy = iy0 + ky * p->dil_h;
        if (iy < 0 || iy >= p->in_h || kx1 <= kx0) {
            fill_run(b, zp, row_bytes);
            continue;
        }
        const int8_t *row = in + (iy * p->in_row + ix0) * cs;
        fill_run(b, zp, kx0 * cin);
        if (run) {
            copy_run(b + kx0 * cin, row + kx0 * cs, (kx1 - kx0) * cin);
        } else {
            for (int32_t kx = kx0; kx < kx1; ++kx) {
                copy_run(b + kx * cin, row + kx * p->dil_w * cs, cin);
            }
        }
        fill_run(b + kx1 * cin, zp, (p->k_w - kx1) * cin);
    }
    fill_run((int8_t *)buf + n, zp, nn - n);
    widen_run((const int8_t *)buf, nn, kb_offset2(p->in_offset), cols + 8 * c, ncols);
}

/* Output pixel (oy, ox)'s window into column c of ncols, any layout (widen_rows below takes the common cases
 * first), in a layout of nn values per column (n, or the wide path's n rounded up to whole groups: the values from n
 * on are zeros). A dense input (in_cstride == in_c, dilation 1 along x) widens each window row's taps inside the
 * image as one run, the padded ones as zeros. */
static void widen_window(const kb_conv_params *p, const int8_t *in, int32_t oy, int32_t ox, int32_t c, int32_t ncols,
                         int32_t nn, int8_t *cols)
{
    const int32_t iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l;
    const int32_t cin = p->in_c, run = p->in_cstride == cin && p->dil_w == 1;
    int32_t kx0, kx1;
    inside(ix0, p->k_w, p->dil_w, p->in_w, &kx0, &kx1);
    kx1 = kx1 > kx0 ? kx1 : kx0;
    if ((nn & 3) == 0 && nn <= KB_GATHER_MAX) {  /* whole groups: gather the window's bytes, then widen them */
        gather_window(p, in, iy0, ix0, kx0, kx1, nn, c, ncols, cols);
        return;
    }
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        const int32_t iy = iy0 + ky * p->dil_h, k_row = ky * p->k_w * cin;
        const int8_t *row = iy >= 0 && iy < p->in_h ? in + iy * p->in_row * p->in_cstride : 0;
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            const int8_t *src = row && kx >= kx0 && kx < kx1 ? row + (ix0 + kx * p->dil_w) * p->in_cstride : 0;
            if (src && run) {  /* the row's taps [kx0, kx1) in one go */
                widen_tap(src, (kx1 - kx0) * cin, p->in_offset, k_row + kx * cin, nn, c, ncols, cols);
                kx = kx1 - 1;
                continue;
            }
            widen_tap(src, cin, p->in_offset, k_row + kx * cin, nn, c, ncols, cols);
        }
    }
    for (int32_t k = p->k_h * p->k_w * cin; k < nn; ++k) {  /* the last group's padding */
        const int16_t zero = 0;
        memcpy(cols + 2 * col_index(k, nn, c, ncols), &zero, 2);
    }
}

/* What widen_rows needs besides *p: the output pixels whose windows widen as k_h whole runs (a dense input,
 * dilation 1 along x, window rows of whole groups, every tap inside: [y_lo, y_hi) x [x_lo, x_hi), empty if not);
 * edge: the other windows of such an input widen as runs and zero groups too (in_c a multiple of 4); nn: the
 * column layout's values (rows_of: kh*kw*in_c; the wide path rounds it up to whole groups, see conv_wide). */
typedef struct {
    int32_t y_lo, y_hi, x_lo, x_hi, len, pitch, off2, edge, nn;
} kb_rows;

static kb_rows rows_of(const kb_conv_params *p)
{
    kb_rows r;
    r.len = p->k_w * p->in_c, r.pitch = p->dil_h * p->in_row * p->in_c, r.off2 = kb_offset2(p->in_offset);
    r.nn = p->k_h * p->k_w * p->in_c;
    interior(p->out_h, p->stride_h, p->pad_t, p->k_h, p->dil_h, p->in_h, &r.y_lo, &r.y_hi);
    interior(p->out_w, p->stride_w, p->pad_l, p->k_w, p->dil_w, p->in_w, &r.x_lo, &r.x_hi);
    const int dense = p->in_cstride == p->in_c && p->dil_w == 1;
    r.edge = dense && (p->in_c & 3) == 0;
    if (!dense || (r.len & 3)) {
        r.y_hi = r.y_lo;
    }
    return r;
}

/* groups zero groups of a column from dst on (a padded tap: TFLite skips it); returns the next group's address. */
static inline __attribute__((always_inline)) int8_t *zero_groups(int8_t *dst, int32_t groups, int32_t step)
{
    for (int32_t g = 0; g < groups; ++g) {
        kb_st2_inc(&dst, 0, 0, step);
    }
    return dst;
}

/* A window with padded taps (kb_rows.edge): per window row, zero groups for the taps left of the image, one run
 * for those inside, zero groups for those right of it; a row above or below the image is all zero groups. */
static void widen_edge(const kb_rows *r, const kb_conv_params *p, const int8_t *in, int32_t oy, int32_t ox, int32_t c,
                       int32_t ncols, int8_t *cols)
{
    const int32_t cin = p->in_c, iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l;
    const int32_t step = 8 * ncols;
    int32_t kx0, kx1;
    inside(ix0, p->k_w, 1, p->in_w, &kx0, &kx1);
    kx1 = kx1 > kx0 ? kx1 : kx0;
    const int32_t left = kx0 * cin >> 2, run = (kx1 - kx0) * cin, right = (p->k_w - kx1) * cin >> 2;
    int8_t *dst = cols + 8 * c;
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        const int32_t iy = iy0 + ky * p->dil_h;
        if (iy < 0 || iy >= p->in_h) {
            dst = zero_groups(dst, r->len >> 2, step);
            continue;
        }
        dst = zero_groups(dst, left, step);
        dst = widen_run(in + (iy * p->in_row + ix0 + kx0) * cin, run, r->off2, dst, ncols);
        dst = zero_groups(dst, right, step);
    }
}

/* widen_window, with the common case (pixels of kb_rows) inline: k_h runs, the six-column step a constant. */
static inline __attribute__((always_inline)) void widen_rows(const kb_rows *r, const kb_conv_params *p,
                                                             const int8_t *in, int32_t oy, int32_t ox, int32_t c,
                                                             int32_t ncols, int8_t *cols)
{
    if (oy < r->y_lo || oy >= r->y_hi || ox < r->x_lo || ox >= r->x_hi) {
        if (r->edge) {
            widen_edge(r, p, in, oy, ox, c, ncols, cols);
        } else {
            widen_window(p, in, oy, ox, c, ncols, r->nn, cols);
        }
        return;
    }
    const int8_t *row = in + ((oy * p->stride_h - p->pad_t) * p->in_row + ox * p->stride_w - p->pad_l) * p->in_c;
    int8_t *dst = cols + 8 * c;
    for (int32_t ky = 0; ky < p->k_h; ++ky, row += r->pitch) {
        dst = ncols == KB_WIDE_COLS ? widen_run6(row, r->len, r->off2, dst) : widen_run(row, r->len, r->off2, dst,
                                                                                          ncols);
    }
}

/* widen_rows as a call, for conv_cols's three sites: inlined there it costs ~0.5 kB of Flash, on the two-column path
 * that runs only where no wider columns fit. */
static __attribute__((noinline)) void widen_pixel(const kb_rows *r, const kb_conv_params *p, const int8_t *in,
                                                  int32_t oy, int32_t ox, int32_t c, int8_t *cols)
{
    widen_rows(r, p, in, oy, ox, c, 2, cols);
}

/* What every channel pair of conv_cols reads, copied out of *p: the int8 output stores may alias anything, so
 * reading p's fields inside the channel loop would reload them after every store. */
typedef struct {
    int32_t n, out_c, out_offset, act_min, act_max;
} kb_cols_job;

/* Output channels co and co1 (co + 1, or co for an odd last channel, stored once) of the two widened pixels into
 * ya and yb, or (yb a literal NULL, so that inlining keeps only one of the two dot products) of column a alone. */
static inline __attribute__((always_inline)) void cols_pair(const kb_cols_job j, const int8_t *w,
                                                            const int32_t *bias, const int32_t *mult,
                                                            const int32_t *shift, int32_t co, const int8_t *cols,
                                                            int8_t *ya, int8_t *yb)
{
    const int32_t co1 = co + 1 < j.out_c ? co + 1 : co;
    int32_t acc[4] = {bias[co], bias[co1], bias[co], bias[co1]};
    if (yb) {
        kb_dot_2x2_cols(cols, w + co * j.n, w + co1 * j.n, j.n, acc);
    } else {
        kb_dot_1x2_cols(cols, w + co * j.n, w + co1 * j.n, j.n, acc);
    }
    if (kb_arm_rq1_is_fast(shift[co], j.act_min, j.act_max) && kb_arm_rq1_is_fast(shift[co1], j.act_min, j.act_max)) {
        const kb_arm_rq1 f0 = kb_arm_rq1_of(mult[co], shift[co], j.out_offset, j.act_min, j.act_max);
        const kb_arm_rq1 f1 = kb_arm_rq1_of(mult[co1], shift[co1], j.out_offset, j.act_min, j.act_max);
        ya[co] = kb_arm_rq1_fast(&f0, acc[0]);
        if (yb) {
            yb[co] = kb_arm_rq1_fast(&f0, acc[2]);
        }
        if (co1 != co) {
            ya[co1] = kb_arm_rq1_fast(&f1, acc[1]);
            if (yb) {
                yb[co1] = kb_arm_rq1_fast(&f1, acc[3]);
            }
        }
        return;
    }
    const kb_arm_rq q0 = kb_arm_rq_of(mult[co], shift[co], j.out_offset, j.act_min, j.act_max);
    ya[co] = kb_arm_rq_apply(&q0, acc[0]);
    if (yb) {
        yb[co] = kb_arm_rq_apply(&q0, acc[2]);
    }
    if (co1 != co) {
        const kb_arm_rq q1 = kb_arm_rq_of(mult[co1], shift[co1], j.out_offset, j.act_min, j.act_max);
        ya[co1] = kb_arm_rq_apply(&q1, acc[1]);
        if (yb) {
            yb[co1] = kb_arm_rq_apply(&q1, acc[3]);
        }
    }
}

/* Output pixels [k0, pixels) (row-major) in pairs on two columns. */
static void conv_cols(const kb_conv_params *p, const kb_rows *rows, const int8_t *in, const int8_t *w,
                      const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *cols,
                      int32_t k0, int32_t pixels)
{
    const kb_cols_job j = {p->k_h * p->k_w * p->in_c, p->out_c, p->out_offset, p->act_min, p->act_max};
    const int32_t out_w = p->out_w, out_row = p->out_row, cs = p->out_cstride;
    int32_t k = k0;
    for (; k + 1 < pixels; k += 2) {
        const int32_t ay = k / out_w, ax = k % out_w, by = (k + 1) / out_w, bx = (k + 1) % out_w;
        widen_pixel(rows, p, in, ay, ax, 0, cols);
        widen_pixel(rows, p, in, by, bx, 1, cols);
        int8_t *ya = out + (ay * out_row + ax) * cs, *yb = out + (by * out_row + bx) * cs;
        if (!yb) {
            __builtin_unreachable();  /* an output pixel's address: tells GCC to keep only the 2x2 path here */
        }
        for (int32_t co = 0; co < j.out_c; co += 2) {
            cols_pair(j, w, bias, mult, shift, co, cols, ya, yb);
        }
    }
    if (k < pixels) {  /* an odd last pixel: column a alone */
        const int32_t ay = k / out_w, ax = k % out_w;
        widen_pixel(rows, p, in, ay, ax, 0, cols);
        int8_t *ya = out + (ay * out_row + ax) * cs;
        for (int32_t co = 0; co < j.out_c; co += 2) {
            cols_pair(j, w, bias, mult, shift, co, cols, ya, 0);
        }
    }
}

/* -- 1 channel x 3..6 pixels ------------------------------------------------------------------------------------ */
typedef void kb_dot_1xn(const int8_t *cols, const int8_t *w, int32_t groups, int32_t *acc);

/* *y[c]++ = acc[c] requantised by q, c < n. A function of its own, so that its few values stay in registers; the
 * common case (q->fast: multiplier < 1, clamp [-128, 127], as after ReLU with zero point -128 or without activation)
 * runs its own loop: two SMLALs, ASR, QADD and SSAT per output. */
static __attribute__((noinline)) void store_block(const kb_arm_rq1 *q, const int32_t *acc, int8_t **y, int32_t n)
{
    const kb_arm_rq1 r = *q;
    if (r.fast) {
        for (int32_t c = 0; c < n; ++c) {
            *y[c]++ = kb_arm_rq1_fast(&r, acc[c]);
        }
    } else {
        for (int32_t c = 0; c < n; ++c) {
            *y[c]++ = kb_arm_rq1_apply(&r, acc[c]);
        }
    }
}

/* Column space for the block of n pixels from pixel k (2 * n * n_values bytes, 4-byte aligned), the first of:
 *   - the scratch, when it holds that much;
 *   - with p->in_consumed and a dense input (in_cstride == in_c, in_row == in_w), the input rows above the first row
 *     that pixel k's window reads: no later pixel reads them again;
 *   - with a dense output (out_cstride == out_c, out_row == out_w: its pixels' bytes are all this conv's own, see
 *     kilobyte.h), the bytes after pixel k + n - 1's outputs, which only later blocks write;
 * NULL when none fits. At the memory peak the planner's two columns are all the scratch there is: the output's
 * unwritten part holds six columns early in the layer, the consumed input rows late in it. */
static int8_t *block_cols(const kb_conv_params *p, const int8_t *in, int8_t *out, int8_t *scratch, int32_t k,
                          int32_t n)
{
    const int32_t bytes = 2 * n * ((p->k_h * p->k_w * p->in_c + 3) & ~3), cs = p->out_cstride;  /* whole groups */
    if (scratch && p->scratch_bytes >= bytes) {
        return scratch;
    }
    if (p->in_consumed && p->in_cstride == p->in_c && p->in_row == p->in_w) {
        const int32_t rows = (k / p->out_w) * p->stride_h - p->pad_t;  /* input rows [0, rows) are done */
        const uintptr_t start = ((uintptr_t)in + 3) & ~(uintptr_t)3;
        if (rows > 0 && start + bytes <= (uintptr_t)(in + rows * p->in_w * p->in_c)) {
            return (int8_t *)start;
        }
    }
    if (cs != p->out_c || p->out_row != p->out_w) {
        return 0;
    }
    const uintptr_t start = ((uintptr_t)(out + (k + n) * cs) + 3) & ~(uintptr_t)3;
    return start + bytes <= (uintptr_t)(out + p->out_h * p->out_w * cs) ? (int8_t *)start : 0;
}

/* Output pixels [k0, k1) (row-major) without columns: each output channel pair of each pixel directly (conv_one).
 * conv_wide's fallback without scratch, for the few pixels where neither the output's unwritten part nor consumed
 * input rows hold three columns. */
static void direct_pixels(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *out, int32_t k0, int32_t k1)
{
    for (int32_t co = 0; co < p->out_c; co += 2) {
        const kb_pair c = pair_at(p, w, bias, mult, shift, co);
        for (int32_t k = k0; k < k1; ++k) {
            conv_one(p, in, &c, k / p->out_w, k % p->out_w, out);
        }
    }
}

/* Whether conv_wide runs the layer: enough output channels to share the widening, and columns for its first block
 * (the scratch's, or without scratch, room in the output's unwritten part). Without scratch the direct paths run
 * where the output is not dense or the layer has fewer than 3 pixels. */
static int wide_ok(const kb_conv_params *p, const int8_t *in, int8_t *out, int8_t *scratch)
{
    if (p->out_c < KB_COLS_MIN_OUT_C) {
        return 0;
    }
    const int32_t pixels = p->out_h * p->out_w;
    return scratch || (pixels >= 3 && block_cols(p, in, out, 0, 0, 3));
}

/* Every output pixel in blocks of kb_wide_block pixels (fewer where block_cols has less room, down to 3) on N
 * columns of whole groups (a reduction of n % 4 != 0 values padded with zeros): the block's windows widened, then
 * every output channel in one kb_wide_1x<N> call (dot products, requantisation, stores and the channel loop in
 * assembly) when kb_wide_job_ok and the weights are whole groups, as in most layers; with a padded reduction one call
 * per channel; else, and for a last channel whose padded weight word would end past the weights, per channel
 * kb_dot_1x<N>_cols, the values after its whole words and store_block in C. Where no 3 columns fit, two pixels run
 * on the scratch's two columns (conv_cols, unpadded), or without scratch directly (direct_pixels). */
static void conv_wide(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    typedef void kb_wide_fn(const int8_t *cols, const int8_t *w, int32_t groups, kb_wide_job *job);
    static kb_dot_1xn *const dot[KB_WIDE_COLS + 1] = {0, 0, 0, kb_dot_1x3_cols, kb_dot_1x4_cols, kb_dot_1x5_cols,
                                                       kb_dot_1x6_cols};
    static kb_wide_fn *const fused[KB_WIDE_COLS + 1] = {0, 0, 0, kb_wide_1x3, kb_wide_1x4, kb_wide_1x5, kb_wide_1x6};
    const kb_cols_job j = {p->k_h * p->k_w * p->in_c, p->out_c, p->out_offset, p->act_min, p->act_max};
    const int32_t pixels = p->out_h * p->out_w, out_w = p->out_w, out_row = p->out_row, cs = p->out_cstride;
    const int32_t nn = (j.n + 3) & ~3, groups = nn >> 2;  /* the columns hold whole groups: zeros from j.n on */
    const int8_t *const w_end = w + j.out_c * j.n;
    const int asm_ok = kb_wide_job_ok(bias, shift, j.out_c, nn, j.out_offset, j.act_min, j.act_max);
    kb_wide_job job = {bias, mult, shift, 0, j.out_c, 1 + 2 * j.out_offset, {0}};
    const kb_rows rows = rows_of(p);  /* conv_cols's layout: j.n values a column */
    kb_rows wide = rows;
    wide.nn = nn;
    for (int32_t k = 0, oy = 0, ox = 0; k < pixels;) {
        int32_t n = kb_wide_block(pixels - k);
        int8_t *cols = n >= 3 ? block_cols(p, in, out, scratch, k, n) : 0;
        for (; !cols && n > 3; --n) {
            cols = block_cols(p, in, out, scratch, k, n - 1);
        }
        if (!cols) {  /* two pixels on the scratch's two columns (or directly); more room may come later */
            n = pixels - k < 2 ? pixels - k : 2;
            if (scratch) {
                conv_cols(p, &rows, in, w, bias, mult, shift, out, scratch, k, k + n);
            } else {
                direct_pixels(p, in, w, bias, mult, shift, out, k, k + n);
            }
            k += n, oy = k / out_w, ox = k % out_w;
            continue;
        }
        for (int32_t c = 0; c < n; ++c) {
            widen_rows(&wide, p, in, oy, ox, c, n, cols);
            job.y[c] = out + (oy * out_row + ox) * cs;
            if (++ox == out_w) {
                ox = 0, ++oy;
            }
        }
        k += n;
        if (asm_ok && nn == j.n) {  /* every channel in one call: their weights follow each other group by group */
            job.co = 0;
            fused[n](cols, w, groups, &job);
            continue;
        }
        for (int32_t co = 0; co < j.out_c; ++co) {  /* else channel by channel (a reduction of j.n % 4 != 0 values) */
            const int8_t *wc = w + co * j.n;
            const int whole = wc + nn <= w_end;  /* its last group's weight word lies inside the weights (the bytes
                                                  * after j.n meet the columns' zeros) */
            if (asm_ok && whole) {
                job.co = co, job.out_c = co + 1;
                fused[n](cols, wc, groups, &job);
                continue;
            }
            const int32_t g = whole ? groups : j.n >> 2;
            int32_t acc[KB_WIDE_COLS];
            acc[0] = bias[co];
            dot[n](cols, wc, g, acc);
            for (int32_t c = 0; c < n; ++c) {  /* the values after g groups; acc holds the bias: wrap like SMLAD */
                for (int32_t i = 4 * g; i < j.n; ++i) {
                    int16_t x;
                    memcpy(&x, cols + 2 * col_index(i, nn, c, n), 2);
                    acc[c] = kb_wrapping_add(acc[c], x * wc[i]);
                }
            }
            const kb_arm_rq1 q = kb_arm_rq1_of(mult[co], shift[co], j.out_offset, j.act_min, j.act_max);
            int8_t *y[KB_WIDE_COLS];  /* channel co of each pixel (store_block advances its pointers) */
            for (int32_t c = 0; c < n; ++c) {
                y[c] = job.y[c] + co;
            }
            store_block(&q, acc, y, n);
        }
        job.out_c = j.out_c;
    }
}

void kb_conv(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
             const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    if (wide_ok(p, in, out, scratch)) {
        conv_wide(p, in, w, bias, mult, shift, out, scratch);
    } else {
        conv_any(p, in, w, bias, mult, shift, out);
    }
}

void kb_conv_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    kb_conv(p, in, w, bias, mult, shift, out, scratch);  /* dense window rows already make 3x3 three runs */
}

/* Pointwise, stride 1, no padding: the column path where wide_ok; else pixels in row-major order, paired across
 * rows; out (h, w) == in (h, w). */
void kb_conv_1x1(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    if (wide_ok(p, in, out, scratch)) {
        conv_wide(p, in, w, bias, mult, shift, out, scratch);
        return;
    }
    const int32_t n = p->in_c, pixels = p->out_h * p->out_w;
    for (int32_t co = 0; co < p->out_c; co += 2) {
        const kb_pair c = pair_at(p, w, bias, mult, shift, co);
        int32_t y = 0, x = 0;  /* the next pixel */
        for (int32_t k = 0; k + 1 < pixels; k += 2) {
            KB_PIXEL_NEXT(p, in, out, y, x, xa, ya)
            KB_PIXEL_NEXT(p, in, out, y, x, xb, yb)
            int32_t acc[4] = {c.base0, c.base1, c.base0, c.base1};
            kb_dot_2x2(xa, xb, c.w0, c.w1, n, 0, 0, acc);
            store(&c, acc[0], acc[1], acc[2], acc[3], ya, yb);
        }
        if (pixels & 1) {  /* the last pixel, (out_h - 1, out_w - 1) */
            int32_t acc[4] = {c.bias0, c.bias1, 0, 0};
            kb_dot_1x2(in + (y * p->in_row + x) * p->in_cstride, c.w0, c.w1, n, p->in_offset, acc);
            store(&c, acc[0], acc[1], 0, 0, out + (y * p->out_row + x) * p->out_cstride, 0);
        }
    }
}
