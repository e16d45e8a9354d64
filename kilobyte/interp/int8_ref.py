"""Reference stage: a numpy int8 interpreter with TFLite's integer arithmetic — bit-exact with TensorFlow Lite Micro.

`run_int8` runs a whole quantised graph; `eval_node_int8` runs one node from its argument arrays (a memory-plan
executor calls it node by node); the per-op kernels below (`conv2d_int8`, `depthwise_conv2d_int8`,
`fully_connected_int8`, `add_int8`, `sub_int8`, `mul_int8`, `avg_pool_int8`, `max_pool_int8`, `pad_int8`) take plain
integer parameters so the C runtime can be tested against them directly, and `requant_params` / `add_node_params` /
`mul_node_params` / `activation_range_of` derive those parameters from a graph exactly as TFLite Micro's Prepare
functions do.

Beyond the conv / pool / ADD core:
- MEAN (`mean_int8`, TFLM's integer MEAN; its requantisation in `mean_multiplier`, shared with the code generator);
- SOFTMAX and LOG_SOFTMAX (`kilobyte.interp.softmax`; `softmax_params` gives their C kernel's fields);
- ADD, SUB, MUL, MAXIMUM, MINIMUM: broadcast as numpy does (TFLite Micro's broadcast kernels,
  `BroadcastAdd6DSlow`, `BroadcastQuantSubSlow`, `BroadcastMul6DSlow`, compute the same formula per element), either
  operand may be a constant of any shape that broadcasts (a (C,) bias, a single value); `constant_terms` gives a
  constant operand's share of each element, which the C kernels take from a table; MAXIMUM / MINIMUM compare raw int8
  values, so their inputs and output must share params;
- LOGISTIC, TANH, ELU, HARD_SWISH, LEAKY_RELU, GELU, RELU_N1_TO_1, EXP, LOG and a standing RELU / RELU6: the
  256-entry table `kilobyte.ops.lut.node_table` builds, the same table the C kernel reads;
- PRELU: one such table per channel (`kilobyte.interp.prelu`);
- RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR (output quantised like the input: TFLite Micro never rescales) and
  TRANSPOSE_CONV (CONV_2D's per-channel requantisation): `kilobyte.ops.resize`, `kilobyte.ops.transpose_conv`;
- QUANTIZE between uint8 and int8 at a model's edges (`requantize_values`), which only imported `.tflite` files have;
- TRANSPOSE, STRIDED_SLICE, TILE and REDUCE_MAX (`kilobyte.interp.movement`): values moved or compared raw, so
  input and output must share quantisation params (`check_shared_qparams`; TFLite's converter writes them equal, and
  TFLite Micro's kernels copy bytes without looking).

Integer semantics follow TFLite's reference kernels: convolutions accumulate `w · (x - zp_in)` (padding contributes
nothing, i.e. the input is padded with its zero point) in int32, add the int32 bias and requantise per output
channel; max pooling ignores padded taps; average pooling divides by the number of in-image taps with
`(sum ± count/2) / count`. Products are summed in float64, which is exact for every integer sum below 2^53, so BLAS
does the heavy lifting without changing a bit. Kernels accept any batch size N in the leading axis.
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..ir import Activation, Graph, Node, Op, conv_out_size
from ..ops import opdef
from ..ops.arith import (
    AddParams,
    MulParams,
    dequantize_values,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    quantize_values,
    requantize_values,
)
from ..ops.node_params import (
    RequantParams,
    activation_range_of,
    add_node_params,
    check_shared_qparams,
    finish,
    mul_node_params,
    requant_params,
    require_same_qparams,
    tensor_qparams,
)
from .movement import batched
from .prelu import prelu_int8, prelu_node_tables
from .softmax import (
    SoftmaxParams,
    log_softmax_int8,
    log_softmax_params_for,
    softmax_int8,
    softmax_params_for,
)


# -- graph-level execution ---------------------------------------------------------------------------------------------
def run_int8(graph: Graph, inputs, *, keep_all: bool = False) -> dict[str, np.ndarray]:
    """Execute a quantised `graph`; return its outputs (or every non-constant tensor with `keep_all`).

    `inputs` is one int8 array (single-input graphs) or a dict name -> int8 array in the graph's shapes; a
    leading axis of N instead of the graph's batch of 1 runs N samples at once (results equal N single runs).
    Quantise float data first with `kilobyte.quant.quantize_input`.
    """
    if not isinstance(inputs, dict):
        inputs = {graph.inputs[0]: inputs}
    env: dict[str, np.ndarray] = {name: _check_input(graph, name, inputs.get(name)) for name in graph.inputs}
    for node in graph.nodes:
        args = [env[t] if t in env else graph.tensors[t].data for t in node.inputs]
        env[node.outputs[0]] = eval_node_int8(graph, node, args)
    names = list(env) if keep_all else list(graph.outputs)
    return {k: env[k] for k in names}


def _check_input(graph: Graph, name: str, x) -> np.ndarray:
    t = graph.tensors[name]
    if x is None:
        raise KilobyteError(f"graph input '{name}' was not given")
    x = np.asarray(x)
    if x.dtype != np.dtype(t.dtype):
        hint = " (quantise float data with kilobyte.quant.quantize_input)" if t.dtype == "int8" else ""
        raise KilobyteError(f"graph input '{name}' is {t.dtype}, got {x.dtype}{hint}")
    if x.shape != t.shape and not (t.shape[0] == 1 and x.shape[1:] == t.shape[1:]):
        raise KilobyteError(f"graph input '{name}': shape {x.shape}, graph expects {t.shape}")
    return x


def eval_node_int8(graph: Graph, node: Node, args: list[np.ndarray]) -> np.ndarray:
    """Run one node of a quantised graph on its argument arrays (activations, then weight / bias data): the op's
    own int8 reference (`OpDef.int8_ref`), or for the ops still pending in the registry the rules below."""
    op, d = node.op, opdef(node.op)
    if d.int8_input and args[0].dtype != np.int8:
        raise KilobyteError(f"node '{node.name}' ({op.value}): expects an int8 input, got {args[0].dtype}")
    if d.int8_ref is not None:
        return d.int8_ref(graph, node, args)
    if op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED):
        return _eval_weighted(graph, node, args)
    if op is Op.ADD:
        return add_int8(args[0], args[1], add_node_params(graph, node))
    if op is Op.SUB:
        return sub_int8(args[0], args[1], add_node_params(graph, node))
    if op is Op.MUL:
        return mul_int8(args[0], args[1], mul_node_params(graph, node))
    if op in (Op.MAXIMUM, Op.MINIMUM):
        require_same_qparams(graph, node)
        return (np.maximum if op is Op.MAXIMUM else np.minimum)(args[0], args[1])
    if op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        require_same_qparams(graph, node)
        a = node.attrs
        lo, hi = activation_range_of(graph, node)
        pool = avg_pool_int8 if op is Op.AVG_POOL_2D else max_pool_int8
        return pool(args[0], a.kernel, a.stride, a.padding, lo, hi)
    if op in (Op.PAD, Op.RESHAPE, Op.IDENTITY, Op.CONCAT):
        return _eval_moving(graph, node, args)
    if op is Op.MEAN:
        return mean_int8(args[0], node.attrs.axes, node.attrs.keepdims, *tensor_qparams(graph, node.inputs[0]),
                         *tensor_qparams(graph, node.outputs[0]))
    if op is Op.QUANTIZE and args[0].dtype in (np.int8, np.uint8):  # uint8 <-> int8 at a model's edges
        x, y = node.inputs[0], node.outputs[0]
        return requantize_values(args[0], *tensor_qparams(graph, x), *tensor_qparams(graph, y),
                                 np.dtype(graph.tensors[y].dtype))
    if op is Op.QUANTIZE:
        return quantize_values(args[0], *tensor_qparams(graph, node.outputs[0]))
    if op is Op.DEQUANTIZE:
        return dequantize_values(args[0], *tensor_qparams(graph, node.inputs[0]))
    if op in (Op.SOFTMAX, Op.LOG_SOFTMAX):
        return _eval_softmax(graph, node, args[0])
    if op in MOVEMENT_OPS:
        check_shared_qparams(graph, node)
        return batched(node, args[0], graph.tensors[node.inputs[0]].shape)
    if op is Op.PRELU:
        return prelu_int8(args[0], prelu_node_tables(graph, node))
    raise UnsupportedOpError(f"node '{node.name}': no int8 kernel for {op.value}")


MOVEMENT_OPS = frozenset({Op.TRANSPOSE, Op.STRIDED_SLICE, Op.TILE, Op.REDUCE_MAX})


def _eval_moving(graph: Graph, node: Node, args: list[np.ndarray]) -> np.ndarray:
    """PAD / RESHAPE / IDENTITY / CONCAT: values move unchanged, so input and output params must agree — except for
    RESHAPE, which TFLite Micro runs as a byte copy whatever the output's params say (some converters write them
    different): so do we."""
    if node.op is not Op.RESHAPE:
        require_same_qparams(graph, node)
    if node.op is Op.PAD:
        return pad_int8(args[0], node.attrs.pads, tensor_qparams(graph, node.inputs[0])[1])
    if node.op is Op.CONCAT:
        if node.attrs.activation is not Activation.NONE:
            raise UnsupportedOpError(f"node '{node.name}': int8 CONCAT cannot fuse an activation (TFLite Micro)")
        return np.concatenate(args, axis=node.attrs.axis)
    if node.op is Op.RESHAPE:
        if args[0].shape == graph.tensors[node.inputs[0]].shape:  # one sample: the new shape as it is (rank 0 too)
            return args[0].reshape(tuple(node.attrs.shape))
        return args[0].reshape((args[0].shape[0],) + tuple(node.attrs.shape[1:]))
    return args[0].copy()


def _eval_softmax(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    """SOFTMAX / LOG_SOFTMAX: float32 (a float tail, as quantize() leaves a final softmax) or int8 (TFLite's)."""
    log = node.op is Op.LOG_SOFTMAX
    if x.dtype == np.float32:
        return log_softmax_float(x) if log else softmax_float(x, node.attrs.beta)
    p = _softmax_node_params(graph, node)
    try:
        return log_softmax_int8(x, p) if log else softmax_int8(x, p)
    except KilobyteError as e:
        raise KilobyteError(f"node '{node.name}' ({node.op.value}): {e}") from None


def _eval_weighted(graph: Graph, node: Node, args: list[np.ndarray]) -> np.ndarray:
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    p = requant_params(graph, node)
    a = node.attrs
    if node.op is Op.FULLY_CONNECTED:
        return fully_connected_int8(x, w, bias, p)
    if node.op is Op.CONV_2D:
        return conv2d_int8(x, w, bias, p, stride=a.stride, padding=a.padding, dilation=a.dilation)
    return depthwise_conv2d_int8(x, w, bias, p, stride=a.stride, padding=a.padding, dilation=a.dilation,
                                 depth_multiplier=a.depth_multiplier)


def _softmax_node_params(graph: Graph, node: Node) -> SoftmaxParams:
    """TFLite Micro's Prepare of an int8 SOFTMAX / LOG_SOFTMAX, refusing what it refuses."""
    log = node.op is Op.LOG_SOFTMAX
    x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
    want = opdef(node.op).fixed_qparams
    if x.dtype != "int8" or y.dtype != "int8" or tensor_qparams(graph, node.outputs[0]) != want:
        raise KilobyteError(f"node '{node.name}' ({node.op.value}): int8 in and out with output scale "
                            f"{float(want[0])} and zero point {want[1]} (TFLite Micro refuses others), got "
                            f"{x.dtype} -> {y.dtype} {y.qparams}")
    s_in = tensor_qparams(graph, node.inputs[0])[0]
    try:
        return log_softmax_params_for(s_in) if log else softmax_params_for(s_in, node.attrs.beta)
    except KilobyteError as e:
        raise KilobyteError(f"node '{node.name}' ({node.op.value}): {e}") from None


def softmax_params(graph: Graph, node: Node) -> dict[str, int]:
    """The fields of `kb_softmax_params` (kilobyte.h) for an int8 SOFTMAX or LOG_SOFTMAX node: `rows` x `depth`
    values (the last axis), and TFLite Micro's Prepare results (the reverse scaling is 0 for SOFTMAX)."""
    p = _softmax_node_params(graph, node)
    shape = graph.tensors[node.outputs[0]].shape
    depth = int(shape[-1])
    return dict(rows=int(np.prod(shape[:-1], dtype=np.int64)), depth=depth, input_multiplier=p.input_multiplier,
                input_left_shift=p.input_left_shift, diff_min=p.diff_min,
                reverse_scaling_divisor=p.reverse_scaling_divisor,
                reverse_scaling_right_shift=p.reverse_scaling_right_shift)


# -- kernels -----------------------------------------------------------------------------------------------------------
def _taps(xp: np.ndarray, kh: int, kw: int, stride, dilation, out_hw):
    """Yield `(i, j, view)` for every kernel tap: `view` (N,Ho,Wo,C) holds the padded input under tap (i, j)."""
    (sh, sw), (dh, dw), (ho, wo) = stride, dilation, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw, :]


