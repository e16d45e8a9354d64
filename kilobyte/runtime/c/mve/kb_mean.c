/* Kilobyte runtime, Cortex-M55 Helium (MVE) kernels: int8 MEAN, bit-identical to ../kb_mean.c (same function,
 * arguments and layout; TFLite Micro's arithmetic with 1/n and the zero-point term folded in by the code generator).
 *
 * Channels 16 at a time: per reduced pixel four VLDRB.S32 and four VADDs into four int32 vectors (the last block of
 * channels predicated), then the sums requantised as kb_requant.h's kb_rq_row does, four channels per vector
 * (kb_mve_rq4 with the folded sum offset as its bias). |sum| <= 128 * reduce < 2^31: the code generator keeps reduce
 * below 2^23.
 */
#include <arm_mve.h>

#include "kilobyte.h"
#include "kb_mve_requant.h"

void kb_mean(const kb_mean_params *p, const int8_t *in, int8_t *out)
{
    const int32_t step = p->inner * p->in_cstride;  /* bytes from one reduced pixel to the next */
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t i = 0; i < p->inner; ++i) {
            const int8_t *x0 = in + (o * p->reduce * p->inner + i) * p->in_cstride;
            int8_t *y = out + (o * p->inner + i) * p->out_cstride;
            for (int32_t c0 = 0; c0 < p->c; c0 += 16) {
                const int32_t n = p->c - c0;  /* channels left: the lanes of the last block's vectors */
                const mve_pred16_t k0 = vctp32q((uint32_t)n), k1 = vctp32q((uint32_t)(n > 4 ? n - 4 : 0));
                const mve_pred16_t k2 = vctp32q((uint32_t)(n > 8 ? n - 8 : 0));
                const mve_pred16_t k3 = vctp32q((uint32_t)(n > 12 ? n - 12 : 0));
                int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
                const int8_t *x = x0 + c0;
                for (int32_t r = 0; r < p->reduce; ++r, x += step) {
                    a0 = vaddq_s32(a0, vldrbq_z_s32(x, k0));
                    a1 = vaddq_s32(a1, vldrbq_z_s32(x + 4, k1));
                    a2 = vaddq_s32(a2, vldrbq_z_s32(x + 8, k2));
                    a3 = vaddq_s32(a3, vldrbq_z_s32(x + 12, k3));
                }
                int8_t *yc = y + c0;
                vstrbq_p_s32(yc, kb_mve_rq4(a0, p->sum_offset, p->mult, p->shift, -128 - p->out_offset,
                                            127 - p->out_offset, p->out_offset), k0);
                vstrbq_p_s32(yc + 4, kb_mve_rq4(a1, p->sum_offset, p->mult, p->shift, -128 - p->out_offset,
                                                127 - p->out_offset, p->out_offset), k1);
                vstrbq_p_s32(yc + 8, kb_mve_rq4(a2, p->sum_offset, p->mult, p->shift, -128 - p->out_offset,
                                                127 - p->out_offset, p->out_offset), k2);
                vstrbq_p_s32(yc + 12, kb_mve_rq4(a3, p->sum_offset, p->mult, p->shift, -128 - p->out_offset,
                                                 127 - p->out_offset, p->out_offset), k3);
            }
        }
    }
}
