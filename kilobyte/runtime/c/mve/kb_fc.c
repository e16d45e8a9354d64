/* Kilobyte runtime, Cortex-M55 Helium (MVE) kernels: int8 FULLY_CONNECTED, bit-identical to ../kb_fc.c (same
 * function, arguments and layouts; TFLite's reference arithmetic).
 *
 * Four weight rows per pass over the input, 16 values per step: one VLDRB of the input and one per row, then one
 * VMLADAVA per row (16 int8 products summed into the row's int32 sum) — 9 instructions for 64 MACs. The input
 * offset enters as in_offset * sum(w) (VADDVA per row, only when the offset is not 0: generated code folds it into
 * the bias). The last step is tail-predicated (VCTP8), so any in_n runs the same loop. Requantisation is the
 * portable kernels' (kb_requant.h), per output.
 */
#include <arm_mve.h>

#include "kilobyte.h"
#include "kb_requant.h"

/* sums[j] = sum over i of w_j[i] * x[i] (mod 2^32), and wsum[j] = sum of w_j when `offset`. */
static void dot_rows4(const int8_t *x, const int8_t *const w[4], int32_t n, int offset, int32_t sums[4],
                      int32_t wsum[4])
{
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0;
    const int8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    for (int32_t i = 0; i < n; i += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(n - i));
        const int8x16_t xv = vldrbq_z_s8(x + i, p);
        const int8x16_t a = vldrbq_z_s8(w0 + i, p), b = vldrbq_z_s8(w1 + i, p);
        const int8x16_t c = vldrbq_z_s8(w2 + i, p), d = vldrbq_z_s8(w3 + i, p);
        s0 = vmladavaq_s8(s0, xv, a), s1 = vmladavaq_s8(s1, xv, b);
        s2 = vmladavaq_s8(s2, xv, c), s3 = vmladavaq_s8(s3, xv, d);
        if (offset) {
            t0 = vaddvaq_s8(t0, a), t1 = vaddvaq_s8(t1, b), t2 = vaddvaq_s8(t2, c), t3 = vaddvaq_s8(t3, d);
        }
    }
    sums[0] = s0, sums[1] = s1, sums[2] = s2, sums[3] = s3;
    wsum[0] = t0, wsum[1] = t1, wsum[2] = t2, wsum[3] = t3;
}

void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t n = p->in_n, last = p->out_n - 1, off = p->in_offset;
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    for (int32_t o = 0; o <= last; o += 4) {
        const int8_t *w_o = w + o * n;  /* rows o .. o + 3, clamped to the last */
        const int8_t *const rows[4] = {w_o, o + 1 <= last ? w_o + n : w_o, o + 2 <= last ? w_o + 2 * n : w_o,
                                       o + 3 <= last ? w_o + 3 * n : w_o};
        int32_t sums[4], wsum[4];
        dot_rows4(in, rows, n, off != 0, sums, wsum);
        for (int32_t j = 0; j < 4 && o + j <= last; ++j) {
            const int32_t acc = kb_wrapping_add(sums[j], (int32_t)((uint32_t)off * (uint32_t)wsum[j]));
            const kb_rq_channel ch = kb_rq_channel_of(bias[o + j], mult[o + j], shift[o + j]);
            out[o + j] = kb_rq_apply(acc, &ch, &bd);
        }
    }
}