def _out_hw(x: np.ndarray, kh: int, kw: int, stride, padding, dilation=(1, 1)) -> tuple[int, int]:
    t, b, left, r = padding
    return (conv_out_size(x.shape[1], kh, stride[0], t, b, dilation[0]),
            conv_out_size(x.shape[2], kw, stride[1], left, r, dilation[1]))


def _pad_hw(x: np.ndarray, padding, value=0) -> np.ndarray:
    t, b, left, r = padding
    return np.pad(x, ((0, 0), (t, b), (left, r), (0, 0)), constant_values=value)


def conv2d_int8(x, w, bias, p: RequantParams, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """int8 CONV_2D. x (N,H,W,Cin) int8, w (Cout,kh,kw,Cin) int8, bias (Cout,) int32 or None -> (N,Ho,Wo,Cout)."""
    cout, kh, kw, _ = w.shape
    ho, wo = _out_hw(x, kh, kw, stride, padding, dilation)
    xp = _pad_hw(x.astype(np.float64) - p.input_zp, padding)  # zero-point padding == skipping padded taps
    wf = w.astype(np.float64)
    acc = np.zeros((x.shape[0], ho, wo, cout))
    for i, j, view in _taps(xp, kh, kw, stride, dilation, (ho, wo)):
        acc += view @ wf[:, i, j, :].T  # (N,Ho,Wo,Cin) @ (Cin,Cout)
    return finish(acc, bias, p)


def depthwise_conv2d_int8(x, w, bias, p: RequantParams, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                          depth_multiplier: int = 1) -> np.ndarray:
    """int8 DEPTHWISE_CONV_2D. x (N,H,W,C), w (1,kh,kw,C·m) -> (N,Ho,Wo,C·m); output channel c·m+k reads c."""
    _, kh, kw, _ = w.shape
    ho, wo = _out_hw(x, kh, kw, stride, padding, dilation)
    xs = x.astype(np.float64) - p.input_zp
    if depth_multiplier != 1:
        xs = np.repeat(xs, depth_multiplier, axis=3)
    xp = _pad_hw(xs, padding)
    wf = w[0].astype(np.float64)
    acc = np.zeros((x.shape[0], ho, wo, w.shape[3]))
    for i, j, view in _taps(xp, kh, kw, stride, dilation, (ho, wo)):
        acc += view * wf[i, j]
    return finish(acc, bias, p)


def fully_connected_int8(x, w, bias, p: RequantParams) -> np.ndarray:
    """int8 FULLY_CONNECTED. x (N,in) int8, w (out,in) int8, bias (out,) int32 or None -> (N,out)."""
    acc = (x.astype(np.float64) - p.input_zp) @ w.astype(np.float64).T
    return finish(acc, bias, p)


def add_int8(a, b, p: AddParams) -> np.ndarray:
    """TFLite's int8 ADD (`AddFunc`): inputs shifted left 20 bits, rescaled, summed. Shapes broadcast as in numpy
    (TFLite Micro's `BroadcastAdd6DSlow` applies the same function per element)."""
    x = (np.asarray(a, np.int64) + p.input1_offset) << p.left_shift
    y = (np.asarray(b, np.int64) + p.input2_offset) << p.left_shift
    x = multiply_by_quantized_multiplier(x, p.input1_multiplier, p.input1_shift)
    y = multiply_by_quantized_multiplier(y, p.input2_multiplier, p.input2_shift)
    raw = multiply_by_quantized_multiplier(x + y, p.output_multiplier, p.output_shift) + p.output_offset
    return np.clip(raw, p.act_min, p.act_max).astype(np.int8)


def sub_int8(a, b, p: AddParams) -> np.ndarray:
    """TFLite's int8 SUB (`SubElementwise`, and its broadcast form element by element): ADD's arithmetic with the
    rescaled second input subtracted. Shapes broadcast as in numpy."""
    x = (np.asarray(a, np.int64) + p.input1_offset) << p.left_shift
    y = (np.asarray(b, np.int64) + p.input2_offset) << p.left_shift
    x = multiply_by_quantized_multiplier(x, p.input1_multiplier, p.input1_shift)
    y = multiply_by_quantized_multiplier(y, p.input2_multiplier, p.input2_shift)
    raw = multiply_by_quantized_multiplier(x - y, p.output_multiplier, p.output_shift) + p.output_offset
    return np.clip(raw, p.act_min, p.act_max).astype(np.int8)


def mul_int8(a, b, p: MulParams) -> np.ndarray:
    """TFLite's int8 MUL (`reference_integer_ops::MulElementwise`, and its broadcast form element by element): the
    product of the offset inputs, rescaled once, plus the output zero point, clamped. Shapes broadcast as in numpy."""
    prod = (np.asarray(a, np.int64) + p.input1_offset) * (np.asarray(b, np.int64) + p.input2_offset)
    raw = multiply_by_quantized_multiplier(prod, p.output_multiplier, p.output_shift) + p.output_offset
    return np.clip(raw, p.act_min, p.act_max).astype(np.int8)


def avg_pool_int8(x, kernel, stride, padding, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 AVG_POOL_2D: mean of the in-image taps, rounded as TFLite does (`(sum ± count/2) / count`, truncating)."""
    kh, kw = kernel
    ho, wo = _out_hw(x, kh, kw, stride, padding)
    xp = _pad_hw(x.astype(np.int64), padding)
    ones = _pad_hw(np.ones((1,) + x.shape[1:3] + (1,), np.int64), padding)
    total = np.zeros((x.shape[0], ho, wo, x.shape[3]), np.int64)
    count = np.zeros((1, ho, wo, 1), np.int64)
    for (_, _, view), (_, _, ones_view) in zip(_taps(xp, kh, kw, stride, (1, 1), (ho, wo)),
                                               _taps(ones, kh, kw, stride, (1, 1), (ho, wo))):
        total += view
        count += ones_view
    half = count // 2
    mean = np.where(total > 0, (total + half) // count, -((half - total) // count))  # C division truncates
    return np.clip(mean, act_min, act_max).astype(np.int8)


def max_pool_int8(x, kernel, stride, padding, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 MAX_POOL_2D: maximum over the in-image taps (padded taps never win), then the activation clamp."""
    kh, kw = kernel
    ho, wo = _out_hw(x, kh, kw, stride, padding)
    xp = _pad_hw(x.astype(np.int16), padding, value=-129)  # below every int8: padded taps are ignored
    best = np.full((x.shape[0], ho, wo, x.shape[3]), -129, np.int16)
    for _, _, view in _taps(xp, kh, kw, stride, (1, 1), (ho, wo)):
        np.maximum(best, view, out=best)
    return np.clip(best, act_min, act_max).astype(np.int8)


def mean_int8(x, axes, keepdims: bool, input_scale, input_zp: int, output_scale, output_zp: int) -> np.ndarray:
    """int8 MEAN as TFLite Micro computes it (`reference_ops::QuantizedMeanOrSum`, integer version), any axes.

    `sum(x - zp_in)` over the n reduced values is requantised with `QuantizeMultiplier(s_in / s_out)` into which
    1/n is folded: `k = min(floor(log2 n), 32, 31 + shift)`, `multiplier = (multiplier << k) / n` (truncating),
    `shift -= k`; then `+ zp_out` and the int8 clamp.
    """
    axes = tuple(sorted({a % x.ndim for a in axes}))
    n = int(np.prod([x.shape[a] for a in axes]))
    acc = (np.asarray(x, np.int64) - input_zp).sum(axis=axes, keepdims=keepdims)
    m, s = mean_multiplier(input_scale, output_scale, n)
    return np.clip(multiply_by_quantized_multiplier(acc, m, s) + output_zp, -128, 127).astype(np.int8)


def mean_multiplier(input_scale, output_scale, n: int) -> tuple[int, int]:
    """(multiplier, shift) of an int8 MEAN over `n` values: `QuantizeMultiplier(s_in / s_out)` with 1/n folded in as
    TFLite Micro's `QuantizedMeanOrSum` does it (`mean_int8`); the C kernel `kb_mean` gets the same two numbers.

    The shift k taken out of the multiplier is at most floor(log2 n) (so `(m << k) / n` stays below 2^31), at most 32,
    and at most 31 + shift (so the final right shift stays within 31 bits).

    >>> mean_multiplier(0.5, 0.5, 49)  # 2^30 * 2^5 / 49, shift 1 - 5
    (701219150, -4)
    """
    m, s = (int(v) for v in quantize_multiplier(float(np.float32(input_scale)) / float(np.float32(output_scale))))
    k = min(n.bit_length() - 1, 32, 31 + s)
    return (m << k) // n, s - k


def pad_int8(x, pads, zero_point: int) -> np.ndarray:
    """int8 PAD: pad every axis with the zero point (the quantised value of real 0)."""
    return np.pad(x, tuple(tuple(p) for p in pads), constant_values=np.int8(zero_point))


def softmax_float(x, beta: float = 1.0) -> np.ndarray:
    """TFLite's float32 SOFTMAX over the last axis: exp((x - max) · beta) / sum, all in float32."""
    x = np.asarray(x, np.float32)
    e = np.exp((x - x.max(axis=-1, keepdims=True)) * np.float32(beta))
    return (e / e.sum(axis=-1, keepdims=True, dtype=np.float32)).astype(np.float32)


def log_softmax_float(x) -> np.ndarray:
    """TFLite's float32 LOG_SOFTMAX over the last axis: x - max - log(sum(exp(x - max))), in float32."""
    x = np.asarray(x, np.float32)
    d = x - x.max(axis=-1, keepdims=True)
    return (d - np.log(np.exp(d).sum(axis=-1, keepdims=True, dtype=np.float32))).astype(np.float32)
