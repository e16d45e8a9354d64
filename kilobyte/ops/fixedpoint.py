"""Quantisation stage: gemmlowp's fixed-point math functions (exp, 1/(1+x), (1-x)/(1+x), log), vectorised, bit for
bit.

TFLite's int8 SOFTMAX, LOG_SOFTMAX, LOGISTIC and TANH evaluate exp, a reciprocal and a logarithm in gemmlowp's
`FixedPoint<int32_t, m>` format: a raw int32 `r` stands for `r / 2^(31 - m)` (m integer bits, 31 - m fractional bits).
The functions here take and return raw values as int64 numpy arrays holding int32 values, one element per lane, and
follow gemmlowp's operation order exactly (its products are `SaturatingRoundingDoublingHighMul`, its power-of-two
rescales saturate upwards and round downwards); plain additions wrap to int32 as the C code does in practice. The
polynomial coefficients are gemmlowp's own raw constants, written as integers so no float arithmetic is involved.

>>> int(exp_on_negative_values(np.int64(0), 5))  # exp(0) is the largest Q0.31 value
2147483647
>>> round(int(exp_on_negative_values(np.int64(-(1 << 26)), 5)) / 2**31, 5)  # exp(-1): Q5.26 in, Q0.31 out
0.36788
"""

from __future__ import annotations

import numpy as np

from .arith import INT32_MAX, INT32_MIN, rounding_divide_by_pot, wrap_int32
from .arith import saturating_rounding_doubling_high_mul as mul

# gemmlowp's constants (raw Q0.31 unless noted).
EXP_MINUS_ONE_EIGHTH = 1895147668  # exp(-1/8)
ONE_THIRD = 715827883
# exp(-2^k) for k = -2 .. 4: the barrel shifter multiplies by these for each set bit of the integer part.
EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
              (4, 242))
FORTY_EIGHT_OVER_17_Q2 = 1515870810  # 48/17 in Q2.29 (Newton-Raphson start for 1/x)
MINUS_32_OVER_17_Q2 = -1010580540  # -32/17 in Q2.29
LOG_2 = 1488522236
SQRT_SQRT_HALF = 1805811301
SQRT_HALF = 1518500250
ONE_QUARTER = 536870912
LOG_ALPHA_N = 117049297  # the rational approximation of log(x) on [sqrt(sqrt(1/2)), sqrt(sqrt(2))]
LOG_ALPHA_D = 127690142
LOG_ALPHA_I = 1057819769
LOG_ALPHA_F = 638450708


def _i64(x) -> np.ndarray:
    return np.asarray(x, np.int64)


def add(a, b) -> np.ndarray:
    """int32 `a + b`, wrapping (gemmlowp's `operator+` on raw values)."""
    return wrap_int32(_i64(a) + _i64(b))


def sub(a, b) -> np.ndarray:
    """int32 `a - b`, wrapping."""
    return wrap_int32(_i64(a) - _i64(b))


def saturating_add(a, b) -> np.ndarray:
    """TFLite's `SaturatingAddNonGemmlowp` on int32."""
    return np.clip(_i64(a) + _i64(b), INT32_MIN, INT32_MAX)


def saturating_sub(a, b) -> np.ndarray:
    """TFLite's `SaturatingSub` on int32."""
    return np.clip(_i64(a) - _i64(b), INT32_MIN, INT32_MAX)


def count_leading_zeros(x) -> np.ndarray:
    """`CountLeadingZeros(static_cast<uint32_t>(x))`: 32 for 0.

    >>> count_leading_zeros(np.array([0, 1, -1, 1 << 19])).tolist()
    [32, 31, 0, 12]
    """
    u = _i64(x) & 0xFFFFFFFF
    _, bits = np.frexp(u.astype(np.float64))  # u < 2^32 is exact in float64; frexp's exponent is its bit length
    return 32 - bits.astype(np.int64)


