/* Kilobyte runtime: QUANTIZE (float32 -> int8 / uint8) and DEQUANTIZE (back) at the graph's edges, as TFLite.
 *
 * QUANTIZE: q = clamp(round(x / scale) + zero_point), with the float32 division (not a multiply by 1/scale, which
 * can differ in the last bit) and std::round's ties away from zero, written without libm.
 * The same for a uint8 edge (kb_quantize_u8 / kb_dequantize_u8: clamped to 0..255).
 * DEQUANTIZE: x = scale * (q - zero_point). TFLite multiplies in double; the float32 product is the same value,
 * because scale (24-bit significand) times a 9-bit integer is exact in double and then rounded once to float.
 * QUANTIZE between uint8 and int8 (TFLite Micro's Requantize): MBQM(q - zp_in, mult, shift) + zp_out, clamped to the
 * output type; its multiplier and shift are computed at generation time.
 * ARGMAX of a classifier's int8 or uint8 scores (kb_argmax_i8 / _u8): the first index of the largest value, as
 * numpy's argmax. A positive scale makes DEQUANTIZE increasing, so the integer argmax is the float one.
 */
#include "kilobyte.h"
#include "kb_requant.h"

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

/* round(x / scale) + zero_point, before the clamp to the output type. */
static int32_t quantize_one(float x, float scale, int32_t zero_point)
{
    float v = x / scale;
    /* Beyond +-2^30 the result clamps to the same int8 / uint8 anyway; keeps the int conversion defined. */
    if (v > 1073741824.0f) {
        v = 1073741824.0f;
    } else if (v < -1073741824.0f) {
        v = -1073741824.0f;
    }
    return round_half_away(v) + zero_point;
}

void kb_quantize(int32_t n, const float *in, float scale, int32_t zero_point, int8_t *out)
{
    for (int32_t i = 0; i < n; ++i) {
        const int32_t q = quantize_one(in[i], scale, zero_point);
        out[i] = (int8_t)(q < -128 ? -128 : (q > 127 ? 127 : q));
    }
}

void kb_quantize_u8(int32_t n, const float *in, float scale, int32_t zero_point, uint8_t *out)
{
    for (int32_t i = 0; i < n; ++i) {
        const int32_t q = quantize_one(in[i], scale, zero_point);
        out[i] = (uint8_t)(q < 0 ? 0 : (q > 255 ? 255 : q));
    }
}

void kb_dequantize(int32_t n, const int8_t *in, float scale, int32_t zero_point, float *out)
{
    for (int32_t i = 0; i < n; ++i) {
        out[i] = scale * (float)(in[i] - zero_point);
    }
}

void kb_dequantize_u8(int32_t n, const uint8_t *in, float scale, int32_t zero_point, float *out)
{
    for (int32_t i = 0; i < n; ++i) {
        out[i] = scale * (float)(in[i] - zero_point);
    }
}

/* First index of the largest byte of in[0..n) XOR flip, compared unsigned: flip 0x80 maps int8 order onto uint8 order
 * (v -> v + 128), so one loop serves both argmaxes. */
static int32_t argmax_bytes(int32_t n, const uint8_t *in, uint8_t flip)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) {
        if ((uint8_t)(in[i] ^ flip) > (uint8_t)(in[best] ^ flip)) {
            best = i;
        }
    }
    return best;
}

int32_t kb_argmax_i8(int32_t n, const int8_t *in)
{
    return argmax_bytes(n, (const uint8_t *)in, 0x80);
}

int32_t kb_argmax_u8(int32_t n, const uint8_t *in)
{
    return argmax_bytes(n, in, 0);
}

static int32_t requantize_one(int32_t v, const kb_requantize_params *p)
{
    return kb_multiply_by_quantized_multiplier(v - p->in_offset, p->mult, (int)p->shift) + p->out_offset;
}

void kb_requantize_u8_i8(const kb_requantize_params *p, const uint8_t *in, int8_t *out)
{
    for (int32_t i = 0; i < p->n; ++i) {
        const int32_t v = requantize_one(in[i], p);
        out[i] = (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v));
    }
}

void kb_requantize_i8_u8(const kb_requantize_params *p, const int8_t *in, uint8_t *out)
{
    for (int32_t i = 0; i < p->n; ++i) {
        const int32_t v = requantize_one(in[i], p);
        out[i] = (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
    }
}
