/* Kilobyte runtime, Cortex-M55 Helium (MVE): what the conv files (kb_conv.c, kb_sparse_conv.c) share — the windows
 * of output pixels, four at a time, as int8 columns (im2col, padding = the input's zero point), and the requantisation
 * of a table of sums four channels at a time. Static functions: each file that includes this has its own copy. */
#ifndef KB_MVE_WINDOW_H
#define KB_MVE_WINDOW_H

#include <arm_mve.h>

#include "kilobyte.h"
#include "kb_mve_conv4.h"

#define KB_MVE_ALL_RIGHT 2  /* kb_mve_shift_form: every channel shifts right */

/* The valid range [*k0, *k1) of a window axis starting at input index i0 with `k` taps `dil` apart in `size`. */
static inline void valid(int32_t i0, int32_t k, int32_t dil, int32_t size, int32_t *k0, int32_t *k1)
{
    int32_t a = 0, b = k;
    while (a < b && i0 + a * dil < 0) {
        ++a;
    }
    while (b > a && i0 + (b - 1) * dil >= size) {
        --b;
    }
    *k0 = a, *k1 = b;
}

/* The window of a pixel whose valid taps are ky0 <= ky < ky1, kx0 <= kx < kx1 and whose tap (0, 0) is at `origin`, as
 * kh * kw * in_c int8 values at col, padded taps as the zero point `zp`: the rows above and below in one fill each,
 * each valid row one copy when its taps are one run (dense input, dilation 1 across), else one per tap. */
static void window_column(const kb_conv_params *p, const int8_t *origin, int32_t ky0, int32_t ky1, int32_t kx0,
                          int32_t kx1, int8_t zp, int8_t *col)
{
    const int32_t cin = p->in_c, row_k = p->k_w * cin;
    const int32_t row_pitch = p->dil_h * p->in_row * p->in_cstride, tap_pitch = p->dil_w * p->in_cstride;
    if (kx0 >= kx1) {
        ky1 = ky0;
    }
    kb_mve_fill(col, zp, ky0 * row_k);
    const int run = p->dil_w == 1 && p->in_cstride == cin;
    const int32_t head = kx0 * cin, body = (kx1 - kx0) * cin, tail = row_k - head - body;
    for (int32_t ky = ky0; ky < ky1; ++ky) {
        int8_t *dst = col + ky * row_k;
        const int8_t *src = origin + ky * row_pitch;
        if (head) {
            kb_mve_fill(dst, zp, head);
        }
        if (run) {
            kb_mve_copy(dst + head, src + kx0 * tap_pitch, body);
        } else {
            for (int32_t kx = kx0; kx < kx1; ++kx) {
                kb_mve_copy(dst + kx * cin, src + kx * tap_pitch, cin);
            }
        }
        if (tail) {
            kb_mve_fill(dst + head + body, zp, tail);
        }
    }
    kb_mve_fill(col + ky1 * row_k, zp, (p->k_h - ky1) * row_k);
}

/* What a group of up to `group` (3, 4 or 6) output pixels hands on: their columns (k int8 values each; the unused ones
 * repeat the first) and their output byte offsets. */
#define KB_MVE_GROUP_MAX 6  /* the largest group: two three-column passes of a 1x1 conv */
typedef void kb_mve_group_fn(void *ctx, const int8_t *const col[KB_MVE_GROUP_MAX],
                             const uint32_t offs[KB_MVE_GROUP_MAX], int32_t npx);

/* Every output pixel in raster order, `group` at a time: a 1x1 window without padding (`direct`) is the input pixel
 * itself, any other is copied into scratch (`group` columns of k = kh * kw * in_c bytes: an interior window in one
 * kb_mve_copy_rows call, a border one by window_column). */
static void kb_mve_groups(const kb_conv_params *p, const int8_t *in, int8_t *scratch, int direct, int32_t group,
                          kb_mve_group_fn *fn, void *ctx)
{
    /* the parameters in locals: the stores into offs (uint32_t) may alias *p's int32 fields for the compiler */
    const int32_t k_h = p->k_h, k_w = p->k_w, in_c = p->in_c, cs = p->in_cstride, in_h = p->in_h, in_w = p->in_w;
    const int32_t sh = p->stride_h, sw = p->stride_w, dh = p->dil_h, dw = p->dil_w, pad_t = p->pad_t;
    const int32_t pad_l = p->pad_l, in_row = p->in_row, out_row = p->out_row, ocs = p->out_cstride;
    const int32_t out_h = p->out_h, out_w = p->out_w;
    const int32_t k = k_h * k_w * in_c, run = k_w * in_c;
    const int8_t zp = (int8_t)-p->in_offset;
    const int rows_whole = dw == 1 && cs == in_c;  /* a window row is one run */
    const int32_t row_pitch = dh * in_row * cs;
    /* the output columns whose windows lie inside the input across: ox_lo <= ox < ox_hi */
    int32_t ox_lo = 0, ox_hi = out_w;
    while (ox_lo < out_w && ox_lo * sw - pad_l < 0) {
        ++ox_lo;
    }
    while (ox_hi > ox_lo && (ox_hi - 1) * sw - pad_l + (k_w - 1) * dw >= in_w) {
        --ox_hi;
    }
    const int8_t *col[KB_MVE_GROUP_MAX];
    uint32_t offs[KB_MVE_GROUP_MAX];
    int32_t n = 0;
    for (int32_t oy = 0; oy < out_h; ++oy) {
        const int32_t iy0 = oy * sh - pad_t;
        int32_t ky0, ky1;
        valid(iy0, k_h, dh, in_h, &ky0, &ky1);
        const int whole = rows_whole && ky0 == 0 && ky1 == k_h;
        const int8_t *origin = in + (iy0 * in_row - pad_l) * cs;
        uint32_t at = (uint32_t)(oy * out_row * ocs);
        for (int32_t ox = 0; ox < out_w; ++ox, origin += sw * cs, at += (uint32_t)ocs) {
            if (direct) {
                col[n] = origin;
            } else {
                int8_t *dst = scratch + n * k;
                col[n] = dst;
                if (whole && ox >= ox_lo && ox < ox_hi) {  /* an interior window: kh runs */
                    kb_mve_copy_rows(dst, origin, k_h, run, row_pitch);
                } else {
                    int32_t kx0 = 0, kx1 = k_w;
                    valid(ox * sw - pad_l, k_w, dw, in_w, &kx0, &kx1);
                    window_column(p, origin, ky0, ky1, kx0, kx1, zp, dst);
                }
            }
            offs[n++] = at;
            if (n == group) {
                fn(ctx, col, offs, group);
                n = 0;
            }
        }
    }
    if (n > 0) {
        for (int32_t j = n; j < KB_MVE_GROUP_MAX; ++j) {
            col[j] = col[0], offs[j] = offs[0];
        }
        fn(ctx, col, offs, n);
    }
}

