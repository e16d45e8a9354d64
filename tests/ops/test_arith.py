"""TFLite's integer arithmetic: hand-derived edge cases, and hypothesis against a big-int model of the C++ code.

The model below is a line-by-line transcription of TFLite's / gemmlowp's C++ with Python's unbounded integers and
exact fractions (`quantization_util.cc` QuantizeMultiplier, `fixedpoint.h` SaturatingRoundingDoublingHighMul and
RoundingDivideByPOT, `common.cc` double-rounding MultiplyByQuantizedMultiplier); the numpy implementation under test
must agree with it on every input.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kilobyte.ir import Activation
from kilobyte.ops.arith import (
    INT32_MAX,
    INT32_MIN,
    activation_range,
    add_params,
    channel_multipliers,
    dequantize_values,
    fc_multipliers,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    quantize_values,
    round_half_away,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)


# -- the big-int model of the C++ ------------------------------------------------------------------------------------
def c_div(a: int, b: int) -> int:
    """C/C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def to_int32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def ref_srdhm(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return c_div(ab + nudge, 1 << 31)


def ref_rdbpot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask  # Python's & on negative ints sees the two's complement bits, like int32 does
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def ref_mbqm(x: int, multiplier: int, shift: int) -> int:
    left, right = (shift, 0) if shift > 0 else (0, -shift)
    return ref_rdbpot(ref_srdhm(to_int32(x * (1 << left)), multiplier), right)


def ref_round(f: Fraction) -> int:
    """std::round: half away from zero."""
    n = math.floor(abs(f) + Fraction(1, 2))
    return n if f >= 0 else -n


def ref_quantize_multiplier(d: float) -> tuple[int, int]:
    if d == 0.0:
        return 0, 0
    q, shift = math.frexp(d)
    q_fixed = ref_round(Fraction(q) * (1 << 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


# -- hand-derived edge cases -----------------------------------------------------------------------------------------
def test_srdhm_edge_cases():
    assert saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX  # the one saturating product
    # (2^31-1)^2·2/2^32 = 2^31 - 2 + tiny: truncated after the nudge
    assert saturating_rounding_doubling_high_mul(INT32_MAX, INT32_MAX) == INT32_MAX - 1
    assert saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MAX) == INT32_MIN + 1
    # ±0.5 ties: +0.5 -> 1, but -0.5 -> 0 and -1.5 -> -1 (the negative nudge is 1 - 2^30, not -2^30)
    assert saturating_rounding_doubling_high_mul(1, 1 << 30) == 1
    assert saturating_rounding_doubling_high_mul(-1, 1 << 30) == 0
    assert saturating_rounding_doubling_high_mul(-3, 1 << 30) == -1
    assert saturating_rounding_doubling_high_mul(3, 1 << 30) == 2


def test_rounding_divide_by_pot_edge_cases():
    got = rounding_divide_by_pot(np.array([5, -5, 6, -6, 7, -7, -4, 0, INT32_MIN, INT32_MAX]), 1)
    assert got.tolist() == [3, -3, 3, -3, 4, -4, -2, 0, -(1 << 30), 1 << 30]  # ties away from zero
    assert rounding_divide_by_pot(np.array([6, -6, 7]), 2).tolist() == [2, -2, 2]  # 1.5 -> 2, -1.5 -> -2, 1.75 -> 2
    assert rounding_divide_by_pot(12345, 0) == 12345
    assert rounding_divide_by_pot(np.array([INT32_MAX, INT32_MIN]), 31).tolist() == [1, -1]


def test_quantize_multiplier_edge_cases():
    cases = {
        0.0: (0, 0),
        0.5: (1 << 30, 0),
        1.0: (1 << 30, 1),
        0.75: (3 << 29, 0),
        3.0: (3 << 29, 2),
        1 - 2.0**-40: (1 << 30, 1),  # the mantissa rounds up to 2^31: renormalised
        0.5 + 2.0**-32: ((1 << 30) + 1, 0),  # q·2^31 = 2^30 + 0.5: the tie rounds away from zero
        2.0**-32: (1 << 30, -31),  # smallest shift kept
        2.0**-33: (0, 0),  # flushed to zero
    }
    for real, want in cases.items():
        m, s = quantize_multiplier(real)
        assert (int(m), int(s)) == want, real
    m, s = quantize_multiplier(np.array([0.5, 3.0]))  # vectorised
    assert m.tolist() == [1 << 30, 3 << 29] and s.tolist() == [0, 2]


def test_multiply_by_quantized_multiplier_edge_cases():
    half = 1 << 30  # 0.5 in Q0.31
    assert multiply_by_quantized_multiplier(100, half, 0) == 50
    assert multiply_by_quantized_multiplier(-3, half, 0) == -1  # -1.5 -> -1 (SRDHM ties upward)
    assert multiply_by_quantized_multiplier(1, half, 1) == 1  # left shift first
    # Double rounding (TFLite Micro's default): 5 · 0.25 = 1.25 -> SRDHM gives round(2.5) = 3, then 3/2 -> 2.
    assert multiply_by_quantized_multiplier(5, half, -1) == 2
    assert multiply_by_quantized_multiplier(-5, half, -1) == -1  # -2.5 -> -2, then -1.0
    assert multiply_by_quantized_multiplier(1 << 30, half, 2) == 0  # x·4 wraps to 0 in int32, as the C code does
    assert multiply_by_quantized_multiplier(12345, 0, 0) == 0
    per_channel = multiply_by_quantized_multiplier(np.array([[1000, 1000]]), np.array([half, 3 << 29]),
                                                   np.array([-2, 1]))
    assert per_channel.tolist() == [[125, 1500]]


def test_round_half_away_is_exact_at_float32_edges():
    x = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, 8388609.0], np.float32)
    assert round_half_away(x).tolist() == [1, -1, 2, 3, -3, 0, 8388609]  # floor(x + 0.5) fails the last two


