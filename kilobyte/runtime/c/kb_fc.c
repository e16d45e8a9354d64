/* Kilobyte runtime: int8 FULLY_CONNECTED with TFLite's reference arithmetic
 * (reference_integer_ops::FullyConnected / FullyConnectedPerChannel; weights symmetric, so no filter offset).
 *
 * Shapes: in (in_n,); w (out_n, in_n); bias (out_n,) int32, always given; mult/shift (out_n,) — a per-tensor
 * multiplier is passed as out_n equal entries, so one kernel serves both; out (out_n,).
 */
#include "kilobyte.h"
#include "kb_requant.h"

void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int8_t *w_o = w;  /* (in_n,) row of output o */
    for (int32_t o = 0; o < p->out_n; ++o, w_o += p->in_n) {
        int32_t acc = 0;
        for (int32_t i = 0; i < p->in_n; ++i) {
            acc += w_o[i] * (in[i] + p->in_offset);
        }
        acc = kb_wrapping_add(acc, bias[o]);
        out[o] = kb_requantize(acc, mult[o], shift[o], p->out_offset, p->act_min, p->act_max);
    }
}
