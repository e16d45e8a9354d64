"""Frontend stage: the ONNX op table — one handler per supported ONNX operator.

Each handler takes `(low, origin, attrs, inputs, opset)`: the node's attributes as a dict, its inputs as a list of
`Value` (activation), `np.ndarray` (constant: initializer or folded) or None (omitted optional input). It normalises
ONNX conventions (`pads` as all-begins-then-all-ends, `auto_pad`, Gemm's alpha/beta/transB, attribute-vs-input
changes between opsets) and makes one `Lowering` call.
"""

from __future__ import annotations

import numpy as np

from ..ir import LeakyReluAttrs, Op
from .lowering import Lowering, LoweringError, Value, same_padding

SUPPORTED = ("Conv (1-D, 2-D), BatchNormalization, Relu, Clip(0,6), Clip(-1,1), Sigmoid, Tanh, Elu (alpha 1), "
             "PRelu (constant slope), Exp, Log, HardSwish, HardSigmoid, LeakyRelu, "
             "Gemm, MatMul(+Add), AveragePool, MaxPool, GlobalAveragePool, GlobalMaxPool, ReduceMean, Add, Sub, Mul, "
             "Div by a constant, Neg, Max, Min, Concat, Flatten, Reshape, Squeeze, Unsqueeze, Transpose of unit axes, "
             "Dropout, Identity, Pad, Softmax, LogSoftmax, ConvTranspose (1-D, 2-D), Resize / Upsample (nearest, "
             "linear), Gelu and the exporters' Erf and Tanh GELU chains, ReduceMax")

# ONNX operators whose IR op is not there yet: the error names what they need.
NOT_IN_IR = {"Slice": "STRIDED_SLICE", "Tile": "TILE",
             "Erf": "GELU (only the exporters' GELU chain x * 0.5 * (1 + erf(x / sqrt 2)) is recognised)"}

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
    """strides, dilations and explicit padding of a 1-D or 2-D Conv/pool node: (before, after) for a 1-D window,
    (top, bottom, left, right) for a 2-D one."""
    n = len(kernel)
    if n not in (1, 2) or len(x.shape) != n + 2:
        raise LoweringError(f"only 1-D and 2-D windows are supported, got kernel {tuple(kernel)} on {x.shape}")
    strides = tuple(attrs.get("strides", (1,) * n))
    dilations = tuple(attrs.get("dilations", (1,) * n))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [same_padding(x.shape[2 + i], kernel[i], strides[i], dilations[i], auto_pad == "SAME_LOWER")
                for i in range(n)]
    elif auto_pad == "VALID":
        pads = [(0, 0)] * n
    else:
        flat = attrs.get("pads", (0,) * 2 * n)  # ONNX: (x1_begin, x2_begin, x1_end, x2_end)
        pads = [(flat[i], flat[i + n]) for i in range(n)]
    return strides, dilations, tuple(int(p) for pair in pads for p in pair)


def conv(low: Lowering, origin, attrs, ins, opset):
    x, w = _act(ins[0]), _const(ins[1], "weight")
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else None
    bias = None if bias is None else _const(bias, "bias")
    kernel = attrs.get("kernel_shape", w.shape[2:])
    strides, dilations, pads = _window(attrs, x, kernel)
    groups = int(attrs.get("group", 1))
    if len(kernel) == 1:
        return low.conv1d(x, w, bias, stride=strides[0], padding=pads, dilation=dilations[0], groups=groups,
                          origin=origin)
    return low.conv2d(x, w, bias, stride=strides, padding=pads, dilation=dilations, groups=groups, origin=origin)


def conv_transpose(low: Lowering, origin, attrs, ins, opset):
    x, w = _act(ins[0]), _const(ins[1], "ConvTranspose weight")
    bias = None if len(ins) < 3 or ins[2] is None else _const(ins[2], "ConvTranspose bias")
    n = w.ndim - 2
    if attrs.get("auto_pad", "NOTSET") != "NOTSET" or "output_shape" in attrs:
        raise LoweringError("ConvTranspose with auto_pad or output_shape; export with explicit pads "
                            "(PyTorch does)")
    strides = tuple(attrs.get("strides", (1,) * n))
    flat = tuple(attrs.get("pads", (0,) * 2 * n))  # (x1_begin, x2_begin, x1_end, x2_end)
    out_pad = tuple(attrs.get("output_padding", (0,) * n))
    dilations, group = tuple(attrs.get("dilations", (1,) * n)), int(attrs.get("group", 1))
    if n == 1:
        if group != 1 or dilations != (1,):
            raise LoweringError(f"ConvTranspose with group={group}, dilations={dilations}; only 1 is supported")
        return low.conv_transpose1d(x, w, bias, stride=strides[0], padding=(flat[0], flat[1]),
                                    output_padding=out_pad[0], origin=origin)
    if n != 2:
        raise LoweringError(f"only 1-D and 2-D transposed convolutions are supported, got a weight of {w.shape}")
    return low.conv_transpose2d(x, w, bias, stride=strides, padding=(flat[0], flat[2], flat[1], flat[3]),
                                output_padding=out_pad, dilation=dilations, groups=group, origin=origin)


