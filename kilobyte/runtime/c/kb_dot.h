/* Kilobyte runtime: the int8 dot product of the portable CONV_2D and FULLY_CONNECTED kernels (kb_conv.c's
 * large-window path and kb_fc.c), one input run times four weight rows, so that each (x + in_offset) computed feeds
 * four sums; the inner loop is an int8 x int16 dot product that gcc -O3 vectorises (pmaddwd).
 *
 * Sums are int32, like TFLite's accumulator. One term is at most 128 * 255 in magnitude, so partial sums of up to
 * KB_DOT_CHUNK terms cannot overflow; they join the accumulators with wrapping adds (TFLite's int32 accumulator
 * wraps the same way, and the reassociation is exact modulo 2^32).
 */
#ifndef KB_DOT_H
#define KB_DOT_H

#include <stdint.h>

#include "kb_requant.h"

#define KB_DOT_CHUNK (1 << 15)  /* terms per int32 partial sum: 2^15 * 128 * 255 < 2^31 */

/* acc[j] += sum_i w[j][wo + i] * (x[i] + off), i < n, for the 4 weight rows w[j] (a caller may repeat a row). */
static inline void kb_dot4(const int8_t *x, const int8_t *const w[4], int32_t wo, int32_t n, int32_t off,
                           int32_t acc[4])
{
    const int16_t o = (int16_t)off;  /* -zero point, in [-127, 128] */
    for (int32_t i0 = 0; i0 < n; i0 += KB_DOT_CHUNK) {
        const int32_t m = n - i0 < KB_DOT_CHUNK ? n - i0 : KB_DOT_CHUNK;
        const int8_t *xs = x + i0, *w0 = w[0] + wo + i0, *w1 = w[1] + wo + i0, *w2 = w[2] + wo + i0;
        const int8_t *w3 = w[3] + wo + i0;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int32_t i = 0; i < m; ++i) {
            const int16_t xi = (int16_t)(xs[i] + o);  /* in [-255, 255] */
            a0 += w0[i] * xi;
            a1 += w1[i] * xi;
            a2 += w2[i] * xi;
            a3 += w3[i] * xi;
        }
        acc[0] = kb_wrapping_add(acc[0], a0);
        acc[1] = kb_wrapping_add(acc[1], a1);
        acc[2] = kb_wrapping_add(acc[2], a2);
        acc[3] = kb_wrapping_add(acc[3], a3);
    }
}

#endif /* KB_DOT_H */
