"""Op registry: the parameters an int8 kernel needs besides data, from a node's quantisation params (TFLite Micro's
Prepare), shared by the references, the kernel contracts and the emitters — one source of truth for the arithmetic.

Graphs and nodes are duck-typed (`graph.tensors[name].qparams`, `node.attrs`): this module sits below the IR.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from .arith import (
    AddParams,
    MulParams,
    activation_range,
    add_params,
    channel_multipliers,
    fc_multipliers,
    mul_params,
    multiply_by_quantized_multiplier,
    requantize,
)
from .types import Activation, Op


# -- parameters (TFLite Micro's Prepare) -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RequantParams:
    """What a conv / depthwise / FC kernel needs besides data: zero points, per-channel multipliers, clamp."""

    input_zp: int
    output_zp: int
    multiplier: np.ndarray  # (Cout,) int64, values in [0, 2^31)
    shift: np.ndarray  # (Cout,) int64
    act_min: int
    act_max: int


def tensor_qparams(graph, name: str) -> tuple[np.float32, int]:
    """(scale, zero point) of an activation tensor, which must be quantised per tensor."""
    q = graph.tensors[name].qparams
    if q is None or q.axis is not None or len(q.scale) != 1:
        raise KilobyteError(f"tensor '{name}' needs per-tensor quantisation params for int8 execution")
    return np.float32(q.scale[0]), int(q.zero_point[0])


def activation_range_of(graph, node) -> tuple[int, int]:
    """int8 clamp bounds of `node`'s fused activation, from its output's scale and zero point."""
    return activation_range(getattr(node.attrs, "activation", Activation.NONE), *tensor_qparams(graph, node.outputs[0]))


def requant_params(graph, node) -> RequantParams:
    """Per-channel requantisation of a CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED / TRANSPOSE_CONV node (TFLite
    Micro's TRANSPOSE_CONV Prepare is CONV_2D's `PopulateConvolutionQuantizationParams`)."""
    s_in, z_in = tensor_qparams(graph, node.inputs[0])
    s_out, z_out = tensor_qparams(graph, node.outputs[0])
    wq = graph.tensors[node.inputs[1]].qparams
    if wq is None or np.any(wq.zero_point != 0):
        raise KilobyteError(f"node '{node.name}': weights need symmetric (zero point 0) quantisation params")
    n_out = graph.tensors[node.outputs[0]].shape[-1]
    if node.op is Op.FULLY_CONNECTED:
        m, s = fc_multipliers(s_in, wq.scale, s_out)
    else:
        m, s = channel_multipliers(s_in, wq.scale, s_out)
    m, s = np.broadcast_to(m, (n_out,)), np.broadcast_to(s, (n_out,))
    lo, hi = activation_range_of(graph, node)
    return RequantParams(z_in, z_out, m, s, lo, hi)


def add_node_params(graph, node) -> AddParams:
    """TFLite's ADD parameters of an ADD node; a SUB node's are the same (TFLite Micro's `CalculateOpDataSub`)."""
    (s1, z1), (s2, z2) = tensor_qparams(graph, node.inputs[0]), tensor_qparams(graph, node.inputs[1])
    return add_params(s1, z1, s2, z2, *tensor_qparams(graph, node.outputs[0]), node.attrs.activation)


def mul_node_params(graph, node) -> MulParams:
    """TFLite's int8 MUL parameters of a MUL node."""
    (s1, z1), (s2, z2) = tensor_qparams(graph, node.inputs[0]), tensor_qparams(graph, node.inputs[1])
    return mul_params(s1, z1, s2, z2, *tensor_qparams(graph, node.outputs[0]), node.attrs.activation)


def constant_terms(graph, node, k: int) -> np.ndarray:
    """The share of constant operand `k` (0 or 1) in each element of an int8 ADD / SUB / MUL, in the constant's shape
    (int64 values in int32 range): what `add_int8` / `sub_int8` / `mul_int8` compute from it alone, so a kernel
    can take it from a table made here (`kb_add_const`, `kb_mul_const`). ADD / SUB: the rescaled value
    MBQM((c + offset) << 20, multiplier, shift), negated when SUB subtracts it; MUL: c + offset."""
    c = np.asarray(graph.tensors[node.inputs[k]].data, np.int64)
    if node.op is Op.MUL:
        p = mul_node_params(graph, node)
        return c + (p.input1_offset, p.input2_offset)[k]
    p = add_node_params(graph, node)
    offset, m, s = ((p.input1_offset, p.input1_multiplier, p.input1_shift),
                    (p.input2_offset, p.input2_multiplier, p.input2_shift))[k]
    term = multiply_by_quantized_multiplier((c + offset) << p.left_shift, m, s)
    return -term if node.op is Op.SUB and k == 1 else term


def check_shared_qparams(graph, node) -> None:
    """A TRANSPOSE / STRIDED_SLICE / TILE / REDUCE_MAX node's int8 input and output must share quantisation params
    (its kernel moves or compares raw int8 values); otherwise a one-line `UnsupportedOpError` naming the node."""
    x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
    if x.dtype != y.dtype or x.qparams != y.qparams:
        raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): input '{x.name}' ({x.dtype}, "
                                 f"{fmt_qparams(x.qparams)}) and output ({y.dtype}, {fmt_qparams(y.qparams)}) must "
                                 f"share dtype and quantisation params (the kernel moves raw values)")


def fmt_qparams(q) -> str:
    if q is None:
        return "no quantisation"
    return f"scale {[float(v) for v in q.scale]}, zero point {[int(v) for v in q.zero_point]}"


def require_same_qparams(graph, node) -> None:
    want = graph.tensors[node.outputs[0]].qparams
    for t in node.inputs:
        if graph.tensors[t].qparams != want:
            raise KilobyteError(f"node '{node.name}' ({node.op.value}): input '{t}' and output must share "
                                f"quantisation params (the int8 kernel copies values without rescaling)")


def finish(acc: np.ndarray, bias, p: RequantParams) -> np.ndarray:
    """float64 accumulator (exact integers) + int32 bias -> requantised int8."""
    acc = acc.astype(np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64)
    return requantize(acc, p.multiplier, p.shift, p.output_zp, p.act_min, p.act_max)
