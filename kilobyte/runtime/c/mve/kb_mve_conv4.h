/* Kilobyte runtime, Cortex-M55 Helium (MVE): the conv kernels' shared constant and their byte movers in assembly
 * (kb_mve_conv4.S): the im2col's and the depthwise planes' copies, fills and gathers. */
#ifndef KB_MVE_CONV4_H
#define KB_MVE_CONV4_H

#define KB_MVE_DOT4_CHANNELS 32  /* channels per pass of the dot-product kernels: the length of a sums table's rows */
#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

/* dst[i] = src[i] for i < n, and dst[i] = v for i < n: 16 bytes per step, tail-predicated; n >= 0. */
void kb_mve_copy(int8_t *dst, const int8_t *src, int32_t n);
void kb_mve_fill(int8_t *dst, int32_t v, int32_t n);
/* dst[i * dst_stride] = src[i * stride] for i < n (n >= 0): one channel of a row of pixels, four bytes per gather
 * (and per scatter when dst_stride != 1: a column of a transposed plane). */
void kb_mve_gather(int8_t *dst, const int8_t *src, int32_t n, int32_t stride);
void kb_mve_gather_t(int8_t *dst, const int8_t *src, int32_t n, int32_t stride, int32_t dst_stride);
/* rows runs of n > 0 bytes, src_pitch bytes apart at src, one after another at dst (a whole window of an interior
 * pixel: kh rows of kw * in_c bytes). */
void kb_mve_copy_rows(int8_t *dst, const int8_t *src, int32_t rows, int32_t n, int32_t src_pitch);
#endif

#endif /* KB_MVE_CONV4_H */
