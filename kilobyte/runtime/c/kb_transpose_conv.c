/* Kilobyte runtime: int8 TRANSPOSE_CONV with TFLite Micro's arithmetic (reference_integer_ops::TransposeConv).
 *
 * TFLite Micro scatters: every input pixel adds w * (x + in_offset) into an int32 scratch copy of the whole output
 * (out_h * out_w * out_c * 4 bytes of arena), then requantises it. Integer sums do not depend on their order, so
 * this kernel gathers instead and needs no scratch: output pixel (oy, ox) of the cropped output is full-output pixel
 * (oy + pad_t, ox + pad_l), which input pixel (iy, ix) reaches through tap (fy, fx) exactly when
 * oy + pad_t = iy * stride_h + fy (the same in x). So for each output pixel the taps fy = (oy + pad_t) mod stride_h,
 * + stride_h, ... pick input rows iy = (oy + pad_t - fy) / stride_h, kept while inside the input; each in-image
 * (fy, fx) adds one dot product of in_c contiguous input bytes with in_c contiguous OHWI weights (kb_dot4, four
 * output channels at a time). Then bias, per-channel requantisation and clamp, as CONV_2D.
 *
 * Shapes (kb_conv_params): in (in_h, in_w, in_c), row pitch in_row pixels, pixel stride in_cstride; w OHWI
 * (out_c, k_h, k_w, in_c); bias (out_c,) int32 (zeros when the model has none); out (out_h, out_w, out_c), row pitch
 * out_row, pixel stride out_cstride. pad_t / pad_l are the rows and columns cropped off the top and left of the full
 * ((in_h - 1) * stride_h + k_h rows) output; bottom and right need nothing (out_h ends the output). dil_*, pad_b,
 * pad_r, scratch_bytes and in_consumed are unused. in and out are disjoint.
 */
#include "kilobyte.h"
#include "kb_dot.h"
#include "kb_requant.h"

/* acc[j] (j < 4) += the sums of output pixel (oy, ox) for output channels co .. co + 3 (weight rows in w4). */
static void gather_pixel(const kb_conv_params *p, const int8_t *in, const int8_t *const w4[4], int32_t oy, int32_t ox,
                         int32_t acc[4])
{
    const int32_t ty = oy + p->pad_t, tx = ox + p->pad_l;  /* full-output coordinates, >= 0 */
    for (int32_t fy = ty % p->stride_h; fy < p->k_h && fy <= ty; fy += p->stride_h) {
        const int32_t iy = (ty - fy) / p->stride_h;
        if (iy >= p->in_h) {
            continue;
        }
        for (int32_t fx = tx % p->stride_w; fx < p->k_w && fx <= tx; fx += p->stride_w) {
            const int32_t ix = (tx - fx) / p->stride_w;
            if (ix >= p->in_w) {
                continue;
            }
            const int8_t *x = in + (iy * p->in_row + ix) * p->in_cstride;
            kb_dot4(x, w4, (fy * p->k_w + fx) * p->in_c, p->in_c, p->in_offset, acc);
        }
    }
}

void kb_transpose_conv(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t w_row = p->k_h * p->k_w * p->in_c;  /* weights of one output channel */
    for (int32_t co = 0; co < p->out_c; co += 4) {
        const int32_t n = p->out_c - co < 4 ? p->out_c - co : 4;
        const int8_t *w4[4];
        for (int32_t j = 0; j < 4; ++j) {
            w4[j] = w + (co + (j < n ? j : 0)) * w_row;  /* a short block repeats its first row; its sums are unused */
        }
        for (int32_t oy = 0; oy < p->out_h; ++oy) {
            for (int32_t ox = 0; ox < p->out_w; ++ox) {
                int32_t acc[4] = {0, 0, 0, 0};
                gather_pixel(p, in, w4, oy, ox, acc);
                int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride + co;
                for (int32_t j = 0; j < n; ++j) {
                    y[j] = kb_requantize(kb_wrapping_add(acc[j], bias[co + j]), mult[co + j], shift[co + j],
                                         p->out_offset, p->act_min, p->act_max);
                }
            }
        }
    }
}
