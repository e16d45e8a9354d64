"""Export stage: lower each IR node to TFLite operators (builtin code, tensor names, options fields).

Most nodes become one operator. TFLite only knows SAME/VALID padding, so a window op whose explicit padding is
neither becomes PAD (CONV_2D, DEPTHWISE_CONV_2D: pads with the zero point) or PADV2 with the dtype minimum
(MAX_POOL_2D) followed by the VALID op; AVG_POOL_2D cannot be padded that way (TFLite divides by the count of
in-image taps) and is refused. A TRANSPOSE_CONV whose crop is neither SAME's nor VALID's (PyTorch's k=3, s=2, p=1,
output_padding=1 crops the top row, SAME the bottom one) becomes a VALID TRANSPOSE_CONV into the whole uncropped
output followed by a STRIDED_SLICE (a byte copy) of the IR's rows and columns: TFLite (unlike TFLite Micro) refuses
an output size from which it cannot derive the input size back. Attributes TFLite keeps in tensors (PAD paddings,
MEAN / REDUCE_MAX axes, RESHAPE shape, TRANSPOSE perm, STRIDED_SLICE begin/end/strides, TILE multiples, resize
size, TRANSPOSE_CONV output shape) become int32 constants. A resolved STRIDED_SLICE end of -1 (a negative stride
running down to index 0) cannot be written as an index (TFLite reads -1 as the last element): that axis gets its
end_mask bit instead. An int8 CONV_2D without a bias gets a zero int32 one: TFLite, unlike TFLite Micro, refuses an
int8 conv without, and TFLite's converter always writes one. Every added tensor is named after the IR output it
serves (`<out>.pad`, `<out>.axes`, `<out>.uncropped`, `<out>.zero_bias`, ...), so the writer is deterministic and
the reader can recognise (and fold back) what the writer added.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..formats import tflite_schema as S
from ..ir import Graph, Node, Op, QParams, Tensor
from ..ops import opdef

B = S.B


@dataclass(frozen=True)
class TflOp:
    """One TFLite operator: builtin code, tensor names (None = optional input left out), options fields."""

    code: int
    inputs: tuple[str | None, ...]
    outputs: tuple[str, ...]
    options: dict  # field name (as in the generated `<Options>Add<Field>` functions) -> value or tuple (vector)


def lower_graph(graph: Graph) -> tuple[list[TflOp], list[Tensor]]:
    """All operators of `graph` in node order, plus the tensors the lowering added (constants and pad outputs)."""
    ops: list[TflOp] = []
    extra: list[Tensor] = []
    for node in graph.nodes:
        node_ops, node_tensors = lower_node(graph, node)
        ops += node_ops
        extra += node_tensors
    for t in extra:
        if t.name in graph.tensors:
            raise KilobyteError(f"graph '{graph.name}': tensor name '{t.name}' is reserved for the .tflite writer")
    return ops, extra


class Lowering:
    """What an op's own lowering (`OpDef.lower`, `kilobyte.ops`) writes through: operators by builtin name, the
    constants and intermediate tensors it adds, the fused activation code, and the schema's facts (`schema`)."""

    schema = S

    def __init__(self):
        self.ops: list[TflOp] = []
        self.tensors: list[Tensor] = []

    def op(self, builtin: str, inputs, outputs, options: dict) -> None:
        self.ops.append(TflOp(getattr(B, builtin), tuple(inputs), tuple(outputs), options))

    def const(self, name: str, data: np.ndarray) -> str:
        self.tensors.append(_const(name, data))
        return name

    def tensor_like(self, name: str, shape, like: Tensor) -> str:
        """An added activation tensor of `shape` with `like`'s dtype and quantisation."""
        self.tensors.append(Tensor(name, tuple(shape), like.dtype, None, like.qparams))
        return name

    def activation(self, node: Node) -> int:
        return _act(node)


def lower_node(graph: Graph, node: Node) -> tuple[list[TflOp], list[Tensor]]:
    own = opdef(node.op).lower
    if own is not None:
        w = Lowering()
        own(w, graph, node)
        return w.ops, w.tensors
    lower = _LOWER.get(node.op)
    if lower is None:
        raise UnsupportedOpError(f"node '{node.name}': {node.op.value} has no TFLite operator; run the inference "
                                 f"transforms (fold batch norm, fuse activations) before export")
    return lower(graph, node)


# -- window ops (padding) ---------------------------------------------------------------------------------------
def _window(graph: Graph, node: Node, kernel, dilation, pad_value: str) -> tuple[int, str, list[TflOp], list]:
    """Padding mode for a window op and its (possibly padded) input: (mode, input name, pad ops, pad tensors)."""
    a = node.attrs
    x = graph.tensors[node.inputs[0]]
    mode = S.tflite_padding(x.shape[1:3], kernel, a.stride, dilation, a.padding)
    if mode is not None:
        return mode, x.name, [], []
    if pad_value == "none":
        raise KilobyteError(f"node '{node.name}': {node.op.value} padding {a.padding} is neither SAME nor VALID and "
                            f"TFLite cannot express it (the average divisor would change); pad to SAME or VALID")
    ops, tensors = _pad_input(x, node.outputs[0], a.padding, pad_value)
    return S.VALID, S.pad_tensor_name(node.outputs[0]), ops, tensors


