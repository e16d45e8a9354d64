/* Kilobyte runtime: int8 MUL, MAXIMUM and MINIMUM with TFLite's reference arithmetic
 * (reference_integer_ops::MulElementwise, reference_ops::MaximumMinimumBroadcastSlow).
 *
 * Shapes: in1, in2, out (pixels, c), each with its own pixel stride; a stride of 0 repeats one pixel of that operand
 * (a (1,1,1,c) operand broadcast over the other's pixels, as in squeeze-excite), which gives TFLite's broadcast result
 * since its broadcast path computes the same formula per element. When all three are dense the loop runs over the
 * whole tensor as one row. MUL rescales the product of the two offset inputs once; MAXIMUM / MINIMUM compare the raw
 * int8 values (valid because inputs and output share quantisation params, which the code generator checks).
 * kb_mul_const multiplies an activation by a constant of any shape that broadcasts to it (kb_const_params: the
 * constant's values with their offset added, read by steps that are 0 on broadcast axes).
 */
#include "kilobyte.h"
#include "kb_requant.h"

/* The constants of one MUL call. */
typedef struct {
    kb_rq_channel so;
    kb_rq_bounds bd;
    int32_t off1, off2;
} mul_consts;

/* y[i] = in1[i] * in2[i] in the output's quantisation, i < n. */
static void mul_row(const mul_consts *k, const int8_t *a, const int8_t *b, int32_t n, int8_t *y)
{
    const mul_consts q = *k;  /* locals: the int8 stores may not alias them */
    for (int32_t i = 0; i < n; ++i) {
        /* each factor is in [-255, 255], so the product fits int32 with room to spare */
        int32_t v = kb_rq_scale_v((a[i] + q.off1) * (b[i] + q.off2), &q.so);
        v = v < q.bd.lo ? q.bd.lo : v;
        v = v > q.bd.hi ? q.bd.hi : v;
        y[i] = (int8_t)(v + q.bd.out_offset);
    }
}

static int dense(int32_t c, int32_t s1, int32_t s2, int32_t so)
{
    return s1 == c && s2 == c && so == c;
}

void kb_mul(const kb_mul_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    const mul_consts k = {kb_rq_channel_of(0, p->out_mult, p->out_shift),
                          kb_rq_bounds_of(p->out_offset, p->act_min, p->act_max), p->in1_offset, p->in2_offset};
    if (dense(p->c, p->in1_cstride, p->in2_cstride, p->out_cstride)) {
        mul_row(&k, in1, in2, p->pixels * p->c, out);
        return;
    }
    for (int32_t px = 0; px < p->pixels; ++px) {
        mul_row(&k, in1 + px * p->in1_cstride, in2 + px * p->in2_cstride, p->c, out + px * p->out_cstride);
    }
}

/* MUL of an activation and constant terms (each the constant's value plus its offset): one rescale per element
 * (kb_const_op in kb_requant.h). */
void kb_mul_const(const kb_const_params *p, const int8_t *in, const int32_t *terms, int8_t *out)
{
    kb_const_op(p, in, terms, out, 1);
}

static void max_row(const int8_t *a, const int8_t *b, int32_t n, int8_t *y)
{
    for (int32_t i = 0; i < n; ++i) {
        y[i] = a[i] > b[i] ? a[i] : b[i];
    }
}

static void min_row(const int8_t *a, const int8_t *b, int32_t n, int8_t *y)
{
    for (int32_t i = 0; i < n; ++i) {
        y[i] = a[i] < b[i] ? a[i] : b[i];
    }
}

/* One row (dense) or one row per pixel of `row`. */
static void minmax(const kb_minmax_params *p, void (*row)(const int8_t *, const int8_t *, int32_t, int8_t *),
                   const int8_t *in1, const int8_t *in2, int8_t *out)
{
    if (dense(p->c, p->in1_cstride, p->in2_cstride, p->out_cstride)) {
        row(in1, in2, p->pixels * p->c, out);
        return;
    }
    for (int32_t px = 0; px < p->pixels; ++px) {
        row(in1 + px * p->in1_cstride, in2 + px * p->in2_cstride, p->c, out + px * p->out_cstride);
    }
}

void kb_maximum(const kb_minmax_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    minmax(p, max_row, in1, in2, out);
}

void kb_minimum(const kb_minmax_params *p, const int8_t *in1, const int8_t *in2, int8_t *out)
{
    minmax(p, min_row, in1, in2, out);
}
