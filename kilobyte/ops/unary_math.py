"""Op registry: TFLite Micro's int8 unary activations (LOGISTIC, TANH, ELU, HARD_SWISH, LEAKY_RELU, RELU, RELU6) and
TFLite's int8 GELU, RELU_N1_TO_1, EXP and LOG (TFLite Micro has no int8 kernel for these), bit for bit.

Each output of these ops depends on its input byte alone, so each node is fully described by a 256-entry int8
lookup table: entry i is the op applied to the int8 value i - 128. Each op's table function (in `lut.py`, its
`OpDef`) calls the arithmetic here; the interpreter reads the table and the code generator writes it into model.c
for the one C kernel they share (`kb_lut`). The tables are transcriptions of TFLite Micro's kernels over all 256
values:

- LOGISTIC (`reference_integer_ops::Logistic`, int8): Prepare turns `input_scale · 2^27` into a multiplier and left
  shift by frexp and rounds the mantissa itself (no renormalisation: a float32 scale gives an exact one) and derives
  `input_range_radius`; inputs beyond the radius saturate, the others are rescaled into Q4.27 and run through
  gemmlowp's fixed-point `logistic` (exp of the negative magnitude, then 1 / (1 + x)); the Q0.31 result is shifted
  down 23 bits onto the output scale 1/256 with zero point -128, the only output TFLite writes.
- TANH (`reference_integer_ops::Tanh`, int8): the same Prepare and Q4.27 rescale as LOGISTIC; gemmlowp's `tanh`
  takes n = -|a|, reads its raw value as Q5.26 (`ExactMulByPot<1>`: 2n) for `exp_on_negative_values`, and turns
  e = exp(2n) into (1 - e) / (1 + e) by Newton-Raphson; the Q0.31 result is shifted down 24 bits onto the output
  scale 1/128, zero point 0 (the kernel adds no zero point and reads no output scale).
- ELU (TFLite Micro's `PopulateLookupTable`): the table is built in Prepare in float32, as GELU's below, from
  x < 0 ? expf(x) - 1 : x (alpha 1; expf taken correctly rounded, as `gelu_f32` takes erfcf).
- EXP and LOG (TFLite's int8 kernels; TFLite Micro's take float32 only): tables built in float32 the same way from
  expf / logf. A LOG input at or below zero has no logarithm; TFLite's table holds -128 there (the float -> int
  conversion of -inf / NaN on the machines its interpreter runs on), and so does ours, by rule.
- RELU_N1_TO_1 (TFLite's `Relu1Eval`, `QuantizedReluX(-1, 1)`): RELU's requantisation, but Prepare divides the
  float32 scales in float32 (pinned by the tie cases), then a clamp to zero point + roundf(±1 / s_out).
- HARD_SWISH (`reference_ops::HardSwish` with `HardSwishParams`): int16 fixed point throughout; the input is moved
  onto a "hires" scale (x · 2^7), a "reluish" factor in [0, 1] comes from a rescale to [-3, 3] -> [-1, 1] with
  saturating shifts, the product uses a truncating (not rounding) doubling high multiply to cancel the rounding bias,
  then one rounding right shift onto the output scale. Multipliers are TFLite's int32 ones rounded to int16.
- LEAKY_RELU (`reference_ops::QuantizeLeakyRelu`): separate requantisations for x >= 0 (identity) and x < 0 (alpha);
  a negative alpha multiplies by |multiplier| and negates, as the current kernel does.
- RELU (`ReluQuantized`): a requantisation by `s_in / s_out` (double division), clamped below at the output zero
  point. RELU6 (`Relu6Quantized`): a clamp to [input zero point, quantised 6] that never rescales.
- GELU: TFLite Micro has no GELU kernel; TFLite's int8 kernel builds its table in Prepare with `LUTPopulate`, in
  float32: dequantise (`s_in * (x - z_in)`), apply `GeluTransform` (0.5 x erfc(-x / sqrt 2)) or
  `GeluTransformApproximate` (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), multiply by `1 / s_out`, round half
  away from zero, add the zero point, truncate, clamp. Every float32 step is done in float32 here too; erfcf and
  tanhf are taken correctly rounded (float64 then float32), which glibc's agree with on the tables tests pin
  (`tests/interp/gelu_tflite_tables.json`, made by TFLite's own interpreter).

Prepare's scale arithmetic happens in float32 where TFLite Micro's does (HARD_SWISH's products and quotients of
`float` scales) and in double where it converts first (RELU, LEAKY_RELU: pinned by tests on tie cases).

>>> leaky_relu_int8(INT8_VALUES, 0.1, 0, 0.1, 0, 0.5)[[0, 127, 128, 255]].tolist()  # x = -128, -1, 0, 127
[-64, 0, 0, 127]

(-1 · 0.5 gives 0: gemmlowp's high multiply rounds a negative tie toward zero.)
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import KilobyteError
from .arith import (
    INT8_MAX,
    INT8_MIN,
    INT32_MAX,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    round_half_away,
    rounding_divide_by_pot,
    wrap_int32,
)
from .fixedpoint import (
    exp_on_negative_values,
    one_minus_x_over_one_plus_x_for_x_in_0_1,
    one_over_one_plus_x_for_x_in_0_1,
)

INT8_VALUES = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)  # table entry i is the op at INT8_VALUES[i]
LOGISTIC_INPUT_INTEGER_BITS = 4  # the rescaled input is Q4.27
# What TFLite writes and its kernels assume whatever the file says (TFLM checks LOGISTIC's zero point only, TANH's
# neither): the quantiser gives them these, the reader and the reference refuse any other (`OpDef.fixed_qparams`).
LOGISTIC_OUTPUT_QPARAMS = (np.float32(1 / 256), -128)
TANH_OUTPUT_QPARAMS = (np.float32(1 / 128), 0)
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1


def _f32(x) -> np.float32:
    return np.float32(x)


def _clip_int8(x) -> np.ndarray:
    return np.clip(x, INT8_MIN, INT8_MAX).astype(np.int8)


# -- LOGISTIC ----------------------------------------------------------------------------------------------------
def logistic_params(input_scale: float) -> tuple[int, int, int]:
    """(input_multiplier, input_left_shift, input_range_radius) as TFLite Micro's LOGISTIC Prepare computes them."""
    q, left_shift = math.frexp(float(_f32(input_scale)) * float(1 << (31 - LOGISTIC_INPUT_INTEGER_BITS)))
    if left_shift < 0:  # CalculateInputRadius would shift by a negative amount (undefined in C)
        raise KilobyteError(f"input scale {input_scale} is too small for TFLite's int8 LOGISTIC")
    multiplier = int(round_half_away(q * float(1 << 31)))
    max_rescaled = ((1 << LOGISTIC_INPUT_INTEGER_BITS) - 1) * float(1 << (31 - LOGISTIC_INPUT_INTEGER_BITS))
    return multiplier, left_shift, math.floor(max_rescaled / float(1 << left_shift))


