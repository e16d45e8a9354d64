"""Op registry: SOFTMAX and LOG_SOFTMAX — their definitions, and TFLite Micro's int8 kernels, bit for bit, over the
last axis of any shape.

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

from ..errors import KilobyteError, UnsupportedOpError
from .arith import (
    INT8_MAX,
    INT8_MIN,
    INT32_MAX,
    INT32_MIN,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    wrap_int32,
)
from .c_text import c_struct
from .contract import KernelContract
from .fixedpoint import (
    add,
    exp_on_negative_values,
    get_reciprocal,
    log_x_for_x_greater_than_or_equal_to_1,
    rescale,
    sub,
)
from .fixedpoint import mul as srdhm
from .layer_code import Buffers, LayerCode
from .node_params import tensor_qparams
from .opdef import OpDef
from .types import NoAttrs, Op, ShapeError, SoftmaxAttrs

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


# -- the ops -------------------------------------------------------------------------------------------------------
# (scale, zero point) TFLite requires of an int8 output (TFLite Micro's Prepare refuses others)
OUTPUT_QPARAMS = {Op.SOFTMAX: (np.float32(1 / 256), -128), Op.LOG_SOFTMAX: (np.float32(16 / 256), 127)}
FUNCTION = {Op.SOFTMAX: "kb_softmax", Op.LOG_SOFTMAX: "kb_log_softmax"}


def _shape(attrs, shapes) -> tuple[int, ...]:
    x = tuple(shapes[0])
    if len(x) < 1 or x[-1] < 1:
        raise ShapeError(f"softmax works along the last axis; input shape {x} has none")
    return x


def softmax_float(x, beta: float = 1.0) -> np.ndarray:
    """TFLite's float32 SOFTMAX over the last axis: exp((x - max) · beta) / sum, all in float32 (a float tail)."""
    x = np.asarray(x, np.float32)
    e = np.exp((x - x.max(axis=-1, keepdims=True)) * np.float32(beta))
    return (e / e.sum(axis=-1, keepdims=True, dtype=np.float32)).astype(np.float32)


def log_softmax_float(x) -> np.ndarray:
    """TFLite's float32 LOG_SOFTMAX over the last axis: x - max - log(sum(exp(x - max))), in float32."""
    x = np.asarray(x, np.float32)
    d = x - x.max(axis=-1, keepdims=True)
    return (d - np.log(np.exp(d).sum(axis=-1, keepdims=True, dtype=np.float32))).astype(np.float32)


def _float(node, args) -> np.ndarray:
    """The definition, in the input's precision (the frontends' oracle)."""
    x = args[0]
    if node.op is Op.LOG_SOFTMAX:
        z = x - x.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    e = np.exp(node.attrs.beta * (x - x.max(axis=-1, keepdims=True)))
    return e / e.sum(axis=-1, keepdims=True)


def node_params(graph, node) -> SoftmaxParams:
    """TFLite Micro's Prepare of an int8 SOFTMAX / LOG_SOFTMAX, refusing what it refuses."""
    log = node.op is Op.LOG_SOFTMAX
    x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
    want = OUTPUT_QPARAMS[node.op]
    if x.dtype != "int8" or y.dtype != "int8" or tensor_qparams(graph, node.outputs[0]) != want:
        raise KilobyteError(f"node '{node.name}' ({node.op.value}): int8 in and out with output scale "
                            f"{float(want[0])} and zero point {want[1]} (TFLite Micro refuses others), got "
                            f"{x.dtype} -> {y.dtype} {y.qparams}")
    s_in = tensor_qparams(graph, node.inputs[0])[0]
    try:
        return log_softmax_params_for(s_in) if log else softmax_params_for(s_in, node.attrs.beta)
    except KilobyteError as e:
        raise KilobyteError(f"node '{node.name}' ({node.op.value}): {e}") from None


def _int8(graph, node, args) -> np.ndarray:
    """float32 (a float tail, as quantize() leaves a final softmax) or int8 (TFLite's)."""
    x, log = args[0], node.op is Op.LOG_SOFTMAX
    if x.dtype == np.float32:
        return log_softmax_float(x) if log else softmax_float(x, node.attrs.beta)
    p = node_params(graph, node)
    try:
        return log_softmax_int8(x, p) if log else softmax_int8(x, p)
    except KilobyteError as e:
        raise KilobyteError(f"node '{node.name}' ({node.op.value}): {e}") from None


def kernel_fields(graph, node) -> dict[str, int]:
    """The fields of `kb_softmax_params` (kilobyte.h) for an int8 SOFTMAX or LOG_SOFTMAX node: `rows` x `depth`
    values (the last axis), and TFLite Micro's Prepare results (the reverse scaling is 0 for SOFTMAX)."""
    p = node_params(graph, node)
    shape = graph.tensors[node.outputs[0]].shape
    depth = int(shape[-1])
    return dict(rows=int(np.prod(shape[:-1], dtype=np.int64)), depth=depth, input_multiplier=p.input_multiplier,
                input_left_shift=p.input_left_shift, diff_min=p.diff_min,
                reverse_scaling_divisor=p.reverse_scaling_divisor,
                reverse_scaling_right_shift=p.reverse_scaling_right_shift)


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    """Over the last axis, TFLite Micro's Prepare results as `kb_softmax_params`. The kernel reads rows of `depth`
    contiguous values, so neither side may be a concat slice."""
    params = kernel_fields(graph, node)
    x, y = node.inputs[0], node.outputs[0]
    if bufs.cstride(x) != params["depth"] or bufs.cstride(y) != params["depth"]:
        raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): kb_softmax needs dense rows, not a slice")
    return LayerCode(body=[c_struct("kb_softmax_params", params), f"{FUNCTION[node.op]}(&p, {bufs.ptr(x)}, "
                           f"{bufs.ptr(y)});"], families={"softmax"})


def _lower(w, graph, node) -> None:
    """SOFTMAX keeps its beta in its options; LOG_SOFTMAX has none (beta 1)."""
    options = {"Beta": float(node.attrs.beta)} if node.op is Op.SOFTMAX else {}
    w.op(node.op.value, node.inputs, node.outputs, options)


def _softmax_def(op: Op, attrs: type, constraints: str) -> OpDef:
    return OpDef(op, attrs, KernelContract(op, "softmax", "kb_softmax_params", constraints=constraints),
                 qparams="fixed", fixed_qparams=OUTPUT_QPARAMS[op], elementwise_cost=True, int8_input=False,
                 builtin=op.value, function=FUNCTION[op], shape=_shape, float_ref=_float, int8_ref=_int8, emit=_emit,
                 lower=_lower)


DEFS = (
    _softmax_def(Op.SOFTMAX, SoftmaxAttrs, "int8 in, int8 out with scale 1/256 and zero point -128 (TFLite); a float "
                 "SOFTMAX after a DEQUANTIZE at the output is left to the caller"),
    _softmax_def(Op.LOG_SOFTMAX, NoAttrs, "int8 in, int8 out with scale 16/256 and zero point 127 (TFLite)"),
)
