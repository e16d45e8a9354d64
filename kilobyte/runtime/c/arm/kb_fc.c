/* Kilobyte runtime, Cortex-M DSP kernels: int8 FULLY_CONNECTED on Armv7E-M SIMD, bit-identical to ../kb_fc.c.
 *
 * Shapes as the portable file: in (in_n,); w (out_n, in_n); bias, mult, shift (out_n,); out (out_n,). Two output
 * rows at a time share each unpacked input word (kb_dot_1x2: the input offset is added while unpacking, 8 MACs per
 * 3 loads, 6 unpacks and 4 SMLADs); an odd last row runs paired with itself and is stored once.
 */
/* See arm/kb_conv.c: keeps the unrolled SIMD loop within the registers. Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_requant.h"
#include "kb_arm_dot.h"

void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t n = p->in_n, in_offset = p->in_offset, o = p->out_offset, lo = p->act_min, hi = p->act_max;
    for (int32_t r = 0; r < p->out_n; r += 2) {
        const int32_t r1 = r + 1 < p->out_n ? r + 1 : r;
        int32_t acc[2] = {bias[r], bias[r1]};
        kb_dot_1x2(in, w + r * n, w + r1 * n, n, in_offset, acc);
        out[r] = kb_arm_requantize(acc[0], mult[r], shift[r], o, lo, hi);
        if (r1 != r) {
            out[r1] = kb_arm_requantize(acc[1], mult[r1], shift[r1], o, lo, hi);
        }
    }
}
