/* Kilobyte runtime: int8 FULLY_CONNECTED with TFLite's reference arithmetic
 * (reference_integer_ops::FullyConnected / FullyConnectedPerChannel; weights symmetric, so no filter offset).
 *
 * Shapes: in (in_n,); w (out_n, in_n); bias (out_n,) int32, always given; mult/shift (out_n,) — a per-tensor
 * multiplier is passed as out_n equal entries, so one kernel serves both; out (out_n,).
 * Four outputs per pass over the input, so each (x + in_offset) computed feeds four weight rows; the inner loop is
 * an int8 x int16 dot product that gcc -O3 vectorises (pmaddwd). Sums are int32, like TFLite's accumulator, with
 * wrapping adds where they could overflow.
 */
#include "kilobyte.h"
#include "kb_requant.h"

#define KB_DOT_CHUNK (1 << 15)  /* terms per int32 partial sum: 2^15 * 128 * 255 < 2^31 */

/* acc[j] = sum_i w_j[i] * (x[i] + off), i < n, for 4 weight rows w_j (the last row repeated past out_n); int32
 * partial sums of KB_DOT_CHUNK terms (no signed overflow) joined with wrapping adds. */
static void dot4(const int8_t *x, const int8_t *w0, const int8_t *w1, const int8_t *w2, const int8_t *w3, int32_t n,
                 int32_t off, int32_t acc[4])
{
    const int16_t o = (int16_t)off;  /* -zero point, in [-127, 128] */
    acc[0] = acc[1] = acc[2] = acc[3] = 0;
    for (int32_t i0 = 0; i0 < n; i0 += KB_DOT_CHUNK) {
        const int32_t m = n - i0 < KB_DOT_CHUNK ? n - i0 : KB_DOT_CHUNK;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int32_t i = i0; i < i0 + m; ++i) {
            const int16_t xi = (int16_t)(x[i] + o);
            a0 += w0[i] * xi;
            a1 += w1[i] * xi;
            a2 += w2[i] * xi;
            a3 += w3[i] * xi;
        }
        acc[0] = kb_wrapping_add(acc[0], a0);
        acc[1] = kb_wrapping_add(acc[1], a1);
        acc[2] = kb_wrapping_add(acc[2], a2);
        acc[3] = kb_wrapping_add(acc[3], a3);
    }
}

void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t n = p->in_n, last = p->out_n - 1;
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    for (int32_t o = 0; o <= last; o += 4) {
        int32_t acc[4];
        const int8_t *w_o = w + o * n;  /* (4, in_n) rows o .. o + 3, clamped to the last */
        dot4(in, w_o, o + 1 <= last ? w_o + n : w_o, o + 2 <= last ? w_o + 2 * n : w_o,
             o + 3 <= last ? w_o + 3 * n : w_o, n, p->in_offset, acc);
        for (int32_t j = 0; j < 4 && o + j <= last; ++j) {
            const kb_rq_channel ch = kb_rq_channel_of(bias[o + j], mult[o + j], shift[o + j]);
            out[o + j] = kb_rq_apply(acc[j], &ch, &bd);
        }
    }
}
