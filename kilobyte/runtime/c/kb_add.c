/* Kilobyte runtime: int8 ADD and SUB with TFLite's reference arithmetic (reference_integer_ops::AddElementwise,
 * reference_ops::SubElementwise: the same rescales, the second input's subtracted instead of added).
 *
 * Shapes: in1, in2, out (pixels, c), each with its own pixel stride (concat slices). Both inputs are shifted left by
 * left_shift (20), rescaled to a common scale, summed, and rescaled to the output. `out` may be `in1` or `in2`
 * (in-place residual add, same stride): every element is read before it is written. Every element shares the three
 * rescales, prepared once (kb_rq_channel_of), so the element loop is branch-free and gcc -O3 vectorises it; when
 * all three tensors are dense it runs over the whole tensor as one row. A pixel stride of 0 repeats one pixel of
 * that operand: a (1,1,1,c) operand broadcast over the other's pixels (TFLite's broadcast path computes the same
 * formula per element).
 *
 * kb_add_const runs an ADD or SUB whose other operand is a constant of any shape that broadcasts to the activation
 * (a (C,) bias of a folded batch norm, a single value, a (1,1,W,1) row ...): the constant's rescaled values are
 * prepared at generation time, so each element costs one rescale fewer than kb_add, and nothing is materialised.
 */
#include "kilobyte.h"
#include "kb_requant.h"

/* The rescales of one call. */
typedef struct {
    kb_rq_channel s1, s2, so;
    kb_rq_bounds bd;
    int32_t off1, off2, left_shift;
    int32_t neg;   /* 0 ADD, -1 SUB: (x ^ neg) - neg is x or -x, branch-free and without a multiply (SSE2, M0) */
} add_consts;

/* y[i] = in1[i] + in2[i] (ADD) or in1[i] - in2[i] (SUB) in the output's quantisation, i < n. */
static void add_row(const add_consts *k, const int8_t *a, const int8_t *b, int32_t n, int8_t *y)
{
    const add_consts q = *k;  /* locals: the int8 stores may not alias them */
    for (int32_t i = 0; i < n; ++i) {
        /* (x + offset) is in [-255, 255], so shifting it by 20 stays far inside int32; so do the rescaled sums. */
        const int32_t sa = kb_rq_scale_v((a[i] + q.off1) * (1 << q.left_shift), &q.s1);
        const int32_t sb = kb_rq_scale_v((b[i] + q.off2) * (1 << q.left_shift), &q.s2);
        /* |sb| < 2^28, so negating it cannot overflow */
        int32_t v = kb_rq_scale_v(sa + ((sb ^ q.neg) - q.neg), &q.so);
        v = v < q.bd.lo ? q.bd.lo : v;
        v = v > q.bd.hi ? q.bd.hi : v;
        y[i] = (int8_t)(v + q.bd.out_offset);
    }
}

/* Both kernels: the rescales prepared once, then one row or one row per pixel. */
static void add_or_sub(const kb_add_params *p, int32_t neg, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    const add_consts k = {kb_rq_channel_of(0, p->in1_mult, p->in1_shift), kb_rq_channel_of(0, p->in2_mult, p->in2_shift),
                          kb_rq_channel_of(0, p->out_mult, p->out_shift),
                          kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max), p->in1_offset, p->in2_offset,
                          p->left_shift, neg};
    if (p->in1_cstride == p->c && p->in2_cstride == p->c && p->out_cstride == p->c) {
        add_row(&k, in1, in2, p->pixels * p->c, out);
        return;
    }
    for (int32_t px = 0; px < p->pixels; ++px) {
        add_row(&k, in1 + px * p->in1_cstride, in2 + px * p->in2_cstride, p->c, out + px * p->out_cstride);
    }
}

void kb_add(const kb_add_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    add_or_sub(p, 0, in1, in2, out);
}

void kb_sub(const kb_add_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    add_or_sub(p, -1, in1, in2, out);
}

/* ADD / SUB of an activation and constant terms (kb_const_params): one rescale of the activation, the prepared term
 * added, the sum rescaled to the output (kb_const_op in kb_requant.h). out may be in. */
void kb_add_const(const kb_const_params *p, const int8_t *in, const int32_t *terms, int8_t *out)
{
    kb_const_op(p, in, terms, out, 0);
}
