"""Quantisation stage: post-training full-integer quantisation of an inference graph (TFLite's int8 specification).

`quantize(graph, calibration_inputs)` lowers what `prepare_for_inference` could not fold (a BATCH_NORM becomes MUL /
SUB by constants, `lower_batchnorm`, and a RELU after it fuses), calibrates every activation (see `calibrate`), then
rewrites the float graph into the int8 graph every later stage relies on, choosing the output parameters TFLite's
converter chooses:

- activations (graph inputs and outputs included) are int8 per-tensor asymmetric, zero point in [-128, 127], the
  range widened to contain 0 and the zero point nudged to an integer as TFLite's `GetAsymmetricQuantizationParams`;
  that covers CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV, ADD, SUB, MUL, MEAN, HARD_SWISH,
  LEAKY_RELU, GELU, ELU, RELU_N1_TO_1, EXP, LOG and a RELU left standing (each calibrated on its own);
- weights are int8 per-output-channel symmetric (zero point 0, scale `max|w| / 127`): CONV_2D and TRANSPOSE_CONV
  axis 0, DEPTHWISE axis 3, FULLY_CONNECTED axis 0 (TFLite Micro supports per-channel FC); biases are int32 with
  scale `s_in · s_w[c]`, axis 0; a constant operand of ADD / SUB / MUL is int8 per tensor from its own range (of
  MAXIMUM / MINIMUM: their shared params);
- ops that move values without rescaling share one set of params between inputs and output: MAX_POOL_2D,
  AVG_POOL_2D, RESHAPE, PAD, IDENTITY, TRANSPOSE, STRIDED_SLICE, TILE, REDUCE_MAX, RESIZE_NEAREST_NEIGHBOR,
  RESIZE_BILINEAR, CONCAT (TFLite Micro's int8 concat
  copies bytes), MAXIMUM, MINIMUM (they compare raw int8 values) and a standing RELU6 (TFLite Micro's never
  rescales), each group taking the union of its members' calibrated ranges;
- LOGISTIC and an int8 SOFTMAX output scale 1/256 with zero point -128, TANH 1/128 with zero point 0, LOG_SOFTMAX
  16/256 with zero point 127: the only outputs TFLite's kernels write; a group of shared params holding such an output
  takes these params, and may then hold nothing else computed (e.g. a CONCAT of a LOGISTIC with a conv output would need
  a requantisation);
- MEAN stays MEAN (TFLite's integer mean, `kb_mean`), with its own output params;
- a final SOFTMAX (a graph output read by no node) stays float at the graph edge: int8 logits -> DEQUANTIZE -> SOFTMAX
  (float32 output); a SOFTMAX inside the graph is int8.
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..ir import Activation, Graph, Node, Op, QParams, Tensor
from ..ops import opdef, ops_where
from ..ops.arith import INT8_MAX, INT8_MIN, dequantize_values, quantize_values, round_half_away
from ..transforms.fold_batchnorm import can_fold
from ..transforms.fuse_activation import can_fuse, fuse_activation
from ..transforms.lower_batchnorm import lower_batchnorm
from .calibrate import Range, calibrate

CONSTANT_OPERAND_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM, Op.PRELU})  # PRELU: its alpha


def quantize(graph: Graph, calibration_inputs, method: str = "minmax", percentile: float = 99.99) -> Graph:
    """The int8 version of the float inference `graph`, calibrated on `calibration_inputs` (see `calibrate`)."""
    _check_float_inference_graph(graph)
    graph = fuse_activation(lower_batchnorm(graph))
    ranges = calibrate(graph, calibration_inputs, method=method, percentile=percentile)
    return rewrite_int8(graph, activation_qparams(graph, ranges))


def int8_structure(graph: Graph, verify: bool = True) -> Graph:
    """The int8 graph `quantize` would give, with every activation at scale 1, zero point 0: the same nodes,
    tensors, shapes and dtypes, so planning it gives the compiled model's SRAM, Flash and MACs — without
    calibrating (architecture search measures candidates that have no trained weights yet)."""
    _check_float_inference_graph(graph)
    graph = fuse_activation(lower_batchnorm(graph))
    unit = QParams.per_tensor(1.0, 0)
    return rewrite_int8(graph, {t: unit for t in graph.tensors if graph.tensors[t].data is None},
                        params=_placeholder_params, verify=verify)


def rewrite_int8(graph: Graph, qparams: dict[str, QParams], params=None, verify: bool = True) -> Graph:
    """The float inference `graph` rewritten to int8 with the given activation params (see the module doc);
    `params(graph, node, qparams)` gives a weighted node's int8 weight and int32 bias tensors (default: quantised)."""
    params = params or _quantize_params
    tensors: dict[str, Tensor] = {}
    nodes: list[Node] = []
    taken = set(graph.tensors) | {n.name for n in graph.nodes}
    for name in graph.inputs:
        tensors[name] = _int8_activation(graph.tensors[name], qparams[name])
    for node in graph.nodes:
        out = graph.tensors[node.outputs[0]]
        if _is_final_softmax(graph, node):
            new_nodes, new_tensors = _softmax_at_edge(graph, node, tensors[node.inputs[0]], taken)
        else:
            new_nodes = [node]
            new_tensors = [_int8_activation(out, qparams[out.name]), *params(graph, node, qparams)]
        for t in new_tensors:
            if t.name in tensors and tensors[t.name] != t:
                raise KilobyteError(f"tensor '{t.name}' is shared by nodes that quantise it differently "
                                    f"(e.g. one bias read with two input scales); give each node its own copy")
            tensors[t.name] = t
        nodes.extend(new_nodes)
    result = Graph(tensors, tuple(nodes), graph.inputs, graph.outputs, graph.name)
    return result.verify() if verify else result


