/* Kilobyte runtime, Cortex-M55 Helium (MVE) kernels: int8 CONV_2D, bit-identical to ../kb_conv.c (same functions,
 * arguments and layouts; TFLite's reference arithmetic).
 *
 * With its scratch (KB_MVE_CONV_SCRATCH, kb_mve_dot32.h; the planner's mve_conv_scratch_bytes):
 *   - the input offset is folded into the biases once per call, bias + in_offset * sum(w), into the scratch's tail;
 *   - output pixels go three at a time, each window an int8 column (kb_mve_window.h): a 1x1 window without padding
 *     is the input pixel itself (and then six pixels a group, two passes), any other window is copied into the
 *     scratch's three columns, padding as the input's zero point, which the folded bias cancels (TFLite skips
 *     padded taps);
 *   - kb_mve_dot32 (assembly) runs the three columns against the channels two at a time, 11 vector instructions per
 *     96 MACs, the sums starting at the biases; short columns (k <= 32: the first layers) stay in registers
 *     instead (kb_mve_dots), a channel's weights one or two VLDRBs;
 *   - the sums, a table of up to 32 channels, are requantised four channels of a pixel at a time with each
 *     channel's multiplier and shift (kb_mve_requant_table), one VSTRB.32 each.
 * Without it (NULL, or fewer bytes), pixels go in groups of up to four that share their window's valid taps, and each
 * valid kernel row is one contiguous run of kw * in_c input bytes per pixel (dense input, dilation 1 across; else
 * one run per tap), read straight from the input in C with the weights' sum taken alongside (conv_runs).
 */
#include <arm_mve.h>

#include "kilobyte.h"
#include "kb_mve_conv4.h"
#include "kb_mve_dot32.h"
#include "kb_mve_dots.h"
#include "kb_mve_requant.h"
#include "kb_mve_window.h"

typedef struct {
    const int8_t *x[4];   /* each pixel's window origin (tap (0, 0), possibly outside the input) */
    uint32_t out[4];      /* each pixel's output byte offset */
    int32_t n;            /* pixels in the group, 1..4 */
    int32_t ky0, ky1, kx0, kx1;  /* the valid taps: ky0 <= ky < ky1, kx0 <= kx < kx1 */
} kb_group;

/* s[j] += sum of x_j[i] * w[i] and *ws += sum of w[i], i < n (mod 2^32). */
static inline __attribute__((always_inline)) void run4(const int8_t *x0, const int8_t *x1, const int8_t *x2,
                                                       const int8_t *x3, const int8_t *w, int32_t n, int32_t s[4],
                                                       int32_t *ws)
{
    int32_t a = s[0], b = s[1], c = s[2], d = s[3], t = *ws;
    for (int32_t i = 0; i < n; i += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(n - i));
        const int8x16_t wv = vldrbq_z_s8(w + i, p);
        a = vmladavaq_s8(a, vldrbq_z_s8(x0 + i, p), wv);
        b = vmladavaq_s8(b, vldrbq_z_s8(x1 + i, p), wv);
        c = vmladavaq_s8(c, vldrbq_z_s8(x2 + i, p), wv);
        d = vmladavaq_s8(d, vldrbq_z_s8(x3 + i, p), wv);
        t = vaddvaq_s8(t, wv);
    }
    s[0] = a, s[1] = b, s[2] = c, s[3] = d, *ws = t;
}

