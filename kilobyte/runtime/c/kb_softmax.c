/* Kilobyte runtime: int8 SOFTMAX and LOG_SOFTMAX with TFLite's reference arithmetic (reference_ops::Softmax,
 * reference_ops::LogSoftmax), bit for bit, in integers only.
 *
 * Each of p->rows rows of p->depth contiguous values is processed alone, on the differences d = x - max(row) <= 0.
 * d is rescaled into Q5.26 by the precomputed multiplier and left shift (differences below p->diff_min are left out),
 * exp(d) comes from gemmlowp's exp_on_negative_values (a Taylor polynomial on the fractional quarter, times exp(-2^k)
 * for each set bit above it), and the exps are summed in Q12.19. SOFTMAX multiplies each exp by the sum's reciprocal
 * (gemmlowp's Newton-Raphson 1/(1+x)); LOG_SOFTMAX subtracts the sum's logarithm (TFLite's
 * log_x_for_x_greater_than_or_equal_to_1). The fixed-point helpers below follow gemmlowp's operation order exactly;
 * additions that TFLite leaves to int32 wrap-around go through uint32, so nothing here is undefined behaviour.
 *
 * Limits (the code generator can rule both out statically with depth < 512): a SOFTMAX row whose exps sum to 512 or
 * more makes TFLite Micro abort (its output shift would exceed 31); here such a row divides by the larger power of
 * two, which gives -128 everywhere (each probability is below half an output step). A LOG_SOFTMAX row whose sum
 * overflows int32 (4096 values at the maximum) is undefined behaviour in TFLite; here the sum saturates.
 * `out` may be `in`: each value is read before it is written, and the row maximum before any.
 */
#include "kilobyte.h"
#include "kb_requant.h"

/* gemmlowp's raw constants (Q0.31 unless noted). */
#define EXP_MINUS_ONE_EIGHTH 1895147668
#define ONE_THIRD 715827883
#define FORTY_EIGHT_OVER_17_Q2 1515870810  /* Q2.29 */
#define MINUS_32_OVER_17_Q2 (-1010580540)  /* Q2.29 */
#define ONE_Q2 (1 << 29)                  /* 1.0 in Q2.29 */
#define LOG_2 1488522236
#define SQRT_SQRT_HALF 1805811301
#define SQRT_HALF 1518500250
#define QUARTER_Q6 (1 << 23)              /* 1/4 in Q6.25 */
#define LOG_ALPHA_N 117049297
#define LOG_ALPHA_D 127690142
#define LOG_ALPHA_I 1057819769
#define LOG_ALPHA_F 638450708

/* exp(-2^k) for k = -2 .. 4, applied for bit 24 + (k + 2) of a Q5.26 remainder. */
static const int32_t EXP_BARREL[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242};

#define Q5_FRACTION_BITS 26
#define ACCUM_INTEGER_BITS 12
#define LOG_OUTPUT_SHIFT (31 - 5 - 4) /* Q5.26 -> Q4.3 output units */

static int32_t wrapping_sub(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a - (uint32_t)b);
}

static int32_t mul(int32_t a, int32_t b)
{
    return kb_sat_rounding_doubling_high_mul(a, b);
}

/* x * 2^e saturated to int32, 0 <= e <= 31 (gemmlowp SaturatingRoundingMultiplyByPOT with e >= 0). */
static int32_t saturating_shift_left(int32_t x, int e)
{
    const int32_t threshold = (int32_t)(((uint32_t)1 << (31 - e)) - 1u);
    if (x > threshold) {
        return INT32_MAX;
    }
    if (x < -threshold) {
        return INT32_MIN;
    }
    return (int32_t)((uint32_t)x << e);
}

static int32_t saturating_add(int32_t a, int32_t b)
{
    const int64_t s = (int64_t)a + b;
    return s > INT32_MAX ? INT32_MAX : (s < INT32_MIN ? INT32_MIN : (int32_t)s);
}

/* (a + b) / 2 rounded half away from zero (gemmlowp RoundingHalfSum; C's division truncates). */
static int32_t rounding_half_sum(int32_t a, int32_t b)
{
    const int64_t s = (int64_t)a + b;
    return (int32_t)((s + (s >= 0 ? 1 : -1)) / 2);
}

static int count_leading_zeros(uint32_t x)
{
    int n = 0;
    if (x == 0) {
        return 32;
    }
    while (!(x & 0x80000000u)) {
        x <<= 1;
        ++n;
    }
    return n;
}