def _check_float_inference_graph(graph: Graph) -> None:
    if any(t.dtype == "int8" for t in graph.tensors.values()):
        raise KilobyteError(f"graph '{graph.name}' is already quantised (it has int8 tensors)")
    for n in graph.nodes:
        if (n.op is Op.BATCH_NORM and can_fold(graph, n)) or (n.op in (Op.RELU, Op.RELU6) and can_fuse(graph, n)):
            what = "fold it into" if n.op is Op.BATCH_NORM else "fuse it into"
            raise KilobyteError(f"node '{n.name}' ({n.op.value}): quantize() needs an inference graph; "
                                f"run kilobyte.transforms.prepare_for_inference first to {what} its producer")
        if n.op in (Op.QUANTIZE, Op.DEQUANTIZE):
            raise UnsupportedOpError(f"node '{n.name}' ({n.op.value}): the float graph must not convert types")
        consts = [t for t in n.inputs if graph.tensors[t].is_const]
        if n.op is Op.BATCH_NORM:
            consts = consts[4:]  # its gamma, beta, mean and variance become MUL / SUB constants
        allowed = ops_where(lambda d: d.linear) | CONSTANT_OPERAND_OPS
        if consts and (n.op not in allowed or len(consts) == len(n.inputs)):
            raise UnsupportedOpError(f"node '{n.name}' ({n.op.value}): constant operand '{consts[0]}' cannot be "
                                     f"quantised (only conv / depthwise / FC weights and biases, and one operand of "
                                     f"ADD / SUB / MUL / MAXIMUM / MINIMUM can be constants)")
        if n.op is Op.CONCAT and n.attrs.activation is not Activation.NONE:
            raise UnsupportedOpError(f"node '{n.name}' (CONCAT): int8 concat cannot fuse an activation")


def _is_final_softmax(graph: Graph, n: Node) -> bool:
    return n.op is Op.SOFTMAX and not graph.consumers(n.outputs[0]) and n.outputs[0] in graph.outputs


# -- activation parameters -------------------------------------------------------------------------------------------
def choose_qparams(lo: float, hi: float) -> QParams:
    """Per-tensor int8 params for the real range [lo, hi], as TFLite's `GetAsymmetricQuantizationParams`.

    The range is widened to contain 0; the zero point is `round(-128 - lo / scale)` clamped to int8, so real 0 is
    exactly representable. An all-zero range gets scale 1.0 (any scale represents it).

    >>> q = choose_qparams(-1.0, 3.0)
    >>> float(q.scale[0]), int(q.zero_point[0])
    (0.01568627543747425, -64)
    """
    lo32 = np.float32(min(float(lo), 0.0))
    hi32 = np.float32(max(float(hi), 0.0))
    scale = (hi32 - lo32) / np.float32(INT8_MAX - INT8_MIN)
    if not np.isfinite(scale):
        raise KilobyteError(f"calibrated range [{lo}, {hi}] is not finite")
    if scale == 0:
        return QParams.per_tensor(1.0, INT8_MIN)
    zp_from_min = np.float32(INT8_MIN) - lo32 / scale
    zp = int(np.clip(round_half_away(zp_from_min), INT8_MIN, INT8_MAX))
    return QParams.per_tensor(float(scale), zp)


