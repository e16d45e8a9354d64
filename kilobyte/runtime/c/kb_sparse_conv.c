/* Kilobyte runtime: int8 CONV_2D on sparse weights — DTMM's filterlet format (FWCS) and the CSR baseline.
 *
 * Formats (kilobyte/ops/sparse.py): a filterlet is the in_c weights of one filter at one window tap (OHWI).
 *   FWCS: arr = the kept filterlets' weights, filter after filter; cptr[j] = offset of kept filterlet j within its
 *         filter, (ky * k_w + kx) * in_c; filter n owns cptr[fidx[n] .. fidx[n + 1]) (fidx has out_c + 1 entries).
 *   CSR:  arr = the nonzero weights; idx[i] = offset of weight i within its filter; filter n owns arr[fidx[n] ..
 *         fidx[n + 1]).
 * bias: the folded bias, bias[n] - zp_in * sum(w[n]) (computed by the code generator, wrapping): the kernels
 * multiply raw int8 inputs, and a padded tap holds the value zp_in, so it contributes w * zp_in, which the folded
 * term cancels — exactly TFLite skipping padded taps (sum over in-image taps of w * (x - zp_in)), modulo 2^32.
 * Sums wrap like TFLite's int32 accumulator.
 *
 * DTMM's Algorithm 1: for each output pixel, its window is gathered once (im2col, raw int8, padding = zp_in) into
 * `scratch` (KB_SPARSE_SCRATCH bytes; this portable version uses the first k_h * k_w * in_c), then every filter
 * walks only its kept filterlets (FWCS) or weights (CSR) over it. The Cortex-M versions (arm/kb_sparse_conv.c)
 * keep the same arithmetic and work on two output pixels at a time.
 */
#include "kilobyte.h"
#include "kb_requant.h"

/* The window of output pixel (oy, ox) as raw int8, (k_h, k_w, in_c), padded taps = zp (= -in_offset). */
static void gather(const kb_conv_params *p, const int8_t *in, int32_t oy, int32_t ox, int8_t *win)
{
    const int32_t iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l, n = p->in_c;
    const int8_t zp = (int8_t)(-p->in_offset);
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        const int32_t iy = iy0 + ky * p->dil_h;
        for (int32_t kx = 0; kx < p->k_w; ++kx, win += n) {
            const int32_t ix = ix0 + kx * p->dil_w;
            const int inside = iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w;
            const int8_t *src = in + (iy * p->in_row + ix) * p->in_cstride;
            for (int32_t c = 0; c < n; ++c) {
                win[c] = inside ? src[c] : zp;
            }
        }
    }
}

typedef int32_t (*filter_sum)(const int8_t *win, const int8_t *arr, const uint16_t *index, const uint16_t *fidx,
                              int32_t n, int32_t in_c);

/* Filter n's sum over the window: its kept filterlets (FWCS). */
static int32_t fwcs_sum(const int8_t *win, const int8_t *arr, const uint16_t *cptr, const uint16_t *fidx, int32_t n,
                        int32_t in_c)
{
    int32_t acc = 0;
    const int8_t *w = arr + (int32_t)fidx[n] * in_c;
    for (int32_t j = fidx[n]; j < fidx[n + 1]; ++j, w += in_c) {
        const int8_t *x = win + cptr[j];
        for (int32_t c = 0; c < in_c; ++c) {
            acc += w[c] * x[c];  /* |term| <= 2^14, at most 2^16 terms: no overflow */
        }
    }
    return acc;
}

/* Filter n's sum over the window: its nonzero weights (CSR). */
static int32_t csr_sum(const int8_t *win, const int8_t *arr, const uint16_t *idx, const uint16_t *fidx, int32_t n,
                       int32_t in_c)
{
    (void)in_c;
    int32_t acc = 0;
    for (int32_t i = fidx[n]; i < fidx[n + 1]; ++i) {
        acc += arr[i] * win[idx[i]];
    }
    return acc;
}

static void sparse_conv(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *index,
                        const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift,
                        int8_t *out, int8_t *scratch, filter_sum sum)
{
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;
            gather(p, in, oy, ox, scratch);
            for (int32_t n = 0; n < p->out_c; ++n) {
                const kb_rq_channel ch = kb_rq_channel_of(bias[n], mult[n], shift[n]);
                y[n] = kb_rq_apply(sum(scratch, arr, index, fidx, n, p->in_c), &ch, &bd);
            }
        }
    }
}

void kb_conv_fwcs(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *cptr,
                  const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                  int8_t *scratch)
{
    sparse_conv(p, in, arr, cptr, fidx, bias, mult, shift, out, scratch, fwcs_sum);
}

void kb_conv_csr(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *idx,
                 const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                 int8_t *scratch)
{
    sparse_conv(p, in, arr, idx, fidx, bias, mult, shift, out, scratch, csr_sum);
}
