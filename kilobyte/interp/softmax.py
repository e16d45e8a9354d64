"""Reference stage: TFLite Micro's int8 SOFTMAX and LOG_SOFTMAX, bit for bit, over the last axis of any shape.

Both kernels (TFLite's `reference_ops::Softmax` for int8 -> int8 and `reference_ops::LogSoftmax` for int8, with the
parameters TFLite Micro's Prepare functions compute) work on differences `d = x - max(row) <= 0` of raw int8 values:

- Prepare: `PreprocessSoftmaxScaling` turns `beta · input_scale · 2^26` (capped at 2^31 - 1) into a multiplier and
  left shift (`QuantizeMultiplierGreaterThanOne`), so `d` rescaled lands in Q5.26; `diff_min = -CalculateInputRadius`
  drops the differences whose rescaled value would not fit. LOG_SOFTMAX (beta 1) also inverts that scaling
  (`reverse_scaling_divisor`, `reverse_scaling_right_shift`).
- SOFTMAX: exp(d) by gemmlowp's `exp_on_negative_values`, summed in Q12.19; `GetReciprocal` of the sum; each output
  `RoundingDivideByPOT(reciprocal · exp(d), exponent) - 128`, with output scale 1/256 and zero point -128.
- LOG_SOFTMAX: log of the same sum (`log_x_for_x_greater_than_or_equal_to_1`, Q5.26), output
  `RoundingDivideByPOT(d_rescaled - log_sum, 22) + 127`, with output scale 16/256 and zero point 127; differences at or
  below `max(diff_min - 1, log_sum - 32 in input units)` give -128.

TFLite Micro refuses (in Prepare) any other output scale or zero point, and aborts (a `TFLITE_CHECK`) on a SOFTMAX row
whose exps sum to 512 or more, which needs at least 512 values near the row's maximum; these functions raise a
`KilobyteError` in both cases instead, and so does a LOG_SOFTMAX row whose int32 sum overflows (4096 values at the
maximum). Rows of fewer than 512 values never meet either limit. The fixed-point math lives in
`kilobyte.ops.fixedpoint`.

>>> p = softmax_params_for(input_scale=0.1, beta=1.0)
>>> softmax_int8(np.array([[0, 0, -128]], np.int8), p).tolist()
[[0, 0, -128]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError
from ..ops.arith import (
    INT8_MAX,
    INT8_MIN,
    INT32_MAX,
    INT32_MIN,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    wrap_int32,
)
from ..ops.fixedpoint import (
    add,
    exp_on_negative_values,
    get_reciprocal,
    log_x_for_x_greater_than_or_equal_to_1,
    rescale,
    sub,
)
from ..ops.fixedpoint import mul as srdhm

SCALED_DIFF_INTEGER_BITS = 5  # exp() reads Q5.26
ACCUM_INTEGER_BITS = 12  # the sum of exps is Q12.19
LOG_OUTPUT_INTEGER_BITS = 4
MAX_RECIPROCAL_EXPONENT = 31  # TFLite's TFLITE_CHECK on the output shift of SOFTMAX


@dataclass(frozen=True)
class SoftmaxParams:
    """What TFLite Micro's Prepare computes for an int8 SOFTMAX / LOG_SOFTMAX (the reverse scaling: LOG_SOFTMAX)."""

    input_multiplier: int
    input_left_shift: int
    diff_min: int
    reverse_scaling_divisor: int = 0
    reverse_scaling_right_shift: int = 0


# -- Prepare ---------------------------------------------------------------------------------------------------------
def softmax_scaling(beta: float, input_scale: float) -> tuple[int, int]:
    """`PreprocessSoftmaxScaling(beta, input_scale, 5)`: (multiplier, left shift) of `beta · input_scale · 2^26`.

    TFLite hands both as doubles made from the file's float32 values, and checks the product exceeds 1.
    """
    real = float(np.float32(beta)) * float(np.float32(input_scale)) * float(1 << (31 - SCALED_DIFF_INTEGER_BITS))
    real = min(real, float(INT32_MAX))  # larger multipliers change nothing: every d < 0 already gives exp ~ 0
    if not real > 1.0:
        raise KilobyteError(f"beta · input scale = {beta} · {input_scale} is at most 2^-26: TFLite's softmax "
                            f"scaling needs a larger product")
    m, s = quantize_multiplier(real)
    return int(m), int(s)


def input_radius(left_shift: int) -> int:
    """`CalculateInputRadius(5, left_shift)`: the largest |d| whose rescaled value fits Q5.26 (floor)."""
    return math.floor(((1 << SCALED_DIFF_INTEGER_BITS) - 1) * float(1 << (31 - SCALED_DIFF_INTEGER_BITS))
                      / float(1 << left_shift))