def activation_qparams(graph: Graph, ranges: dict[str, Range]) -> dict[str, QParams]:
    """QParams of every activation tensor: ranges united over groups that must share params, and the params TFLite
    prescribes for the outputs of LOGISTIC, TANH, SOFTMAX and LOG_SOFTMAX (see the module doc)."""
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        while parent.get(t, t) != t:
            t = parent[t]
        return t

    ranges = dict(ranges)
    for n in graph.nodes:
        if opdef(n.op).qparams == "shared":
            for t in n.inputs:
                parent[find(t)] = find(n.outputs[0])
                if graph.tensors[t].is_const:  # a MAXIMUM / MINIMUM constant: its values join the group's range
                    data = graph.tensors[t].data
                    ranges[t] = (float(data.min()), float(data.max()))
    union: dict[str, Range] = {}
    for t, (lo, hi) in ranges.items():
        root = find(t)
        old_lo, old_hi = union.get(root, (lo, hi))
        union[root] = (min(old_lo, lo), max(old_hi, hi))
    fixed = _fixed_qparams(graph, find, ranges)
    return {t: fixed.get(find(t)) or _tensor_qparams(graph, t, union[find(t)]) for t in ranges
            if not graph.tensors[t].is_const}


def _tensor_qparams(graph: Graph, name: str, rng: Range) -> QParams:
    """`choose_qparams` for tensor `name`; a non-finite calibrated range (a LOG of zero, an overflowing EXP) is a
    one-line error naming the tensor and the op that produced it."""
    try:
        return choose_qparams(*rng)
    except KilobyteError:
        node = graph.producer(name)
        where = f" ({node.op.value} '{node.name}')" if node is not None else ""
        raise KilobyteError(f"graph '{graph.name}': tensor '{name}'{where} has the calibrated range [{rng[0]}, "
                            f"{rng[1]}], which int8 cannot represent; check the calibration data (a LOG of values "
                            "<= 0, an EXP that overflows)") from None


def _fixed_qparams(graph: Graph, find, ranges) -> dict[str, QParams]:
    """Group root -> the params TFLite fixes for the LOGISTIC / TANH / SOFTMAX / LOG_SOFTMAX output in that group.
    Every other member must be moved there by a shared-params op (nothing else could produce values on that scale)."""
    fixed: dict[str, tuple[QParams, Node]] = {}
    for n in graph.nodes:
        if opdef(n.op).qparams == "fixed" and not _is_final_softmax(graph, n):
            scale, zero_point = opdef(n.op).fixed_qparams
            q, root = QParams.per_tensor(float(scale), zero_point), find(n.outputs[0])
            if root in fixed and fixed[root][0] != q:
                raise UnsupportedOpError(f"node '{n.name}' ({n.op.value}): its output shares quantisation params with "
                                         f"the output of node '{fixed[root][1].name}', but TFLite fixes them "
                                         f"differently")
            fixed[root] = (q, n)
    for t in ranges:
        if find(t) in fixed and not graph.tensors[t].is_const:
            producer, owner = graph.producer(t), fixed[find(t)][1]
            if producer is None or opdef(producer.op).qparams == "own":
                raise UnsupportedOpError(f"tensor '{t}' must share quantisation params with the output of node "
                                         f"'{owner.name}' ({owner.op.value}), which TFLite fixes; a requantisation "
                                         f"between them is not supported")
    return {root: q for root, (q, _) in fixed.items()}


def _int8_activation(t: Tensor, q: QParams) -> Tensor:
    return Tensor(t.name, t.shape, "int8", None, q)


# -- weights and biases ----------------------------------------------------------------------------------------------
def weight_scales(w: np.ndarray, axis: int, bias: np.ndarray | None = None, input_scale: float = 1.0) -> np.ndarray:
    """Per-channel symmetric scales `max|w| / 127` (float32), kept large enough that the int32 bias cannot overflow.

    A channel of zero weights and zero bias gets scale 1.0 (any positive scale represents it exactly).
    """
    other = tuple(i for i in range(w.ndim) if i != axis)
    scale = np.abs(w.astype(np.float64)).max(axis=other) / INT8_MAX
    if bias is not None:  # |bias| / (s_in · s_w) must stay below 2^30
        scale = np.maximum(scale, np.abs(bias.astype(np.float64)) / (float(input_scale) * 2.0**30))
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    return np.where(scale > 0, scale, np.float32(np.finfo(np.float32).tiny))  # float32 underflow guard


def quantize_weights(w: np.ndarray, scales: np.ndarray, axis: int) -> np.ndarray:
    """int8 symmetric quantisation `round(w / s[c])` clamped to [-127, 127] along `axis`."""
    shape = [1] * w.ndim
    shape[axis] = -1
    q = round_half_away(w.astype(np.float64) / scales.astype(np.float64).reshape(shape))
    return np.clip(q, -INT8_MAX, INT8_MAX).astype(np.int8)


