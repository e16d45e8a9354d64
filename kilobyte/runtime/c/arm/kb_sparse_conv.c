/* Kilobyte runtime, Cortex-M DSP kernels: int8 CONV_2D on FWCS and CSR weights, bit-identical to ../kb_sparse_conv.c
 * (formats, folded bias and the zero-point argument there).
 *
 * Output pixels go in pairs (raster order, across rows; an odd last pixel runs paired with itself and is stored
 * once). A pair's two windows are widened once to int16 into `scratch` (raw values, padded taps = zp_in), then serve
 * every output filter, which walks only its kept entries; the sums are requantised with kb_arm_rq1.
 *   FWCS (DTMM's filterlet convolution, Algorithm 1 with its weight-stationary reordering on 2 lanes): a filterlet's
 *     weights are loaded and unpacked once per 4 values (LDR + 2 SXTB16) and applied to both pixels (2 LDRD + 4
 *     SMLAD): 9 instructions per 8 MACs. Columns in the layout of arm/kb_conv.c's two-column path: per group of 4
 *     values, pixel a's (x0, x2), (x1, x3), then pixel b's, 16 bytes; a filterlet at cptr starts at byte 4 * cptr.
 *     With in_c % 4 != 0 a filterlet does not start on a group: those layers widen the pair in CSR's layout below,
 *     where a filterlet at cptr is the in_c words from word cptr, and walk it value by value like CSR but with one
 *     index per filterlet instead of one per weight (fwcs_pair_narrow; in_c = 1 and 3 unrolled).
 *   CSR (the baseline): per kept weight its index, the weight, one word holding both pixels' values at that index
 *     (int16 pairs, pixel a low) and two halfword MACs (SMLABB, SMLATB): 5 instructions per 2 MACs.
 */
/* As in arm/kb_conv.c: GCC's first scheduling pass hoists the unrolled loads past the registers (spills in the
 * filterlet loop). Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_simd.h"
#include "kb_arm_requant.h"
#include "kb_arm_widen.h"

/* int16 (zp, zp): a padded tap's two values in one word. */
static inline int32_t zp_pair(const kb_conv_params *p)
{
    return (int32_t)(((uint32_t)(-p->in_offset) & 0xFFFFu) * 0x10001u);
}

/* Tap (ky, kx) of the window with top-left input pixel (iy0, ix0): its in_c values, or NULL when it is padding. */
static inline const int8_t *tap(const kb_conv_params *p, const int8_t *in, int32_t iy0, int32_t ix0, int32_t ky,
                                int32_t kx)
{
    const int32_t iy = iy0 + ky * p->dil_h, ix = ix0 + kx * p->dil_w;
    if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
        return NULL;
    }
    return in + (iy * p->in_row + ix) * p->in_cstride;
}

/* -- FWCS ----------------------------------------------------------------------------------------------------------- */

/* Output pixel q's window into column c of the FWCS layout (in_c % 4 == 0). */
static void widen_fwcs(const kb_conv_params *p, const int8_t *in, int32_t q, int32_t c, int8_t *cols)
{
    const int32_t oy = q / p->out_w, ox = q - oy * p->out_w, n = p->in_c, zz = zp_pair(p);
    const int32_t iy0 = oy * p->stride_h - p->pad_t, ix0 = ox * p->stride_w - p->pad_l;
    for (int32_t ky = 0, k = 0; ky < p->k_h; ++ky) {
        for (int32_t kx = 0; kx < p->k_w; ++kx, k += n) {
            const int8_t *src = tap(p, in, iy0, ix0, ky, kx);
            if (src) {
                widen_run2(src, n, 0, cols + 4 * k + 8 * c);
            } else {
                int8_t *dst = cols + 4 * k + 8 * c;
                for (int32_t i = 0; i < n; i += 4) {
                    kb_st2_inc(&dst, zz, zz, 16);
                }
            }
        }
    }
}

