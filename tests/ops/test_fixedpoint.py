"""Tests for kilobyte/ops/fixedpoint.py: gemmlowp's fixed-point exp, reciprocal and log track the real functions
to within a few units of their last place, and the integer primitives match their definitions. (Bit-exactness is
shown against TFLite Micro itself in tests/interp/test_softmax_vs_tflm.py.)"""

import numpy as np

from kilobyte.ops import fixedpoint as fp


def test_count_leading_zeros_matches_bit_length():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.integers(-2**31, 2**31, 1000), [0, 1, -1, 2**31 - 1, -2**31]])
    want = [32 - (int(v) & 0xFFFFFFFF).bit_length() for v in x]
    assert fp.count_leading_zeros(x).tolist() == want


def test_saturating_shift_left_saturates_and_is_exact_below():
    x = np.array([3, -3, 2**29, -2**29, 2**28, -2**29 - 1])
    assert fp.saturating_shift_left(x, 2).tolist() == [12, -12, 2**31 - 1, -2**31, 2**30, -2**31]
    assert fp.rescale(np.array([1 << 19]), 12, 0).tolist() == [2**31 - 1]  # 1.0 in Q12 is Q0's largest value


def test_rounding_half_sum_rounds_half_away_from_zero():
    assert fp.rounding_half_sum(np.array([1, -1, 2, -2, 3]), np.array([0, 0, 1, -1, 3])).tolist() == [1, -1, 2, -2, 3]


def test_exp_on_negative_values_tracks_exp():
    v = np.concatenate([-np.linspace(0, 31.9, 4001), -np.logspace(-6, 0, 200)])
    raw = np.round(v * 2**26).astype(np.int64)
    got = fp.exp_on_negative_values(raw, 5) / 2**31
    assert np.abs(got - np.exp(raw / 2**26)).max() < 5e-7
    assert np.all(np.diff(fp.exp_on_negative_values(-np.arange(0, 2**16, 7), 5)) <= 0)  # monotone


def test_reciprocal_tracks_one_over_x():
    x = np.linspace(0, 1, 2001)[:-1]
    got = fp.one_over_one_plus_x_for_x_in_0_1(np.round(x * 2**31).astype(np.int64)) / 2**31
    assert np.abs(got - 1 / (1 + x)).max() < 1e-8
    sums = np.array([1 << 19, 3 << 19, 5 << 20, (1 << 31) - 1])  # Q12.19: 1, 3, 10, ~4096
    scale, bits = fp.get_reciprocal(sums, 12)
    assert np.allclose(scale / 2**31 * 2.0 ** -bits, 2**19 / sums, rtol=1e-8)


def test_log_tracks_log():
    x = np.concatenate([np.linspace(1, 4095, 3000), [1.0, 2.0, 4096 - 2**-19]])
    raw = np.round(x * 2**19).astype(np.int64)
    got = fp.log_x_for_x_greater_than_or_equal_to_1(raw, 12, 5) / 2**26
    assert np.abs(got - np.log(raw / 2**19)).max() < 1e-7
