"""Frontend stage: the ONNX op table — one handler per supported ONNX operator.

Each handler takes `(low, origin, attrs, inputs, opset)`: the node's attributes as a dict, its inputs as a list of
`Value` (activation), `np.ndarray` (constant: initializer or folded) or None (omitted optional input). It normalises
ONNX conventions (`pads` as all-begins-then-all-ends, `auto_pad`, Gemm's alpha/beta/transB, attribute-vs-input
changes between opsets) and makes one `Lowering` call.
"""

from __future__ import annotations

import numpy as np

from ..ir import Op
from .lowering import Lowering, LoweringError, Value, same_padding

SUPPORTED = ("Conv, BatchNormalization, Relu, Clip(0,6), Gemm, MatMul(+Add), AveragePool, MaxPool, "
             "GlobalAveragePool, ReduceMean, Add, Concat, Flatten, Reshape, Dropout, Identity, Pad, Softmax")

FLOAT_MAX = 3.0e38  # ONNX's Clip attribute defaults are +-FLT_MAX: treat anything this large as "no bound"


def _act(v, what: str = "input") -> Value:
    if not isinstance(v, Value):
        raise LoweringError(f"{what} must be an activation computed from the graph input, not a constant")
    return v


def _const(v, what: str) -> np.ndarray:
    if v is None or isinstance(v, Value):
        raise LoweringError(f"{what} must be a constant (initializer)")
    return v


def _window(attrs: dict, x: Value, kernel) -> tuple[tuple, tuple, tuple]:
    """strides, dilations and explicit (top, bottom, left, right) padding of a Conv/pool node."""
    if len(kernel) != 2:
        raise LoweringError(f"only 2-D windows are supported, got kernel {tuple(kernel)}")
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        lower = auto_pad == "SAME_LOWER"
        t, b = same_padding(x.shape[2], kernel[0], strides[0], dilations[0], lower)
        left, r = same_padding(x.shape[3], kernel[1], strides[1], dilations[1], lower)
        return strides, dilations, (t, b, left, r)
    if auto_pad == "VALID":
        return strides, dilations, (0, 0, 0, 0)
    t, left, b, r = attrs.get("pads", (0, 0, 0, 0))  # ONNX: (x1_begin, x2_begin, x1_end, x2_end)
    return strides, dilations, (t, b, left, r)


def conv(low: Lowering, origin, attrs, ins, opset):
    x, w = _act(ins[0]), _const(ins[1], "weight")
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else None
    strides, dilations, pads = _window(attrs, x, attrs.get("kernel_shape", w.shape[2:]))
    return low.conv2d(x, w, None if bias is None else _const(bias, "bias"), stride=strides, padding=pads,
                      dilation=dilations, groups=int(attrs.get("group", 1)), origin=origin)


def batch_norm(low: Lowering, origin, attrs, ins, opset):
    if attrs.get("training_mode", 0):
        raise LoweringError("training_mode=1 is not supported")
    gamma, beta, mean, var = (_const(v, "batch norm parameter") for v in ins[1:5])
    return low.batch_norm(_act(ins[0]), gamma, beta, mean, var, eps=attrs.get("epsilon", 1e-5), origin=origin)


def relu(low: Lowering, origin, attrs, ins, opset):
    return low.unary(Op.RELU, _act(ins[0]), origin=origin)


def identity(low: Lowering, origin, attrs, ins, opset):
    if len(ins) > 2 and ins[2] is not None and bool(np.asarray(_const(ins[2], "training_mode"))):
        raise LoweringError("dropout in training mode is random at inference")
    return low.unary(Op.IDENTITY, _act(ins[0]), origin=origin)


def clip(low: Lowering, origin, attrs, ins, opset):
    if opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo, hi = (float(_const(ins[i], "clip bound")) if len(ins) > i and ins[i] is not None else None
                  for i in (1, 2))
    if hi is not None and hi >= FLOAT_MAX:
        hi = None
    if lo == 0 and hi == 6:
        return low.unary(Op.RELU6, _act(ins[0]), origin=origin)
    if lo == 0 and hi is None:
        return low.unary(Op.RELU, _act(ins[0]), origin=origin)
    raise LoweringError(f"clip to [{lo}, {hi}]; only [0, 6] (ReLU6) and [0, inf) (ReLU) are supported")


def gemm(low: Lowering, origin, attrs, ins, opset):
    if attrs.get("transA", 0):
        raise LoweringError("transA=1 is not supported")
    w = _const(ins[1], "B (weight)")
    w = w if attrs.get("transB", 0) else w.T  # the IR wants (out, in)
    w = w * attrs.get("alpha", 1.0)
    bias = None
    if len(ins) > 2 and ins[2] is not None:
        bias = np.broadcast_to(_const(ins[2], "C (bias)") * attrs.get("beta", 1.0), (1, w.shape[0])).reshape(-1)
    return low.linear(_act(ins[0]), w, bias, origin=origin)