/* One group of 4 values of a filterlet: weights unpacked once, both pixels' columns. */
#define KB_FWCS_STEP(x, w, acc_a, acc_b)                                                                        \
    do {                                                                                                        \
        int32_t a0_, a1_, b0_, b1_, wr_ = kb_ld4_inc(&w);                                                       \
        const int32_t we_ = __sxtb16(wr_);                                                                      \
        wr_ = kb_sxtb16_odd(wr_);                                                                               \
        kb_ld2_at8(x, &b0_, &b1_);                                                                              \
        kb_ld2_inc16(&x, &a0_, &a1_);                                                                           \
        acc_a = __smlad(a1_, wr_, __smlad(a0_, we_, acc_a));                                                    \
        acc_b = __smlad(b1_, wr_, __smlad(b0_, we_, acc_b));                                                    \
    } while (0)

/* -- CSR ------------------------------------------------------------------------------------------------------------ */

/* Output pixels qa and qb's windows as int16 pairs: word k = (a's value k, b's value k). */
static void widen_csr(const kb_conv_params *p, const int8_t *in, int32_t qa, int32_t qb, int8_t *cols)
{
    const int32_t n = p->in_c, ya = qa / p->out_w, yb = qb / p->out_w, zp = -p->in_offset;
    const int32_t ay = ya * p->stride_h - p->pad_t, ax = (qa - ya * p->out_w) * p->stride_w - p->pad_l;
    const int32_t by = yb * p->stride_h - p->pad_t, bx = (qb - yb * p->out_w) * p->stride_w - p->pad_l;
    const int32_t z4 = (int32_t)(((uint32_t)zp & 0xFFu) * 0x01010101u);
    uint32_t *dst = (uint32_t *)(void *)cols;
    for (int32_t ky = 0; ky < p->k_h; ++ky) {
        for (int32_t kx = 0; kx < p->k_w; ++kx) {
            const int8_t *sa = tap(p, in, ay, ax, ky, kx), *sb = tap(p, in, by, bx, ky, kx);
            int32_t i = 0;
            for (; i + 4 <= n; i += 4, dst += 4) {
                const int32_t va = sa ? kb_ld4(sa + i) : z4, vb = sb ? kb_ld4(sb + i) : z4;
                const uint32_t ea = (uint32_t)__sxtb16(va), oa = (uint32_t)kb_sxtb16_odd(va);
                const uint32_t eb = (uint32_t)__sxtb16(vb), ob = (uint32_t)kb_sxtb16_odd(vb);
                dst[0] = (ea & 0xFFFFu) | (eb << 16);         /* (a0, b0): PKHBT */
                dst[1] = (oa & 0xFFFFu) | (ob << 16);         /* (a1, b1) */
                dst[2] = (eb & 0xFFFF0000u) | (ea >> 16);     /* (a2, b2): PKHTB */
                dst[3] = (ob & 0xFFFF0000u) | (oa >> 16);     /* (a3, b3) */
            }
            for (; i < n; ++i) {
                const int32_t va = sa ? sa[i] : zp, vb = sb ? sb[i] : zp;
                *dst++ = ((uint32_t)va & 0xFFFFu) | ((uint32_t)vb << 16);
            }
        }
    }
}

/* One kept weight: both pixels' values in one word, two halfword MACs. */
#define KB_CSR_STEP(cols, w, idx, acc_a, acc_b)                                                                 \
    do {                                                                                                        \
        const int32_t wv_ = *w++, xv_ = cols[*idx++];                                                           \
        acc_a = __smlabb(xv_, wv_, acc_a);                                                                      \
        acc_b = __smlatb(xv_, wv_, acc_b);                                                                      \
    } while (0)

/* -- both ----------------------------------------------------------------------------------------------------------- */