static void flush(const kb_conv_params *p, const kb_group *g, const int8_t *w, const int32_t *bias,
                  const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t cin = p->in_c, k_w = p->k_w, taps_k = p->k_h * k_w * cin;
    const int32_t lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset;
    const int rows = p->dil_w == 1 && p->in_cstride == cin;  /* a kernel row's valid taps are one run */
    const int32_t row_pitch = p->dil_h * p->in_row * p->in_cstride, tap_pitch = p->dil_w * p->in_cstride;
    const uint32x4_t offs = vldrwq_u32(g->out);
    const mve_pred16_t keep = vctp32q((uint32_t)g->n);
    for (int32_t co = 0; co < p->out_c; ++co) {
        const int8_t *wc = w + co * taps_k;
        int32_t s[4] = {0, 0, 0, 0}, ws = 0;
        for (int32_t ky = g->ky0; ky < g->ky1; ++ky) {
            const int32_t in_at = ky * row_pitch, w_at = ky * k_w * cin;
            if (rows) {
                const int32_t at = in_at + g->kx0 * tap_pitch;
                run4(g->x[0] + at, g->x[1] + at, g->x[2] + at, g->x[3] + at, wc + w_at + g->kx0 * cin,
                     (g->kx1 - g->kx0) * cin, s, &ws);
                continue;
            }
            for (int32_t kx = g->kx0; kx < g->kx1; ++kx) {
                const int32_t at = in_at + kx * tap_pitch;
                run4(g->x[0] + at, g->x[1] + at, g->x[2] + at, g->x[3] + at, wc + w_at + kx * cin, cin, s, &ws);
            }
        }
        const int32_t off = (int32_t)((uint32_t)p->in_offset * (uint32_t)ws);
        const int32x4_t acc = vaddq_n_s32(vldrwq_s32(s), off);
        const int32x4_t y = kb_mve_rq4(acc, bias[co], mult[co], shift[co], lo, hi, p->out_offset);
        vstrbq_scatter_offset_p_s32(out + co, offs, y, keep);
    }
}

static void conv_runs(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int8_t *out)
{
    kb_group g;
    g.n = 0;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_t;
        int32_t ky0, ky1;
        valid(iy0, p->k_h, p->dil_h, p->in_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_l;
            int32_t kx0, kx1;
            valid(ix0, p->k_w, p->dil_w, p->in_w, &kx0, &kx1);
            if (g.n > 0 && (g.ky0 != ky0 || g.ky1 != ky1 || g.kx0 != kx0 || g.kx1 != kx1)) {
                flush(p, &g, w, bias, mult, shift, out);
                g.n = 0;
            }
            if (g.n == 0) {
                g.ky0 = ky0, g.ky1 = ky1, g.kx0 = kx0, g.kx1 = kx1;
            }
            const int8_t *origin = in + (iy0 * p->in_row + ix0) * p->in_cstride;
            for (int32_t j = g.n; j < 4; ++j) {  /* the rest repeat this pixel until others join */
                g.x[j] = origin;
            }
            g.out[g.n++] = (uint32_t)((oy * p->out_row + ox) * p->out_cstride);
            if (g.n == 4) {
                flush(p, &g, w, bias, mult, shift, out);
                g.n = 0;
            }
        }
    }
    if (g.n > 0) {
        flush(p, &g, w, bias, mult, shift, out);
    }
}

typedef struct {
    const kb_conv_params *p;
    const int8_t *w;
    const int32_t *bias, *mult, *shift;  /* bias: the folded biases in the scratch */
    int8_t *out;
    int left;  /* kb_mve_shift_form */
    kb_mve_dot32_job job;
} kb_conv_ctx;

/* The table's sums, which hold their biases (kb_mve_dot32) or not (kb_mve_dots), requantised: one copy of the
 * requantisation each (inlined), without a branch on the bias in its loops. */
static inline __attribute__((always_inline)) void requant_sums(const kb_conv_ctx *c, int32_t n, int32_t npx,
                                                                const uint32_t *offs, int32_t c0)
{
    kb_mve_requant_table(c->p, c->job.sums, NULL, n, npx, offs, c0, NULL, c->mult, c->shift, c->out, c->left);
}

static inline __attribute__((always_inline)) void requant_biased(const kb_conv_ctx *c, int32_t n, int32_t npx,
                                                                  const uint32_t *offs, int32_t c0)
{
    kb_mve_requant_table(c->p, c->job.sums, NULL, n, npx, offs, c0, c->bias, c->mult, c->shift, c->out, c->left);
}

/* A group's pixels (up to three, or six for a 1x1 conv read in place: two passes of three columns into the table's
 * rows 0-2 and 3-5; `most` is the group's size, a constant per copy): every channel, KB_MVE_DOT4_CHANNELS at a time,
 * then requantised. */