/* Requantise sums (a table of KB_MVE_DOT4_CHANNELS columns) for pixels j < npx (output bytes out + offs[j]) and
 * channels c0 .. c0 + n, four channels of a pixel at a time: per-lane bias (NULL: the sums hold it already) (+
 * in_offset * wsum when wsum is given; the sparse convs' bias is folded), shifts and multipliers (kb_mve_requant.h's steps, by vector), one VSTRB.32 of
 * four channels (the last four predicated). `left` (kb_mve_shift_form): 1, some channel shifts left; 0, the left
 * shift is left out (TFLite's per-channel multipliers are below one: the usual case); KB_MVE_ALL_RIGHT, also the
 * ties fix-up's mask. */
static inline __attribute__((always_inline)) void requant_quads(const kb_conv_params *p,
                                                                 const int32_t (*sums)[KB_MVE_DOT4_CHANNELS],
                                                                 const int32_t *wsum, int32_t n, int32_t npx,
                                                                 const uint32_t *offs, int32_t c0,
                                                                 const int32_t *bias, const int32_t *mult,
                                                                 const int32_t *shift, int8_t *out, int left,
                                                                 int right)
{
    const int32x4_t lo = vdupq_n_s32(p->act_min - p->out_offset), hi = vdupq_n_s32(p->act_max - p->out_offset);
    const int32x4_t zero = vdupq_n_s32(0);
    const int32_t zo = p->out_offset, in_offset = p->in_offset;
    for (int32_t q = 0; q < n; q += 4) {
        const mve_pred16_t k = vctp32q((uint32_t)(n - q));
        const int32x4_t sh = vldrwq_z_s32(shift + c0 + q, k);
        const int32x4_t shl = vmaxq_s32(sh, zero), neg_right = vminq_s32(sh, zero);
        const int32x4_t mu = vldrwq_z_s32(mult + c0 + q, k);
        int32x4_t base = vdupq_n_s32(0);
        if (bias != NULL) {
            base = vldrwq_z_s32(bias + c0 + q, k);
        }
        if (wsum != NULL) {
            base = vmlaq_n_s32(base, vldrwq_s32(wsum + q), in_offset);
        }
        int8_t *o = out + c0 + q;
        for (int32_t j = 0; j < npx; ++j) {
            int32x4_t v = vldrwq_s32(&sums[j][q]);
            if (bias != NULL || wsum != NULL) {
                v = vaddq_s32(v, base);
            }
            v = vqrdmulhq_s32(left ? vshlq_s32(v, shl) : v, mu);
            const int32x4_t fix = right ? vshrq_n_s32(v, 31) : vshrq_n_s32(vandq_s32(v, neg_right), 31);
            v = vrshlq_s32(vqaddq_s32(v, fix), neg_right);
            v = vaddq_n_s32(vminq_s32(vmaxq_s32(v, lo), hi), zo);
            vstrbq_p_s32(o + offs[j], v, k);
        }
    }
}

static inline __attribute__((always_inline)) void kb_mve_requant_table(const kb_conv_params *p,
                                                                       const int32_t (*sums)[KB_MVE_DOT4_CHANNELS],
                                                                       const int32_t *wsum, int32_t n, int32_t npx,
                                                                       const uint32_t *offs, int32_t c0,
                                                                       const int32_t *bias, const int32_t *mult,
                                                                       const int32_t *shift, int8_t *out, int left)
{
    if (left == KB_MVE_ALL_RIGHT) {
        requant_quads(p, sums, wsum, n, npx, offs, c0, bias, mult, shift, out, 0, 1);
    } else if (left) {
        requant_quads(p, sums, wsum, n, npx, offs, c0, bias, mult, shift, out, 1, 0);
    } else {
        requant_quads(p, sums, wsum, n, npx, offs, c0, bias, mult, shift, out, 0, 0);
    }
}

/* The n channels' shifts, once per call: 1 if some shifts left, KB_MVE_ALL_RIGHT if every one shifts right
 * (shift < 0: the ties fix-up needs no mask, kb_mve_divide), else 0. */
static int kb_mve_shift_form(const int32_t *shift, int32_t n)
{
    int any = 0, all_right = 1;
    for (int32_t c = 0; c < n; ++c) {
        any |= shift[c] > 0;
        all_right &= shift[c] < 0;
    }
    return any ? 1 : all_right ? KB_MVE_ALL_RIGHT : 0;
}

#endif /* KB_MVE_WINDOW_H */