/* The requantisation of every output channel, prepared once per call at the end of the scratch (36 bytes each). */
static kb_arm_rq1 *prepare_rq(const kb_conv_params *p, const int32_t *mult, const int32_t *shift, int8_t *scratch)
{
    kb_arm_rq1 *rq = (kb_arm_rq1 *)(void *)(scratch + 4 * ((p->k_h * p->k_w * p->in_c + 3) & ~3));
    for (int32_t f = 0; f < p->out_c; ++f) {
        rq[f] = kb_arm_rq1_of(mult[f], shift[f], p->out_offset, p->act_min, p->act_max);
    }
    return rq;
}

/* Output pixel q's first channel. */
static inline int8_t *pixel_out(const kb_conv_params *p, int32_t q, int8_t *out)
{
    const int32_t y = q / p->out_w;
    return out + (y * p->out_row + q - y * p->out_w) * p->out_cstride;
}

/* Filter f's sums of a pixel pair into ya[f] and yb[f] (yb NULL: an odd last pixel, stored once). */
static inline __attribute__((always_inline)) void store_pair(const kb_arm_rq1 *q, int32_t acc_a, int32_t acc_b,
                                                             int8_t *ya, int8_t *yb)
{
    *ya = kb_arm_rq1_apply(q, acc_a);
    if (yb) {
        *yb = kb_arm_rq1_apply(q, acc_b);
    }
}

/* What every filter of a pixel pair reads (FWCS). */
typedef struct {
    const int8_t *cols, *arr;
    const uint16_t *cptr, *fidx;
    const int32_t *bias;
    const kb_arm_rq1 *rq;
    int32_t out_c, n;
} fwcs_job;

/* Every filter over one widened pixel pair (FWCS, in_c % 4 == 0): per kept filterlet, per 4 values one weight word
 * unpacked for both pixels. Not inlined: on its own the filterlet loop keeps everything in registers. */
static __attribute__((noinline)) void fwcs_pair(const fwcs_job *job, int8_t *ya, int8_t *yb)
{
    const int8_t *w = job->arr;
    const uint16_t *c = job->cptr;
    const int32_t n = job->n, n8 = n & ~7;
    for (int32_t f = 0; f < job->out_c; ++f) {
        int32_t acc_a = job->bias[f], acc_b = acc_a;
        for (const uint16_t *c_end = job->cptr + job->fidx[f + 1]; c != c_end; ++c) {
            const int8_t *x = job->cols + 4 * (int32_t)*c;
            if (n & 4) {
                KB_FWCS_STEP(x, w, acc_a, acc_b);
            }
            for (const int8_t *end = w + n8; w != end;) {  /* 8 values: 16 MACs */
                KB_FWCS_STEP(x, w, acc_a, acc_b);
                KB_FWCS_STEP(x, w, acc_a, acc_b);
            }
        }
        store_pair(&job->rq[f], acc_a, acc_b, ya + f, yb ? yb + f : NULL);
    }
}

/* One weight of a filterlet on a CSR-layout word (both pixels' values at one index): two halfword MACs. */
#define KB_PAIR_MAC(x, w, acc_a, acc_b)                                                                         \
    do {                                                                                                        \
        const int32_t xv_ = (x), wv_ = (w);                                                                     \
        acc_a = __smlabb(xv_, wv_, acc_a);                                                                      \
        acc_b = __smlatb(xv_, wv_, acc_b);                                                                      \
    } while (0)

/* Every filter over one pixel pair widened in CSR's layout (FWCS, in_c % 4 != 0): per kept filterlet one index, then
 * its in_c weights against consecutive words. */