# Resize's coordinate_transformation_mode -> TFLite's (align_corners, half_pixel_centers), per mode
_RESIZE_COORDS = {"nearest": {"asymmetric": (False, False), "half_pixel": (False, True),
                              "tf_half_pixel_for_nn": (False, True), "align_corners": (True, False)},
                  "linear": {"asymmetric": (False, False), "half_pixel": (False, True),
                             "pytorch_half_pixel": (False, True), "align_corners": (True, False)}}


# the nearest_mode that reproduces TFLite's index rounding under each coordinate mode: floor(x * in/out) (asymmetric),
# floor((x + 0.5) * in/out) (half_pixel_centers: ONNX's half_pixel rounds (x + 0.5) * in/out - 0.5 half up), and
# round-half-away (align_corners)
_NEAREST_ROUNDING = {"asymmetric": "floor", "tf_half_pixel_for_nn": "floor", "half_pixel": "round_prefer_ceil",
                     "align_corners": "round_prefer_ceil"}


def resize(low: Lowering, origin, attrs, ins, opset):
    """Resize of the H and W axes, nearest or (bi)linear. Opset 10 takes (X, scales) with asymmetric coordinates and
    floor rounding; opset 11 on (X, roi, scales, sizes) and the coordinate / rounding attributes."""
    if opset < 11:
        return _resize(low, origin, attrs, ins[0], ins[1] if len(ins) > 1 else None, None, "asymmetric", "floor")
    return _resize(low, origin, attrs, ins[0], ins[2] if len(ins) > 2 else None, ins[3] if len(ins) > 3 else None,
                   attrs.get("coordinate_transformation_mode", "half_pixel"),
                   attrs.get("nearest_mode", "round_prefer_floor"))


def upsample(low: Lowering, origin, attrs, ins, opset):
    """Upsample (opsets 7-9; scales an attribute up to opset 8, an input from 9): asymmetric coordinates, floor."""
    scales = np.asarray(attrs["scales"], np.float32) if "scales" in attrs else ins[1] if len(ins) > 1 else None
    return _resize(low, origin, attrs, ins[0], scales, None, "asymmetric", "floor")


def _resize(low: Lowering, origin, attrs, x, scales, sizes, coords: str, rounding: str):
    """Resize / Upsample mapped onto TFLite's resize flags: asymmetric = no flags, half_pixel (and PyTorch's) =
    half_pixel_centers, align_corners. Nearest rounding must be the one that gives TFLite's indices
    (`_NEAREST_ROUNDING`; PyTorch exports asymmetric / floor)."""
    x = _act(x)
    if len(x.shape) != 4:
        raise LoweringError(f"Resize of a rank-{len(x.shape)} input; only (N, C, H, W) images")
    mode = attrs.get("mode", "nearest")
    if mode not in _RESIZE_COORDS or coords not in _RESIZE_COORDS[mode]:
        raise LoweringError(f"Resize mode={mode!r} with coordinate_transformation_mode={coords!r}; supported: "
                            f"nearest or linear with {', '.join(_RESIZE_COORDS['linear'])}")
    if mode == "nearest" and rounding != _NEAREST_ROUNDING[coords]:
        raise LoweringError(f"Resize nearest with coordinate_transformation_mode={coords!r} and "
                            f"nearest_mode={rounding!r}; TFLite's rounding is {_NEAREST_ROUNDING[coords]!r} there")
    if attrs.get("antialias", 0):
        raise LoweringError("Resize with antialias is not supported")
    if sizes is not None:
        out = tuple(int(v) for v in _const(sizes, "Resize sizes"))
    elif scales is not None and np.size(scales):
        factors = [float(v) for v in _const(scales, "Resize scales")]
        out = tuple(int(np.floor(d * f)) for d, f in zip(x.shape, factors))
    else:
        raise LoweringError("Resize without scales or sizes")
    if len(out) != 4 or out[:2] != x.shape[:2]:
        raise LoweringError(f"Resize of {x.shape} to {out}: only H and W may change")
    align, half = _RESIZE_COORDS[mode][coords]
    return low.resize(x, out[2:], mode="nearest" if mode == "nearest" else "bilinear", align_corners=align,
                      half_pixel_centers=half, origin=origin)


