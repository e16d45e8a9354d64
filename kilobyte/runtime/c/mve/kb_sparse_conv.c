/* Kilobyte runtime, Cortex-M55 Helium (MVE) kernels: int8 CONV_2D on FWCS and CSR weights, bit-identical to
 * ../kb_sparse_conv.c (formats, folded bias and the zero-point padding there).
 *
 * Output pixels go four at a time (kb_mve_window.h): their windows are copied, raw int8 with padded taps = zp_in,
 * into the scratch as four columns (4 * k bytes of KB_SPARSE_SCRATCH's 4 * ceil4(k)), then serve every filter.
 *   FWCS (DTMM's filterlet convolution, Algorithm 1 with its weight-stationary reuse on four pixels): per kept
 *     filterlet one offset, then its in_c weights 16 at a time, one VLDRB of the weights and one VMLADAVA per pixel
 *     (kb_mve_fwcs4.S: 9 vector instructions for 64 MACs). The sums of up to 16 filters go to a table, requantised
 *     four filters of a pixel at a time (kb_mve_requant_table).
 *   CSR (the baseline): per nonzero weight its index and value (LDRH, LDRSB), one VLDRB gather of the four pixels'
 *     values at the index, one VMLA by the weight: 4 MACs per weight, in a low-overhead loop. Each filter's four sums are requantised as one vector
 *     (kb_mve_rq4) and scattered to the four pixels.
 */
#include <arm_mve.h>

#include "kilobyte.h"
#include "kb_mve_conv4.h"
#include "kb_mve_fwcs4.h"
#include "kb_mve_requant.h"
#include "kb_mve_window.h"

typedef struct {
    const kb_conv_params *p;
    const int8_t *arr;
    const uint16_t *index, *fidx;
    const int32_t *bias, *mult, *shift;
    int8_t *out, *scratch;
    int32_t k;
    int left;  /* kb_mve_shift_form */
} kb_sparse_ctx;

static void fwcs_group(void *ctx, const int8_t *const col[KB_MVE_GROUP_MAX], const uint32_t offs[KB_MVE_GROUP_MAX],
                       int32_t npx)
{
    const kb_sparse_ctx *c = ctx;
    const kb_conv_params *p = c->p;
    kb_mve_fwcs4_job job;
    job.cols = c->scratch, job.k = c->k, job.in_c = p->in_c, job.w_back = ((p->in_c + 15) & ~15) - p->in_c;
    (void)col;  /* the columns are the scratch's four, k apart (never direct: the planner gives sparse convs scratch) */
    for (int32_t f0 = 0; f0 < p->out_c; f0 += KB_MVE_DOT4_CHANNELS) {
        const int32_t rest = p->out_c - f0, n = rest < KB_MVE_DOT4_CHANNELS ? rest : KB_MVE_DOT4_CHANNELS;
        job.arr = c->arr + (int32_t)c->fidx[f0] * p->in_c, job.cptr = c->index + c->fidx[f0];
        job.fidx = c->fidx + f0, job.n = n, job.at = &job.sums[0][0];
        kb_mve_fwcs4(&job);
        kb_mve_requant_table(p, job.sums, NULL, n, npx, offs, f0, c->bias, c->mult, c->shift, c->out, c->left);
    }
}

static void csr_group(void *ctx, const int8_t *const col[KB_MVE_GROUP_MAX], const uint32_t offs[KB_MVE_GROUP_MAX],
                       int32_t npx)
{
    const kb_sparse_ctx *c = ctx;
    const kb_conv_params *p = c->p;
    (void)col;
    const int32_t lo = p->act_min - p->out_offset, hi = p->act_max - p->out_offset;
    const uint32x4_t lanes = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)c->k), ooffs = vldrwq_u32(offs);
    const mve_pred16_t keep = vctp32q((uint32_t)npx);
    const int8_t *cols = c->scratch, *w = c->arr;
    const uint16_t *ix = c->index;
    for (int32_t f = 0; f < p->out_c; ++f) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int32_t n = c->fidx[f + 1] - c->fidx[f]; n > 0; --n) {  /* the filter's nonzeros, in order */
            acc = vmlaq_n_s32(acc, vldrbq_gather_offset_s32(cols + *ix++, lanes), *w++);
        }
        vstrbq_scatter_offset_p_s32(c->out + f, ooffs, kb_mve_rq4(acc, c->bias[f], c->mult[f], c->shift[f], lo, hi,
                                                                   p->out_offset), keep);
    }
}

static void sparse(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *index,
                   const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                   int8_t *scratch, kb_mve_group_fn *fn)
{
    kb_sparse_ctx ctx = {p, arr, index, fidx, bias, mult, shift, out, scratch, p->k_h * p->k_w * p->in_c,
                         kb_mve_shift_form(shift, p->out_c)};
    kb_mve_groups(p, in, scratch, 0, 4, fn, &ctx);
}

void kb_conv_fwcs(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *cptr,
                  const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                  int8_t *scratch)
{
    sparse(p, in, arr, cptr, fidx, bias, mult, shift, out, scratch, fwcs_group);
}

void kb_conv_csr(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *idx,
                 const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                 int8_t *scratch)
{
    sparse(p, in, arr, idx, fidx, bias, mult, shift, out, scratch, csr_group);
}