def matmul(low: Lowering, origin, attrs, ins, opset, bias=None):
    w = _const(ins[1], "second MatMul operand (weight)")
    if w.ndim != 2:
        raise LoweringError(f"MatMul with a {w.ndim}-D weight is not supported")
    return low.linear(_act(ins[0]), w.T, bias, origin=origin)


def _pool(op: Op, low: Lowering, origin, attrs, ins):
    x = _act(ins[0])
    strides, dilations, pads = _window(attrs, x, attrs["kernel_shape"])
    if tuple(dilations) != (1, 1):
        raise LoweringError("pooling with dilation is not supported")
    return low.pool(op, x, kernel=attrs["kernel_shape"], stride=strides, padding=pads,
                    ceil_mode=bool(attrs.get("ceil_mode", 0)),
                    count_include_pad=bool(attrs.get("count_include_pad", 0)), origin=origin)


def average_pool(low: Lowering, origin, attrs, ins, opset):
    return _pool(Op.AVG_POOL_2D, low, origin, attrs, ins)


def max_pool(low: Lowering, origin, attrs, ins, opset):
    return _pool(Op.MAX_POOL_2D, low, origin, attrs, ins)


def global_average_pool(low: Lowering, origin, attrs, ins, opset):
    return low.mean(_act(ins[0]), (2, 3), True, origin=origin)


def reduce_mean(low: Lowering, origin, attrs, ins, opset):
    if opset >= 18:
        axes = None if len(ins) < 2 or ins[1] is None else _const(ins[1], "axes").tolist()
    else:
        axes = attrs.get("axes")
    if not axes:
        raise LoweringError("mean over all axes is not supported; reduce over axes (2, 3)")
    return low.mean(_act(ins[0]), axes, bool(attrs.get("keepdims", 1)), origin=origin)


def add(low: Lowering, origin, attrs, ins, opset):
    return low.add(_act(ins[0], "first operand"), _act(ins[1], "second operand (a constant bias add?)"),
                   origin=origin)


def concat(low: Lowering, origin, attrs, ins, opset):
    return low.concat([_act(v) for v in ins], int(attrs["axis"]), origin=origin)


def flatten(low: Lowering, origin, attrs, ins, opset):
    x = _act(ins[0])
    axis = int(attrs.get("axis", 1)) % max(len(x.shape), 1)
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return low.reshape(x, (outer, int(np.prod(x.shape[axis:], dtype=np.int64))), origin=origin)


def reshape(low: Lowering, origin, attrs, ins, opset):
    x, shape = _act(ins[0]), [int(d) for d in _const(ins[1], "shape")]
    if not attrs.get("allowzero", 0):  # 0 copies the input's dimension
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return low.reshape(x, shape, origin=origin)


def pad(low: Lowering, origin, attrs, ins, opset):
    x = _act(ins[0])
    if attrs.get("mode", "constant") != "constant":
        raise LoweringError(f"pad mode {attrs['mode']!r}; only constant (zero) padding is supported")
    if opset < 11:
        pads, value, axes = attrs.get("pads"), attrs.get("value", 0.0), None
    else:
        pads = _const(ins[1], "pads").tolist()
        value = 0.0 if len(ins) < 3 or ins[2] is None else float(_const(ins[2], "constant_value"))
        axes = None if len(ins) < 4 or ins[3] is None else _const(ins[3], "axes").tolist()
    if value != 0:
        raise LoweringError(f"padding with {value}; only zero padding is supported")
    rank = len(x.shape)
    axes = [a % rank for a in (axes if axes is not None else range(rank))]
    per_axis = [(0, 0)] * rank
    for i, a in enumerate(axes):
        per_axis[a] = (int(pads[i]), int(pads[i + len(axes)]))
    return low.pad(x, per_axis, origin=origin)


def softmax(low: Lowering, origin, attrs, ins, opset):
    x = _act(ins[0])
    axis = int(attrs.get("axis", -1 if opset >= 13 else 1)) % len(x.shape)
    if opset < 13 and int(np.prod(x.shape[axis + 1:], dtype=np.int64)) != 1:  # old Softmax flattens from `axis`
        raise LoweringError(f"opset {opset} Softmax over the flattened axes {axis}.. is not supported")
    return low.softmax(x, axis, origin=origin)


OPS = {
    "Conv": conv, "BatchNormalization": batch_norm, "Relu": relu, "Clip": clip, "Gemm": gemm, "MatMul": matmul,
    "AveragePool": average_pool, "MaxPool": max_pool, "GlobalAveragePool": global_average_pool,
    "ReduceMean": reduce_mean, "Add": add, "Concat": concat, "Flatten": flatten, "Reshape": reshape,
    "Dropout": identity, "Identity": identity, "Pad": pad, "Softmax": softmax,
}