static inline __attribute__((always_inline)) void columns(void *ctx, const int8_t *const col[KB_MVE_GROUP_MAX],
                                                          const uint32_t offs[KB_MVE_GROUP_MAX], int32_t npx,
                                                          int32_t most)
{
    kb_conv_ctx *c = ctx;
    kb_mve_dot32_job *job = &c->job;
    for (int32_t c0 = 0; c0 < c->p->out_c; c0 += KB_MVE_DOT4_CHANNELS) {
        const int32_t rest = c->p->out_c - c0, n = rest < KB_MVE_DOT4_CHANNELS ? rest : KB_MVE_DOT4_CHANNELS;
        for (int32_t half = 0; half < (most == 3 ? 3 : npx); half += 3) {
            job->col[0] = col[half], job->col[1] = col[half + 1], job->col[2] = col[half + 2];
            job->w = c->w + c0 * job->k, job->at = &job->sums[half][0], job->fb = c->bias + c0;
            if (job->k <= 32) {  /* short columns stay in registers: kb_mve_dots (no bias in the sums) */
                job->pairs = n;
                (job->k <= 16 ? kb_mve_dots16 : kb_mve_dots32)(job);
                continue;
            }
            job->pairs = n / 2, job->w_step = job->k;
            if (job->pairs) {
                kb_mve_dot32(job);
            }
            if (n & 1) {  /* the last channel paired with itself (its bias twice: no read past the biases) */
                const int32_t twice[2] = {c->bias[c0 + n - 1], c->bias[c0 + n - 1]};
                job->w = c->w + (c0 + n - 1) * job->k, job->pairs = 1, job->w_step = 0, job->fb = twice;
                kb_mve_dot32(job);
            }
        }
        if (job->k <= 32) {
            requant_biased(c, n, npx, offs, c0);
        } else {
            requant_sums(c, n, npx, offs, c0);
        }
    }
}

/* kb_mve_groups' callbacks: groups of three (windows copied into the scratch) and of six (1x1, read in place). */
static void columns_out3(void *ctx, const int8_t *const col[KB_MVE_GROUP_MAX], const uint32_t offs[KB_MVE_GROUP_MAX],
                         int32_t npx)
{
    columns(ctx, col, offs, npx, 3);
}

static void columns_out6(void *ctx, const int8_t *const col[KB_MVE_GROUP_MAX], const uint32_t offs[KB_MVE_GROUP_MAX],
                         int32_t npx)
{
    columns(ctx, col, offs, npx, 6);
}

/* bias[c] + in_offset * sum(w_c) for every channel (wrapping, as TFLite's int32 accumulator), into fb. */
static void fold_biases(const kb_conv_params *p, const int8_t *w, const int32_t *bias, int32_t k, int32_t *fb)
{
    for (int32_t c = 0; c < p->out_c; ++c, w += k) {
        int32_t sum = 0;
        for (int32_t i = 0; i < k; i += 16) {
            const mve_pred16_t q = vctp8q((uint32_t)(k - i));
            sum = vaddvaq_p_s8(sum, vldrbq_z_s8(w + i, q), q);
        }
        fb[c] = (int32_t)((uint32_t)bias[c] + (uint32_t)p->in_offset * (uint32_t)sum);
    }
}

void kb_conv(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
             const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    const int32_t k = p->k_h * p->k_w * p->in_c;
    const int direct = p->k_h == 1 && p->k_w == 1 && !(p->pad_t | p->pad_b | p->pad_l | p->pad_r);
    if (scratch == NULL || p->scratch_bytes < KB_MVE_CONV_SCRATCH(p, direct)) {
        conv_runs(p, in, w, bias, mult, shift, out);
        return;
    }
    int32_t *fb = (int32_t *)(void *)(scratch + KB_MVE_CONV_COLUMNS_BYTES(p, direct));
    fold_biases(p, w, bias, k, fb);
    kb_conv_ctx ctx = {.p = p, .w = w, .bias = fb, .mult = mult, .shift = shift, .out = out,
                       .left = kb_mve_shift_form(shift, p->out_c)};
    ctx.job.k = k, ctx.job.w_back = ((k + 15) & ~15) - k;
    kb_mve_groups(p, in, scratch, direct, direct ? 6 : 3, direct ? columns_out6 : columns_out3, &ctx);
}

void kb_conv_3x3(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    kb_conv(p, in, w, bias, mult, shift, out, scratch);
}

void kb_conv_1x1(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch)
{
    kb_conv(p, in, w, bias, mult, shift, out, scratch);
}