def gelu(low: Lowering, origin, attrs, ins, opset):
    approximate = attrs.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise LoweringError(f"Gelu approximate={approximate!r}; expected 'none' or 'tanh'")
    return low.gelu(_act(ins[0]), approximate=approximate == "tanh", origin=origin)


def reduce_max(low: Lowering, origin, attrs, ins, opset):
    x = _act(ins[0])
    axes = _axes(attrs, ins, opset, 18)
    if axes is None:
        raise LoweringError("ReduceMax over all axes (the batch included) is not supported")
    return low.reduce_max(x, axes, bool(attrs.get("keepdims", 1)), origin=origin)


def batch_norm(low: Lowering, origin, attrs, ins, opset):
    if attrs.get("training_mode", 0):
        raise LoweringError("training_mode=1 is not supported")
    gamma, beta, mean, var = (_const(v, "batch norm parameter") for v in ins[1:5])
    return low.batch_norm(_act(ins[0]), gamma, beta, mean, var, eps=attrs.get("epsilon", 1e-5), origin=origin)


def relu(low: Lowering, origin, attrs, ins, opset):
    return low.unary(Op.RELU, _act(ins[0]), origin=origin)


def sigmoid(low: Lowering, origin, attrs, ins, opset):
    return low.unary(Op.LOGISTIC, _act(ins[0]), origin=origin)


def tanh(low: Lowering, origin, attrs, ins, opset):
    return low.unary(Op.TANH, _act(ins[0]), origin=origin)


def prelu(low: Lowering, origin, attrs, ins, opset):
    return low.prelu(_act(ins[0]), _const(ins[1], "PRelu slope"), origin=origin)


def exp(low: Lowering, origin, attrs, ins, opset):
    return low.unary(Op.EXP, _act(ins[0]), origin=origin)


def log(low: Lowering, origin, attrs, ins, opset):
    return low.unary(Op.LOG, _act(ins[0]), origin=origin)


def elu(low: Lowering, origin, attrs, ins, opset):
    if attrs.get("alpha", 1.0) != 1.0:
        raise LoweringError(f"Elu with alpha={attrs['alpha']}; TFLite's ELU has alpha 1 only")
    return low.unary(Op.ELU, _act(ins[0]), origin=origin)


def hard_swish(low: Lowering, origin, attrs, ins, opset):
    return low.unary(Op.HARD_SWISH, _act(ins[0]), origin=origin)


def hard_sigmoid(low: Lowering, origin, attrs, ins, opset):
    return low.hard_sigmoid(_act(ins[0]), attrs.get("alpha", 0.2), attrs.get("beta", 0.5), origin=origin)


def leaky_relu(low: Lowering, origin, attrs, ins, opset):
    alpha = LeakyReluAttrs(alpha=float(attrs.get("alpha", 0.01)))
    return low.unary(Op.LEAKY_RELU, _act(ins[0]), origin=origin, attrs=alpha)


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
    if lo == -1 and hi == 1:
        return low.unary(Op.RELU_N1_TO_1, _act(ins[0]), origin=origin)
    raise LoweringError(f"clip to [{lo}, {hi}]; only [0, 6] (ReLU6), [0, inf) (ReLU) and [-1, 1] (TFLite's "
                        f"RELU_N1_TO_1) are supported")


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
    if any(d != 1 for d in dilations):
        raise LoweringError("pooling with dilation is not supported")
    options = dict(ceil_mode=bool(attrs.get("ceil_mode", 0)), count_include_pad=bool(attrs.get("count_include_pad", 0)),
                   origin=origin)
    if len(strides) == 1:
        return low.pool1d(op, x, kernel=attrs["kernel_shape"][0], stride=strides[0], padding=pads, **options)
    return low.pool(op, x, kernel=attrs["kernel_shape"], stride=strides, padding=pads, **options)


def average_pool(low: Lowering, origin, attrs, ins, opset):
    return _pool(Op.AVG_POOL_2D, low, origin, attrs, ins)


def max_pool(low: Lowering, origin, attrs, ins, opset):
    return _pool(Op.MAX_POOL_2D, low, origin, attrs, ins)


def global_average_pool(low: Lowering, origin, attrs, ins, opset):
    x = _act(ins[0])
    return low.mean(x, range(2, len(x.shape)), True, origin=origin)


def global_max_pool(low: Lowering, origin, attrs, ins, opset):
    x = _act(ins[0])
    return low.adaptive_pool(Op.MAX_POOL_2D, x, (1,) * (len(x.shape) - 2), origin=origin)


def reduce_mean(low: Lowering, origin, attrs, ins, opset):
    axes = _axes(attrs, ins, opset, 18)
    if not axes:
        raise LoweringError("mean over all axes is not supported; reduce over the spatial axes (2, 3)")
    return low.mean(_act(ins[0]), axes, bool(attrs.get("keepdims", 1)), origin=origin)


