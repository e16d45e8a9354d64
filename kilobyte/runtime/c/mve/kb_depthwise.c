/* Kilobyte runtime, Cortex-M55 Helium (MVE) kernels: int8 DEPTHWISE_CONV_2D (depth multiplier 1), bit-identical to
 * ../kb_depthwise.c: same functions, arguments, layouts and in-place contract (the scratch of an in-place call holds
 * at least the padded plane; more, a DSP ring the planner granted, is not read).
 *
 * Lanes are four neighbouring output pixels of one channel, in int32: per tap one VLDRB.S32 of the four inputs (a
 * gather at stride > 1) and one VMLA by the tap's weight (a scalar) — 2 vector instructions for 4 MACs, on the
 * memory and multiply units, which overlap. The four sums are requantised as one vector (kb_mve_requant.h) and
 * stored with one VSTRB scatter (the channel's pixels are in_cstride apart).
 *
 *   kb_depthwise_inplace*  channel by channel through the zero-point-padded plane (filled by kb_mve_fill, the channel
 *                          gathered into it four pixels per VLDRB): every tap present, the input offset folded into
 *                          bias + in_offset * sum(w), no predication but on a row's last group.
 *   kb_depthwise(_3x3)     out of place, straight from the input: each tap's lanes predicated on the tap being
 *                          inside the input (zeroing gathers), the input offset added to the lanes read, so padded
 *                          taps contribute nothing, as TFLite skips them. The 3x3 entry ignores its scratch.
 */
#include <arm_mve.h>
#include <string.h>

#include "kilobyte.h"
#include "kb_mve_conv4.h"
#include "kb_mve_dw3.h"
#include "kb_mve_requant.h"

/* {0, step, 2 step, 3 step} */
static inline __attribute__((always_inline)) uint32x4_t lanes(int32_t step)
{
    return vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)step);
}

/* Channel c of the input into the plane (wp bytes a row), padding as the zero point zp. */
static void fill_plane(const kb_conv_params *p, const int8_t *in, int32_t c, int8_t *plane, int32_t wp, int8_t zp)
{
    kb_mve_fill(plane, zp, (p->in_h + p->pad_t + p->pad_b) * wp);
    const int32_t pitch = p->in_row * p->in_cstride;
    int8_t *dst = plane + p->pad_t * wp + p->pad_l;
    for (int32_t y = 0; y < p->in_h; ++y, dst += wp) {
        kb_mve_gather(dst, in + y * pitch + c, p->in_w, p->in_cstride);
    }
}

/* The sums of four outputs whose window origins are at t, t + sw, t + 2 sw, t + 3 sw in the plane; `k` the lanes. */
static inline __attribute__((always_inline)) int32x4_t plane_sums(const kb_conv_params *p, const int8_t *t,
                                                                  int32_t wp, const int32_t *wt, int32_t kh,
                                                                  int32_t kw, uint32x4_t soffs, mve_pred16_t k)
{
    int32x4_t acc = vdupq_n_s32(0);
    for (int32_t ky = 0; ky < kh; ++ky) {
        const int8_t *row = t + ky * p->dil_h * wp;
        for (int32_t kx = 0; kx < kw; ++kx) {
            const int8_t *at = row + kx * p->dil_w;
            const int32x4_t v = p->stride_w == 1 ? vldrbq_z_s32(at, k) : vldrbq_gather_offset_z_s32(at, soffs, k);
            acc = vmlaq_n_s32(acc, v, wt[ky * kw + kx]);
        }
    }
    return acc;
}

/* A 3x3 window, dilation 1, unrolled: the sums of four outputs at t, t + sw, ... (sw = 1: contiguous loads). */
typedef struct {
    int32_t w0, w1, w2, w3, w4, w5, w6, w7, w8;
} kb_w9;

/* A 3x3 window (dilation 1): the sums of the four outputs whose windows start at row pointer r plus each lane's
 * offset in `lanes0` (lanes1 / lanes2: the same plus 1 / 2, the window's next columns); `full`: all four lanes (plain
 * gathers), else the lanes of k (zeroing ones). */
