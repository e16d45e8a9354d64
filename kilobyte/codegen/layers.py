"""Codegen stage: one int8 IR node -> constant data + one call into the runtime (`runtime/c/`).

Every number a kernel needs (shapes, strides, zero points, clamps, per-channel multipliers and shifts, arena
offsets) is computed here, at generation time, with the same functions the numpy reference interpreter uses
(`kilobyte.interp.int8_ref.requant_params`, `add_node_params`, `mul_node_params`, `mean_multiplier`) — one source of
truth for the arithmetic. Binary ops (ADD, SUB, MUL, MAXIMUM, MINIMUM) run on operands of the output's shape, or a
per-channel (1,1,1,C) operand broadcast by a pixel stride of 0; ADD, SUB and MUL with a constant operand of any
shape that broadcasts call `kb_add_const` / `kb_mul_const` with the constant's share of each element prepared here
(`constant_terms`); a constant operand of MAXIMUM / MINIMUM is a const int8 array in model.c.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..interp.int8_ref import mean_multiplier, softmax_params
from ..interp.prelu import prelu_node_tables
from ..ir import Graph, Node, Op
from ..ir.sparse import encode
from ..kernels.calls import conv_kernel, inplace_depthwise_kernel
from ..kernels.contracts import add_fields, const_fields, constant_operand, mul_fields, sparse_scratch_bytes
from ..ops import opdef
from ..ops.arith import requant_multiplier
from ..ops.c_text import c_array, c_ident, c_struct
from ..ops.layer_code import Buffers, LayerCode, weight_arrays, window_params
from ..ops.node_params import activation_range_of, requant_params, tensor_qparams
from ..schedule.scratch import conv_columns_bytes
from .movement import emit_movement


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
    """A CONV_2D with FWCS or CSR weights (`ir/sparse.py`): the format's arrays, the folded bias, and one call of
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


def emit_fc(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    code = LayerCode(families={"fc"})
    p = requant_params(graph, node)
    w_shape = graph.tensors[node.inputs[1]].shape
    params = dict(in_n=w_shape[1], out_n=w_shape[0], in_offset=-p.input_zp, out_offset=p.output_zp,
                  act_min=p.act_min, act_max=p.act_max)
    w, b, m, s = weight_arrays(graph, node, code)
    code.body += [c_struct("kb_fc_params", params),
                  f"kb_fully_connected(&p, {bufs.ptr(node.inputs[0])}, {w}, {b}, {m}, {s}, "
                  f"{bufs.ptr(node.outputs[0])});"]
    return code


@dataclass(frozen=True)
class Operands:
    """Where a binary op's kernel reads its two operands and writes its output: C pointers and pixel strides (a
    stride of 0 repeats one pixel of that operand), and the constant arrays it reads."""

    ptrs: tuple[str, str]
    strides: tuple[int, int, int]  # in1, in2, out
    decls: list[str]


def binary_operands(graph: Graph, node: Node, bufs: Buffers) -> Operands:
    """An operand shaped like the output keeps its planned stride; a per-channel one (one pixel of the output's C
    channels, e.g. (1,1,1,C), or one value) gets stride 0 (the kernel repeats that pixel). A constant operand becomes
    a const array in model.c (a single value repeated over the C channels). Any other broadcast raises a one-line
    `UnsupportedOpError`."""
    out = graph.tensors[node.outputs[0]].shape
    ptrs, strides, decls = [], [], []
    for k, t in enumerate(node.inputs):
        tensor = graph.tensors[t]
        shape = tensor.shape
        per_channel = int(np.prod(shape[:-1], dtype=np.int64)) == 1 and shape[-1:] in (out[-1:], (1,))
        if tuple(shape) != tuple(out) and not per_channel:
            raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): broadcast of {shape} to {out} has no C "
                                     f"kernel (same shape or a (1,1,1,C) operand only)")
        if per_channel and shape[-1] != out[-1] and not tensor.is_const:
            raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): broadcast of {shape} to {out} has no C "
                                     f"kernel (a single-value operand must be a constant)")
        if tensor.is_const:
            name = f"kb_k_{c_ident(node.name)}_{k}"
            values = tensor.data.reshape(-1) if tuple(shape) == tuple(out) else np.broadcast_to(
                tensor.data.reshape(-1), (out[-1],))
            decls.append(c_array(name, "int8_t", values))
            ptrs.append(name)
            strides.append(out[-1] if tuple(shape) == tuple(out) else 0)
        else:
            ptrs.append(bufs.ptr(t))
            strides.append(bufs.cstride(t) if tuple(shape) == tuple(out) else 0)
    return Operands(tuple(ptrs), (strides[0], strides[1], bufs.cstride(node.outputs[0])), decls)