def _pad_input(x: Tensor, out: str, padding, pad_value: str) -> tuple[list[TflOp], list[Tensor]]:
    t, b, left, r = padding
    name = S.pad_tensor_name(out)
    shape = (x.shape[0], x.shape[1] + t + b, x.shape[2] + left + r, x.shape[3])
    padded = Tensor(name, shape, x.dtype, None, x.qparams)  # PAD keeps the input's quantisation
    pads = _const(f"{name}.paddings", np.array([[0, 0], [t, b], [left, r], [0, 0]], np.int32))
    if pad_value == "zero":
        return [TflOp(B.PAD, (x.name, pads.name), (name,), {})], [pads, padded]
    # MAX_POOL: pad with the smallest value so padded taps never win (TFLite ignores them).
    if x.dtype == "int8":
        q = x.qparams
        value = _const(f"{name}.value", np.array([-128], np.int8),
                       QParams.per_tensor(float(q.scale[0]), int(q.zero_point[0])))
    else:
        value = _const(f"{name}.value", np.array([np.finfo(np.float32).min], np.float32))
    return [TflOp(B.PADV2, (x.name, pads.name, value.name), (name,), {})], [pads, value, padded]


def _const(name: str, data: np.ndarray, qparams: QParams | None = None) -> Tensor:
    data = np.ascontiguousarray(data)
    data.setflags(write=False)
    return Tensor(name, tuple(data.shape), str(data.dtype), data, qparams)


def _params(node: Node) -> tuple[str, ...]:
    """(weight,) or (weight, bias) of a CONV / DEPTHWISE / FC node. A missing bias is left out, not written as -1:
    TFLite Micro's DEPTHWISE_CONV_2D dereferences an optional input of -1 and crashes."""
    return tuple(node.inputs[1:3])


def _act(node: Node) -> int:
    return S.ACT_TO_TFL[node.attrs.activation]


# -- per-op lowerings -------------------------------------------------------------------------------------------
def _conv(graph: Graph, node: Node):
    a = node.attrs
    params = _params(node)
    kernel = graph.tensors[params[0]].shape[1:3]
    mode, x, ops, tensors = _window(graph, node, kernel, a.dilation, "zero")
    opts = {"Padding": mode, "StrideW": a.stride[1], "StrideH": a.stride[0], "FusedActivationFunction": _act(node),
            "DilationWFactor": a.dilation[1], "DilationHFactor": a.dilation[0]}
    if node.op is Op.DEPTHWISE_CONV_2D:
        opts = {**opts, "DepthMultiplier": a.depth_multiplier}
    elif len(params) == 1 and graph.tensors[params[0]].dtype == "int8" and _quantised(graph, node.inputs[0]):
        bias = _zero_bias(graph, node)
        params, tensors = (*params, bias.name), tensors + [bias]
    return ops + [TflOp(S.OP_TO_BUILTIN[node.op], (x, *params), node.outputs, opts)], tensors


def _quantised(graph: Graph, name: str) -> bool:
    return graph.tensors[name].qparams is not None


def _zero_bias(graph: Graph, node: Node) -> Tensor:
    """Zeros at TFLite's bias scale (input scale times each weight scale) for an int8 CONV_2D without a bias."""
    w = graph.tensors[node.inputs[1]].qparams
    s_in = graph.tensors[node.inputs[0]].qparams.scale[0]
    n = graph.tensors[node.inputs[1]].shape[0]
    scale = np.broadcast_to(np.float32(s_in) * w.scale.astype(np.float32), (n,)).astype(np.float32)
    q = QParams(scale, np.zeros(n, np.int64), 0)
    return Tensor(S.zero_bias_tensor_name(node.outputs[0]), (n,), "int32", np.zeros(n, np.int32), q)


def _fully_connected(graph: Graph, node: Node):
    opts = {"FusedActivationFunction": _act(node)}
    return [TflOp(B.FULLY_CONNECTED, (node.inputs[0], *_params(node)), node.outputs, opts)], []


def _pool(graph: Graph, node: Node):
    a = node.attrs
    pad_value = "min" if node.op is Op.MAX_POOL_2D else "none"
    mode, x, ops, tensors = _window(graph, node, a.kernel, (1, 1), pad_value)
    opts = {"Padding": mode, "StrideW": a.stride[1], "StrideH": a.stride[0], "FilterWidth": a.kernel[1],
            "FilterHeight": a.kernel[0], "FusedActivationFunction": _act(node)}
    return ops + [TflOp(S.OP_TO_BUILTIN[node.op], (x,), node.outputs, opts)], tensors