static inline __attribute__((always_inline)) int32x4_t sums_3x3(const int8_t *r, int32_t wp, kb_w9 w,
                                                                uint32x4_t lanes0, uint32x4_t lanes1,
                                                                uint32x4_t lanes2, int full, mve_pred16_t k)
{
#define KB_DW_TAP(acc, row, off, wt)                                                                             \
    vmlaq_n_s32(acc, full ? vldrbq_gather_offset_s32(row, off) : vldrbq_gather_offset_z_s32(row, off, k), wt)
    const int8_t *b = r + wp, *c = b + wp;
    int32x4_t acc = vmulq_n_s32(full ? vldrbq_gather_offset_s32(r, lanes0) : vldrbq_gather_offset_z_s32(r, lanes0, k),
                                w.w0);
    acc = KB_DW_TAP(acc, r, lanes1, w.w1), acc = KB_DW_TAP(acc, r, lanes2, w.w2);
    acc = KB_DW_TAP(acc, b, lanes0, w.w3), acc = KB_DW_TAP(acc, b, lanes1, w.w4);
    acc = KB_DW_TAP(acc, b, lanes2, w.w5), acc = KB_DW_TAP(acc, c, lanes0, w.w6);
    acc = KB_DW_TAP(acc, c, lanes1, w.w7), acc = KB_DW_TAP(acc, c, lanes2, w.w8);
#undef KB_DW_TAP
    return acc;
}

/* One channel of a 3x3 window (dilation 1) from its plane. Lanes are four outputs of a row (`across`) or of a column
 * (four rows), whichever leaves fewer lanes idle on this map; each lane reads its taps with gathers. */
static __attribute__((noinline)) void channel_3x3(const kb_conv_params *p, const int8_t *plane, int32_t wp,
                                                  const int32_t *wt, int32_t b, int32_t mult, int32_t shift,
                                                  int8_t *out, int across)
{
    const kb_w9 w = {wt[0], wt[1], wt[2], wt[3], wt[4], wt[5], wt[6], wt[7], wt[8]};
    const int32_t cs = p->out_cstride, lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset;
    const int32_t sh = p->stride_h, sw = p->stride_w, oh = p->out_h, ow = p->out_w;
    /* the lane direction's step in the plane and in the output, and the other direction's */
    const int32_t lane_in = across ? sw : sh * wp, lane_out = across ? cs : p->out_row * cs;
    const int32_t step_in = across ? sh * wp : sw, step_out = across ? p->out_row * cs : cs;
    const int32_t lines = across ? oh : ow, span = across ? ow : oh;
    const uint32x4_t lanes0 = lanes(lane_in), ooffs = lanes(lane_out);
    const uint32x4_t lanes1 = vaddq_n_u32(lanes0, 1), lanes2 = vaddq_n_u32(lanes0, 2);
    for (int32_t line = 0; line < lines; ++line) {
        const int8_t *r = plane + line * step_in;
        int8_t *o = out + line * step_out;
        int32_t i = 0;
        for (; i + 4 <= span; i += 4) {
            const int32x4_t acc = sums_3x3(r + i * lane_in, wp, w, lanes0, lanes1, lanes2, 1, 0xffff);
            vstrbq_scatter_offset_s32(o + i * lane_out, ooffs, kb_mve_rq4(acc, b, mult, shift, lo, hi, p->out_offset));
        }
        if (i < span) {
            const mve_pred16_t k = vctp32q((uint32_t)(span - i));
            const int32x4_t acc = sums_3x3(r + i * lane_in, wp, w, lanes0, lanes1, lanes2, 0, k);
            vstrbq_scatter_offset_p_s32(o + i * lane_out, ooffs,
                                        kb_mve_rq4(acc, b, mult, shift, lo, hi, p->out_offset), k);
        }
    }
}

/* Channel c of the input into a transposed plane (hp bytes a column: planeT[x][y]), padding as zp. */
static void fill_plane_t(const kb_conv_params *p, const int8_t *in, int32_t c, int8_t *plane, int32_t hp, int8_t zp)
{
    kb_mve_fill(plane, zp, (p->in_w + p->pad_l + p->pad_r) * hp);
    const int32_t pitch = p->in_row * p->in_cstride;
    int8_t *dst = plane + p->pad_l * hp + p->pad_t;
    for (int32_t y = 0; y < p->in_h; ++y, ++dst) {
        kb_mve_gather_t(dst, in + y * pitch + c, p->in_w, p->in_cstride, hp);
    }
}

#define KB_DW3_LANES 64  /* outputs per kb_mve_dw3_sums call: the sums' stack buffer */

/* One channel of a 3x3 window (dilation 1) whose lanes are one plane byte apart: along each line of `plane` (pitch
 * wp, lines line_in apart), kb_mve_dw3_sums (assembly, weights w in the plane's orientation) into a stack buffer,
 * then the sums requantised four at a time and scattered to the outputs (lane_out apart, lines line_out apart). */
