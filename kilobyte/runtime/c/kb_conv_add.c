/* Kilobyte runtime: a pointwise CONV_2D fused with the residual ADD that reads its output (the scheduler's
 * `Plan.fused`): the conv's output never exists, the ADD's output is written over the residual.
 *
 * Shapes: in (out_h, out_w, in_c), pixel stride in_cstride, row pitch in_row; w (out_c, in_c); bias, mult, shift
 * (out_c,); residual_and_out (out_h, out_w, out_c), pixel stride out_cstride, row pitch out_row. For every pixel and
 * output channel: the conv's int8 value exactly as kb_conv_1x1 computes it (requantised to the conv output's
 * qparams, clamped by its fused activation), then TFLite's int8 ADD with the residual value exactly as kb_add
 * computes it, written over the residual value. Bit-exact with kb_conv_1x1 followed by kb_add.
 *
 * Operands: a->in1_* describe the conv's output, a->in2_* the residual (their cstrides are unused: the conv value
 * lives in a register, the residual uses out_cstride). When the IR adds (residual, conv) the code generator swaps
 * the two operands' parameters; that is exact, as each operand is rescaled with its own parameters and the int32
 * sum of the two commutes.
 * Channel by channel is safe because `in` never overlaps residual_and_out (the scheduler only fuses a conv that does
 * not read the residual): each residual value is read once, just before it is overwritten.
 */
#include "kilobyte.h"
#include "kb_requant.h"

/* sum_i w[i] * (x[i] + in_offset), i < n (as in kb_conv.c). */
static inline int32_t dot_offset(const int8_t *x, const int8_t *w, int32_t n, int32_t in_offset)
{
    int32_t acc = 0;
    for (int32_t i = 0; i < n; ++i) {
        acc += w[i] * (x[i] + in_offset);
    }
    return acc;
}

/* TFLite's int8 ADD of one pair of values (as in kb_add.c): x1 the conv value, x2 the residual value. */
static inline int8_t add_values(const kb_add_params *a, int32_t x1, int32_t x2)
{
    /* (x + offset) is in [-255, 255], so shifting it by 20 stays far inside int32. */
    const int32_t s1 = kb_multiply_by_quantized_multiplier((x1 + a->in1_offset) * (1 << a->left_shift),
                                                           a->in1_mult, (int)a->in1_shift);
    const int32_t s2 = kb_multiply_by_quantized_multiplier((x2 + a->in2_offset) * (1 << a->left_shift),
                                                           a->in2_mult, (int)a->in2_shift);
    const int32_t raw = kb_multiply_by_quantized_multiplier(s1 + s2, a->out_mult, (int)a->out_shift);
    return kb_clamp_i8(raw + a->out_offset, a->act_min, a->act_max);
}

void kb_conv_1x1_add(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                     const int32_t *mult, const int32_t *shift, const kb_add_params *a, int8_t *residual_and_out)
{
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int8_t *x = in + (oy * p->in_row + ox) * p->in_cstride;                  /* (in_c,) */
            int8_t *r = residual_and_out + (oy * p->out_row + ox) * p->out_cstride;        /* (out_c,) */
            const int8_t *w_co = w;  /* (in_c,) row of the (out_c, in_c) weights */
            for (int32_t co = 0; co < p->out_c; ++co, w_co += p->in_c) {
                const int32_t acc = kb_wrapping_add(dot_offset(x, w_co, p->in_c, p->in_offset), bias[co]);
                const int8_t y = kb_requantize(acc, mult[co], shift[co], p->out_offset, p->act_min, p->act_max);
                r[co] = add_values(a, y, r[co]);
            }
        }
    }
}