def _binary(graph: Graph, node: Node):
    """ADD, SUB, MUL (with their fused activation), MAXIMUM, MINIMUM (no options fields)."""
    if len(node.inputs) != 2:
        raise UnsupportedOpError(f"node '{node.name}': TFLite {node.op.value} takes 2 operands, not "
                                 f"{len(node.inputs)}")
    opts = {} if node.op in (Op.MAXIMUM, Op.MINIMUM) else {"FusedActivationFunction": _act(node)}
    return [TflOp(S.OP_TO_BUILTIN[node.op], node.inputs, node.outputs, opts)], []


def _mean(graph: Graph, node: Node):
    axes = _const(f"{node.outputs[0]}.axes", np.array(node.attrs.axes, np.int32))
    op = TflOp(B.MEAN, (node.inputs[0], axes.name), node.outputs, {"KeepDims": bool(node.attrs.keepdims)})
    return [op], [axes]


def _pad(graph: Graph, node: Node):
    pads = _const(f"{node.outputs[0]}.paddings", np.array(node.attrs.pads, np.int32).reshape(-1, 2))
    return [TflOp(B.PAD, (node.inputs[0], pads.name), node.outputs, {})], [pads]


def _reshape(graph: Graph, node: Node):
    shape = tuple(int(d) for d in node.attrs.shape)
    const = _const(f"{node.outputs[0]}.shape", np.array(shape, np.int32))
    return [TflOp(B.RESHAPE, (node.inputs[0], const.name), node.outputs, {"NewShape": shape})], [const]


def _transpose(graph: Graph, node: Node):
    perm = _const(f"{node.outputs[0]}.perm", np.array(node.attrs.perm, np.int32))
    return [TflOp(B.TRANSPOSE, (node.inputs[0], perm.name), node.outputs, {})], [perm]


def _strided_slice(graph: Graph, node: Node):
    a, out = node.attrs, node.outputs[0]
    consts = [_const(f"{out}.{k}", np.array(v, np.int32))
              for k, v in (("begin", a.begin), ("end", [max(e, 0) for e in a.end]), ("strides", a.strides))]
    end_mask = sum(1 << i for i, e in enumerate(a.end) if e < 0)
    opts = {"BeginMask": 0, "EndMask": end_mask, "EllipsisMask": 0, "NewAxisMask": 0, "ShrinkAxisMask": 0}
    return [TflOp(B.STRIDED_SLICE, (node.inputs[0], *(c.name for c in consts)), node.outputs, opts)], consts


def _tile(graph: Graph, node: Node):
    multiples = _const(f"{node.outputs[0]}.multiples", np.array(node.attrs.multiples, np.int32))
    return [TflOp(B.TILE, (node.inputs[0], multiples.name), node.outputs, {})], [multiples]


def _reduce_max(graph: Graph, node: Node):
    axes = _const(f"{node.outputs[0]}.axes", np.array(node.attrs.axes, np.int32))
    op = TflOp(B.REDUCE_MAX, (node.inputs[0], axes.name), node.outputs, {"KeepDims": bool(node.attrs.keepdims)})
    return [op], [axes]


def _concat(graph: Graph, node: Node):
    opts = {"Axis": node.attrs.axis, "FusedActivationFunction": _act(node)}
    return [TflOp(B.CONCATENATION, node.inputs, node.outputs, opts)], []


def _softmax(graph: Graph, node: Node):
    return [TflOp(B.SOFTMAX, node.inputs, node.outputs, {"Beta": float(node.attrs.beta)})], []


def _plain(graph: Graph, node: Node):
    """QUANTIZE, DEQUANTIZE, PRELU (its alpha a second input), LOG_SOFTMAX: no attributes."""
    return [TflOp(S.OP_TO_BUILTIN[node.op], node.inputs, node.outputs, {})], []


_LOWER = {
    Op.CONV_2D: _conv,
    Op.DEPTHWISE_CONV_2D: _conv,
    Op.FULLY_CONNECTED: _fully_connected,
    Op.AVG_POOL_2D: _pool,
    Op.MAX_POOL_2D: _pool,
    Op.ADD: _binary,
    Op.SUB: _binary,
    Op.MUL: _binary,
    Op.MAXIMUM: _binary,
    Op.MINIMUM: _binary,
    Op.MEAN: _mean,
    Op.PAD: _pad,
    Op.RESHAPE: _reshape,
    Op.CONCAT: _concat,
    Op.TRANSPOSE: _transpose,
    Op.STRIDED_SLICE: _strided_slice,
    Op.TILE: _tile,
    Op.REDUCE_MAX: _reduce_max,
    Op.SOFTMAX: _softmax,
    Op.LOG_SOFTMAX: _plain,
    Op.QUANTIZE: _plain,
    Op.DEQUANTIZE: _plain,
    Op.PRELU: _plain,
}