/* exp(a) for a Q0.31 a in [-1/4, 0): the Taylor expansion around -1/8 (sums wrap as gemmlowp's would). */
static int32_t exp_on_quarter(int32_t a)
{
    const int32_t x = kb_wrapping_add(a, 1 << 28);
    const int32_t x2 = mul(x, x);
    const int32_t x3 = mul(x2, x);
    const int32_t x4 = mul(x2, x2);
    const int32_t x4_over_4 = kb_rounding_divide_by_pot(x4, 2);
    const int32_t poly = kb_rounding_divide_by_pot(kb_wrapping_add(mul(kb_wrapping_add(x4_over_4, x3), ONE_THIRD),
                                                                   x2), 1);
    return kb_wrapping_add(EXP_MINUS_ONE_EIGHTH, mul(EXP_MINUS_ONE_EIGHTH, kb_wrapping_add(x, poly)));
}

/* exp(a) in Q0.31 for a Q5.26 a <= 0 (gemmlowp exp_on_negative_values). */
static int32_t exp_on_negative_values(int32_t a)
{
    const int32_t quarter = 1 << (Q5_FRACTION_BITS - 2);
    if (a == 0) {
        return INT32_MAX;
    }
    const int32_t a_mod_quarter_minus_quarter = (int32_t)((uint32_t)a & (uint32_t)(quarter - 1)) - quarter;
    /* Rescale<0>: times 2^5, exact since the value is in [-2^24, 0). */
    int32_t result = exp_on_quarter(a_mod_quarter_minus_quarter * 32);
    const uint32_t remainder = (uint32_t)a_mod_quarter_minus_quarter - (uint32_t)a;
    for (int k = 0; k < 7; ++k) {
        if (remainder & ((uint32_t)1 << (Q5_FRACTION_BITS - 2 + k))) {
            result = mul(result, EXP_BARREL[k]);
        }
    }
    return result;
}

/* 1 / (1 + a) in Q0.31 for a Q0.31 a in [0, 1): three Newton-Raphson steps in Q2.29. */
static int32_t one_over_one_plus_x(int32_t a)
{
    const int32_t half_denominator = rounding_half_sum(a, INT32_MAX);
    int32_t x = kb_wrapping_add(FORTY_EIGHT_OVER_17_Q2, mul(half_denominator, MINUS_32_OVER_17_Q2));
    for (int i = 0; i < 3; ++i) {
        const int32_t one_minus_half_denominator_times_x = wrapping_sub(ONE_Q2, mul(half_denominator, x));
        x = kb_wrapping_add(x, saturating_shift_left(mul(x, one_minus_half_denominator_times_x), 2));
    }
    return saturating_shift_left(x, 1); /* x / 2 read as Q1, rescaled to Q0 */
}

/* log(r) for r (Q0.31) in [sqrt(sqrt(1/2)), sqrt(sqrt(2))), in Q6.25: a rational approximation around 1. */
static int32_t log_of_normalised(int32_t r)
{
    const int32_t p = rounding_half_sum(r, SQRT_SQRT_HALF);
    int32_t q = wrapping_sub(r, SQRT_SQRT_HALF);
    q = kb_wrapping_add(q, q);
    const int32_t common_sq = mul(q, q);
    const int32_t num = kb_wrapping_add(mul(q, r), mul(mul(q, common_sq), LOG_ALPHA_N));
    const int32_t denom_minus_one = kb_wrapping_add(
        mul(p, kb_wrapping_add(kb_wrapping_add(LOG_ALPHA_I, q), mul(LOG_ALPHA_D, common_sq))), mul(LOG_ALPHA_F, q));
    return mul(kb_rounding_divide_by_pot(num, 6), one_over_one_plus_x(denom_minus_one));
}

/* log(x) in Q5.26 for a Q12.19 x >= 1: x = 2^z * r with r near 1, of two candidate normalisations (a: r in
 * [1/2, 1) times sqrt(2), b: x times sqrt(1/2) in [1/2, 1)) the one nearer 1; log(x) = z * log(2) + log(r). */
static int32_t log_q12_to_q5(int32_t x)
{
    const int z_a_headroom_plus_1 = count_leading_zeros((uint32_t)x);
    const int32_t r_a = saturating_shift_left(mul(saturating_shift_left(x, z_a_headroom_plus_1 - 1), SQRT_HALF), 1);
    const int32_t z_a_pow_2_adj = saturating_add(
        saturating_shift_left(ACCUM_INTEGER_BITS - z_a_headroom_plus_1, 31 - 6), QUARTER_Q6);
    const int z_b_headroom = count_leading_zeros((uint32_t)mul(x, SQRT_HALF)) - 1;
    const int32_t r_b = saturating_shift_left(x, z_b_headroom);
    const int32_t z_b_pow_2_adj = saturating_add(
        saturating_shift_left(ACCUM_INTEGER_BITS - z_b_headroom, 31 - 6), -QUARTER_Q6);
    const int32_t r = r_a < r_b ? r_a : r_b;
    const int32_t z_pow_2_adj = z_a_pow_2_adj > z_b_pow_2_adj ? z_a_pow_2_adj : z_b_pow_2_adj;
    const int32_t log_q6 = kb_wrapping_add(mul(z_pow_2_adj, LOG_2), log_of_normalised(r));
    return saturating_shift_left(log_q6, 1); /* Q6 -> Q5 */
}

