/* Kilobyte runtime: int8 FULLY_CONNECTED with TFLite's reference arithmetic
 * (reference_integer_ops::FullyConnected / FullyConnectedPerChannel; weights symmetric, so no filter offset).
 *
 * Shapes: in (in_n,); w (out_n, in_n); bias (out_n,) int32, always given; mult/shift (out_n,) — a per-tensor
 * multiplier is passed as out_n equal entries, so one kernel serves both; out (out_n,).
 * Four outputs per pass over the input (kb_dot4 of kb_dot.h, shared with kb_conv.c), so each (x + in_offset)
 * computed feeds four weight rows; the inner loop is an int8 x int16 dot product that gcc -O3 vectorises (pmaddwd).
 * Sums are int32, like TFLite's accumulator, with wrapping adds where they could overflow.
 */
#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_dot.h"

void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t n = p->in_n, last = p->out_n - 1;
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    for (int32_t o = 0; o <= last; o += 4) {
        const int8_t *w_o = w + o * n;  /* (4, in_n) rows o .. o + 3, clamped to the last */
        const int8_t *const rows[4] = {w_o, o + 1 <= last ? w_o + n : w_o, o + 2 <= last ? w_o + 2 * n : w_o,
                                       o + 3 <= last ? w_o + 3 * n : w_o};
        int32_t acc[4];
        acc[0] = acc[1] = acc[2] = acc[3] = 0;
        kb_dot4(in, rows, 0, n, p->in_offset, acc);
        for (int32_t j = 0; j < 4 && o + j <= last; ++j) {
            const kb_rq_channel ch = kb_rq_channel_of(bias[o + j], mult[o + j], shift[o + j]);
            out[o + j] = kb_rq_apply(acc[j], &ch, &bd);
        }
    }
}