def softmax_params_for(input_scale: float, beta: float = 1.0) -> SoftmaxParams:
    """int8 SOFTMAX's parameters (`CalculateSoftmaxParams`)."""
    m, s = softmax_scaling(beta, input_scale)
    return SoftmaxParams(m, s, -input_radius(s))


def log_softmax_params_for(input_scale: float) -> SoftmaxParams:
    """int8 LOG_SOFTMAX's parameters (`PreprocessLogSoftmaxScalingExp` with beta 1): the SOFTMAX scaling, plus the
    inverse of the multiplier as `QuantizeMultiplierSmallerThanOneExp(2^(31 - left_shift) / multiplier)`."""
    m, s = softmax_scaling(1.0, input_scale)
    reverse = float(1 << (31 - s)) / float(m)
    if not 0.0 < reverse < 1.0:
        raise KilobyteError(f"input scale {input_scale}: TFLite's log-softmax reverse scaling {reverse} is not "
                            f"in (0, 1)")
    divisor, reverse_left_shift = (int(v) for v in quantize_multiplier(reverse))
    return SoftmaxParams(m, s, -input_radius(s), divisor, -reverse_left_shift)


# -- kernels ---------------------------------------------------------------------------------------------------------
def _exps(x, p: SoftmaxParams) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d, d >= diff_min, d rescaled to Q5.26, exp(d) in Q0.31) per element; unused elements are computed on d = 0
    (their rescaling could overflow, and their values are never read)."""
    x = np.asarray(x, np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    used = diff >= p.diff_min
    scaled = multiply_by_quantized_multiplier(np.where(used, diff, 0), p.input_multiplier, p.input_left_shift)
    return diff, used, scaled, exp_on_negative_values(scaled, SCALED_DIFF_INTEGER_BITS)


def _sum_of_exps(used: np.ndarray, exps: np.ndarray) -> np.ndarray:
    """The row sums in Q12.19 as int64, before TFLite's int32 accumulator would wrap."""
    return np.where(used, rescale(exps, 0, ACCUM_INTEGER_BITS), 0).sum(axis=-1, keepdims=True)


def softmax_int8(x, p: SoftmaxParams, *, tflm_checks: bool = True) -> np.ndarray:
    """TFLite's int8 SOFTMAX over the last axis of `x` (output scale 1/256, zero point -128).

    A row TFLite Micro aborts on raises, unless `tflm_checks` is False: then its output shift (> 31) divides as
    `kb_softmax` does, which makes every value of the row -128 (each probability is below half an output step).
    """
    _, used, _, exps = _exps(x, p)
    reciprocal, bits_over_unit = get_reciprocal(wrap_int32(_sum_of_exps(used, exps)), ACCUM_INTEGER_BITS)
    exponent = bits_over_unit + 31 - 8
    if tflm_checks and np.any(exponent > MAX_RECIPROCAL_EXPONENT):
        raise KilobyteError("a softmax row's exps sum to 512 or more (512+ values near the row's maximum): "
                            "TFLite Micro aborts on it (TFLITE_CHECK on the output shift)")
    out = rounding_divide_by_pot(srdhm(reciprocal, exps), exponent) + INT8_MIN
    return np.where(used, np.clip(out, INT8_MIN, INT8_MAX), INT8_MIN).astype(np.int8)


def log_softmax_int8(x, p: SoftmaxParams, *, tflm_checks: bool = True) -> np.ndarray:
    """TFLite's int8 LOG_SOFTMAX over the last axis of `x` (output scale 16/256, zero point 127).

    A row whose int32 sum of exps overflows (TFLite's result is then undefined behaviour) raises, unless
    `tflm_checks` is False: then the sum saturates, as in `kb_log_softmax`.
    """
    diff, used, scaled, exps = _exps(x, p)
    total = _sum_of_exps(used, exps)
    if tflm_checks and np.any(total > INT32_MAX):
        raise KilobyteError("a log-softmax row's exps sum to 4096 or more (4096+ values at the row's maximum): "
                            "TFLite's int32 Q12.19 accumulator overflows")
    total = np.minimum(total, INT32_MAX)
    log_sum = log_x_for_x_greater_than_or_equal_to_1(total, ACCUM_INTEGER_BITS, SCALED_DIFF_INTEGER_BITS)
    # Differences so small that d_rescaled - log_sum would leave Q5.26 give the lowest output, as do those below
    # diff_min (note the strict > against diff_min - 1).
    lowest = multiply_by_quantized_multiplier(add(log_sum, INT32_MIN), p.reverse_scaling_divisor,
                                              -p.reverse_scaling_right_shift)
    kept = diff > np.maximum(p.diff_min - 1, lowest)
    shift = 31 - SCALED_DIFF_INTEGER_BITS - LOG_OUTPUT_INTEGER_BITS
    out = rounding_divide_by_pot(sub(scaled, log_sum), shift) + INT8_MAX
    return np.where(kept, np.clip(out, INT8_MIN, INT8_MAX), INT8_MIN).astype(np.int8)