/* -- the row walk ----------------------------------------------------------------------------------------------- */
static int32_t row_max(const int8_t *x, int32_t n)
{
    int32_t m = -128;
    for (int32_t c = 0; c < n; ++c) {
        m = x[c] > m ? x[c] : m;
    }
    return m;
}

/* d rescaled to Q5.26; only called for d >= diff_min, where d * 2^left_shift fits int32. */
static int32_t scaled_diff(const kb_softmax_params *p, int32_t d)
{
    return kb_multiply_by_quantized_multiplier(d, p->input_multiplier, (int)p->input_left_shift);
}

/* One exp in Q12.19, the units of the row sum. */
static int32_t exp_q12(const kb_softmax_params *p, int32_t d)
{
    return kb_rounding_divide_by_pot(exp_on_negative_values(scaled_diff(p, d)), ACCUM_INTEGER_BITS); /* Q0 -> Q12 */
}

static void softmax_row(const kb_softmax_params *p, const int8_t *x, int8_t *y)
{
    const int32_t n = p->depth, max = row_max(x, n);
    uint32_t sum = 0; /* TFLite's int32 accumulator, wrapping */
    for (int32_t c = 0; c < n; ++c) {
        if (x[c] - max >= p->diff_min) {
            sum += (uint32_t)exp_q12(p, x[c] - max);
        }
    }
    /* GetReciprocal: sum = 2^bits_over_unit * (1 + s) with s in [0, 1) read from the bits below the leading one. */
    const int headroom_plus_one = count_leading_zeros(sum);
    const uint32_t shifted_sum = headroom_plus_one < 32 ? sum << headroom_plus_one : 0u; /* 0: a wrapped sum */
    const int32_t shifted_sum_minus_one = (int32_t)(shifted_sum - 0x80000000u);
    const int32_t reciprocal = one_over_one_plus_x(shifted_sum_minus_one);
    const int exponent = ACCUM_INTEGER_BITS - headroom_plus_one + 31 - 8;
    for (int32_t c = 0; c < n; ++c) {
        const int32_t d = x[c] - max;
        int32_t v = -128;
        /* exponent > 31: the product (< 2^31) over 2^32 or more rounds to 0 */
        if (d >= p->diff_min && exponent <= 31) {
            v = kb_rounding_divide_by_pot(mul(reciprocal, exp_on_negative_values(scaled_diff(p, d))), exponent) - 128;
        }
        y[c] = kb_clamp_i8(v, -128, 127);
    }
}

static void log_softmax_row(const kb_softmax_params *p, const int8_t *x, int8_t *y)
{
    const int32_t n = p->depth, max = row_max(x, n);
    int32_t sum = 0;
    for (int32_t c = 0; c < n; ++c) {
        if (x[c] - max >= p->diff_min) {
            sum = saturating_add(sum, exp_q12(p, x[c] - max));
        }
    }
    const int32_t log_sum = log_q12_to_q5(sum);
    /* Below this, d rescaled minus log_sum would leave Q5.26: such values get the lowest output. */
    const int32_t lowest = kb_multiply_by_quantized_multiplier(kb_wrapping_add(log_sum, INT32_MIN),
                                                               p->reverse_scaling_divisor,
                                                               -(int)p->reverse_scaling_right_shift);
    const int32_t cutoff = p->diff_min - 1 > lowest ? p->diff_min - 1 : lowest;
    for (int32_t c = 0; c < n; ++c) {
        const int32_t d = x[c] - max;
        int32_t v = -128;
        if (d > cutoff) {
            v = kb_rounding_divide_by_pot(wrapping_sub(scaled_diff(p, d), log_sum), LOG_OUTPUT_SHIFT) + 127;
        }
        y[c] = kb_clamp_i8(v, -128, 127);
    }
}

void kb_softmax(const kb_softmax_params *p, const int8_t *in, int8_t *out)
{
    for (int32_t r = 0; r < p->rows; ++r) {
        softmax_row(p, in + r * p->depth, out + r * p->depth);
    }
}

void kb_log_softmax(const kb_softmax_params *p, const int8_t *in, int8_t *out)
{
    for (int32_t r = 0; r < p->rows; ++r) {
        log_softmax_row(p, in + r * p->depth, out + r * p->depth);
    }
}
