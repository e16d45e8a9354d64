/* Kilobyte runtime: every int8 unary activation (LOGISTIC, HARD_SWISH, LEAKY_RELU, RELU, RELU6) as one table lookup.
 *
 * An int8 unary op's output depends on its input byte alone, so the code generator evaluates TFLite Micro's kernel
 * for all 256 inputs at generation time (kilobyte/ops/lut.py) and emits the results as a const table in
 * model.c; entry i holds the output for input value i - 128. Reads (pixels, c) bytes from `in` (pixel stride
 * in_cstride) and writes them to `out` (pixel stride out_cstride), so either side may be a concat slice; `out` may
 * be `in` (each byte is read before it is written).
 */
#include "kilobyte.h"

void kb_lut(int32_t pixels, int32_t c, const int8_t table[256], const int8_t *in, int32_t in_cstride, int8_t *out,
            int32_t out_cstride)
{
    for (int32_t px = 0; px < pixels; ++px) {
        const int8_t *x = in + px * in_cstride;
        int8_t *y = out + px * out_cstride;
        for (int32_t i = 0; i < c; ++i) {
            y[i] = table[(int32_t)x[i] + 128]; /* int8 -> table index 0..255 */
        }
    }
}
