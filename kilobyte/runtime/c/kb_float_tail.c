/* Kilobyte runtime: the float ops a model file may run after its last DEQUANTIZE (a "float tail"), in place on the
 * float output buffer, with float32 arithmetic in the order TFLite's reference float kernels use:
 *
 * SOFTMAX: per row of `depth`, max; e_c = exp((x_c - max) * beta), summed in order; y_c = e_c / sum.
 * LOG_SOFTMAX: per row, max; sum of exp(x_c - max) in order; y_c = x_c - max - log(sum).
 * LOGISTIC: 1 for x > 16.619047164916992188, exp(x) for x < -9, else 1 / (1 + exp(-x)) (TFLite's cut-offs).
 * ADD / MUL by a constant: y = min(max(x op c, lo), hi), the fused activation's clamp; c broadcast as c[(i / inner)
 * % c_len] (a scalar: c_len 1; per channel: c_len = channels, inner 1; a whole tensor: c_len = n).
 * RESHAPE needs no code (the same bytes). Each reads x_c before it writes y_c, so in place is exact.
 * Only expf / logf are used (libm); every intermediate is float, never double.
 */
#include <math.h>

#include "kilobyte.h"

/* The largest value of one row (TFLite's reference softmaxes subtract it before expf). */
static float row_max(const float *row, int32_t depth)
{
    float max = row[0];
    for (int32_t c = 1; c < depth; ++c) {
        max = row[c] > max ? row[c] : max;
    }
    return max;
}

void kb_softmax_f32(int32_t rows, int32_t depth, float beta, float *x)
{
    for (int32_t r = 0; r < rows; ++r) {
        float *row = x + r * depth;
        const float max = row_max(row, depth);
        float sum = 0.0f;
        for (int32_t c = 0; c < depth; ++c) {
            const float e = expf((row[c] - max) * beta);
            row[c] = e;
            sum += e;
        }
        for (int32_t c = 0; c < depth; ++c) {
            row[c] = row[c] / sum;
        }
    }
}

void kb_log_softmax_f32(int32_t rows, int32_t depth, float *x)
{
    for (int32_t r = 0; r < rows; ++r) {
        float *row = x + r * depth;
        const float max = row_max(row, depth);
        float sum = 0.0f;
        for (int32_t c = 0; c < depth; ++c) {
            sum += expf(row[c] - max);
        }
        const float log_sum = logf(sum);
        for (int32_t c = 0; c < depth; ++c) {
            row[c] = row[c] - max - log_sum;
        }
    }
}

void kb_logistic_f32(int32_t n, float *x)
{
    for (int32_t i = 0; i < n; ++i) {
        const float v = x[i];
        if (v > 16.619047164916992188f) {
            x[i] = 1.0f;
        } else if (v < -9.0f) {
            x[i] = expf(v);
        } else {
            x[i] = 1.0f / (1.0f + expf(-v));
        }
    }
}

static float clamp(float v, float lo, float hi)
{
    v = v < lo ? lo : v;  /* std::max(v, lo), then std::min(., hi) */
    return hi < v ? hi : v;
}

void kb_add_const_f32(int32_t n, float *x, const float *c, int32_t c_len, int32_t inner, float lo, float hi)
{
    for (int32_t i = 0; i < n; ++i) {
        x[i] = clamp(x[i] + c[(i / inner) % c_len], lo, hi);
    }
}

void kb_mul_const_f32(int32_t n, float *x, const float *c, int32_t c_len, int32_t inner, float lo, float hi)
{
    for (int32_t i = 0; i < n; ++i) {
        x[i] = clamp(x[i] * c[(i / inner) % c_len], lo, hi);
    }
}