static __attribute__((noinline)) void channel_3x3_lines(const kb_conv_params *p, const int8_t *plane, int32_t wp,
                                                        const int32_t *w, int32_t lines, int32_t span,
                                                        int32_t line_in, int8_t *out, int32_t lane_out,
                                                        int32_t line_out, int32_t b, int32_t mult, int32_t shift)
{
    const int32_t lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset, zo = p->out_offset;
    const uint32x4_t ooffs = lanes(lane_out);
    int32_t sums[KB_DW3_LANES] __attribute__((aligned(4)));
    for (int32_t line = 0; line < lines; ++line) {
        for (int32_t i0 = 0; i0 < span; i0 += KB_DW3_LANES) {
            const int32_t n = span - i0 < KB_DW3_LANES ? span - i0 : KB_DW3_LANES;
            kb_mve_dw3_sums(plane + line * line_in + i0, wp, (n + 3) / 4, w, sums);
            int8_t *o = out + line * line_out + i0 * lane_out;
            if (shift < 0) {
                for (int32_t i = 0; i < n; i += 4) {
                    const int32x4_t y = kb_mve_rq4_right(vldrwq_s32(sums + i), b, mult, shift, lo, hi, zo);
                    vstrbq_scatter_offset_p_s32(o + i * lane_out, ooffs, y, vctp32q((uint32_t)(n - i)));
                }
                continue;
            }
            for (int32_t i = 0; i < n; i += 4) {
                const int32x4_t y = kb_mve_rq4(vldrwq_s32(sums + i), b, mult, shift, lo, hi, zo);
                vstrbq_scatter_offset_p_s32(o + i * lane_out, ooffs, y, vctp32q((uint32_t)(n - i)));
            }
        }
    }
}

/* Whether rows (four outputs across) leave no more lanes idle than columns do. */
static int lanes_across(const kb_conv_params *p)
{
    const int32_t across = p->out_h * ((p->out_w + 3) / 4), down = p->out_w * ((p->out_h + 3) / 4);
    return across <= down;
}

/* -- four channels at a time through a ring of three padded input rows (3x3, in place) ----------------------------- */

#define KB_DW_RING_PIXEL_BYTES 12  /* three rows x four channel bytes: ops/conv_kernels.py MVE_RING_BYTES_PER_PIXEL */
#define KB_DW_RING_BYTES(wp) (KB_DW_RING_PIXEL_BYTES * (wp))
#define KB_DW_RING_MAX_PIXELS 256  /* measured on MLPerf VWW / KWS under the beat model (docs/benchmarks.md) */

/* One line of the ring (channels c .. c + 3, four bytes a pixel, zp outside the input): padded row `line` when
 * `across`, else padded column `line` (a transposed ring). */
static void ring_line(const kb_conv_params *p, const int8_t *in, int32_t c, int32_t line, int8_t *slot, int across,
                      int8_t zp)
{
    const int32_t row_bytes = p->in_row * p->in_cstride;
    const int32_t n = across ? p->in_w : p->in_h, lo = across ? p->pad_l : p->pad_t, hi = across ? p->pad_r : p->pad_b;
    const int32_t i = line - (across ? p->pad_t : p->pad_l), lines = across ? p->in_h : p->in_w;
    const int32_t step = across ? p->in_cstride : row_bytes;  /* source bytes between the line's pixels */
    if (i < 0 || i >= lines) {
        kb_mve_fill(slot, zp, 4 * (lo + n + hi));
        return;
    }
    kb_mve_fill(slot, zp, 4 * lo);
    const int8_t *src = in + (across ? i * row_bytes : i * p->in_cstride) + c;
    int8_t *dst = slot + 4 * lo;
    for (int32_t x = 0; x < n; ++x, src += step, dst += 4) {
        memcpy(dst, src, 4);
    }
    kb_mve_fill(dst, zp, 4 * hi);
}

/* How a 3x3 call runs four channels at a time through a ring of three padded lines, or 0: 1, lines are rows; 2, lines
 * are columns (stride 1 only), chosen when the map is taller than wide (fewer, longer lines) and the scratch holds
 * the column ring. In place it also needs every output line to be written after the input lines it overwrites are
 * in the ring (stride 1 on the same map, or stride 2 on a map at least twice as wide), and a map of at most
 * KB_DW_RING_MAX_PIXELS outputs (on larger ones the plane path's lanes along a channel's rows cost less). */
