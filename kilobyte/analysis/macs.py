"""Analysis stage: compute and storage cost of each node — MACs, other ops, parameters and Flash bytes at int8.

MACs count multiply-accumulates of the linear ops only, the papers' convention:
CONV_2D `kh*kw*Cin*Cout*Ho*Wo`, DEPTHWISE_CONV_2D `kh*kw*C*Ho*Wo` (C output channels), FULLY_CONNECTED `in*out`;
i.e. weight elements times output pixels; TRANSPOSE_CONV scatters every input pixel through the whole kernel, so it is
weight elements times *input* pixels, `kh*kw*Cin*Cout*H*W` (taps that land in the cropped border included).
Everything else is counted separately in `ops`: pooling taps (`kh*kw*Ho*Wo*C`), ADD element additions, MEAN summed
and REDUCE_MAX compared input elements, and one op per output element for the elementwise ops (activations, GELU,
BN, softmax, log-softmax), the binary ops SUB, MUL, MAXIMUM, MINIMUM and RESIZE_BILINEAR (one interpolation per
output element). Data movement (PAD, RESHAPE, CONCAT, TRANSPOSE, STRIDED_SLICE, TILE, RESIZE_NEAREST_NEIGHBOR,
IDENTITY, (DE)QUANTIZE) costs 0.

Flash is counted at int8 as deployed: weights 1 B per element, biases int32 at 4 B per element, any other constant
operand 1 B per element. Per-channel quantisation scales / multipliers are metadata and are not included.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Op
from ..ops import opdef
from ..ops.sparse import format_bytes, sparsity
from .shapes import output_shape, spatial_extent

WEIGHT_BYTES = 1  # int8 weights
BIAS_BYTES = 4  # int32 biases


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def node_macs(graph: Graph, node: Node) -> int:
    """Multiply-accumulates of `node` (0 for ops that are not conv / depthwise / fully connected / transpose conv).

    >>> import numpy as np
    >>> from kilobyte.ir import ConvAttrs, GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 8, 8, 3))], ConvAttrs(stride=(2, 2), padding=(1, 1, 1, 1)),
    ...            params={"weight": np.zeros((16, 3, 3, 3), np.float32)})
    >>> g = b.build([y])
    >>> node_macs(g, g.nodes[0]) == 3 * 3 * 3 * 16 * 4 * 4
    True
    """
    d = opdef(node.op)
    if d.macs is not None:
        return d.macs(graph, node)
    if not d.linear:
        return 0
    weight = graph.tensors[node.inputs[1]].shape
    ho, wo = spatial_extent(output_shape(graph, node))  # FC output (1, out): one "pixel"
    return _numel(weight) * ho * wo


def node_ops(graph: Graph, node: Node) -> int:
    """Non-MAC arithmetic of `node` (see the module docstring)."""
    out = _numel(output_shape(graph, node))
    if node.op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        kh, kw = node.attrs.kernel
        return kh * kw * out
    if node.op is Op.ADD:
        return (len(node.inputs) - 1) * out
    if node.op in (Op.MEAN, Op.REDUCE_MAX):
        return graph.tensors[node.inputs[0]].numel
    if opdef(node.op).elementwise_cost:
        return out
    return 0


def constant_inputs(graph: Graph, node: Node) -> list[str]:
    """The constant (parameter) inputs of `node`, each once."""
    return list(dict.fromkeys(t for t in node.inputs if graph.tensors[t].is_const))


def node_params(graph: Graph, node: Node) -> int:
    """Parameter elements of `node`: weights plus bias (plus any other constant operand)."""
    return sum(graph.tensors[t].numel for t in constant_inputs(graph, node))


def constant_flash_bytes(graph: Graph, node: Node, tensor: str) -> int:
    """Flash bytes of constant `tensor` as an operand of `node`: int32 when it is a linear op's bias, else int8; the
    weights of a CONV_2D stored FWCS or CSR count that format's weights and indices (`ops/sparse.py`)."""
    fmt = getattr(node.attrs, "weight_format", "dense")
    if fmt != "dense" and node.inputs.index(tensor) == 1:
        w = graph.tensors[tensor].data
        return sum(format_bytes((w != 0).astype(np.int8), fmt, f"node '{node.name}'"))
    per_element = BIAS_BYTES if opdef(node.op).linear and node.inputs.index(tensor) == 2 else WEIGHT_BYTES
    return graph.tensors[tensor].numel * per_element


def node_flash_bytes(graph: Graph, node: Node) -> int:
    """Flash bytes of `node`'s constants at int8 (weights 1 B, int32 bias 4 B; scales excluded)."""
    return sum(constant_flash_bytes(graph, node, t) for t in constant_inputs(graph, node))


def layer_weight_bytes(graph) -> dict[str, dict]:
    """Per CONV_2D / weighted layer of an int8 graph: its format, `weight_bytes`, `index_bytes` and sparsity, as the
    generated C stores them (`ops/sparse.py`) (for reports; the pruning tools call it)."""
    rows = {}
    for node in graph.nodes:
        if not opdef(node.op).linear:
            continue
        w = graph.tensors[node.inputs[1]].data
        fmt = getattr(node.attrs, "weight_format", "dense")
        wb, ib = format_bytes(w, fmt, f"node '{node.name}'")
        rows[node.name] = dict(format=fmt, weight_bytes=wb, index_bytes=ib, sparsity=sparsity(w))
    return rows
