/* Kilobyte runtime: int8 ADD with TFLite's reference arithmetic (reference_integer_ops::AddElementwise).
 *
 * Shapes: in1, in2, out (pixels, c), each with its own pixel stride (concat slices). Both inputs are shifted left by
 * left_shift (20), rescaled to a common scale, summed, and rescaled to the output. `out` may be `in1` or `in2`
 * (in-place residual add, same stride): every element is read before it is written. The three rescales' shifts are
 * split once per call (kb_rq_channel_of), so the per-element work is the fixed-point arithmetic alone.
 */
#include "kilobyte.h"
#include "kb_requant.h"

void kb_add(const kb_add_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    const kb_rq_channel s1 = kb_rq_channel_of(0, p->in1_mult, p->in1_shift);
    const kb_rq_channel s2 = kb_rq_channel_of(0, p->in2_mult, p->in2_shift);
    const kb_rq_channel so = kb_rq_channel_of(0, p->out_mult, p->out_shift);
    const kb_rq_bounds bd = kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max);
    const int32_t off1 = p->in1_offset, off2 = p->in2_offset, ls = p->left_shift, c = p->c;
    for (int32_t px = 0; px < p->pixels; ++px) {
        const int8_t *a = in1 + px * p->in1_cstride;  /* (c,) */
        const int8_t *b = in2 + px * p->in2_cstride;
        int8_t *y = out + px * p->out_cstride;
        for (int32_t i = 0; i < c; ++i) {
            /* (x + offset) is in [-255, 255], so shifting it by 20 stays far inside int32. */
            const int32_t sa = kb_rq_scale((a[i] + off1) * (1 << ls), &s1);
            const int32_t sb = kb_rq_scale((b[i] + off2) * (1 << ls), &s2);
            y[i] = kb_rq_apply(sa + sb, &so, &bd);
        }
    }
}
