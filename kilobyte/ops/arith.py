"""Quantisation stage: TFLite's integer arithmetic, vectorised over numpy int64 arrays, bit for bit.

Everything int8 in Kilobyte rests on these few functions, transcribed from TFLite's definitions (not from float
approximations): `quantize_multiplier` (`QuantizeMultiplier`: frexp, round half away from zero, flush below 2^-31),
gemmlowp's `SaturatingRoundingDoublingHighMul` and `RoundingDivideByPOT`, TFLite's double-rounding
`MultiplyByQuantizedMultiplier` (TFLite Micro's default build; `TFLITE_SINGLE_ROUNDING` is off), the fused-activation
clamp `CalculateActivationRangeQuantized`, the per-kernel multiplier preparation (conv / depthwise / fully connected /
ADD and SUB / MUL) and the QUANTIZE / DEQUANTIZE element maps. Integer results are int64 arrays whose values fit the C
type the kernel uses; C's int32 wrap-around is emulated where the C code can overflow.

>>> m, s = quantize_multiplier(0.5)
>>> int(m), int(s)
(1073741824, 0)
>>> int(multiply_by_quantized_multiplier(100, m, s))
50
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError
from .types import Activation

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT8_MIN, INT8_MAX = -128, 127
ADD_LEFT_SHIFT = 20  # TFLite's int8 ADD: inputs are shifted left by 20 bits before rescaling


def round_half_away(x) -> np.ndarray:
    """`TfLiteRound` / `std::round`: round to nearest, ties away from zero (numpy's `round` ties to even)."""
    x = np.asarray(x)
    whole = np.trunc(x)
    # x - trunc(x) is exact in floating point, so the tie test is exact too (unlike floor(x + 0.5)).
    return whole + np.sign(x) * (np.abs(x - whole) >= 0.5)


def wrap_int32(x) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32 range (what C's int32 arithmetic does in practice)."""
    return np.asarray(x, np.int64).astype(np.int32).astype(np.int64)


def quantize_multiplier(real) -> tuple[np.ndarray, np.ndarray]:
    """`QuantizeMultiplier`: real multiplier(s) -> (int32 fixed-point multiplier, shift), as int64 arrays.

    `real ≈ multiplier · 2^(shift - 31)`; multipliers are in [2^30, 2^31) or 0 (for 0 and for reals < ~2^-31).

    >>> [int(v) for v in quantize_multiplier(0.75)]
    [1610612736, 0]
    >>> [int(v) for v in quantize_multiplier(3.0)]
    [1610612736, 2]
    """
    real = np.asarray(real, np.float64)
    q, shift = np.frexp(real)  # real = q * 2^shift, |q| in [0.5, 1): exactly C's std::frexp
    q_fixed = round_half_away(q * float(1 << 31)).astype(np.int64)  # q * 2^31 is exact, so is the rounding
    shift = shift.astype(np.int64)
    carry = q_fixed == (1 << 31)  # q rounded up to 1.0: renormalise
    q_fixed = np.where(carry, q_fixed // 2, q_fixed)
    shift = np.where(carry, shift + 1, shift)
    flush = shift < -31  # TFLite flushes multipliers below ~2^-31 to zero
    q_fixed = np.where(flush | (real == 0), 0, q_fixed)
    shift = np.where(flush | (real == 0), 0, shift)
    return q_fixed, shift


def saturating_rounding_doubling_high_mul(a, b) -> np.ndarray:
    """gemmlowp `SaturatingRoundingDoublingHighMul(int32 a, int32 b)`: round(a·b / 2^31), saturating MIN·MIN.

    The C code divides with truncation toward zero after adding a sign-dependent nudge of ±2^30.

    >>> int(saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN))
    2147483647
    """
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    t = np.multiply(a, b, dtype=np.int64)  # |a·b| <= 2^62: exact in int64
    t = np.asarray(t)
    negative = t < 0
    t += 1 << 30  # nudge +2^30, or 1 - 2^30 for negative products
    np.subtract(t, (1 << 31) - 1, out=t, where=negative)
    np.add(t, (1 << 31) - 1, out=t, where=t < 0)  # with the shift below: C's truncating `/ 2^31`
    t >>= 31
    if np.any(b == INT32_MIN):
        t = np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, t)
    return t


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp `RoundingDivideByPOT(int32 x, int exponent)`: x / 2^exponent, rounding half away from zero.

    >>> [int(v) for v in rounding_divide_by_pot(np.array([5, -5, 6, -6]), 1)]
    [3, -3, 3, -3]
    """
    x = np.asarray(x, np.int64)
    exponent = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """TFLite `MultiplyByQuantizedMultiplier(int32 x, int32 multiplier, int shift)`, double-rounding build.

    `x · 2^max(shift, 0)` is computed in int32 (wrapping as the C code does), then
    `RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(·, multiplier), max(-shift, 0))`.
    """
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = wrap_int32(np.asarray(x, np.int64) << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, multiplier), right)


def requantize(acc, multiplier, shift, output_zp: int, act_min: int, act_max: int) -> np.ndarray:
    """int32 accumulator -> int8: the epilogue every conv / depthwise / FC kernel shares."""
    out = multiply_by_quantized_multiplier(wrap_int32(acc), multiplier, shift) + output_zp
    return np.clip(out, act_min, act_max).astype(np.int8)


# -- parameter preparation (TFLite Micro's Prepare functions) -------------------------------------------------------
def _quantize_f32(value: float, scale, zero_point: int) -> int:
    """TFLite's `zero_point + (int32)TfLiteRound(f / scale)` with float32 `f / scale`."""
    return int(zero_point) + int(round_half_away(np.float32(value) / np.float32(scale)))


def activation_range(activation: Activation, scale, zero_point) -> tuple[int, int]:
    """`CalculateActivationRangeQuantized` for an int8 output with the given scale and zero point.

    >>> activation_range(Activation.RELU6, 0.05, -128)
    (-128, -8)
    """
    lo, hi = INT8_MIN, INT8_MAX
    if activation is Activation.RELU:
        lo = max(lo, _quantize_f32(0.0, scale, zero_point))
    elif activation is Activation.RELU6:
        lo = max(lo, _quantize_f32(0.0, scale, zero_point))
        hi = min(hi, _quantize_f32(6.0, scale, zero_point))
    return lo, hi


def channel_multipliers(input_scale, weight_scales, output_scale) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel (multiplier, shift) of conv / depthwise / per-channel FC.

    TFLite Micro computes `double(s_in) * double(s_w[c]) / double(s_out)` from the float32 scales.
    """
    s_in = np.float64(np.float32(input_scale))
    s_w = np.asarray(weight_scales, np.float32).astype(np.float64)
    s_out = np.float64(np.float32(output_scale))
    return quantize_multiplier(s_in * s_w / s_out)


def fc_multipliers(input_scale, weight_scales, output_scale) -> tuple[np.ndarray, np.ndarray]:
    """(multiplier, shift) of FULLY_CONNECTED: per channel, or TFLite's per-tensor path for a single scale.

    With one weight scale TFLite Micro takes `GetQuantizedConvolutionMultipler`, whose product `s_in * s_w` is
    rounded to float32 before the division — which can differ from the per-channel path in the last bit.
    """
    s_w = np.asarray(weight_scales, np.float32)
    if s_w.size > 1:
        return channel_multipliers(input_scale, s_w, output_scale)
    product = np.float64(np.float32(input_scale) * s_w[0])
    m, s = quantize_multiplier(product / np.float64(np.float32(output_scale)))
    return m.reshape(1), s.reshape(1)


@dataclass(frozen=True)
class AddParams:
    """TFLite's int8 ADD parameters (`ArithmeticParams`), computed by `add_params`."""

    input1_offset: int
    input2_offset: int
    output_offset: int
    input1_multiplier: int
    input1_shift: int
    input2_multiplier: int
    input2_shift: int
    output_multiplier: int
    output_shift: int
    act_min: int
    act_max: int
    left_shift: int = ADD_LEFT_SHIFT


def _smaller_than_one(real: float) -> tuple[int, int]:
    """`QuantizeMultiplierSmallerThanOneExp`: TFLite requires 0 < real < 1 here."""
    if not 0.0 < real < 1.0:
        raise KilobyteError(f"ADD multiplier {real} outside (0, 1): output scale too small for the input scales")
    m, s = quantize_multiplier(real)
    return int(m), int(s)


def add_params(s1, z1, s2, z2, s_out, z_out, activation: Activation = Activation.NONE) -> AddParams:
    """TFLite Micro's `CalculateOpDataAdd` for int8: per-input and output multipliers around `left_shift = 20`."""
    twice_max = 2.0 * float(max(np.float32(s1), np.float32(s2)))
    m1, sh1 = _smaller_than_one(float(np.float32(s1)) / twice_max)
    m2, sh2 = _smaller_than_one(float(np.float32(s2)) / twice_max)
    mo, sho = _smaller_than_one(twice_max / ((1 << ADD_LEFT_SHIFT) * float(np.float32(s_out))))
    lo, hi = activation_range(activation, s_out, z_out)
    return AddParams(-int(z1), -int(z2), int(z_out), m1, sh1, m2, sh2, mo, sho, lo, hi)


@dataclass(frozen=True)
class MulParams:
    """TFLite's int8 MUL parameters: offsets, one output rescale of the product, the activation clamp."""

    input1_offset: int
    input2_offset: int
    output_offset: int
    output_multiplier: int
    output_shift: int
    act_min: int
    act_max: int


def mul_params(s1, z1, s2, z2, s_out, z_out, activation: Activation = Activation.NONE) -> MulParams:
    """TFLite Micro's `CalculateOpDataMul` for int8: `QuantizeMultiplier(double(s1) * double(s2) / double(s_out))`
    from the float32 scales (any size: the product may need a left shift)."""
    real = float(np.float32(s1)) * float(np.float32(s2)) / float(np.float32(s_out))
    m, s = quantize_multiplier(real)
    lo, hi = activation_range(activation, s_out, z_out)
    return MulParams(-int(z1), -int(z2), int(z_out), int(m), int(s), lo, hi)


# -- graph-edge conversions ------------------------------------------------------------------------------------------
def quantize_values(x, scale, zero_point) -> np.ndarray:
    """TFLite QUANTIZE (float32 -> int8): `round(x / scale) + zero_point` in float32, clamped.

    >>> quantize_values(np.array([0.5, -0.25, 100.0]), 0.25, -3).tolist()
    [-1, -4, 127]
    """
    q = round_half_away(np.asarray(x, np.float32) / np.float32(scale))
    q = np.clip(q, -(2.0**31), 2.0**31 - 1).astype(np.int64) + int(zero_point)
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def requantize_values(q, in_scale, in_zero_point, out_scale, out_zero_point, out_dtype) -> np.ndarray:
    """TFLite QUANTIZE between integer types (uint8 <-> int8 at a model's edges; TFLM's `Requantize`):
    `MultiplyByQuantizedMultiplier(q - zp_in, QuantizeMultiplier(s_in / s_out)) + zp_out`, clamped to `out_dtype`.

    >>> requantize_values(np.array([0, 128, 255], np.uint8), 0.5, 128, 0.5, 0, np.int8).tolist()
    [-128, 0, 127]
    """
    m, shift = requant_multiplier(in_scale, out_scale)
    v = multiply_by_quantized_multiplier(np.asarray(q, np.int64) - int(in_zero_point), m, shift) + int(out_zero_point)
    info = np.iinfo(out_dtype)
    return np.clip(v, info.min, info.max).astype(out_dtype)


def requant_multiplier(in_scale, out_scale) -> tuple[int, int]:
    """QuantizeMultiplier of `double(s_in) / double(s_out)`, as TFLite Micro's QUANTIZE prepares it."""
    m, shift = quantize_multiplier(float(np.float32(in_scale)) / float(np.float32(out_scale)))
    return int(m), int(shift)


def dequantize_values(q, scale, zero_point) -> np.ndarray:
    """TFLite DEQUANTIZE (int8 -> float32): `float(double(scale) * (q - zero_point))`."""
    d = np.float64(np.float32(scale)) * (np.asarray(q, np.int64) - int(zero_point))
    return d.astype(np.float32)
