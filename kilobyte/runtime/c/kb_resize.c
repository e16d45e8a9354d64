/* Kilobyte runtime: int8 RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR with TFLite Micro's arithmetic.
 *
 * Neither kernel decides where a pixel comes from: the code generator runs TFLite Micro's coordinate arithmetic
 * (kilobyte/ops/resize.py) once per output row and column and writes the result into model.c as an int16
 * table, so the kernels hold no float arithmetic and no division by the scale:
 *   - nearest: `src` holds out_h source rows, then out_w source columns (GetNearestNeighbor, in float32 there);
 *   - bilinear: `taps` holds (lo, hi, frac) per output row, then per output column (ComputeInterpolationValuesInteger:
 *     the two source indices and the Q10 distance from lo, in [-512, 1024)).
 * Bilinear output (ResizeBilinearInteger): the four Q10 x Q10 weighted source values summed, then divided by 2^20
 * rounding half away from zero (TFLite Micro's default double-rounding build). Each weight pair sums to 1024 along
 * its axis and |weight| <= 1536, so |sum| <= 128 * 2048 * 2048 = 2^29: int32 holds it, as int64 does in TFLM.
 * Output pixels are out_cstride apart (the output may be a concat slice); the input is dense rows of in_w pixels,
 * in_cstride bytes apart. Input and output share quantisation params (TFLM never rescales). in and out are disjoint.
 */
#include <string.h>

#include "kilobyte.h"

void kb_resize_nearest(const kb_resize_params *p, const int16_t *src, const int8_t *in, int8_t *out)
{
    const int16_t *cols = src + p->out_h;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int8_t *row = in + (int32_t)src[oy] * p->in_w * p->in_cstride;
        int8_t *y = out + oy * p->out_w * p->out_cstride;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            memcpy(y + ox * p->out_cstride, row + (int32_t)cols[ox] * p->in_cstride, (size_t)p->c);
        }
    }
}

/* One output pixel: four source pixels and their Q20 weights (w[0] for (lo, lo) ... w[3] for (hi, hi)). */
static void bilinear_pixel(const int8_t *const src[4], const int32_t w[4], int32_t c, int8_t *out)
{
    for (int32_t i = 0; i < c; ++i) {
        const int32_t sum = src[0][i] * w[0] + src[1][i] * w[1] + src[2][i] * w[2] + src[3][i] * w[3];
        out[i] = (int8_t)((sum + (sum > 0 ? (1 << 19) : -(1 << 19))) / (1 << 20));  /* C division truncates */
    }
}

void kb_resize_bilinear(const kb_resize_params *p, const int16_t *taps, const int8_t *in, int8_t *out)
{
    const int16_t *cols = taps + 3 * p->out_h;
    const int32_t row_bytes = p->in_w * p->in_cstride;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int8_t *lo_row = in + taps[3 * oy] * row_bytes, *hi_row = in + taps[3 * oy + 1] * row_bytes;
        const int32_t fy = taps[3 * oy + 2];
        int8_t *y = out + oy * p->out_w * p->out_cstride;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t lo = cols[3 * ox] * p->in_cstride, hi = cols[3 * ox + 1] * p->in_cstride;
            const int32_t fx = cols[3 * ox + 2];
            const int8_t *const src[4] = {lo_row + lo, hi_row + lo, lo_row + hi, hi_row + hi};
            const int32_t w[4] = {(1024 - fy) * (1024 - fx), fy * (1024 - fx), (1024 - fy) * fx, fy * fx};
            bilinear_pixel(src, w, p->c, y + ox * p->out_cstride);
        }
    }
}
