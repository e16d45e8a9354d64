"""Frontend stage: convert each TFLite operator of a parsed `.tflite` file into IR nodes.

One function per builtin operator. SAME/VALID become explicit (top, bottom, left, right) padding with TFLite's
rule (`tflite_schema.same_pads`, and `transpose_conv_crop` for TRANSPOSE_CONV, whose padding crops its output);
fused activations map to `Activation`; PAD paddings, MEAN / REDUCE_MAX axes, the RESHAPE shape, TRANSPOSE perm, TILE
multiples, STRIDED_SLICE begin/end/strides and the resize size are read from their constant tensors (constant in the
file, or folded by `tflite_fold`) into attrs. STRIDED_SLICE masks and negative indices are resolved as TFLite Micro
resolves them (`tflite_index.slice_bounds`); its shrink axes become a RESHAPE after the slice. `find_folds`
recognises the PAD/PADV2 operators the Kilobyte writer inserted (output named `<out>.pad`) so the window op that
reads them gets its explicit padding back, and the STRIDED_SLICE it puts after a TRANSPOSE_CONV whose crop SAME/VALID
cannot express (input named `<out>.uncropped`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tflite

from ..errors import ModelFileError, UnsupportedOpError
from ..formats import tflite_schema as S
from ..ir import (
    Activation,
    AddAttrs,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    GeluAttrs,
    LeakyReluAttrs,
    MeanAttrs,
    Node,
    Op,
    PadAttrs,
    PoolAttrs,
    QParams,
    ReshapeAttrs,
    ResizeAttrs,
    SoftmaxAttrs,
    StridedSliceAttrs,
    Tensor,
    TileAttrs,
    TransposeAttrs,
    TransposeConvAttrs,
)
from ..ops import opdef
from .tflite_index import SliceBounds, slice_bounds

B = S.B
_WINDOW_OPS = (B.CONV_2D, B.DEPTHWISE_CONV_2D, B.MAX_POOL_2D)


@dataclass
class Folds:
    """Writer-inserted pads and slices: operators to skip; per consumer operator its real input and explicit padding;
    per TRANSPOSE_CONV the slice it feeds: (the slice's output tensor, rows and columns cut off the top and left)."""

    skipped: set[int] = field(default_factory=set)
    by_consumer: dict[int, tuple[int, tuple[int, int, int, int]]] = field(default_factory=dict)
    crops: dict[int, tuple[int, tuple[int, int]]] = field(default_factory=dict)


def _op_name(op) -> str:
    return S.BUILTIN_NAMES.get(op.code, f"builtin code {op.code}")


def op_where(fm, op) -> str:
    """Where an operator is, for error messages: the file, its index, its builtin and its output tensor."""
    out = fm.tensors[op.outputs[0]].name if op.outputs else "?"
    return f"{fm.src}: operator {op.index} ({_op_name(op)}, output '{out}')"


def _unsupported(fm, op, reason: str = "") -> UnsupportedOpError:
    return UnsupportedOpError(f"{op_where(fm, op)}: {reason or 'operator not supported by Kilobyte'}")


def _const(fm, op, k: int, what: str) -> np.ndarray:
    if k >= len(op.inputs) or op.inputs[k] < 0 or fm.tensors[op.inputs[k]].data is None:
        raise ModelFileError(f"{op_where(fm, op)}: {what} (input {k}) must be a constant tensor")
    return fm.tensors[op.inputs[k]].data


def op_options(fm, op, kind: str):
    """The operator's options table `kind` (a `tflite` options class name), or a `ModelFileError` if it has none."""
    if op.options is None or op.options_type != getattr(tflite.BuiltinOptions, kind):
        raise ModelFileError(f"{op_where(fm, op)}: missing {kind}")
    opts = getattr(tflite, kind)()
    opts.Init(op.options.Bytes, op.options.Pos)
    return opts


def _act(fm, op, code: int) -> Activation:
    if code not in S.TFL_TO_ACT:
        raise _unsupported(fm, op, f"fused activation {S.TFL_ACT_NAMES.get(code, code)} not supported")
    return S.TFL_TO_ACT[code]


def _stride(fm, op, opts) -> tuple[int, int]:
    stride = (opts.StrideH(), opts.StrideW())
    if min(stride) < 1:
        raise ModelFileError(f"{op_where(fm, op)}: stride {stride} must be positive")
    return stride


# -- writer-inserted pads ---------------------------------------------------------------------------------------
def find_folds(fm) -> Folds:
    """Pads to fold: PAD before CONV/DEPTHWISE or PADV2 (dtype minimum) before MAX_POOL, named `<out>.pad`,
    padding H/W only, read by that VALID op alone."""
    folds = Folds()
    readers: dict[int, list] = {}
    for op in fm.ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    for op in fm.ops:
        if op.code not in (B.PAD, B.PADV2) or not op.outputs or op.outputs[0] in fm.outputs:
            continue
        users = readers.get(op.outputs[0], [])
        if len(users) == 1 and _is_writer_pad(fm, op, users[0]):
            pads = fm.tensors[op.inputs[1]].data.astype(np.int64)
            folds.skipped.add(op.index)
            folds.by_consumer[users[0].index] = (op.inputs[0], (int(pads[1, 0]), int(pads[1, 1]),
                                                                int(pads[2, 0]), int(pads[2, 1])))
    producer = {t: op for op in fm.ops for t in op.outputs}
    for op in fm.ops:
        tconv = producer.get(op.inputs[0]) if op.code == B.STRIDED_SLICE and op.inputs else None
        if tconv is not None and len(readers.get(op.inputs[0], [])) == 1 and _is_writer_slice(fm, op, tconv):
            begin = fm.tensors[op.inputs[1]].data
            folds.skipped.add(op.index)
            folds.crops[tconv.index] = (op.outputs[0], (int(begin[1]), int(begin[2])))
    return folds


def _is_writer_slice(fm, op, tconv) -> bool:
    """A STRIDED_SLICE (no masks, strides 1) of a TRANSPOSE_CONV's output named `<out>.uncropped`, cutting rows and
    columns only: what the writer puts after a TRANSPOSE_CONV whose crop TFLite cannot express."""
    if tconv.code != B.TRANSPOSE_CONV or len(op.inputs) != 4 or min(op.inputs) < 0 or len(op.outputs) != 1:
        return False
    src, out = fm.tensors[op.inputs[0]], fm.tensors[op.outputs[0]]
    if src.name != S.uncropped_tensor_name(out.name) or op.inputs[0] in fm.outputs:
        return False
    vectors = [fm.tensors[i].data for i in op.inputs[1:]]
    if any(v is None or v.shape != (4,) or v.dtype.kind != "i" for v in vectors) or len(out.shape) != 4:
        return False
    begin, end, strides = (v.astype(np.int64) for v in vectors)
    if op.options is not None and _slice_masks(fm, op):
        return False
    return (bool((strides == 1).all()) and begin[0] == 0 and begin[3] == 0 and bool((begin >= 0).all())
            and tuple(int(d) for d in end - begin) == tuple(out.shape) and len(src.shape) == 4
            and bool((end <= np.array(src.shape)).all()))


def _slice_masks(fm, op) -> bool:
    opts = op_options(fm, op, "StridedSliceOptions")
    return any((opts.BeginMask(), opts.EndMask(), opts.EllipsisMask(), opts.NewAxisMask(), opts.ShrinkAxisMask()))


def _is_writer_pad(fm, pad, user) -> bool:
    if user.code not in _WINDOW_OPS or user.inputs[:1] != pad.outputs[:1] or not user.outputs:
        return False
    if fm.tensors[pad.outputs[0]].name != S.pad_tensor_name(fm.tensors[user.outputs[0]].name):
        return False
    if len(pad.inputs) < 2 or fm.tensors[pad.inputs[1]].data is None:
        return False
    pads = fm.tensors[pad.inputs[1]].data
    if pads.shape != (4, 2) or pads.min() < 0 or pads[0].any() or pads[3].any():
        return False
    if user.options is None or _window_padding_mode(user) != S.VALID:
        return False
    if user.code == B.MAX_POOL_2D:
        return pad.code == B.PADV2 and _is_dtype_min(fm, pad)
    return pad.code == B.PAD


def _window_padding_mode(op) -> int | None:
    kind = S.BUILTIN_OPTIONS[op.code]
    if op.options_type != getattr(tflite.BuiltinOptions, kind):
        return None
    opts = getattr(tflite, kind)()
    opts.Init(op.options.Bytes, op.options.Pos)
    return opts.Padding()


def _is_dtype_min(fm, pad) -> bool:
    if len(pad.inputs) < 3 or fm.tensors[pad.inputs[2]].data is None:
        return False
    value = fm.tensors[pad.inputs[2]].data.reshape(-1)
    if value.size != 1:
        return False
    if value.dtype == np.int8:
        return int(value[0]) == -128
    return value.dtype == np.float32 and float(value[0]) <= float(np.finfo(np.float32).min)


# -- per-op conversions -----------------------------------------------------------------------------------------
def _node(fm, op, ir_op: Op, inputs, attrs) -> Node:
    out = fm.tensors[op.outputs[0]].name
    names = tuple(fm.tensors[i].name for i in inputs)
    return Node(out, ir_op, names, (out,), attrs, origin=f"tflite operator {op.index} {_op_name(op)}")


def _window_input(fm, op, folds, mode, kernel, stride, dilation):
    """(activation input index, explicit padding) of a window op, folding a writer-inserted pad."""
    if op.index in folds.by_consumer:
        return folds.by_consumer[op.index]
    x = op.inputs[0]
    shape = fm.tensors[x].shape
    if len(shape) != 4:
        raise ModelFileError(f"{op_where(fm, op)}: input shape {shape} is not NHWC")
    return x, S.explicit_padding(mode, shape[1:3], kernel, stride, dilation)


def _conv(fm, op, folds, extra):
    depthwise = op.code == B.DEPTHWISE_CONV_2D
    opts = op_options(fm, op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
    stride, dilation = _stride(fm, op, opts), (opts.DilationHFactor(), opts.DilationWFactor())
    w = _const(fm, op, 1, "weight")
    x, padding = _window_input(fm, op, folds, opts.Padding(), w.shape[1:3], stride, dilation)
    act = _act(fm, op, opts.FusedActivationFunction())
    params = [i for i in op.inputs[1:3] if i >= 0 and not _writer_zero_bias(fm, op, i)]
    if depthwise:
        cin = fm.tensors[x].shape[3]
        attrs = DepthwiseAttrs(stride, padding, dilation, max(w.shape[3] // max(cin, 1), 1), act)
        return [_node(fm, op, Op.DEPTHWISE_CONV_2D, [x, *params], attrs)]
    return [_node(fm, op, Op.CONV_2D, [x, *params], ConvAttrs(stride, padding, dilation, act))]


def _writer_zero_bias(fm, op, i: int) -> bool:
    """Whether tensor `i` is the zero bias the writer gives an int8 CONV_2D without one (dropped again)."""
    t = fm.tensors[i]
    out = fm.tensors[op.outputs[0]].name
    return t.name == S.zero_bias_tensor_name(out) and t.data is not None and not np.any(t.data)


def _pool(fm, op, folds, extra):
    opts = op_options(fm, op, "Pool2DOptions")
    kernel, stride = (opts.FilterHeight(), opts.FilterWidth()), _stride(fm, op, opts)
    x, padding = _window_input(fm, op, folds, opts.Padding(), kernel, stride, (1, 1))
    attrs = PoolAttrs(kernel, stride, padding, _act(fm, op, opts.FusedActivationFunction()))
    ir_op = Op.MAX_POOL_2D if op.code == B.MAX_POOL_2D else Op.AVG_POOL_2D
    return [_node(fm, op, ir_op, [x], attrs)]


def _fully_connected(fm, op, folds, extra):
    opts = op_options(fm, op, "FullyConnectedOptions")
    _const(fm, op, 1, "weight")
    act = _act(fm, op, opts.FusedActivationFunction())
    x, nodes = op.inputs[0], []
    xt = fm.tensors[x]
    if len(xt.shape) != 2:  # TFLite flattens the input implicitly; the IR wants an explicit (1, in) RESHAPE
        flat = f"{fm.tensors[op.outputs[0]].name}.flatten"
        shape = (1, int(np.prod(xt.shape, dtype=np.int64)))
        quant = None if xt.quant is None else QParams(xt.quant[0], xt.quant[1], None)
        extra[flat] = Tensor(flat, shape, S.TFL_TO_DTYPE.get(xt.type, "float32"), None, quant)
        nodes.append(Node(flat, Op.RESHAPE, (xt.name,), (flat,), ReshapeAttrs(shape), f"tflite operator {op.index}"))
    params = tuple(fm.tensors[i].name for i in op.inputs[1:3] if i >= 0)
    out = fm.tensors[op.outputs[0]].name
    inputs = ((nodes[0].outputs[0],) if nodes else (xt.name,)) + params
    nodes.append(Node(out, Op.FULLY_CONNECTED, inputs, (out,), FullyConnectedAttrs(act),
                      f"tflite operator {op.index} FULLY_CONNECTED"))
    return nodes


_BINARY = {B.ADD: (Op.ADD, "AddOptions"), B.SUB: (Op.SUB, "SubOptions"), B.MUL: (Op.MUL, "MulOptions"),
           B.MAXIMUM: (Op.MAXIMUM, None), B.MINIMUM: (Op.MINIMUM, None)}


def _binary(fm, op, folds, extra):
    """ADD, SUB, MUL with their fused activation; MAXIMUM, MINIMUM have none."""
    ir_op, kind = _BINARY[op.code]
    if len(op.inputs) != 2 or min(op.inputs) < 0:
        raise ModelFileError(f"{op_where(fm, op)}: {_op_name(op)} needs two operands, got inputs {list(op.inputs)}")
    if kind is None:
        return [_node(fm, op, ir_op, op.inputs, None)]
    act = _act(fm, op, op_options(fm, op, kind).FusedActivationFunction())
    return [_node(fm, op, ir_op, op.inputs, AddAttrs(act))]


def _mean(fm, op, folds, extra):
    axes = tuple(int(a) for a in _const(fm, op, 1, "axis").reshape(-1))
    keep = bool(op.options is not None and op_options(fm, op, "ReducerOptions").KeepDims())
    return [_node(fm, op, Op.MEAN, op.inputs[:1], MeanAttrs(axes, keep))]


def _pad(fm, op, folds, extra):
    pads = _const(fm, op, 1, "paddings")
    if pads.ndim != 2 or pads.shape[1] != 2:
        raise ModelFileError(f"{op_where(fm, op)}: paddings shape {pads.shape} is not (rank, 2)")
    if op.code == B.PADV2 and not _pads_with_zero_point(fm, op):
        raise _unsupported(fm, op, "PADV2 with a constant other than the zero point is not supported")
    attrs = PadAttrs(tuple((int(a), int(b)) for a, b in pads))
    return [_node(fm, op, Op.PAD, op.inputs[:1], attrs)]


def _pads_with_zero_point(fm, op) -> bool:
    value = _const(fm, op, 2, "constant_values").reshape(-1)
    quant = fm.tensors[op.outputs[0]].quant
    zero = 0 if quant is None else int(quant[1][0])
    return value.size == 1 and float(value[0]) == zero


def _reshape(fm, op, folds, extra):
    x, out = fm.tensors[op.inputs[0]], fm.tensors[op.outputs[0]]
    opts = op_options(fm, op, "ReshapeOptions") if op.options is not None else None
    shape = opts.NewShapeAsNumpy() if opts is not None else 0
    if isinstance(shape, int) or len(shape) == 0:
        has_shape = len(op.inputs) > 1 and op.inputs[1] >= 0 and fm.tensors[op.inputs[1]].data is not None
        shape = fm.tensors[op.inputs[1]].data if has_shape else np.array(out.shape)
    shape = [int(d) for d in np.asarray(shape).reshape(-1)]
    if shape.count(-1) == 1:  # TFLite lets one dimension be inferred
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        shape[shape.index(-1)] = int(np.prod(x.shape, dtype=np.int64)) // max(known, 1)
    if tuple(shape) != out.shape:
        raise ModelFileError(f"{op_where(fm, op)}: new shape {tuple(shape)} differs from output shape {out.shape}")
    return [_node(fm, op, Op.RESHAPE, op.inputs[:1], ReshapeAttrs(tuple(shape)))]


def _concat(fm, op, folds, extra):
    opts = op_options(fm, op, "ConcatenationOptions")
    attrs = ConcatAttrs(opts.Axis(), _act(fm, op, opts.FusedActivationFunction()))
    return [_node(fm, op, Op.CONCAT, op.inputs, attrs)]


def _ints(fm, op, k: int, what: str) -> list[int]:
    data = _const(fm, op, k, what)
    if data.dtype.kind not in "iu":
        raise ModelFileError(f"{op_where(fm, op)}: {what} (input {k}) must hold integers, not {data.dtype}")
    return [int(v) for v in data.reshape(-1)]


def _transpose(fm, op, folds, extra):
    perm, rank = _ints(fm, op, 1, "perm"), len(fm.tensors[op.inputs[0]].shape)
    if sorted(perm) != list(range(rank)):
        raise ModelFileError(f"{op_where(fm, op)}: perm {perm} is not a permutation of the input's {rank} axes")
    return [_node(fm, op, Op.TRANSPOSE, op.inputs[:1], TransposeAttrs(tuple(perm)))]


def _tile(fm, op, folds, extra):
    multiples = _ints(fm, op, 1, "multiples")
    return [_node(fm, op, Op.TILE, op.inputs[:1], TileAttrs(tuple(multiples)))]


def _reduce_max(fm, op, folds, extra):
    axes = tuple(_ints(fm, op, 1, "axis"))
    keep = bool(op.options is not None and op_options(fm, op, "ReducerOptions").KeepDims())
    return [_node(fm, op, Op.REDUCE_MAX, op.inputs[:1], MeanAttrs(axes, keep))]


def strided_slice_bounds(fm, op) -> SliceBounds:
    """Read a STRIDED_SLICE operator's begin/end/strides tensors and masks and resolve them for its input shape."""
    shape = fm.tensors[op.inputs[0]].shape
    begin, end, strides = (_ints(fm, op, k, what) for k, what in ((1, "begin"), (2, "end"), (3, "strides")))
    if not len(begin) == len(end) == len(strides) == len(shape):
        raise ModelFileError(f"{op_where(fm, op)}: begin/end/strides have {len(begin)}/{len(end)}/{len(strides)} "
                             f"entries for a rank-{len(shape)} input")
    opts = op_options(fm, op, "StridedSliceOptions") if op.options is not None else None
    masks = (0, 0, 0) if opts is None else (opts.BeginMask(), opts.EndMask(), opts.ShrinkAxisMask())
    if opts is not None and (opts.EllipsisMask() or opts.NewAxisMask() or opts.Offset()):
        raise _unsupported(fm, op, f"ellipsis_mask {opts.EllipsisMask()}, new_axis_mask {opts.NewAxisMask()}, "
                                   f"offset {bool(opts.Offset())}: TFLite Micro ignores these, so it would not "
                                   f"compute what TFLite does; only begin, end and shrink_axis masks are supported")
    try:
        return slice_bounds(shape, begin, end, strides, *masks)
    except ValueError as e:
        raise _unsupported(fm, op, str(e)) from None


def _strided_slice(fm, op, folds, extra):
    bounds = strided_slice_bounds(fm, op)
    x, y = fm.tensors[op.inputs[0]], fm.tensors[op.outputs[0]]
    if bounds.out_shape != y.shape:
        raise ModelFileError(f"{op_where(fm, op)}: the slice has shape {bounds.out_shape}, the output tensor {y.shape}")
    attrs = StridedSliceAttrs(bounds.begin, bounds.end, bounds.strides)
    if not bounds.shrink:
        return [_node(fm, op, Op.STRIDED_SLICE, op.inputs[:1], attrs)]
    # shrink axes: the slice keeps them (size 1), a RESHAPE drops them; the slice is quantised as the output, so the
    # int8 checks compare the file's input and output
    mid = f"{y.name}.slice"
    quant = None if y.quant is None else QParams(y.quant[0], y.quant[1], None)
    extra[mid] = Tensor(mid, bounds.kept_shape, S.TFL_TO_DTYPE.get(x.type, "float32"), None, quant)
    origin = f"tflite operator {op.index} STRIDED_SLICE"
    return [Node(mid, Op.STRIDED_SLICE, (x.name,), (mid,), attrs, origin),
            Node(y.name, Op.RESHAPE, (mid,), (y.name,), ReshapeAttrs(y.shape), origin)]


def _softmax(fm, op, folds, extra):
    _check_softmax_output(fm, op, opdef(Op.SOFTMAX).fixed_qparams)
    beta = op_options(fm, op, "SoftmaxOptions").Beta() if op.options is not None else 1.0
    return [_node(fm, op, Op.SOFTMAX, op.inputs[:1], SoftmaxAttrs(float(beta)))]


def _log_softmax(fm, op, folds, extra):
    _check_softmax_output(fm, op, opdef(Op.LOG_SOFTMAX).fixed_qparams)
    return [_node(fm, op, Op.LOG_SOFTMAX, op.inputs[:1], None)]


def _logistic(fm, op, folds, extra):
    _check_softmax_output(fm, op, opdef(Op.LOGISTIC).fixed_qparams)
    return [_node(fm, op, Op.LOGISTIC, op.inputs[:1], None)]


def _tanh(fm, op, folds, extra):
    _check_softmax_output(fm, op, opdef(Op.TANH).fixed_qparams)
    return [_node(fm, op, Op.TANH, op.inputs[:1], None)]


def _prelu(fm, op, folds, extra):
    """PRELU with a constant alpha (what converters write); its per-channel tables are built at compile time."""
    _const(fm, op, 1, "PRELU's alpha")
    return [_node(fm, op, Op.PRELU, op.inputs[:2], None)]


def _leaky_relu(fm, op, folds, extra):
    alpha = op_options(fm, op, "LeakyReluOptions").Alpha() if op.options is not None else 0.0  # the schema default
    return [_node(fm, op, Op.LEAKY_RELU, op.inputs[:1], LeakyReluAttrs(float(alpha)))]


def _check_softmax_output(fm, op, want) -> None:
    """An int8 (LOG_)SOFTMAX, LOGISTIC or TANH must write int8 with the one scale and zero point TFLite prescribes:
    TFLite Micro's Prepare refuses anything else (LOGISTIC: another zero point; its kernel writes scale 1/256 whatever
    the file says; TANH: it checks nothing and writes scale 1/128, zero point 0), so such a file has no reference
    result to be bit-exact with."""
    x, y = fm.tensors[op.inputs[0]], fm.tensors[op.outputs[0]]
    if S.T.INT8 not in (x.type, y.type):
        return
    scale, zero_point = want
    got = None if y.quant is None else (y.quant[0].tolist(), y.quant[1].tolist())
    if x.type != y.type or got != ([scale], [zero_point]):
        raise _unsupported(fm, op, f"an int8 {_op_name(op)} must output int8 with scale {float(scale)} and zero "
                                   f"point {zero_point} (TFLite Micro refuses or misreads others), got "
                                   f"{S.TFL_TYPE_NAMES.get(y.type, y.type)} with (scales, zero points) {got}")


def _gelu(fm, op, folds, extra):
    approximate = bool(op.options is not None and op_options(fm, op, "GeluOptions").Approximate())
    return [_node(fm, op, Op.GELU, op.inputs[:1], GeluAttrs(approximate))]


def _resize(fm, op, folds, extra):
    size = _const(fm, op, 1, "size")
    if size.shape != (2,) or size.dtype.kind != "i":
        raise ModelFileError(f"{op_where(fm, op)}: size {size.dtype}{list(size.shape)} is not two integers (H, W)")
    ir_op, kind = ((Op.RESIZE_BILINEAR, "ResizeBilinearOptions") if op.code == B.RESIZE_BILINEAR
                   else (Op.RESIZE_NEAREST_NEIGHBOR, "ResizeNearestNeighborOptions"))
    opts = op_options(fm, op, kind) if op.options is not None else None
    flags = (bool(opts.AlignCorners()), bool(opts.HalfPixelCenters())) if opts is not None else (False, False)
    return [_node(fm, op, ir_op, op.inputs[:1], ResizeAttrs((int(size[0]), int(size[1])), *flags))]


def _transpose_conv(fm, op, folds, extra):
    """TFLite's operands (output shape, weight, input, bias); the padding mode and the output size give the crop
    (`transpose_conv_crop`), plus the rows and columns a writer-inserted slice cuts off."""
    if len(op.inputs) < 3 or min(op.inputs[:3]) < 0:
        raise ModelFileError(f"{op_where(fm, op)}: needs an output shape, a weight and an input, got {list(op.inputs)}")
    opts = op_options(fm, op, "TransposeConvOptions")
    stride, w, x = _stride(fm, op, opts), _const(fm, op, 1, "weight"), fm.tensors[op.inputs[2]]
    full = fm.tensors[op.outputs[0]].shape
    if w.ndim != 4 or len(x.shape) != 4 or len(full) != 4:
        raise ModelFileError(f"{op_where(fm, op)}: input {x.shape}, weight {w.shape} and output {full} must be 4-D")
    given = fm.tensors[op.inputs[0]].data
    if given is not None and tuple(int(d) for d in given.reshape(-1)) != tuple(full):
        raise ModelFileError(f"{op_where(fm, op)}: output shape operand {given.reshape(-1).tolist()} differs from the "
                             f"output tensor's {full}")
    if opts.Padding() not in (S.SAME, S.VALID):
        raise _unsupported(fm, op, f"padding mode {opts.Padding()} (only SAME and VALID)")
    out, (cut_t, cut_l) = folds.crops.get(op.index, (op.outputs[0], (0, 0)))
    final = fm.tensors[out].shape
    t, left = (S.transpose_conv_crop(opts.Padding(), full[a], w.shape[a], stride[a - 1]) + cut
               for a, cut in ((1, cut_t), (2, cut_l)))
    padding = (t, (x.shape[1] - 1) * stride[0] + w.shape[1] - t - final[1],
               left, (x.shape[2] - 1) * stride[1] + w.shape[2] - left - final[2])
    attrs = TransposeConvAttrs(stride, padding, _act(fm, op, opts.FusedActivationFunction()))
    params = [op.inputs[1]] + [i for i in op.inputs[3:4] if i >= 0]
    name = fm.tensors[out].name
    return [Node(name, Op.TRANSPOSE_CONV, tuple(fm.tensors[i].name for i in [op.inputs[2], *params]), (name,), attrs,
                 origin=f"tflite operator {op.index} {_op_name(op)}")]


def _plain(ir_op: Op):
    def convert(fm, op, folds, extra):
        return [_node(fm, op, ir_op, op.inputs[:1], None)]
    return convert


_CONVERT = {
    B.CONV_2D: _conv,
    B.DEPTHWISE_CONV_2D: _conv,
    B.FULLY_CONNECTED: _fully_connected,
    B.AVERAGE_POOL_2D: _pool,
    B.MAX_POOL_2D: _pool,
    B.ADD: _binary,
    B.SUB: _binary,
    B.MUL: _binary,
    B.MAXIMUM: _binary,
    B.MINIMUM: _binary,
    B.MEAN: _mean,
    B.PAD: _pad,
    B.PADV2: _pad,
    B.RESHAPE: _reshape,
    B.CONCATENATION: _concat,
    B.TRANSPOSE: _transpose,
    B.STRIDED_SLICE: _strided_slice,
    B.TILE: _tile,
    B.REDUCE_MAX: _reduce_max,
    B.SOFTMAX: _softmax,
    B.LOG_SOFTMAX: _log_softmax,
    B.QUANTIZE: _plain(Op.QUANTIZE),
    B.DEQUANTIZE: _plain(Op.DEQUANTIZE),
    B.RELU: _plain(Op.RELU),
    B.RELU6: _plain(Op.RELU6),
    B.LOGISTIC: _logistic,
    B.HARD_SWISH: _plain(Op.HARD_SWISH),
    B.TANH: _tanh,
    B.ELU: _plain(Op.ELU),
    B.RELU_N1_TO_1: _plain(Op.RELU_N1_TO_1),
    B.EXP: _plain(Op.EXP),
    B.LOG: _plain(Op.LOG),
    B.PRELU: _prelu,
    B.LEAKY_RELU: _leaky_relu,
    B.GELU: _gelu,
    B.RESIZE_NEAREST_NEIGHBOR: _resize,
    B.RESIZE_BILINEAR: _resize,
    B.TRANSPOSE_CONV: _transpose_conv,
}


def convert_op(fm, op, folds: Folds, extra: dict[str, Tensor]) -> list[Node]:
    """IR nodes for one TFLite operator; `extra` collects tensors the conversion adds (an FC input flatten)."""
    convert = _CONVERT.get(op.code)
    if convert is None:
        raise _unsupported(fm, op)
    if len(op.outputs) != 1 or not op.inputs or op.inputs[0] < 0:
        raise _unsupported(fm, op, f"{len(op.outputs)} outputs / missing input: Kilobyte ops have one output")
    return convert(fm, op, folds, extra)