def _binary_call(node: Node, bufs: Buffers, operands: Operands, struct: str, params: dict, fn: str,
                 family: str) -> LayerCode:
    a, b = operands.ptrs
    return LayerCode(decls=operands.decls, body=[c_struct(struct, params),
                                                 f"{fn}(&p, {a}, {b}, {bufs.ptr(node.outputs[0])});"],
                     families={family})


def emit_add(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    """int8 ADD and SUB: `kb_add_params` (TFLite computes SUB's rescales as ADD's) and `kb_add` / `kb_sub`; with a
    constant operand, `emit_const_operand`."""
    if constant_operand(graph, node) is not None:
        return emit_const_operand(graph, node, bufs, plan)
    pixels = int(np.prod(graph.tensors[node.outputs[0]].shape[:-1]))
    operands = binary_operands(graph, node, bufs)
    params = add_fields(graph, node, operands.strides, pixels)
    return _binary_call(node, bufs, operands, "kb_add_params", params, "kb_add" if node.op is Op.ADD else "kb_sub",
                        "add")


def emit_mul(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    """int8 MUL: `kb_mul_params` and `kb_mul`; with a constant operand, `emit_const_operand`."""
    if constant_operand(graph, node) is not None:
        return emit_const_operand(graph, node, bufs, plan)
    pixels = int(np.prod(graph.tensors[node.outputs[0]].shape[:-1]))
    operands = binary_operands(graph, node, bufs)
    params = mul_fields(graph, node, operands.strides, pixels)
    return _binary_call(node, bufs, operands, "kb_mul_params", params, "kb_mul", "elementwise")


def emit_const_operand(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    """ADD / SUB / MUL of an activation and a constant of any shape that broadcasts to it: the constant's share of
    each element (`constant_terms`) as an int32 array in model.c, one per constant value (a (C,) bias stays C
    values, never the broadcast map), read by `kb_add_const` / `kb_mul_const` with steps of 0 on broadcast axes."""
    x, y = node.inputs[1 - constant_operand(graph, node)], node.outputs[0]
    params, terms = const_fields(graph, node, bufs.cstride(x), bufs.cstride(y))
    name = f"kb_k_{c_ident(node.name)}"
    fn, family = ("kb_mul_const", "elementwise") if node.op is Op.MUL else ("kb_add_const", "add")
    return LayerCode(decls=[c_array(name, "int32_t", terms)],
                     body=[c_struct("kb_const_params", params), f"{fn}(&p, {bufs.ptr(x)}, {name}, {bufs.ptr(y)});"],
                     families={family})


def emit_minmax(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    """int8 MAXIMUM / MINIMUM compare raw values: inputs and output must share quantisation params."""
    want = graph.tensors[node.outputs[0]].qparams
    if any(graph.tensors[t].qparams != want for t in node.inputs):
        raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): inputs and output must share quantisation "
                                 f"params (the kernel compares raw int8 values)")
    shape = graph.tensors[node.outputs[0]].shape
    operands = binary_operands(graph, node, bufs)
    s1, s2, so = operands.strides
    params = dict(pixels=int(np.prod(shape[:-1])), c=shape[-1], in1_cstride=s1, in2_cstride=s2, out_cstride=so)
    fn = "kb_maximum" if node.op is Op.MAXIMUM else "kb_minimum"
    return _binary_call(node, bufs, operands, "kb_minmax_params", params, fn, "elementwise")


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


def emit_pool(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    zp = int(graph.tensors[node.inputs[0]].qparams.zero_point[0])
    act = activation_range_of(graph, node)
    params = window_params(graph, node, bufs, node.attrs.kernel, (zp, zp), act)
    fn = "kb_avg_pool" if node.op is Op.AVG_POOL_2D else "kb_max_pool"
    return LayerCode(body=[c_struct("kb_conv_params", params),
                           f"{fn}(&p, {bufs.ptr(node.inputs[0])}, {bufs.ptr(node.outputs[0])});"],
                     families={"pool"})


MEAN_MAX_REDUCE = 1 << 23  # below this many values |sum - n * zero point| < 256 n fits kb_mean's int32 sum


def mean_fields(graph: Graph, node: Node, cstrides: tuple[int, int]) -> dict[str, int]:
    """`kb_mean_params` of an int8 MEAN whose input and output have pixel strides `cstrides`.

    kb_mean reads (outer, reduce, inner) pixels, so the reduced axes must be one contiguous run once unit axes (which
    belong to either side) are left out: over NHWC, (1, 2), (1,), (2,), (3,), (2, 3), (1, 2, 3) all work, (1, 3) only
    when W is 1. Without the channel axis a pixel is the tensor's own (c = C, the planned strides: the output may be
    a concat slice); with it the tensor is read byte by byte (c = 1), which needs a dense input and an output whose
    last axis is 1 or dense. Everything else raises a one-line `UnsupportedOpError` naming the node and its axes.
    """
    x_shape, y_shape = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    rank = len(x_shape)
    axes = sorted({a % rank for a in node.attrs.axes})
    where = f"node '{node.name}' (MEAN over axes {tuple(node.attrs.axes)} of {x_shape})"
    if rank - 1 in axes:
        y_last = y_shape[-1] if y_shape else 1
        if cstrides[0] != x_shape[-1] or (y_last != 1 and cstrides[1] != y_last):
            raise UnsupportedOpError(f"{where}: a mean over channels needs a dense input and output")
        dims, c, strides = x_shape, 1, (1, cstrides[1] if y_last == 1 else 1)
    else:
        dims, c, strides = x_shape[:-1], x_shape[-1], cstrides
    reduced = [a for a in axes if dims[a] > 1]
    first, last = (reduced[0], reduced[-1]) if reduced else (len(dims), len(dims) - 1)
    if any(a not in axes and dims[a] > 1 for a in range(first, last + 1)):
        raise UnsupportedOpError(f"{where}: kb_mean needs the reduced axes to be one contiguous run")
    outer, reduce, inner = (int(np.prod(dims[:first])), int(np.prod(dims[first:last + 1])),
                            int(np.prod(dims[last + 1:])))
    if reduce >= MEAN_MAX_REDUCE:
        raise UnsupportedOpError(f"{where}: {reduce} values overflow kb_mean's int32 sum")
    (s_in,), (z_in,) = graph.tensors[node.inputs[0]].qparams.scale, graph.tensors[node.inputs[0]].qparams.zero_point
    (s_out,), (z_out,) = graph.tensors[node.outputs[0]].qparams.scale, graph.tensors[node.outputs[0]].qparams.zero_point
    mult, shift = mean_multiplier(s_in, s_out, reduce)  # reduce == n of mean_int8: unit axes add nothing
    return dict(outer=outer, reduce=reduce, inner=inner, c=c, in_cstride=strides[0], out_cstride=strides[1],
                sum_offset=-int(z_in) * reduce, mult=mult, shift=shift, out_offset=int(z_out))


def emit_mean(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    params = mean_fields(graph, node, (bufs.cstride(node.inputs[0]), bufs.cstride(node.outputs[0])))
    return LayerCode(body=[c_struct("kb_mean_params", params),
                           f"kb_mean(&p, {bufs.ptr(node.inputs[0])}, {bufs.ptr(node.outputs[0])});"],
                     families={"mean"})


def emit_pad(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    (n0, n1), (t, b), (left, r), (c0, c1) = node.attrs.pads
    if n0 or n1:
        raise UnsupportedOpError(f"node '{node.name}': PAD on the batch axis has no C kernel")
    _, ih, iw, ic = graph.tensors[node.inputs[0]].shape
    zp = int(graph.tensors[node.inputs[0]].qparams.zero_point[0])
    params = dict(in_h=ih, in_w=iw, in_c=ic, in_cstride=bufs.cstride(node.inputs[0]), pad_t=t, pad_b=b, pad_l=left,
                  pad_r=r, pad_c0=c0, pad_c1=c1, out_cstride=bufs.cstride(node.outputs[0]), value=zp, in_row=iw,
                  out_row=left + iw + r)
    return LayerCode(body=[c_struct("kb_pad_params", params),
                           f"kb_pad(&p, {bufs.ptr(node.inputs[0])}, {bufs.ptr(node.outputs[0])});"],
                     families={"pad"})


def emit_reshape(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    src, dst = node.inputs[0], node.outputs[0]
    if bufs.same_bytes(src, dst):
        return LayerCode(body=["/* RESHAPE: aliases its input, nothing to do */"])
    n = graph.tensors[dst].numel
    return LayerCode(body=[f"memmove({bufs.ptr(dst)}, {bufs.ptr(src)}, {n});"])


def emit_concat(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    out = node.outputs[0]
    out_place = plan.placements[out]
    shape = graph.tensors[out].shape
    pixels = int(np.prod(shape[:-1]))
    code, c0 = LayerCode(), 0
    for t in node.inputs:
        c = graph.tensors[t].shape[-1]
        place = plan.placements.get(t)
        in_slice = place is not None and place.offset == out_place.offset + c0 and place.channel_stride == shape[-1]
        if not in_slice:
            code.families.add("concat")
            code.body.append(f"kb_copy_channels({pixels}, {c}, {bufs.ptr(t)}, {bufs.cstride(t)}, "
                             f"KB_ARENA + {out_place.offset + c0}, {out_place.channel_stride});")
        c0 += c
    if not code.body:
        code.body.append("/* CONCAT: every input was written straight into its slice */")
    return code


def emit_softmax(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    """int8 SOFTMAX / LOG_SOFTMAX over the last axis: TFLite Micro's Prepare results as `kb_softmax_params`. The
    kernel reads rows of `depth` contiguous values, so neither side may be a concat slice."""
    params = softmax_params(graph, node)
    x, y = node.inputs[0], node.outputs[0]
    if bufs.cstride(x) != params["depth"] or bufs.cstride(y) != params["depth"]:
        raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): kb_softmax needs dense rows, not a slice")
    fn = "kb_softmax" if node.op is Op.SOFTMAX else "kb_log_softmax"
    return LayerCode(body=[c_struct("kb_softmax_params", params), f"{fn}(&p, {bufs.ptr(x)}, {bufs.ptr(y)});"],
                     families={"softmax"})


def emit_quantize(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    """QUANTIZE between uint8 and int8 (a model's uint8 input or output): TFLite Micro's Requantize."""
    x, y = node.inputs[0], node.outputs[0]
    kinds = (graph.tensors[x].dtype, graph.tensors[y].dtype)
    if kinds not in (("uint8", "int8"), ("int8", "uint8")):
        raise UnsupportedOpError(f"node '{node.name}' (QUANTIZE {kinds[0]} -> {kinds[1]}): only uint8 <-> int8 runs "
                                 "in C (a float QUANTIZE belongs at the input: kb_invoke_float)")
    (si, zi), (so, zo) = tensor_qparams(graph, x), tensor_qparams(graph, y)
    mult, shift = requant_multiplier(si, so)
    fields = dict(n=graph.tensors[y].numel, in_offset=zi, out_offset=zo, mult=mult, shift=shift)
    fn = "kb_requantize_u8_i8" if kinds[0] == "uint8" else "kb_requantize_i8_u8"
    return LayerCode(body=[c_struct("kb_requantize_params", fields),
                           f"{fn}(&p, (const void *){bufs.ptr(x)}, (void *){bufs.ptr(y)});"], families={"quantize"})


def emit_prelu(graph: Graph, node: Node, bufs: Buffers, plan) -> LayerCode:
    """An int8 PRELU: its tables (`interp.prelu`, one per channel, or one for a single alpha) as one const array;
    one `kb_lut` call over all channels, or a loop of calls each running one channel's table over every pixel."""
    x, y = node.inputs[0], node.outputs[0]
    shape = graph.tensors[y].shape
    pixels, channels = int(np.prod(shape[:-1])), shape[-1]
    tables = prelu_node_tables(graph, node)  # (1 or C, 256)
    name = f"kb_lut_{c_ident(node.name)}"
    if tables.shape[0] == 1:
        body = [f"kb_lut({pixels}, {channels}, {name}, {bufs.ptr(x)}, {bufs.cstride(x)}, {bufs.ptr(y)}, "
                f"{bufs.cstride(y)});"]
    else:  # channel c: a one-channel image at pixel stride cstride, starting c bytes in
        body = [f"for (int32_t c = 0; c < {channels}; ++c) {{",
                f"    kb_lut({pixels}, 1, {name} + 256 * c, {bufs.ptr(x)} + c, {bufs.cstride(x)}, {bufs.ptr(y)} + c, "
                f"{bufs.cstride(y)});", "}"]
    return LayerCode(decls=[c_array(name, "int8_t", tables.reshape(-1))], body=body, families={"lut"})


EMITTERS = {
    Op.CONV_2D: emit_conv, Op.DEPTHWISE_CONV_2D: emit_depthwise, Op.FULLY_CONNECTED: emit_fc, Op.ADD: emit_add,
    Op.AVG_POOL_2D: emit_pool, Op.MAX_POOL_2D: emit_pool, Op.PAD: emit_pad, Op.RESHAPE: emit_reshape,
    Op.CONCAT: emit_concat, Op.MEAN: emit_mean, Op.SOFTMAX: emit_softmax, Op.LOG_SOFTMAX: emit_softmax,
    Op.QUANTIZE: emit_quantize,
    Op.SUB: emit_add, Op.MUL: emit_mul, Op.MAXIMUM: emit_minmax, Op.MINIMUM: emit_minmax,
    Op.PRELU: emit_prelu,
    **{op: emit_movement for op in (Op.TRANSPOSE, Op.STRIDED_SLICE, Op.TILE, Op.REDUCE_MAX)},
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