static int ring_mode(const kb_conv_params *p, int in_place)
{
    const int32_t wp = p->in_w + p->pad_l + p->pad_r, hp = p->in_h + p->pad_t + p->pad_b;
    int s1 = p->stride_h == 1 && p->stride_w == 1, s2 = p->stride_h == 2 && p->stride_w == 2;
    if (p->in_c < 4) {
        return 0;
    }
    if (in_place) {
        if (p->out_h * p->out_w > KB_DW_RING_MAX_PIXELS) {
            return 0;
        }
        s1 = s1 && p->out_row == p->in_row && p->pad_t <= 2 && p->pad_l <= 2;
        s2 = s2 && 2 * p->out_row <= p->in_row;
    }
    if (s1 && p->out_h > p->out_w && p->scratch_bytes >= KB_DW_RING_BYTES(hp)) {
        return 2;
    }
    return (s1 || s2) && p->scratch_bytes >= KB_DW_RING_BYTES(wp) ? 1 : 0;
}

/* Channels c .. c + 3, output line by output line (rows when `across`, else columns through a transposed ring),
 * KB_DW3_LANES outputs at a time: the sums by kb_mve_dw3_quads (assembly), then requantised four channels per
 * vector with each channel's own multiplier and shift. */
static __attribute__((noinline)) void ring_group(const kb_conv_params *p, const int8_t *in, const int8_t *w,
                                                 const int32_t *bias, const int32_t *mult, const int32_t *shift,
                                                 int8_t *out, int8_t *ring, int32_t c, int across)
{
    const int8_t zp = (int8_t)-p->in_offset;
    const int32_t cs = p->out_cstride, C = p->in_c;
    const int32_t len = across ? p->in_w + p->pad_l + p->pad_r : p->in_h + p->pad_t + p->pad_b;  /* pixels a line */
    const int32_t n_lines = across ? p->in_h + p->pad_t + p->pad_b : p->in_w + p->pad_l + p->pad_r;
    const int32_t lines = across ? p->out_h : p->out_w, span = across ? p->out_w : p->out_h;
    const int32_t line_step = across ? p->stride_h : p->stride_w, lane_step = across ? p->stride_w : p->stride_h;
    const int32_t line_out = across ? p->out_row * cs : cs, lane_out = across ? cs : p->out_row * cs;
    const int32x4_t lo = vdupq_n_s32(p->act_min - p->out_offset), hi = vdupq_n_s32(p->act_max - p->out_offset);
    int32_t wv[9][4] __attribute__((aligned(16)));
    int32x4_t wsum = vdupq_n_s32(0);
    for (int32_t t = 0; t < 9; ++t) {  /* tap t = (ky, kx); a transposed ring takes it at (kx, ky) */
        const int32x4_t v = vldrbq_s32(w + t * C + c);
        vstrwq_s32(wv[across ? t : 3 * (t % 3) + t / 3], v);
        wsum = vaddq_s32(wsum, v);
    }
    const int32x4_t base = vmlaq_n_s32(vldrwq_s32(bias + c), wsum, p->in_offset);
    const int32x4_t mu = vldrwq_s32(mult + c), sh = vldrwq_s32(shift + c);
    const int32x4_t neg_right = vminq_s32(sh, vdupq_n_s32(0));
    const int right = shift[c] < 0 && shift[c + 1] < 0 && shift[c + 2] < 0 && shift[c + 3] < 0;
    const int32_t zo = p->out_offset;
    int32_t sums[4 * KB_DW3_LANES] __attribute__((aligned(16)));
    int32_t loaded = 0;  /* padded lines in the ring: 0 .. loaded - 1 (the last three kept) */
    for (int32_t line = 0; line < lines; ++line) {
        const int32_t l0 = line * line_step;
        for (; loaded < l0 + 3 && loaded < n_lines; ++loaded) {
            ring_line(p, in, c, loaded, ring + (loaded % 3) * 4 * len, across, zp);
        }
        const int8_t *rows[3] = {ring + (l0 % 3) * 4 * len, ring + ((l0 + 1) % 3) * 4 * len,
                                 ring + ((l0 + 2) % 3) * 4 * len};
        int8_t *o = out + line * line_out + c;
        for (int32_t x0 = 0; x0 < span; x0 += KB_DW3_LANES) {
            const int32_t n = span - x0 < KB_DW3_LANES ? span - x0 : KB_DW3_LANES;
            const int8_t *const at[3] = {rows[0] + 4 * lane_step * x0, rows[1] + 4 * lane_step * x0,
                                         rows[2] + 4 * lane_step * x0};
            kb_mve_dw3_quads(at, 4 * lane_step, n, wv, sums);
            if (right) {  /* every channel shifts right only: no left shift, no mask in the ties fix-up */
                for (int32_t i = 0; i < n; ++i, o += lane_out) {
                    int32x4_t v = vqrdmulhq_s32(vaddq_s32(vldrwq_s32(sums + 4 * i), base), mu);
                    v = vrshlq_s32(vqaddq_s32(v, vshrq_n_s32(v, 31)), neg_right);
                    vstrbq_s32(o, vaddq_n_s32(vminq_s32(vmaxq_s32(v, lo), hi), zo));
                }
                continue;
            }
            for (int32_t i = 0; i < n; ++i, o += lane_out) {
                vstrbq_s32(o, kb_mve_rq_lanes(vaddq_s32(vldrwq_s32(sums + 4 * i), base), mu, sh, lo, hi, zo));
            }
        }
    }
}

