/* Kilobyte runtime: int8 ADD with TFLite's reference arithmetic (reference_integer_ops::AddElementwise).
 *
 * Shapes: in1, in2, out (pixels, c), each with its own pixel stride (concat slices). Both inputs are shifted left by
 * left_shift (20), rescaled to a common scale, summed, and rescaled to the output. `out` may be `in1` or `in2`
 * (in-place residual add, same stride): every element is read before it is written.
 */
#include "kilobyte.h"
#include "kb_requant.h"

void kb_add(const kb_add_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    for (int32_t px = 0; px < p->pixels; ++px) {
        const int8_t *a = in1 + px * p->in1_cstride;  /* (c,) */
        const int8_t *b = in2 + px * p->in2_cstride;
        int8_t *y = out + px * p->out_cstride;
        for (int32_t i = 0; i < p->c; ++i) {
            /* (x + offset) is in [-255, 255], so shifting it by 20 stays far inside int32. */
            const int32_t xa = (a[i] + p->in1_offset) * (1 << p->left_shift);
            const int32_t xb = (b[i] + p->in2_offset) * (1 << p->left_shift);
            const int32_t sa = kb_multiply_by_quantized_multiplier(xa, p->in1_mult, (int)p->in1_shift);
            const int32_t sb = kb_multiply_by_quantized_multiplier(xb, p->in2_mult, (int)p->in2_shift);
            const int32_t raw = kb_multiply_by_quantized_multiplier(sa + sb, p->out_mult, (int)p->out_shift);
            y[i] = kb_clamp_i8(raw + p->out_offset, p->act_min, p->act_max);
        }
    }
}