def saturating_shift_left(x, exponent) -> np.ndarray:
    """gemmlowp `SaturatingRoundingMultiplyByPOT` for exponents >= 0 (also TFLite's `...POTParam`): `x · 2^e`,
    saturated to int32. `exponent` may be an array (one per lane)."""
    x, e = _i64(x), _i64(exponent)
    threshold = (np.int64(1) << (31 - e)) - 1  # the largest x that does not overflow
    shifted = x << e
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, shifted))


def multiply_by_pot(x, exponent: int) -> np.ndarray:
    """gemmlowp `SaturatingRoundingMultiplyByPOT<exponent>`: saturating left shift, or rounding right shift."""
    if exponent >= 0:
        return saturating_shift_left(x, exponent)
    return rounding_divide_by_pot(x, -exponent)


def rescale(x, src_bits: int, dst_bits: int) -> np.ndarray:
    """gemmlowp `Rescale<dst_bits>` of a `FixedPoint<int32, src_bits>` raw value."""
    return multiply_by_pot(x, src_bits - dst_bits)


def rounding_half_sum(a, b) -> np.ndarray:
    """gemmlowp `RoundingHalfSum`: (a + b ± 1) / 2 with C's truncating division."""
    s = _i64(a) + _i64(b)
    s = s + np.where(s >= 0, 1, -1)
    return np.where(s >= 0, s // 2, -((-s) // 2))


# -- exp -----------------------------------------------------------------------------------------------------------
def exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    """exp(a) for a Q0.31 `a` in [-1/4, 0): a fourth-order Taylor expansion around -1/8."""
    x = add(a, 1 << 28)  # a + 1/8
    x2 = mul(x, x)
    x3 = mul(x2, x)
    x4 = mul(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(add(mul(add(x4_over_4, x3), ONE_THIRD), x2), 1)
    return add(EXP_MINUS_ONE_EIGHTH, mul(EXP_MINUS_ONE_EIGHTH, add(x, poly)))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp `exp_on_negative_values`: exp(a) in Q0.31 for `a` <= 0 in `FixedPoint<int32, integer_bits>`.

    The fractional quarter goes through the Taylor expansion; each set bit of the rest multiplies by exp(-2^k).
    """
    a = _i64(a)
    fractional_bits = 31 - integer_bits
    quarter = 1 << (fractional_bits - 2)
    a_mod_quarter_minus_quarter = (a & (quarter - 1)) - quarter
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_quarter, integer_bits, 0))
    remainder = sub(a_mod_quarter_minus_quarter, a)
    for k, multiplier in EXP_BARREL:
        if integer_bits > k:
            bit = (remainder >> (fractional_bits + k)) & 1
            result = np.where(bit == 1, mul(result, multiplier), result)
    if integer_bits > 5:  # formats that can hold values below -32 clamp them to 0
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


# -- reciprocal ------------------------------------------------------------------------------------------------------
def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """1 / (1 + a) in Q0.31 for a Q0.31 `a` in [0, 1): three Newton-Raphson steps in Q2.29."""
    half_denominator = rounding_half_sum(a, INT32_MAX)
    x = add(FORTY_EIGHT_OVER_17_Q2, mul(half_denominator, MINUS_32_OVER_17_Q2))
    one_q2 = 1 << 29  # 1.0 in Q2.29
    for _ in range(3):
        one_minus_half_denominator_times_x = sub(one_q2, mul(half_denominator, x))
        x = add(x, rescale(mul(x, one_minus_half_denominator_times_x), 4, 2))  # Q2 · Q2 is Q4
    return rescale(x, 1, 0)  # x / 2 (the same raw value read as Q1), then to Q0


def one_minus_x_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """(1 - a) / (1 + a) in Q0.31 for a Q0.31 `a` in [0, 1): the same Newton-Raphson steps as
    `one_over_one_plus_x_for_x_in_0_1`, then (x - 1) read back from Q2.29 (tanh's last step)."""
    half_denominator = rounding_half_sum(a, INT32_MAX)
    x = add(FORTY_EIGHT_OVER_17_Q2, mul(half_denominator, MINUS_32_OVER_17_Q2))
    one_q2 = 1 << 29
    for _ in range(3):
        one_minus_half_denominator_times_x = sub(one_q2, mul(half_denominator, x))
        x = add(x, rescale(mul(x, one_minus_half_denominator_times_x), 4, 2))
    return rescale(sub(x, one_q2), 2, 0)


def get_reciprocal(x, x_integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's `GetReciprocal`: (1/x scaled into [1/2, 1) as Q0.31, num_bits_over_unit) for a positive
    `FixedPoint<int32, x_integer_digits>` raw `x`; the true reciprocal is the first times 2^-num_bits_over_unit."""
    headroom_plus_one = count_leading_zeros(x)
    num_bits_over_unit = x_integer_digits - headroom_plus_one
    shifted = ((_i64(x) & 0xFFFFFFFF) << headroom_plus_one) & 0xFFFFFFFF  # uint32 arithmetic, as in TFLite
    shifted_minus_one = wrap_int32(shifted - (1 << 31))
    return one_over_one_plus_x_for_x_in_0_1(shifted_minus_one), num_bits_over_unit


# -- log -------------------------------------------------------------------------------------------------------------
def log_x_for_x_greater_than_or_equal_to_1(x, input_bits: int, output_bits: int) -> np.ndarray:
    """TFLite's `log_x_for_x_greater_than_or_equal_to_1_impl<output_bits, input_bits>`: log(x) for x >= 1.

    x is normalised to r in [sqrt(sqrt(1/2)), sqrt(sqrt(2))) by a power of two z (two candidate shifts, a and b,
    of which the one closer to the interval wins); log(x) = z·log(2) + a rational approximation of log(r).
    """
    accum_bits = output_bits + 1  # one bit of headroom: z·log(2) may saturate
    shifted_quarter = rescale(ONE_QUARTER, 0, accum_bits)
    z_a = _i64(x)  # read as Q0.31: the shifts below find the exponent themselves
    z_a_headroom_plus_1 = count_leading_zeros(z_a)
    r_a_tmp = saturating_shift_left(z_a, z_a_headroom_plus_1 - 1)
    r_a_raw = saturating_shift_left(mul(r_a_tmp, SQRT_HALF), 1)
    z_a_pow_2_adj = saturating_add(saturating_shift_left(input_bits - z_a_headroom_plus_1, 31 - accum_bits),
                                   shifted_quarter)
    z_b = mul(z_a, SQRT_HALF)
    z_b_headroom = count_leading_zeros(z_b) - 1
    r_b_raw = saturating_shift_left(z_a, z_b_headroom)
    z_b_pow_2_adj = saturating_sub(saturating_shift_left(input_bits - z_b_headroom, 31 - accum_bits),
                                   shifted_quarter)
    r = np.minimum(r_a_raw, r_b_raw)
    z_pow_2_adj = np.maximum(z_a_pow_2_adj, z_b_pow_2_adj)
    return rescale(add(mul(z_pow_2_adj, LOG_2), _log_of_normalised(r, accum_bits)), accum_bits, output_bits)


def _log_of_normalised(r, accum_bits: int) -> np.ndarray:
    """log(r) for r (Q0.31) near 1, in Q`accum_bits`: q = 2(r - sqrt(sqrt(1/2))), num / (1 + denom_minus_one)."""
    p = rounding_half_sum(r, SQRT_SQRT_HALF)
    q = sub(r, SQRT_SQRT_HALF)
    q = add(q, q)
    common_sq = mul(q, q)
    num = add(mul(q, r), mul(mul(q, common_sq), LOG_ALPHA_N))
    denom_minus_one = add(mul(p, add(add(LOG_ALPHA_I, q), mul(LOG_ALPHA_D, common_sq))), mul(LOG_ALPHA_F, q))
    recip_denom = one_over_one_plus_x_for_x_in_0_1(denom_minus_one)
    return mul(rescale(num, 0, accum_bits), recip_denom)