static inline __attribute__((always_inline)) void inplace_kxk(const kb_conv_params *p, const int8_t *in,
                                                              const int8_t *w, const int32_t *bias,
                                                              const int32_t *mult, const int32_t *shift,
                                                              int8_t *out, int8_t *scratch, int32_t kk)
{
    const int32_t kh = kk ? kk : p->k_h, kw = kk ? kk : p->k_w, taps = kh * kw;
    const int32_t wp = p->in_w + p->pad_l + p->pad_r, cs = p->out_cstride;
    const int32_t lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset;
    const uint32x4_t soffs = lanes(p->stride_w), ooffs = lanes(cs);
    const int8_t zp = (int8_t)-p->in_offset;
    int32_t wt[taps];  /* the channel's weights (at most 7 x 7 in the fixed-size entries) */
    const int across = lanes_across(p);
    /* 3x3: lanes along the plane's rows (stride 1 across), or down its columns through a transposed plane (stride 1
     * down), whichever leaves fewer lanes idle; else (stride 2 both ways, other windows) the gathering C loops */
    const int rows = kk == 3 && p->stride_w == 1 && (across || p->stride_h != 1);
    const int cols = kk == 3 && !rows && p->stride_h == 1;
    const int32_t hp = p->in_h + p->pad_t + p->pad_b;
    int32_t c = 0;
    /* small maps four channels at a time (no per-channel plane and set-up), the last in_c % 4 channel by channel
     * below; on maps of more than KB_DW_RING_MAX_PIXELS outputs the lanes along a channel's rows cost less */
    const int mode = kk == 3 ? ring_mode(p, 1) : 0;
    if (mode) {
        for (; c + 4 <= p->in_c; c += 4) {
            ring_group(p, in, w, bias, mult, shift, out, scratch, c, mode == 1);
        }
    }
    for (; c < p->in_c; ++c) {
        if (cols) {
            fill_plane_t(p, in, c, scratch, hp, zp);
        } else {
            fill_plane(p, in, c, scratch, wp, zp);
        }
        int32_t wsum = 0;
        for (int32_t t = 0; t < taps; ++t) {
            wt[t] = w[t * p->in_c + c];
            wsum += wt[t];
        }
        const int32_t b = (int32_t)((uint32_t)bias[c] + (uint32_t)p->in_offset * (uint32_t)wsum);
        if (rows) {
            channel_3x3_lines(p, scratch, wp, wt, p->out_h, p->out_w, p->stride_h * wp, out + c, cs,
                              p->out_row * cs, b, mult[c], shift[c]);
            continue;
        }
        if (cols) {  /* the window transposed too */
            const int32_t wt_t[9] = {wt[0], wt[3], wt[6], wt[1], wt[4], wt[7], wt[2], wt[5], wt[8]};
            channel_3x3_lines(p, scratch, hp, wt_t, p->out_w, p->out_h, p->stride_w * hp, out + c,
                              p->out_row * cs, cs, b, mult[c], shift[c]);
            continue;
        }
        if (kk == 3) {  /* the fixed-size entries have dilation 1 */
            channel_3x3(p, scratch, wp, wt, b, mult[c], shift[c], out + c, across);
            continue;
        }
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int8_t *r = scratch + oy * p->stride_h * wp;
            int8_t *o = out + oy * p->out_row * cs + c;
            int32_t ox = 0;
            for (; ox + 4 <= p->out_w; ox += 4) {
                const int32x4_t acc = plane_sums(p, r + ox * p->stride_w, wp, wt, kh, kw, soffs, 0xffff);
                vstrbq_scatter_offset_s32(o + ox * cs, ooffs, kb_mve_rq4(acc, b, mult[c], shift[c], lo, hi,
                                                                         p->out_offset));
            }
            if (ox < p->out_w) {
                const mve_pred16_t k = vctp32q((uint32_t)(p->out_w - ox));
                const int32x4_t acc = plane_sums(p, r + ox * p->stride_w, wp, wt, kh, kw, soffs, k);
                vstrbq_scatter_offset_p_s32(o + ox * cs, ooffs, kb_mve_rq4(acc, b, mult[c], shift[c], lo, hi,
                                                                           p->out_offset), k);
            }
        }
    }
}