def test_activation_ranges():
    assert activation_range(Activation.NONE, 0.1, 5) == (-128, 127)
    assert activation_range(Activation.RELU, 0.1, -10) == (-10, 127)
    assert activation_range(Activation.RELU6, 6 / 255, -128) == (-128, 127)  # 6 / s = 255: exactly the top
    assert activation_range(Activation.RELU6, 0.05, -128) == (-128, -8)  # -128 + 120
    assert activation_range(Activation.RELU, 0.1, -128) == (-128, 127)


def test_add_params_equal_scales():
    p = add_params(0.1, 3, 0.1, -7, 0.2, 1, Activation.RELU)
    assert (p.input1_offset, p.input2_offset, p.output_offset, p.left_shift) == (-3, 7, 1, 20)
    assert (p.input1_multiplier, p.input1_shift) == (1 << 30, 0)  # 0.1 / (2·0.1) = 0.5
    # twice_max / (2^20 · s_out) = 0.2 / (2^20 · 0.2) = 2^-20 (float32 scales, double arithmetic)
    want = quantize_multiplier(2 * float(np.float32(0.1)) / (2**20 * float(np.float32(0.2))))
    assert (p.output_multiplier, p.output_shift) == tuple(int(v) for v in want)
    assert (p.act_min, p.act_max) == (1, 127)


def test_fc_single_scale_uses_float32_product():
    s_in, s_w, s_out = 0.0123, 0.00457, 0.0391
    m, s = fc_multipliers(s_in, [s_w], s_out)
    want = quantize_multiplier(float(np.float32(s_in) * np.float32(s_w)) / float(np.float32(s_out)))
    assert (int(m[0]), int(s[0])) == tuple(int(v) for v in want)
    m2, s2 = channel_multipliers(s_in, [s_w, s_w], s_out)
    assert m2.shape == (2,) and int(s2[0]) == int(s[0])


def test_quantize_dequantize_values():
    assert quantize_values(np.array([0.5, -0.25, 0.375, 100.0, -100.0]), 0.25, -3).tolist() == [-1, -4, -1, 127, -128]
    assert dequantize_values(np.array([-3, 5], np.int8), 0.25, -3).tolist() == [0.0, 2.0]


# -- hypothesis against the model ------------------------------------------------------------------------------------
int32s = st.integers(INT32_MIN, INT32_MAX)


@given(st.lists(st.tuples(int32s, int32s), min_size=1, max_size=20))
def test_srdhm_matches_model(pairs):
    a, b = np.array(pairs, np.int64).T
    assert saturating_rounding_doubling_high_mul(a, b).tolist() == [ref_srdhm(x, y) for x, y in pairs]


@given(st.lists(st.tuples(int32s, st.integers(0, 31)), min_size=1, max_size=20))
def test_rdbpot_matches_model(pairs):
    x, e = np.array(pairs, np.int64).T
    assert rounding_divide_by_pot(x, e).tolist() == [ref_rdbpot(int(v), int(k)) for v, k in pairs]


@given(st.lists(st.tuples(int32s, st.one_of(st.just(0), st.integers(1 << 30, INT32_MAX)), st.integers(-31, 30)),
                min_size=1, max_size=20))
def test_mbqm_matches_model(triples):
    x, m, s = np.array(triples, np.int64).T
    assert multiply_by_quantized_multiplier(x, m, s).tolist() == [ref_mbqm(*t) for t in triples]


@given(st.floats(min_value=0.0, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_quantize_multiplier_matches_model(real):
    m, s = quantize_multiplier(real)
    assert (int(m), int(s)) == ref_quantize_multiplier(real)
    if m:  # m · 2^(s - 31) approximates real to 2^-31 relative
        assert abs(Fraction(int(m)) * Fraction(2) ** (int(s) - 31) - Fraction(real)) <= Fraction(real) * 2**-30


@given(st.integers(-(1 << 24), 1 << 24), st.floats(min_value=1e-6, max_value=0.999))
def test_mbqm_is_within_one_of_the_real_product(x, real):
    m, s = quantize_multiplier(real)
    assert abs(int(multiply_by_quantized_multiplier(x, m, s)) - x * real) <= 1
