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

from ..errors import KilobyteError, UnsupportedOpError
from ..ir import Graph, Node, Op
from ..ops import opdef
from ..ops.binary import add_fields
from ..ops.c_text import c_array, c_ident, c_struct
from ..ops.conv_kernels import conv_columns_bytes, conv_kernel, inplace_depthwise_kernel, sparse_scratch_bytes
from ..ops.layer_code import Buffers, LayerCode, weight_arrays, window_params
from ..ops.node_params import requant_params
from ..ops.sparse import encode


def folded_bias(graph: Graph, node: Node) -> np.ndarray:
    """bias[n] - zp_in * sum(w[n]), wrapped to int32: the sparse kernels multiply raw int8 inputs (and read padded
    taps as zp_in), so the input zero point enters once per filter here (kb_sparse_conv.c)."""
    w = graph.tensors[node.inputs[1]].data.astype(np.int64)
    n_out = w.shape[0]
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 else np.zeros(n_out, np.int32)
    zp = int(requant_params(graph, node).input_zp)
    folded = bias.astype(np.int64) - zp * w.reshape(n_out, -1).sum(axis=1)
    return ((folded + 2**31) % 2**32 - 2**31).astype(np.int32)


def emit_sparse_conv(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    """A CONV_2D with FWCS or CSR weights (`ops/sparse.py`): the format's arrays, the folded bias, and one call of
    `kb_conv_fwcs` / `kb_conv_csr` with its two-window scratch."""
    code = LayerCode(families={"sparse_conv"})
    fmt, base = node.attrs.weight_format, c_ident(node.name)
    p = requant_params(graph, node)
    w_shape = graph.tensors[node.inputs[1]].shape
    params = window_params(graph, node, bufs, (w_shape[1], w_shape[2]), (p.input_zp, p.output_zp),
                           (p.act_min, p.act_max))
    enc = encode(graph.tensors[node.inputs[1]].data, fmt, f"node '{node.name}'")
    index = enc.cptr if fmt == "fwcs" else enc.idx
    names = [f"kb_{k}_{base}" for k in ("w", "i", "f", "b", "mult", "shift")]
    code.decls += [c_array(names[0], "int8_t", enc.arr, align=4), c_array(names[1], "uint16_t", index),
                   c_array(names[2], "uint16_t", enc.fidx), c_array(names[3], "int32_t", folded_bias(graph, node)),
                   c_array(names[4], "int32_t", p.multiplier), c_array(names[5], "int32_t", p.shift)]
    offset, size = plan.scratch.get(node.name, (0, 0))
    if size < sparse_scratch_bytes(graph, node) or offset % 4:
        raise KilobyteError(f"node '{node.name}': the plan gives its {fmt} kernel {size} bytes of scratch at offset "
                            f"{offset}; it needs {sparse_scratch_bytes(graph, node)}, 4-byte aligned")
    params["scratch_bytes"], params["in_consumed"] = size, int(node.name in plan.consumed)
    code.body += [c_struct("kb_conv_params", params),
                  f"kb_conv_{fmt}(&p, {bufs.ptr(node.inputs[0])}, {', '.join(names)}, {bufs.ptr(node.outputs[0])}, "
                  f"KB_ARENA + {offset});"]
    return code


def emit_conv(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    if node.attrs.weight_format != "dense":
        return emit_sparse_conv(graph, node, bufs, plan)
    code = LayerCode(families={"conv"})
    p = requant_params(graph, node)
    w_shape = graph.tensors[node.inputs[1]].shape
    params = window_params(graph, node, bufs, (w_shape[1], w_shape[2]), (p.input_zp, p.output_zp),
                           (p.act_min, p.act_max))
    w, b, m, s = weight_arrays(graph, node, code)
    fn = conv_kernel(node, tuple(w_shape[1:3]))
    scratch, params["scratch_bytes"] = conv_scratch(graph, node, plan.scratch.get(node.name))
    params["in_consumed"] = int(node.name in plan.consumed)
    code.body += [c_struct("kb_conv_params", params),
                  f"{fn}(&p, {bufs.ptr(node.inputs[0])}, {w}, {b}, {m}, {s}, {bufs.ptr(node.outputs[0])}, "
                  f"{scratch});"]
    return code


def conv_scratch(graph: Graph, node: Node, placement: tuple[int, int] | None) -> tuple[str, int]:
    """A conv call's scratch argument and its `scratch_bytes`: the planned (arena offset, bytes) buffer when that holds
    the kernels' two int16 columns (KB_CONV_SCRATCH) word-aligned (LDRD / LDM), else (NULL, 0) (the DSP kernels then
    convolve directly; the portable ones never use it). Per layer and per patch alike."""
    offset, size = placement or (0, 0)
    if size >= conv_columns_bytes(graph, node) and offset % 4 == 0:
        return f"KB_ARENA + {offset}", size
    return "NULL", 0


def emit_depthwise(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    code = LayerCode(families={"depthwise"})
    if node.attrs.depth_multiplier != 1:
        raise UnsupportedOpError(f"node '{node.name}': depthwise multiplier {node.attrs.depth_multiplier} has no C "
                                 "kernel (only 1)")
    p = requant_params(graph, node)
    k = graph.tensors[node.inputs[1]].shape[1:3]
    params = window_params(graph, node, bufs, k, (p.input_zp, p.output_zp), (p.act_min, p.act_max))
    w, b, m, s = weight_arrays(graph, node, code)
    args = f"&p, {bufs.ptr(node.inputs[0])}, {w}, {b}, {m}, {s}, {bufs.ptr(node.outputs[0])}"
    if node.name in plan.inplace:
        if params["in_cstride"] != params["out_cstride"]:
            raise UnsupportedOpError(f"node '{node.name}': in-place depthwise needs equal input/output pixel strides")
        fn = inplace_depthwise_kernel(node, tuple(k))
        scratch_off = plan.scratch[node.name][0]
        code.body += [c_struct("kb_conv_params", params), f"{fn}({args}, KB_ARENA + {scratch_off});"]
    else:
        code.body += [c_struct("kb_conv_params", params), f"kb_depthwise({args});"]
    return code


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


EMITTERS = {
    Op.CONV_2D: emit_conv, Op.DEPTHWISE_CONV_2D: emit_depthwise,
}


def emitter(op: Op):
    """The function that writes `op`'s layer: its own (`OpDef.emit`), or for the ops still pending in the registry
    the ones above; None when the generated library cannot run it."""
    return opdef(op).emit or EMITTERS.get(op)


def emit_node(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    emit = emitter(node.op)
    if emit is None:
        covered = ", ".join(op.value for op in Op if emitter(op) is not None)
        raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): no C kernel; the generated library covers "
                                 f"{covered}")
    return emit(graph, node, bufs, plan)
