/* Kilobyte runtime, Cortex-M55 Helium (MVE) kernels: int8 FULLY_CONNECTED, bit-identical to ../kb_fc.c (same
 * function, arguments and layouts; TFLite's reference arithmetic).
 *
 * Four weight rows per pass over the input (kb_mve_fc4.S: 9 vector instructions for 64 MACs, tail-predicated, so any
 * in_n runs the same loop), then the four sums requantised as one vector with each row's multiplier and shift
 * (kb_mve_rq_lanes) and stored with one VSTRB.32 (the last rows predicated). The input offset is 0 in generated code
 * (folded into the bias); otherwise it enters as in_offset * sum(w), the row sums taken here.
 */
#include <arm_mve.h>

#include "kilobyte.h"
#include "kb_mve_fc4.h"
#include "kb_mve_requant.h"

/* sum of row o + j's weights for j < 4 (the rows past the last repeat it). */
static int32x4_t row_sums(const int8_t *w, int32_t n, int32_t o, int32_t last)
{
    int32_t s[4];
    for (int32_t j = 0; j < 4; ++j) {
        const int8_t *row = w + (o + j <= last ? o + j : last) * n;
        int32_t t = 0;
        for (int32_t i = 0; i < n; i += 16) {
            t = vaddvaq_p_s8(t, vldrbq_z_s8(row + i, vctp8q((uint32_t)(n - i))), vctp8q((uint32_t)(n - i)));
        }
        s[j] = t;
    }
    return vldrwq_s32(s);
}

void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t n = p->in_n, last = p->out_n - 1;
    const int32x4_t lo = vdupq_n_s32(p->act_min - p->out_offset), hi = vdupq_n_s32(p->act_max - p->out_offset);
    int32_t sums[4];
    for (int32_t o = 0; o <= last; o += 4) {
        const mve_pred16_t k = vctp32q((uint32_t)(last + 1 - o));
        const int8_t *const rows[4] = {w + o * n, w + (o + 1 <= last ? o + 1 : last) * n,
                                       w + (o + 2 <= last ? o + 2 : last) * n, w + (o + 3 <= last ? o + 3 : last) * n};
        kb_mve_fc4(in, rows, n, sums);  /* rows past the last repeat it: read, not stored */
        int32x4_t v = vaddq_s32(vldrwq_s32(sums), vldrwq_z_s32(bias + o, k));
        if (p->in_offset != 0) {
            v = vmlaq_n_s32(v, row_sums(w, n, o, last), p->in_offset);
        }
        v = kb_mve_rq_lanes(v, vldrwq_z_s32(mult + o, k), vldrwq_z_s32(shift + o, k), lo, hi, p->out_offset);
        vstrbq_p_s32(out + o, v, k);
    }
}