static __attribute__((noinline)) void fwcs_pair_narrow(const fwcs_job *job, int8_t *ya, int8_t *yb)
{
    const int32_t *cols = (const int32_t *)(const void *)job->cols;
    const int8_t *w = job->arr;
    const uint16_t *c = job->cptr;
    const int32_t n = job->n;
    for (int32_t f = 0; f < job->out_c; ++f) {
        int32_t acc_a = job->bias[f], acc_b = acc_a;
        const uint16_t *c_end = job->cptr + job->fidx[f + 1];
        if (n == 1) {
            for (; c != c_end; ++c) {
                KB_PAIR_MAC(cols[*c], *w++, acc_a, acc_b);
            }
        } else if (n == 3) {
            for (; c != c_end; ++c, w += 3) {
                const int32_t *x = cols + *c;
                KB_PAIR_MAC(x[0], w[0], acc_a, acc_b);
                KB_PAIR_MAC(x[1], w[1], acc_a, acc_b);
                KB_PAIR_MAC(x[2], w[2], acc_a, acc_b);
            }
        } else {
            for (; c != c_end; ++c) {
                const int32_t *x = cols + *c;
                for (const int8_t *end = w + n; w != end;) {
                    KB_PAIR_MAC(*x++, *w++, acc_a, acc_b);
                }
            }
        }
        store_pair(&job->rq[f], acc_a, acc_b, ya + f, yb ? yb + f : NULL);
    }
}

void kb_conv_fwcs(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *cptr,
                  const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                  int8_t *scratch)
{
    const int32_t pixels = p->out_h * p->out_w, n = p->in_c;
    const kb_arm_rq1 *rq = prepare_rq(p, mult, shift, scratch);
    const fwcs_job job = {scratch, arr, cptr, fidx, bias, rq, p->out_c, n};
    for (int32_t qa = 0; qa < pixels; qa += 2) {
        const int32_t qb = qa + 1 < pixels ? qa + 1 : qa;
        int8_t *ya = pixel_out(p, qa, out), *yb = qb != qa ? pixel_out(p, qb, out) : NULL;
        if ((n & 3) == 0) {
            widen_fwcs(p, in, qa, 0, scratch);
            widen_fwcs(p, in, qb, 1, scratch);
            fwcs_pair(&job, ya, yb);
        } else {
            widen_csr(p, in, qa, qb, scratch);
            fwcs_pair_narrow(&job, ya, yb);
        }
    }
}

static inline __attribute__((always_inline)) void csr_sums(const int32_t *cols, const int8_t *w,
                                                           const uint16_t *idx, int32_t count, int32_t acc[2])
{
    int32_t acc_a = acc[0], acc_b = acc[1];
    for (const int8_t *end = w + (count & ~3); w != end;) {
        KB_CSR_STEP(cols, w, idx, acc_a, acc_b);
        KB_CSR_STEP(cols, w, idx, acc_a, acc_b);
        KB_CSR_STEP(cols, w, idx, acc_a, acc_b);
        KB_CSR_STEP(cols, w, idx, acc_a, acc_b);
    }
    for (const int8_t *end = w + (count & 3); w != end;) {
        KB_CSR_STEP(cols, w, idx, acc_a, acc_b);
    }
    acc[0] = acc_a, acc[1] = acc_b;
}

/* CSR keeps its per-pair loop inlined: measured 1.5 % faster than a separate function like fwcs_pair. */
void kb_conv_csr(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *idx,
                 const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                 int8_t *scratch)
{
    const int32_t pixels = p->out_h * p->out_w;
    const int32_t *cols = (const int32_t *)(const void *)scratch;
    const kb_arm_rq1 *rq = prepare_rq(p, mult, shift, scratch);
    for (int32_t qa = 0; qa < pixels; qa += 2) {
        const int32_t qb = qa + 1 < pixels ? qa + 1 : qa;
        int8_t *ya = pixel_out(p, qa, out), *yb = qb != qa ? pixel_out(p, qb, out) : NULL;
        widen_csr(p, in, qa, qb, scratch);
        for (int32_t f = 0; f < p->out_c; ++f) {
            int32_t acc[2] = {bias[f], bias[f]};
            csr_sums(cols, arr + fidx[f], idx + fidx[f], fidx[f + 1] - fidx[f], acc);
            store_pair(&rq[f], acc[0], acc[1], ya + f, yb ? yb + f : NULL);
        }
    }
}