def fixed_point_logistic(a) -> np.ndarray:
    """gemmlowp `logistic` of a Q4.27 raw value: Q0.31 raw 1 / (1 + exp(-a))."""
    a = np.asarray(a, np.int64)
    positive = a > 0
    magnitude = np.where(positive, a, -a)
    if_positive = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(-magnitude, LOGISTIC_INPUT_INTEGER_BITS))
    if_negative = wrap_int32(INT32_MAX - if_positive)  # One() - x: Q0.31's one is INT32_MAX
    return np.where(a == 0, 1 << 30, np.where(positive, if_positive, if_negative))


def logistic_int8(x, input_scale: float, input_zero_point: int) -> np.ndarray:
    """TFLite Micro's int8 LOGISTIC of int8 `x` (output scale 1/256, zero point -128)."""
    multiplier, left_shift, radius = logistic_params(input_scale)
    d = np.asarray(x, np.int64) - input_zero_point
    inside = np.where(np.abs(d) < radius, d, 0)  # out-of-range lanes are overwritten below; keep them harmless
    q4 = multiply_by_quantized_multiplier(inside, multiplier, left_shift)
    out = rounding_divide_by_pot(fixed_point_logistic(q4), 31 - 8) + LOGISTIC_OUTPUT_QPARAMS[1]
    out = np.where(d <= -radius, INT8_MIN, np.where(d >= radius, INT8_MAX, out))  # the C code tests these first
    return _clip_int8(out)


# -- TANH ----------------------------------------------------------------------------------------------------------
def fixed_point_tanh(a) -> np.ndarray:
    """gemmlowp `tanh` of a Q4.27 raw value: Q0.31 raw tanh(a)."""
    a = np.asarray(a, np.int64)
    negative_magnitude = np.where(a < 0, a, -a)
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(negative_magnitude, 5))  # raw 2n as Q5.26
    return np.where(a == 0, 0, np.where(a < 0, -t, t))


