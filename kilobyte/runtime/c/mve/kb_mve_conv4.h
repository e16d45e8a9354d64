/* Kilobyte runtime, Cortex-M55 Helium (MVE): the dot products of four output pixels of a conv with a run of output
 * channels, in assembly (kb_mve_conv4.S), for mve/kb_conv.c; and the im2col's copies and fills.
 *
 * kb_mve_dot4(job): for each of job->n channels co (weights: the k bytes at job->w + co * k) and each column j (the
 * k int8 values at job->col[j]):
 *   job->sums[j][co] = sum_i col[j][i] * w_co[i]   and   job->wsum[co] = sum_i w_co[i]   (mod 2^32).
 * The caller requantises them, four channels of a pixel at a time (kb_conv.c). The struct's layout is the
 * assembly's: keep them in step (the static asserts below). */
#ifndef KB_MVE_CONV4_H
#define KB_MVE_CONV4_H

#define KB_MVE_DOT4_CHANNELS 32  /* channels per call, at most: the sums' rows */
#define KB_MVE_DOT4_W 0
#define KB_MVE_DOT4_K 4
#define KB_MVE_DOT4_N 8
#define KB_MVE_DOT4_W_BACK 12
#define KB_MVE_DOT4_COL 16
#define KB_MVE_DOT4_SUMS 32
#define KB_MVE_DOT4_WSUM (KB_MVE_DOT4_SUMS + 4 * 4 * KB_MVE_DOT4_CHANNELS)

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const int8_t *w;  /* the first channel's weights; k bytes a channel */
    int32_t k, n;     /* values per column, channels (1..KB_MVE_DOT4_CHANNELS) */
    int32_t w_back;   /* 16 * ceil(k / 16) - k: how far the weight pointer runs past a channel's k bytes */
    const int8_t *col[4];
    int32_t sums[4][KB_MVE_DOT4_CHANNELS];
    int32_t wsum[KB_MVE_DOT4_CHANNELS];
} kb_mve_dot4_job;

_Static_assert(offsetof(kb_mve_dot4_job, col) == KB_MVE_DOT4_COL, "kb_mve_dot4_job layout");
_Static_assert(offsetof(kb_mve_dot4_job, sums) == KB_MVE_DOT4_SUMS, "kb_mve_dot4_job layout");
_Static_assert(offsetof(kb_mve_dot4_job, wsum) == KB_MVE_DOT4_WSUM, "kb_mve_dot4_job layout");

void kb_mve_dot4(kb_mve_dot4_job *job);
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
