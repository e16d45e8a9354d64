/* Kilobyte runtime (codegen stage): the ops that move int8 values without changing them — TRANSPOSE, STRIDED_SLICE,
 * TILE — as one strided copy, and REDUCE_MAX, which picks the largest of the values it reads (TFLite's ReduceGeneric
 * with the int8 lowest value as start: raw int8 comparisons, valid because input and output share quantisation
 * params, which the code generator checks).
 *
 * Both kernels run four nested loops described by kb_strides_params (kilobyte.h): loop axis k has dims[k] steps, each
 * moving the input position by in_step[k] bytes and the output position by out_step[k] bytes, starting from input
 * byte in_start and output byte 0. The code generator derives them from the op at generation time:
 *   TRANSPOSE      one loop axis per output axis, reading the input axis perm[k] (its stride as in_step);
 *   STRIDED_SLICE  one loop axis per axis, in_step = input stride * slice stride (negative: a reversed axis),
 *                  in_start = the first element of the slice;
 *   TILE           per axis a repeat loop (in_step 0) around the axis itself;
 *   REDUCE_MAX     one loop axis per input axis; a reduced axis has out_step 0, so all its values meet in one output
 *                  byte: the first one read is stored, every later one is compared with it.
 * Axes of one step are dropped and axes that continue each other are merged first, so the innermost loop is as long
 * as possible; when it reads and writes consecutive bytes it is one memcpy. Every index is int32 and always inside
 * its buffer (no pointer is formed past either end); in and out must not overlap.
 */
#include <string.h>

#include "kilobyte.h"

void kb_strided_copy(const kb_strides_params *p, const int8_t *in, int8_t *out)
{
    const int32_t n = p->dims[3];
    const int dense = p->in_step[3] == 1 && p->out_step[3] == 1;
    for (int32_t i0 = 0; i0 < p->dims[0]; ++i0) {
        for (int32_t i1 = 0; i1 < p->dims[1]; ++i1) {
            for (int32_t i2 = 0; i2 < p->dims[2]; ++i2) {
                const int32_t x = p->in_start + i0 * p->in_step[0] + i1 * p->in_step[1] + i2 * p->in_step[2];
                const int32_t y = i0 * p->out_step[0] + i1 * p->out_step[1] + i2 * p->out_step[2];
                if (dense) {
                    memcpy(out + y, in + x, (size_t)n);
                    continue;
                }
                for (int32_t i3 = 0; i3 < n; ++i3) {
                    out[y + i3 * p->out_step[3]] = in[x + i3 * p->in_step[3]];
                }
            }
        }
    }
}

/* out[i * out_step] = max(out[i * out_step], in[i * in_step]), i < n; with `first` the value is stored instead. */
static void max_row(const int8_t *in, int32_t in_step, int8_t *out, int32_t out_step, int32_t n, int first)
{
    if (out_step == 0) {  /* the innermost axis is reduced: one output byte for the whole row */
        int8_t best = first ? in[0] : (in[0] > out[0] ? in[0] : out[0]);
        for (int32_t i = 1; i < n; ++i) {
            best = in[i * in_step] > best ? in[i * in_step] : best;
        }
        out[0] = best;
        return;
    }
    for (int32_t i = 0; i < n; ++i) {
        const int8_t v = in[i * in_step];
        int8_t *y = out + i * out_step;
        *y = (first || v > *y) ? v : *y;
    }
}

void kb_reduce_max(const kb_strides_params *p, const int8_t *in, int8_t *out)
{
    for (int32_t i0 = 0; i0 < p->dims[0]; ++i0) {
        for (int32_t i1 = 0; i1 < p->dims[1]; ++i1) {
            for (int32_t i2 = 0; i2 < p->dims[2]; ++i2) {
                /* the first value of an output byte comes at index 0 of every reduced axis (out_step 0) */
                const int first = (p->out_step[0] != 0 || i0 == 0) && (p->out_step[1] != 0 || i1 == 0)
                                  && (p->out_step[2] != 0 || i2 == 0);
                const int32_t x = p->in_start + i0 * p->in_step[0] + i1 * p->in_step[1] + i2 * p->in_step[2];
                const int32_t y = i0 * p->out_step[0] + i1 * p->out_step[1] + i2 * p->out_step[2];
                max_row(in + x, p->in_step[3], out + y, p->out_step[3], p->dims[3], first);
            }
        }
    }
}