def tanh_int8(x, input_scale: float, input_zero_point: int) -> np.ndarray:
    """TFLite Micro's int8 TANH of int8 `x` (output scale 1/128, zero point 0): LOGISTIC's Prepare and radius."""
    multiplier, left_shift, radius = logistic_params(input_scale)
    d = np.asarray(x, np.int64) - input_zero_point
    inside = np.where(np.abs(d) < radius, d, 0)
    q4 = multiply_by_quantized_multiplier(inside, multiplier, left_shift)
    out = rounding_divide_by_pot(fixed_point_tanh(q4), 31 - 7)
    out = np.where(d <= -radius, INT8_MIN, np.where(d >= radius, INT8_MAX, out))
    return _clip_int8(out)


# -- HARD_SWISH: int16 gemmlowp arithmetic -----------------------------------------------------------------------
def _wrap16(x) -> np.ndarray:
    """Conversion of an int result to int16_t (two's complement wrap)."""
    return ((np.asarray(x, np.int64) - INT16_MIN) & 0xFFFF) + INT16_MIN


def _trunc_div(x, d: int) -> np.ndarray:
    """C's `/` (truncating toward zero) of int64 values by a positive `d`."""
    x = np.asarray(x, np.int64)
    return np.where(x >= 0, x // d, -((-x) // d))


def srdhm16(a, b) -> np.ndarray:
    """gemmlowp `SaturatingRoundingDoublingHighMul` on int16: round(a·b / 2^15), saturating MIN·MIN."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, _wrap16(_trunc_div(ab + nudge, 1 << 15)))


def sdhm16(a, b) -> np.ndarray:
    """TFLite's `SaturatingDoublingHighMul` on int16: like `srdhm16` but truncating (SQDMULH)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    return np.where((a == INT16_MIN) & (b == INT16_MIN), INT16_MAX, _wrap16(_trunc_div(a * b, 1 << 15)))


def rounding_divide_by_pot16(x, exponent: int) -> np.ndarray:
    """gemmlowp `RoundingDivideByPOT<int16_t>`: the mask and threshold are int16 too (exponents past 15 wrap)."""
    x = np.asarray(x, np.int64)
    mask = int(_wrap16((1 << exponent) - 1))
    remainder = x & mask
    threshold = _wrap16((mask >> 1) + (x < 0))
    return _wrap16((x >> exponent) + (remainder > threshold))


def saturating_left_shift16(x, amount: int) -> np.ndarray:
    """TFLite's `SaturatingLeftShift` on int16."""
    return np.clip(np.asarray(x, np.int64) * (1 << amount), INT16_MIN, INT16_MAX)


def downscale_multiplier16(multiplier: int) -> int:
    """`DownScaleInt32ToInt16Multiplier`: round an int32 Q0.31 multiplier to Q0.15, saturating."""
    if multiplier >= INT32_MAX - (1 << 15):
        return INT16_MAX
    return (multiplier + (1 << 15)) >> 16


def hard_swish_params(input_scale: float, output_scale: float) -> tuple[int, int, int, int]:
    """(reluish multiplier int16, reluish exponent, output multiplier int16, output exponent): HardSwishPrepare."""
    hires_input_scale = _f32(1.0 / 128.0) * _f32(input_scale)
    output_multiplier, output_exponent = (int(v) for v in quantize_multiplier(float(hires_input_scale
                                                                                    / _f32(output_scale))))
    if output_exponent > 0:
        raise KilobyteError(f"input scale {input_scale} / output scale {output_scale} is at least 128: TFLite "
                            f"Micro's HARD_SWISH refuses it")
    reluish_multiplier, reluish_exponent = (int(v) for v in quantize_multiplier(
        float(hires_input_scale / _f32(3.0 / 32768.0))))
    return (downscale_multiplier16(reluish_multiplier), reluish_exponent, downscale_multiplier16(output_multiplier),
            output_exponent)


def _reluish(hires, multiplier: int, exponent: int) -> np.ndarray:
    """The input rescaled so that [-3, 3] maps onto int16's [-1, 1], saturating, then moved to [0, 1]."""
    r = hires
    if exponent > 0:  # all but the last bit of left shift before the multiply: any saturation is redone below
        r = saturating_left_shift16(r, exponent - 1)
    r = srdhm16(r, multiplier)
    if exponent > 0:
        r = saturating_left_shift16(r, 1)
    if exponent < 0:
        r = rounding_divide_by_pot16(r, -exponent)
    return (r + (1 << 15)) >> 1


def hard_swish_int8(x, input_scale: float, input_zero_point: int, output_scale: float,
                    output_zero_point: int) -> np.ndarray:
    """TFLite Micro's int8 HARD_SWISH of int8 `x`: x · relu6(x + 3) / 6 in int16 fixed point."""
    reluish_m, reluish_e, output_m, output_e = hard_swish_params(input_scale, output_scale)
    hires = _wrap16((np.asarray(x, np.int64) - input_zero_point) * (1 << 7))
    preshift_output = srdhm16(hires, output_m)
    out = rounding_divide_by_pot16(sdhm16(_reluish(hires, reluish_m, reluish_e), preshift_output), -output_e)
    return _clip_int8(_wrap16(out + output_zero_point))


# -- LEAKY_RELU, RELU, RELU6 ---------------------------------------------------------------------------------------
def leaky_relu_params(input_scale: float, output_scale: float, alpha: float) -> tuple[int, int, int, int]:
    """(identity multiplier, identity shift, alpha multiplier, alpha shift). The scales and alpha are float32 in the
    file, but the tflite-micro build we check against divides (and multiplies) them as doubles: a float32 quotient
    that rounds to a tie (s_in / s_out = 1.25 exactly) gives a different table, and tests pin the double one."""
    s_in, s_out = float(_f32(input_scale)), float(_f32(output_scale))
    mi, si = quantize_multiplier(s_in / s_out)
    ma, sa = quantize_multiplier(s_in * float(_f32(alpha)) / s_out)
    return int(mi), int(si), int(ma), int(sa)


def leaky_relu_int8(x, input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int,
                    alpha: float) -> np.ndarray:
    """TFLite Micro's int8 LEAKY_RELU of int8 `x`."""
    mi, si, ma, sa = leaky_relu_params(input_scale, output_scale, alpha)
    d = np.asarray(x, np.int64) - input_zero_point
    negative_part = multiply_by_quantized_multiplier(d, abs(ma), sa)  # the kernel needs a non-negative multiplier
    negative_part = -negative_part if ma < 0 else negative_part
    out = output_zero_point + np.where(d >= 0, multiply_by_quantized_multiplier(d, mi, si), negative_part)
    return _clip_int8(out)


def relu_int8(x, input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> np.ndarray:
    """TFLite Micro's int8 RELU: requantise by s_in / s_out (double), clamp below at the output zero point."""
    m, s = quantize_multiplier(float(_f32(input_scale)) / float(_f32(output_scale)))
    out = output_zero_point + multiply_by_quantized_multiplier(np.asarray(x, np.int64) - input_zero_point, m, s)
    return _clip_int8(np.maximum(out, max(INT8_MIN, output_zero_point)))


def relu_n1_to_1_int8(x, input_scale: float, input_zero_point: int, output_scale: float,
                      output_zero_point: int) -> np.ndarray:
    """TFLite's int8 RELU_N1_TO_1: requantise by s_in / s_out (a float32 quotient), clamp to quantised [-1, 1]."""
    s_out = _f32(output_scale)
    m, s = quantize_multiplier(float(_f32(input_scale) / s_out))
    lo = max(INT8_MIN, output_zero_point + int(round_half_away(_f32(-1.0) / s_out)))
    hi = min(INT8_MAX, output_zero_point + int(round_half_away(_f32(1.0) / s_out)))
    out = output_zero_point + multiply_by_quantized_multiplier(np.asarray(x, np.int64) - input_zero_point, m, s)
    return np.clip(out, lo, hi).astype(np.int8)


def relu6_int8(x, input_scale: float, input_zero_point: int) -> np.ndarray:
    """TFLite Micro's int8 RELU6: clamp to [zero point, quantised 6.0] on the input's own scale."""
    six = int(np.clip(round_half_away(_f32(6.0) / _f32(input_scale)) + input_zero_point, INT8_MIN, INT8_MAX))
    x = np.asarray(x, np.int64)
    return np.where(x > six, six, np.where(x < input_zero_point, input_zero_point, x)).astype(np.int8)


# -- ELU and GELU: tables built in float32 (TFLite Micro's PopulateLookupTable, TFLite's LUTPopulate) ------------
_expm1_32 = np.vectorize(lambda v: _f32(math.exp(float(v))) - _f32(1.0), otypes=[np.float32])


def float_table_int8(x, transformed, input_scale: float, input_zero_point: int, output_scale: float,
                     output_zero_point: int, what: str) -> np.ndarray:
    """The int8 entries of a table built in float32: `transformed` (float32 values -> float32) applied to each
    dequantised `x`, times 1 / s_out, rounded half away from zero, plus the zero point, truncated, clamped."""
    inverse_scale = _f32(1.0) / _f32(output_scale)
    dequantized = _f32(input_scale) * (np.asarray(x, np.int64) - input_zero_point).astype(np.float32)
    rescaled = round_half_away(transformed(dequantized) * inverse_scale).astype(np.float32)
    quantized = np.trunc(rescaled + _f32(output_zero_point))  # static_cast<int32_t> of a float32 sum
    if not np.all(np.abs(quantized) < 2.0**31):  # the C++ conversion to int32 would be undefined
        raise KilobyteError(f"{what}: input scale {input_scale} / output scale {output_scale} puts table values "
                            f"beyond int32 (TFLite's float -> int conversion is undefined there)")
    return _clip_int8(quantized.astype(np.int64))


def elu_f32(x) -> np.ndarray:
    """TFLite Micro's ELU transform in float32: x < 0 ? expf(x) - 1 : x."""
    x = np.asarray(x, np.float32)
    return np.where(x < 0, _expm1_32(np.minimum(x, 0)), x).astype(np.float32)


def exp_f32(x) -> np.ndarray:
    """expf on float32 values, correctly rounded."""
    return np.exp(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def log_f32(x) -> np.ndarray:
    """logf on positive float32 values, correctly rounded."""
    return np.log(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def exp_int8(x, input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> np.ndarray:
    """TFLite's int8 EXP of int8 `x`: its Prepare's `LUTPopulate` entry for each value."""
    return float_table_int8(x, exp_f32, input_scale, input_zero_point, output_scale, output_zero_point, "EXP")


def log_int8(x, input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> np.ndarray:
    """TFLite's int8 LOG of int8 `x`: the float32 table entry where the input is positive, -128 elsewhere."""
    x = np.asarray(x, np.int64)
    positive = x > input_zero_point
    table = float_table_int8(np.where(positive, x, input_zero_point + 1), log_f32, input_scale, input_zero_point,
                             output_scale, output_zero_point, "LOG")
    return np.where(positive, table, INT8_MIN).astype(np.int8)


def elu_int8(x, input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> np.ndarray:
    """TFLite Micro's int8 ELU of int8 `x`: its Prepare's table entry for each value."""
    return float_table_int8(x, elu_f32, input_scale, input_zero_point, output_scale, output_zero_point, "ELU")


# -- GELU: TFLite's LUTPopulate in float32 ----------------------------------------------------------------------
_SQRT_2_OVER_PI = _f32(2.0 / math.sqrt(math.pi) * math.sqrt(0.5))  # kSqrt2dPi: M_2_SQRTPI * M_SQRT1_2, to float
_MINUS_SQRT_HALF = _f32(-math.sqrt(0.5))  # static_cast<float>(-M_SQRT1_2)
_erfc32 = np.vectorize(lambda v: _f32(math.erfc(float(v))), otypes=[np.float32])


def gelu_f32(x, approximate: bool) -> np.ndarray:
    """TFLite's `GeluTransform` / `GeluTransformApproximate` on float32 values, every operation in float32 (C++
    evaluates `0.5f * in * ...` left to right)."""
    x = np.asarray(x, np.float32)
    half_x = _f32(0.5) * x
    if not approximate:
        return half_x * _erfc32(x * _MINUS_SQRT_HALF)
    cubic = _f32(0.044715) * x * x * x
    inner = _SQRT_2_OVER_PI * (x + cubic)
    return half_x * (_f32(1.0) + np.tanh(inner.astype(np.float64)).astype(np.float32))


def gelu_int8(x, input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int,
              approximate: bool) -> np.ndarray:
    """TFLite's int8 GELU of int8 `x`: its `LUTPopulate<int8_t>` entry for each value."""
    return float_table_int8(x, lambda v: gelu_f32(v, approximate), input_scale, input_zero_point, output_scale,
                            output_zero_point, "GELU")


def apply_table(x, table: np.ndarray) -> np.ndarray:
    """Look every int8 value of `x` up in a 256-entry table (what `kb_lut` does)."""
    return table[np.asarray(x, np.int64) - INT8_MIN]