def _quantize_params(graph: Graph, node: Node, qparams: dict[str, QParams]) -> list[Tensor]:
    """int8 weight and int32 bias tensors of a CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED node, or the int8
    constant operand of an ADD / SUB / MUL / MAXIMUM / MINIMUM node."""
    if node.op in CONSTANT_OPERAND_OPS:
        return [_constant_operand(graph.tensors[t], node, qparams) for t in node.inputs if graph.tensors[t].is_const]
    if not opdef(node.op).linear:
        return []
    axis = opdef(node.op).weight_axis
    w_t = graph.tensors[node.inputs[1]]
    b_t = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 else None
    s_in = float(qparams[node.inputs[0]].scale[0])
    scales = weight_scales(w_t.data, axis, None if b_t is None else b_t.data, s_in)
    zeros = np.zeros(len(scales), np.int64)
    out = [_const(w_t, quantize_weights(w_t.data, scales, axis), QParams(scales, zeros, axis))]
    if b_t is not None:
        bias_scale = np.float64(np.float32(s_in)) * scales.astype(np.float64)
        q = round_half_away(b_t.data.astype(np.float64) / bias_scale)
        q = np.clip(q, -(2**31 - 1), 2**31 - 1).astype(np.int32)
        out.append(_const(b_t, q, QParams(bias_scale.astype(np.float32), zeros, 0)))
    return out


def _placeholder_params(graph: Graph, node: Node, qparams: dict[str, QParams]) -> list[Tensor]:
    """int8 / int32 zero tensors of `_quantize_params`'s shapes and dtypes; the weights a read-only broadcast view
    (no memory per weight: a candidate's weights are never read, only counted)."""
    if not opdef(node.op).linear:
        return []
    w, out = graph.tensors[node.inputs[1]], []
    axis = opdef(node.op).weight_axis
    n = w.shape[axis]
    unit = QParams(np.ones(n, np.float32), np.zeros(n, np.int64), axis)
    out.append(Tensor(w.name, w.shape, "int8", np.broadcast_to(_INT8_ZERO, w.shape), unit))
    if len(node.inputs) > 2:
        b = graph.tensors[node.inputs[2]]
        bias_q = QParams(unit.scale, unit.zero_point, 0)
        out.append(Tensor(b.name, b.shape, "int32", np.zeros(b.shape, np.int32), bias_q))
    return out


_INT8_ZERO = np.int8(0)


def _constant_operand(t: Tensor, node: Node, qparams: dict[str, QParams]) -> Tensor:
    """A constant operand as int8 per tensor: with its own range (ADD, SUB, MUL), or the params it shares (MAXIMUM,
    MINIMUM, whose kernels compare raw values)."""
    q = qparams[node.outputs[0]] if opdef(node.op).qparams == "shared" else choose_qparams(t.data.min(), t.data.max())
    return _const(t, quantize_values(t.data, q.scale[0], q.zero_point[0]), q)


def _const(t: Tensor, data: np.ndarray, q: QParams) -> Tensor:
    data.setflags(write=False)
    return Tensor(t.name, t.shape, str(data.dtype), data, q)


# -- rewrites --------------------------------------------------------------------------------------------------------
def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _softmax_at_edge(graph: Graph, node: Node, logits: Tensor, taken: set[str]):
    """SOFTMAX(int8 x) -> SOFTMAX(DEQUANTIZE(x)), both float32."""
    deq = _fresh(f"{logits.name}_dequant", taken)
    out = graph.tensors[node.outputs[0]]
    nodes = [Node(deq, Op.DEQUANTIZE, (logits.name,), (deq,), None, node.origin),
             Node(node.name, Op.SOFTMAX, (deq,), node.outputs, node.attrs, node.origin)]
    return nodes, [Tensor(deq, logits.shape, "float32"), Tensor(out.name, out.shape, "float32")]


# -- graph-edge helpers ----------------------------------------------------------------------------------------------
def quantize_input(graph: Graph, x, name: str | None = None) -> np.ndarray:
    """Float data -> the int8 values graph input `name` (default: the first) expects (TFLite QUANTIZE)."""
    t = graph.tensors[name or graph.inputs[0]]
    if t.dtype != "int8":
        raise KilobyteError(f"graph input '{t.name}' is {t.dtype}, not int8")
    return quantize_values(x, t.qparams.scale[0], t.qparams.zero_point[0])


def dequantize_output(graph: Graph, y, name: str | None = None) -> np.ndarray:
    """int8 values of graph output `name` (default: the first) -> float32 (TFLite DEQUANTIZE); float passes through."""
    t = graph.tensors[name or graph.outputs[0]]
    if t.dtype != "int8":
        return np.asarray(y, np.float32)
    return dequantize_values(y, t.qparams.scale[0], t.qparams.zero_point[0])