KB_DEPTHWISE_INPLACE_KXK(3)
KB_DEPTHWISE_INPLACE_KXK(5)
KB_DEPTHWISE_INPLACE_KXK(7)

void kb_depthwise_inplace(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    inplace_kxk(p, in, w, bias, mult, shift, out, scratch, 0);
}

/* Out of place, any window: each tap's lanes that fall inside the input are read (zeroing gathers) and offset. */
static void direct_channels(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                            const int32_t *mult, const int32_t *shift, int8_t *out, int32_t c_lo);

void kb_depthwise(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                  const int32_t *mult, const int32_t *shift, int8_t *out)
{
    direct_channels(p, in, w, bias, mult, shift, out, 0);
}

/* Channels c_lo .. in_c, out of place, straight from the input. */
static void direct_channels(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                            const int32_t *mult, const int32_t *shift, int8_t *out, int32_t c_lo)
{
    const int32_t ics = p->in_cstride, ocs = p->out_cstride;
    const int32_t lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset;
    const uint32x4_t ioffs = lanes(p->stride_w * ics), ooffs = lanes(ocs);
    const int32x4_t step = vmulq_n_s32(vreinterpretq_s32_u32(vidupq_n_u32(0, 1)), p->stride_w);
    for (int32_t c = c_lo; c < p->in_c; ++c) {
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            const int32_t iy0 = oy * p->stride_h - p->pad_t;
            int8_t *o = out + oy * p->out_row * ocs + c;
            for (int32_t ox = 0; ox < p->out_w; ox += 4) {
                const mve_pred16_t tail = vctp32q((uint32_t)(p->out_w - ox));
                const int32_t ix0 = ox * p->stride_w - p->pad_l;
                int32x4_t acc = vdupq_n_s32(0);
                for (int32_t ky = 0; ky < p->k_h; ++ky) {
                    const int32_t iy = iy0 + ky * p->dil_h;
                    if (iy < 0 || iy >= p->in_h) {
                        continue;
                    }
                    const int8_t *row = in + iy * p->in_row * ics + c;
                    for (int32_t kx = 0; kx < p->k_w; ++kx) {
                        const int32_t ix = ix0 + kx * p->dil_w;
                        const int32x4_t xs = vaddq_n_s32(step, ix);
                        const mve_pred16_t k = tail & vcmpgeq_n_s32(xs, 0) & vcmpltq_n_s32(xs, p->in_w);
                        int32x4_t v = vldrbq_gather_offset_z_s32(row + ix * ics, ioffs, k);
                        v = vaddq_m_n_s32(v, v, p->in_offset, k);
                        acc = vmlaq_n_s32(acc, v, w[(ky * p->k_w + kx) * p->in_c + c]);
                    }
                }
                vstrbq_scatter_offset_p_s32(o + ox * ocs, ooffs, kb_mve_rq4(acc, bias[c], mult[c], shift[c], lo, hi,
                                                                            p->out_offset), tail);
            }
        }
    }
}

/* Out of place: four channels at a time through the ring where the planner granted one (mve_ring_bytes), any map
 * size (no in-place order to keep: rows, or columns on a map taller than wide at stride 1), the last in_c % 4
 * channels and calls without it straight from the input. */
void kb_depthwise_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    const int mode = scratch != NULL ? ring_mode(p, 0) : 0;
    int32_t c = 0;
    if (mode) {
        for (; c + 4 <= p->in_c; c += 4) {
            ring_group(p, in, w, bias, mult, shift, out, scratch, c, mode == 1);
        }
    }
    if (c < p->in_c) {
        direct_channels(p, in, w, bias, mult, shift, out, c);
    }
}