def _arith(low: Lowering, origin, op: Op, a, b) -> Value:
    """Two activations, or an activation and a constant (`Lowering.arith_const`: a per-channel or scalar scale /
    shift, folded later, or a constant of any broadcast shape)."""
    if isinstance(a, Value) and isinstance(b, Value):
        return low.add(a, b, origin=origin) if op is Op.ADD else low.binary(op, a, b, origin=origin)
    x, c = (a, _const(b, "operand")) if isinstance(a, Value) else (_act(b, "operand"), _const(a, "operand"))
    if op in (Op.ADD, Op.SUB, Op.MUL):
        return low.arith_const(op, x, c, const_first=x is not a, origin=origin)
    raise LoweringError(f"{op.value.lower()} with a constant operand is not supported")


def _binary(op: Op):
    def handler(low: Lowering, origin, attrs, ins, opset):
        return _arith(low, origin, op, ins[0], ins[1])
    return handler


def div(low: Lowering, origin, attrs, ins, opset):
    if isinstance(ins[1], Value):
        raise LoweringError("only division by a constant is supported")
    return _arith(low, origin, Op.MUL, _act(ins[0]), 1.0 / _const(ins[1], "divisor").astype(np.float32))


def neg(low: Lowering, origin, attrs, ins, opset):
    return low.scale_shift(_act(ins[0]), -1.0, 0.0, origin=origin)


def _variadic(op: Op):
    """Max / Min of one or more operands: a chain of MAXIMUM / MINIMUM."""
    def handler(low: Lowering, origin, attrs, ins, opset):
        out = ins[0]
        for v in ins[1:]:
            out = _arith(low, origin, op, out, v)
        return _act(out)
    return handler


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


def _softmax(log: bool):
    def handler(low: Lowering, origin, attrs, ins, opset):
        x = _act(ins[0])
        axis = int(attrs.get("axis", -1 if opset >= 13 else 1)) % len(x.shape)
        if opset < 13 and int(np.prod(x.shape[axis + 1:], dtype=np.int64)) != 1:  # old Softmax flattens from `axis`
            raise LoweringError(f"opset {opset} softmax over the flattened axes {axis}.. is not supported")
        return low.softmax(x, axis, origin=origin, log=log)
    return handler


def _axes(attrs: dict, ins: list, opset: int, since: int) -> list[int] | None:
    """The `axes` of Squeeze / Unsqueeze / ReduceMean: an attribute before opset `since`, an optional input after."""
    if opset < since:
        return attrs.get("axes")
    return None if len(ins) < 2 or ins[1] is None else [int(a) for a in _const(ins[1], "axes").reshape(-1)]


def squeeze(low: Lowering, origin, attrs, ins, opset):
    return low.squeeze(_act(ins[0]), _axes(attrs, ins, opset, 13), origin=origin)


def unsqueeze(low: Lowering, origin, attrs, ins, opset):
    axes = _axes(attrs, ins, opset, 13)
    if not axes:
        raise LoweringError("Unsqueeze without axes")
    return low.unsqueeze(_act(ins[0]), axes, origin=origin)


def transpose(low: Lowering, origin, attrs, ins, opset):
    x = _act(ins[0])
    return low.transpose(x, attrs.get("perm", list(range(len(x.shape)))[::-1]), origin=origin)


OPS = {
    "Tanh": tanh, "Elu": elu, "Exp": exp, "Log": log, "PRelu": prelu,
    "Conv": conv, "ConvTranspose": conv_transpose, "Resize": resize, "Upsample": upsample, "Gelu": gelu,
    "ReduceMax": reduce_max, "BatchNormalization": batch_norm, "Relu": relu, "Clip": clip, "Sigmoid": sigmoid,
    "HardSwish": hard_swish, "HardSigmoid": hard_sigmoid, "LeakyRelu": leaky_relu, "Gemm": gemm, "MatMul": matmul,
    "AveragePool": average_pool, "MaxPool": max_pool, "GlobalAveragePool": global_average_pool,
    "GlobalMaxPool": global_max_pool, "ReduceMean": reduce_mean, "Add": _binary(Op.ADD), "Sub": _binary(Op.SUB),
    "Mul": _binary(Op.MUL), "Div": div, "Neg": neg, "Max": _variadic(Op.MAXIMUM), "Min": _variadic(Op.MINIMUM),
    "Concat": concat, "Flatten": flatten, "Reshape": reshape, "Squeeze": squeeze, "Unsqueeze": unsqueeze,
    "Transpose": transpose, "Dropout": identity, "Identity": identity, "Pad": pad, "Softmax": _softmax(False),
    "LogSoftmax": _softmax(True),
}
