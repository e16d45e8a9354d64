/* Kilobyte runtime, Cortex-M55 Helium (MVE): four output pixels of a conv, every output channel, in assembly
 * (kb_mve_conv4.S), for mve/kb_conv.c.
 *
 * kb_mve_conv4(job): for each channel co < out_c, with the weights of co the k bytes at w + co * k, and column j the
 * k int8 values at col[j] (a pixel's window, padding already its zero point):
 *   s_j = bias[co] + sum_i col[j][i] * w_co[i] + in_offset * sum_i w_co[i]   (mod 2^32),
 * requantised as kb_mve_requant.h's kb_mve_rq4 and stored at out + co + offs[j] for the lanes `keep` (a VPR value:
 * 0xffff for four pixels, vctp32q(n) for n) selects. The struct's layout is the assembly's: keep them in step.
 * kb_mve_copy / kb_mve_fill: the im2col's copies and padding, in the same file. */
#ifndef KB_MVE_CONV4_H
#define KB_MVE_CONV4_H

#define KB_MVE_CONV4_W 0
#define KB_MVE_CONV4_BIAS 4
#define KB_MVE_CONV4_MULT 8
#define KB_MVE_CONV4_SHIFT 12
#define KB_MVE_CONV4_OUT 16
#define KB_MVE_CONV4_K 20
#define KB_MVE_CONV4_OUT_C 24
#define KB_MVE_CONV4_IN_OFFSET 28
#define KB_MVE_CONV4_OFFS 32
#define KB_MVE_CONV4_LO 48
#define KB_MVE_CONV4_HI 52
#define KB_MVE_CONV4_OUT_OFFSET 56
#define KB_MVE_CONV4_KEEP 60
#define KB_MVE_CONV4_COL 64
#define KB_MVE_CONV4_W_BACK 80

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const int8_t *w;
    const int32_t *bias, *mult, *shift;
    int8_t *out;
    int32_t k, out_c, in_offset;
    uint32_t offs[4];
    int32_t lo, hi, out_offset;  /* act_min - out_offset, act_max - out_offset, out_offset */
    uint32_t keep;
    const int8_t *col[4];
    int32_t w_back;  /* 16 * ceil(k / 16) - k: how far the weight pointer runs past a channel's k bytes */
} kb_mve_conv4_job;

_Static_assert(offsetof(kb_mve_conv4_job, offs) == KB_MVE_CONV4_OFFS, "kb_mve_conv4_job layout");
_Static_assert(offsetof(kb_mve_conv4_job, keep) == KB_MVE_CONV4_KEEP, "kb_mve_conv4_job layout");
_Static_assert(offsetof(kb_mve_conv4_job, col) == KB_MVE_CONV4_COL, "kb_mve_conv4_job layout");
_Static_assert(offsetof(kb_mve_conv4_job, w_back) == KB_MVE_CONV4_W_BACK, "kb_mve_conv4_job layout");

void kb_mve_conv4(const kb_mve_conv4_job *job);
/* dst[i] = src[i] for i < n, and dst[i] = v for i < n: 16 bytes per step, tail-predicated; n >= 0. */
void kb_mve_copy(int8_t *dst, const int8_t *src, int32_t n);
void kb_mve_fill(int8_t *dst, int32_t v, int32_t n);
#endif

#endif /* KB_MVE_CONV4_H */
