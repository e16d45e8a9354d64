/* Kilobyte runtime (codegen stage): int8 MEAN with TFLite Micro's integer arithmetic (reference_ops::
 * QuantizedMeanOrSum): the int32 sum of the n reduced values, minus n * input zero point, requantised by
 * QuantizeMultiplier(s_in / s_out) with 1/n folded into multiplier and shift, plus the output zero point, clamped to
 * int8. The code generator folds 1/n and the zero-point term in (kilobyte.interp.int8_ref.mean_multiplier), so the
 * kernel only adds bytes and requantises.
 *
 * Layout (kb_mean_params): the input is (outer, reduce, inner) pixels of c channels, pixel stride in_cstride; the
 * output is (outer, inner) pixels, pixel stride out_cstride. A mean over H and W of an NHWC tensor is outer = 1,
 * reduce = H * W, inner = 1, c = C; over H alone, reduce = H and inner = W; a mean that includes the channel axis is
 * described byte by byte (c = 1, strides 1). Channels are the inner loop, KB_MEAN_CHUNK at a time (contiguous in
 * NHWC), so the adds vectorise and the int32 sums fit on the stack.
 */
#include "kilobyte.h"
#include "kb_requant.h"

#define KB_MEAN_CHUNK 64  /* channels per pass (int32 sums on the stack) */

void kb_mean(const kb_mean_params *p, const int8_t *in, int8_t *out)
{
    int32_t acc[KB_MEAN_CHUNK];
    /* sum_offset rides in the bias slot: kb_rq_row adds it (wrapping, as TFLM's int32 does) before scaling */
    const kb_rq_channel ch = kb_rq_channel_of(p->sum_offset, p->mult, p->shift);
    const kb_rq_bounds bounds = kb_rq_bounds_of(p->out_offset, -128, 127);  /* MEAN fuses no activation */
    const int32_t step = p->inner * p->in_cstride;  /* bytes from one reduced pixel to the next */
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t i = 0; i < p->inner; ++i) {
            const int8_t *x0 = in + (o * p->reduce * p->inner + i) * p->in_cstride;
            int8_t *y = out + (o * p->inner + i) * p->out_cstride;
            for (int32_t c0 = 0; c0 < p->c; c0 += KB_MEAN_CHUNK) {
                const int32_t n = p->c - c0 < KB_MEAN_CHUNK ? p->c - c0 : KB_MEAN_CHUNK;
                for (int32_t c = 0; c < n; ++c) {
                    acc[c] = 0;
                }
                for (int32_t r = 0; r < p->reduce; ++r) {
                    const int8_t *x = x0 + r * step + c0;  /* never a pointer past the end of the input */
                    for (int32_t c = 0; c < n; ++c) {
                        acc[c] += x[c];  /* |sum| <= 128 * reduce: codegen keeps reduce below 2^23 */
                    }
                }
                kb_rq_row(acc, n, &ch, &bounds, y + c0);
            }
        }
    }
}
