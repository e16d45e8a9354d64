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

#include "kilobyte.h"
#include "kb_mve_conv4.h"
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
    const uint32x4_t offs = lanes(p->in_cstride);
    for (int32_t y = 0; y < p->in_h; ++y) {
        const int8_t *src = in + y * p->in_row * p->in_cstride + c;
        int8_t *dst = plane + (y + p->pad_t) * wp + p->pad_l;
        for (int32_t x = 0; x < p->in_w; x += 4) {
            const mve_pred16_t k = vctp32q((uint32_t)(p->in_w - x));
            vstrbq_p_s32(dst + x, vldrbq_gather_offset_z_s32(src + x * p->in_cstride, offs, k), k);
        }
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

/* `full`: all four lanes (plain loads), else the lanes of k (zeroing loads). */
static inline __attribute__((always_inline)) int32x4_t sums_3x3(const int8_t *t, int32_t wp, kb_w9 w, int32_t sw,
                                                                uint32x4_t soffs, int full, mve_pred16_t k)
{
#define KB_DW_LOAD(at)                                                                                   \
    (sw == 1 ? (full ? vldrbq_s32(at) : vldrbq_z_s32(at, k))                                             \
             : (full ? vldrbq_gather_offset_s32(at, soffs) : vldrbq_gather_offset_z_s32(at, soffs, k)))
    const int8_t *b = t + wp, *c = b + wp;
    int32x4_t acc = vmulq_n_s32(KB_DW_LOAD(t), w.w0);
    acc = vmlaq_n_s32(acc, KB_DW_LOAD(t + 1), w.w1), acc = vmlaq_n_s32(acc, KB_DW_LOAD(t + 2), w.w2);
    acc = vmlaq_n_s32(acc, KB_DW_LOAD(b), w.w3), acc = vmlaq_n_s32(acc, KB_DW_LOAD(b + 1), w.w4);
    acc = vmlaq_n_s32(acc, KB_DW_LOAD(b + 2), w.w5), acc = vmlaq_n_s32(acc, KB_DW_LOAD(c), w.w6);
    acc = vmlaq_n_s32(acc, KB_DW_LOAD(c + 1), w.w7), acc = vmlaq_n_s32(acc, KB_DW_LOAD(c + 2), w.w8);
#undef KB_DW_LOAD
    return acc;
}

/* Every output row of one channel of a 3x3 window (dilation 1) at horizontal stride sw (a constant when inlined). */
static inline __attribute__((always_inline)) void rows_3x3(const kb_conv_params *p, const int8_t *plane, int32_t wp,
                                                           const int32_t *wt, int32_t b, int32_t mult, int32_t shift,
                                                           int8_t *out, int32_t sw)
{
    const kb_w9 w = {wt[0], wt[1], wt[2], wt[3], wt[4], wt[5], wt[6], wt[7], wt[8]};
    const int32_t cs = p->out_cstride, lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset;
    const uint32x4_t soffs = lanes(sw), ooffs = lanes(cs);
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int8_t *r = plane + oy * p->stride_h * wp;
        int8_t *o = out + oy * p->out_row * cs;
        int32_t ox = 0;
        for (; ox + 4 <= p->out_w; ox += 4) {
            const int32x4_t acc = sums_3x3(r + ox * sw, wp, w, sw, soffs, 1, 0xffff);
            vstrbq_scatter_offset_s32(o + ox * cs, ooffs, kb_mve_rq4(acc, b, mult, shift, lo, hi, p->out_offset));
        }
        if (ox < p->out_w) {
            const mve_pred16_t k = vctp32q((uint32_t)(p->out_w - ox));
            const int32x4_t acc = sums_3x3(r + ox * sw, wp, w, sw, soffs, 0, k);
            vstrbq_scatter_offset_p_s32(o + ox * cs, ooffs, kb_mve_rq4(acc, b, mult, shift, lo, hi, p->out_offset),
                                        k);
        }
    }
}

static __attribute__((noinline)) void rows_3x3_s1(const kb_conv_params *p, const int8_t *plane, int32_t wp,
                                                  const int32_t *w, int32_t b, int32_t mult, int32_t shift,
                                                  int8_t *out)
{
    rows_3x3(p, plane, wp, w, b, mult, shift, out, 1);
}

static __attribute__((noinline)) void rows_3x3_s2(const kb_conv_params *p, const int8_t *plane, int32_t wp,
                                                  const int32_t *w, int32_t b, int32_t mult, int32_t shift,
                                                  int8_t *out)
{
    rows_3x3(p, plane, wp, w, b, mult, shift, out, 2);
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
    for (int32_t c = 0; c < p->in_c; ++c) {
        fill_plane(p, in, c, scratch, wp, zp);
        int32_t wsum = 0;
        for (int32_t t = 0; t < taps; ++t) {
            wt[t] = w[t * p->in_c + c];
            wsum += wt[t];
        }
        const int32_t b = (int32_t)((uint32_t)bias[c] + (uint32_t)p->in_offset * (uint32_t)wsum);
        if (kk == 3 && (p->stride_w == 1 || p->stride_w == 2)) {  /* the fixed-size entries have dilation 1 */
            (p->stride_w == 1 ? rows_3x3_s1 : rows_3x3_s2)(p, scratch, wp, wt, b, mult[c], shift[c], out + c);
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
void kb_depthwise(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                  const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t ics = p->in_cstride, ocs = p->out_cstride;
    const int32_t lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset;
    const uint32x4_t ioffs = lanes(p->stride_w * ics), ooffs = lanes(ocs);
    const int32x4_t step = vmulq_n_s32(vreinterpretq_s32_u32(vidupq_n_u32(0, 1)), p->stride_w);
    for (int32_t c = 0; c < p->in_c; ++c) {
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

void kb_depthwise_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    (void)scratch;
    kb_depthwise(p, in, w, bias, mult, shift, out);
}
