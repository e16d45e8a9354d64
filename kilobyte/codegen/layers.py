"""Codegen stage: one int8 IR node -> constant data + one call into the runtime (`runtime/c/`).

Every number a kernel needs (shapes, strides, zero points, clamps, per-channel multipliers and shifts, arena
offsets) is computed here, at generation time, with the same functions the numpy reference interpreter uses
(`kilobyte.ops.node_params`: `requant_params`, `add_node_params`, `mul_node_params`) — one source of
truth for the arithmetic. Binary ops (ADD, SUB, MUL, MAXIMUM, MINIMUM) run on operands of the output's shape, or a
per-channel (1,1,1,C) operand broadcast by a pixel stride of 0; ADD, SUB and MUL with a constant operand of any
shape that broadcasts call `kb_add_const` / `kb_mul_const` with the constant's share of each element prepared here
(`constant_terms`); a constant operand of MAXIMUM / MINIMUM is a const int8 array in model.c.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Graph, Node, Op
from ..ops import opdef
from ..ops.binary import add_fields
from ..ops.c_text import c_struct
from ..ops.layer_code import Buffers, LayerCode, weight_arrays, window_params
from ..ops.node_params import requant_params


def emit_conv_add(graph: Graph, conv: Node, add: Node, bufs: Buffers, plan) -> LayerCode:
    """A fused pair (`plan.fused`): one `kb_conv_1x1_add` call writing the ADD's output over the residual; the ADD
    node emits nothing. The kernel's `a.in1_*` describe the conv's output, `a.in2_*` the residual: for an IR
    ADD(residual, conv) the two operands' parameters are swapped (exact: each operand keeps its own rescaling, and
    the int32 sum commutes)."""
    y, out = conv.outputs[0], add.outputs[0]
    residual = next(t for t in add.inputs if t != y)
    if not bufs.same_bytes(residual, out) or bufs.cstride(residual) != bufs.cstride(out):
        raise UnsupportedOpError(f"node '{add.name}': a fused conv + ADD needs its output over the residual")
    code = LayerCode(families={"conv_add"})
    p = requant_params(graph, conv)
    params = window_params(graph, conv, bufs, (1, 1), (p.input_zp, p.output_zp), (p.act_min, p.act_max))
    params["out_cstride"] = bufs.cstride(residual)  # the conv's output never exists: pixels land on the residual
    params["in_consumed"] = int(conv.name in plan.consumed)
    w, b, m, s = weight_arrays(graph, conv, code)
    shape = graph.tensors[out].shape
    fields = add_fields(graph, add, (shape[-1], bufs.cstride(residual), bufs.cstride(out)),
                        pixels=int(np.prod(shape[:-1])), swap=add.inputs[0] != y)
    add_struct = c_struct("kb_add_params", fields).replace(" p = ", " a = ", 1)  # the second struct: `a`
    code.body += [c_struct("kb_conv_params", params), add_struct,
                  f"kb_conv_1x1_add(&p, {bufs.ptr(conv.inputs[0])}, {w}, {b}, {m}, {s}, &a, {bufs.ptr(residual)});"]
    return code


def emitter(op: Op):
    """The function that writes `op`'s layer (`OpDef.emit`); None when the generated library cannot run it."""
    return opdef(op).emit


def emit_node(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    emit = emitter(node.op)
    if emit is None:
        covered = ", ".join(op.value for op in Op if emitter(op) is not None)
        raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): no C kernel; the generated library covers "
                                 f"{covered}")
    return emit(graph, node, bufs, plan)
