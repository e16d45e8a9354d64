/* Kilobyte runtime: QUANTIZE (float32 -> int8) and DEQUANTIZE (int8 -> float32) at the graph's edges, as TFLite.
 *
 * QUANTIZE: q = clamp(round(x / scale) + zero_point), with the float32 division (not a multiply by 1/scale, which
 * can differ in the last bit) and std::round's ties away from zero, written without libm.
 * DEQUANTIZE: x = scale * (q - zero_point). TFLite multiplies in double; the float32 product is the same value,
 * because scale (24-bit significand) times a 9-bit integer is exact in double and then rounded once to float.
 */
#include "kilobyte.h"

/* std::round for |v| < 2^31: v - trunc(v) is exact in binary floating point, so the tie test is too. */
static int32_t round_half_away(float v)
{
    const int32_t whole = (int32_t)v;  /* truncates toward zero */
    const float frac = v - (float)whole;
    if (frac >= 0.5f) {
        return whole + 1;
    }
    if (frac <= -0.5f) {
        return whole - 1;
    }
    return whole;
}

void kb_quantize(int32_t n, const float *in, float scale, int32_t zero_point, int8_t *out)
{
    for (int32_t i = 0; i < n; ++i) {
        float v = in[i] / scale;
        /* Beyond +-2^30 the result clamps to the same int8 anyway; keeps the int conversion defined. */
        if (v > 1073741824.0f) {
            v = 1073741824.0f;
        } else if (v < -1073741824.0f) {
            v = -1073741824.0f;
        }
        int32_t q = round_half_away(v) + zero_point;
        q = q < -128 ? -128 : q;
        q = q > 127 ? 127 : q;
        out[i] = (int8_t)q;
    }
}

void kb_dequantize(int32_t n, const int8_t *in, float scale, int32_t zero_point, float *out)
{
    for (int32_t i = 0; i < n; ++i) {
        out[i] = scale * (float)(in[i] - zero_point);
    }
}
