"""Op registry: CONV_2D and DEPTHWISE_CONV_2D — their definitions, references, C emitters and `.tflite` lowering.

Integer semantics follow TFLite's reference kernels: convolutions accumulate `w · (x - zp_in)` (padding contributes
nothing, i.e. the input is padded with its zero point) in int32, add the int32 bias and requantise per output
channel. Products are summed in float64, which is exact for every integer sum below 2^53, so BLAS does the heavy
lifting without changing a bit. `conv2d_int8` and `depthwise_conv2d_int8` take plain integer parameters so the C
runtime can be tested against them directly (`node_params.requant_params` derives them from a graph as TFLite Micro's
Prepare does). What their kernels read as scratch and which C variant runs: `conv_kernels.py`. A 1x1 conv fused with
the residual ADD after it is the code generator's (`codegen/layers.py` `emit_conv_add`): it spans two nodes.
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from .c_text import c_array, c_ident, c_struct
from .contract import InPlaceRule, KernelContract, conv_window
from .conv_kernels import (
    conv_columns_bytes,
    conv_kernel,
    depthwise_kernel,
    inplace_depthwise_kernel,
    mve_conv_scratch_bytes,
    sparse_scratch_bytes,
)
from .layer_code import Buffers, LayerCode, folded_bias, weight_arrays, window_params
from .node_params import RequantParams, finish, requant_params
from .opdef import OpDef
from .sparse import encode
from .tile_code import WindowSpec, emit_window
from .types import ConvAttrs, DepthwiseAttrs, Op, ShapeError, apply_activation
from .window import lower_window_input, out_hw, pad_hw, taps, window_shape, windows


# -- shape rules ---------------------------------------------------------------------------------------------------
def _conv_shape(attrs, shapes) -> tuple[int, ...]:
    x, w = shapes[0], shapes[1]
    if len(x) != 4 or len(w) != 4 or w[3] != x[3]:
        raise ShapeError(f"conv input {x} does not match weight {w} (OHWI)")
    return window_shape(x, w[1], w[2], attrs, w[0])


def _depthwise_shape(attrs, shapes) -> tuple[int, ...]:
    x, w = shapes[0], shapes[1]
    if len(x) != 4 or w[3] != x[3] * attrs.depth_multiplier:
        raise ShapeError(f"depthwise input {x} does not match weight {w} (1,kh,kw,C)")
    return window_shape(x, w[1], w[2], attrs, w[3])


# -- float references ----------------------------------------------------------------------------------------------
def _conv_float(node, args):
    x, w, b = args[0], args[1], args[2] if len(args) > 2 else None
    a = node.attrs
    win = windows(pad_hw(x, a.padding), w.shape[1], w.shape[2], a.stride, a.dilation)
    y = np.einsum("nhwijc,oijc->nhwo", win, w, optimize=True)
    return apply_activation(y + (b if b is not None else 0.0), a.activation)


def _depthwise_float(node, args):
    x, w, b = args[0], args[1], args[2] if len(args) > 2 else None
    a = node.attrs
    if a.depth_multiplier != 1:
        x = np.repeat(x, a.depth_multiplier, axis=3)
    win = windows(pad_hw(x, a.padding), w.shape[1], w.shape[2], a.stride, a.dilation)
    y = np.einsum("nhwijc,ijc->nhwc", win, w[0], optimize=True)
    return apply_activation(y + (b if b is not None else 0.0), a.activation)


# -- int8 references -----------------------------------------------------------------------------------------------
def conv2d_int8(x, w, bias, p: RequantParams, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """int8 CONV_2D. x (N,H,W,Cin) int8, w (Cout,kh,kw,Cin) int8, bias (Cout,) int32 or None -> (N,Ho,Wo,Cout)."""
    cout, kh, kw, _ = w.shape
    ho, wo = out_hw(x, kh, kw, stride, padding, dilation)
    xp = pad_hw(x.astype(np.float64) - p.input_zp, padding)  # zero-point padding == skipping padded taps
    wf = w.astype(np.float64)
    acc = np.zeros((x.shape[0], ho, wo, cout))
    for i, j, view in taps(xp, kh, kw, stride, dilation, (ho, wo)):
        acc += view @ wf[:, i, j, :].T  # (N,Ho,Wo,Cin) @ (Cin,Cout)
    return finish(acc, bias, p)


def depthwise_conv2d_int8(x, w, bias, p: RequantParams, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                          depth_multiplier: int = 1) -> np.ndarray:
    """int8 DEPTHWISE_CONV_2D. x (N,H,W,C), w (1,kh,kw,C·m) -> (N,Ho,Wo,C·m); output channel c·m+k reads c."""
    _, kh, kw, _ = w.shape
    ho, wo = out_hw(x, kh, kw, stride, padding, dilation)
    xs = x.astype(np.float64) - p.input_zp
    if depth_multiplier != 1:
        xs = np.repeat(xs, depth_multiplier, axis=3)
    xp = pad_hw(xs, padding)
    wf = w[0].astype(np.float64)
    acc = np.zeros((x.shape[0], ho, wo, w.shape[3]))
    for i, j, view in taps(xp, kh, kw, stride, dilation, (ho, wo)):
        acc += view * wf[i, j]
    return finish(acc, bias, p)


def _int8(graph, node, args) -> np.ndarray:
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    p, a = requant_params(graph, node), node.attrs
    if node.op is Op.CONV_2D:
        return conv2d_int8(x, w, bias, p, stride=a.stride, padding=a.padding, dilation=a.dilation)
    return depthwise_conv2d_int8(x, w, bias, p, stride=a.stride, padding=a.padding, dilation=a.dilation,
                                 depth_multiplier=a.depth_multiplier)


# -- C emitters ----------------------------------------------------------------------------------------------------
def emit_sparse_conv(graph, node, bufs: Buffers, plan) -> LayerCode:
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


def emit_conv(graph, node, bufs: Buffers, plan) -> LayerCode:
    if node.attrs.weight_format != "dense":
        return emit_sparse_conv(graph, node, bufs, plan)
    code = LayerCode(families={"conv"})
    p = requant_params(graph, node)
    w_shape = graph.tensors[node.inputs[1]].shape
    params = window_params(graph, node, bufs, (w_shape[1], w_shape[2]), (p.input_zp, p.output_zp),
                           (p.act_min, p.act_max))
    w, b, m, s = weight_arrays(graph, node, code)
    fn = conv_kernel(node, tuple(w_shape[1:3]))
    scratch, params["scratch_bytes"] = conv_scratch(graph, node, plan.scratch.get(node.name), plan.options.kernels)
    params["in_consumed"] = int(node.name in plan.consumed)
    code.body += [c_struct("kb_conv_params", params),
                  f"{fn}(&p, {bufs.ptr(node.inputs[0])}, {w}, {b}, {m}, {s}, {bufs.ptr(node.outputs[0])}, "
                  f"{scratch});"]
    return code


def conv_scratch(graph, node, placement: tuple[int, int] | None, kernels: str = "dsp") -> tuple[str, int]:
    """A conv call's scratch argument and its `scratch_bytes`: the planned (arena offset, bytes) buffer when that holds
    what the kernel set's conv reads, word-aligned (LDRD / LDM): the DSP kernels' two int16 columns (KB_CONV_SCRATCH),
    the Helium ones' columns and folded biases (`mve_conv_scratch_bytes`); else (NULL, 0) (the kernels then
    convolve directly; the portable ones never use it). Per layer and per patch alike."""
    offset, size = placement or (0, 0)
    need = mve_conv_scratch_bytes(graph, node) if kernels == "mve" else conv_columns_bytes(graph, node)
    if size and size >= need and offset % 4 == 0:
        return f"KB_ARENA + {offset}", size
    return "NULL", 0


def emit_depthwise(graph, node, bufs: Buffers, plan) -> LayerCode:
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
        scratch_off, size = plan.scratch[node.name]
        params["scratch_bytes"] = size if scratch_off % 4 == 0 else 0  # DSP: the channel-group ring needs LDRD
        code.body += [c_struct("kb_conv_params", params), f"{fn}({args}, KB_ARENA + {scratch_off});"]
    elif depthwise_kernel(node, tuple(k), False) == "kb_depthwise_3x3":  # its ring where the plan granted one
        offset, size = plan.scratch.get(node.name, (0, 0))
        scratch = f"KB_ARENA + {offset}" if size and offset % 4 == 0 else "NULL"
        params["scratch_bytes"] = size if scratch != "NULL" else 0
        code.body += [c_struct("kb_conv_params", params), f"kb_depthwise_3x3({args}, {scratch});"]
    else:
        code.body += [c_struct("kb_conv_params", params), f"kb_depthwise({args});"]
    return code


def _tile_spec(g, k: int, code: LayerCode) -> WindowSpec:
    """The kernel call of conv node k on a patch stage's tiles; emits its weights, multipliers and shifts."""
    graph, node = g.graph, g.nodes[k]
    rq = requant_params(graph, node)
    kernel = tuple(graph.tensors[node.inputs[1]].shape[1:3])
    weights = ", " + ", ".join(weight_arrays(graph, node, code))
    common = dict(kernel=kernel, zps=(rq.input_zp, rq.output_zp), act=(rq.act_min, rq.act_max), weights=weights)
    if node.op is Op.CONV_2D:
        code.families.add("conv")  # the tile scratch the stage planned for im2col columns, if any (else NULL)
        scratch, size = conv_scratch(graph, node, g.stage.tile_scratch.get(node.name), g.options.kernels)
        return WindowSpec(conv_kernel(node, kernel), scratch=f", {scratch}", scratch_bytes=size, **common)
    code.families.add("depthwise")
    if node.attrs.depth_multiplier != 1:
        raise UnsupportedOpError(f"node '{node.name}': depthwise multiplier {node.attrs.depth_multiplier} has no C "
                                 "kernel (only 1)")
    if not g.in_place(k):  # a 3x3 one calls kb_depthwise_3x3 without a ring (a tile has no scratch of its own)
        fn = depthwise_kernel(node, kernel, False)
        return WindowSpec(fn, scratch=", NULL" if fn == "kb_depthwise_3x3" else "", **common)
    if node.name not in g.stage.tile_scratch:
        raise KilobyteError(f"patch stage: in-place depthwise '{node.name}' has no tile scratch")
    fn = inplace_depthwise_kernel(node, kernel)
    return WindowSpec(fn, scratch=f", KB_ARENA + {g.stage.tile_scratch[node.name][0]}", **common)


def _emit_tile(g, k: int, code: LayerCode) -> str:
    return emit_window(g, k, code, _tile_spec(g, k, code))


# -- .tflite lowering ----------------------------------------------------------------------------------------------
def _lower(w, graph, node) -> None:
    """One CONV_2D / DEPTHWISE_CONV_2D; padding TFLite cannot express becomes a PAD before it (`window.py`). A
    missing bias is left out, not written as -1 (TFLite Micro's DEPTHWISE_CONV_2D dereferences an optional input of
    -1 and crashes), except that an int8 CONV_2D gets a zero one (`Lowering.zero_bias`)."""
    a = node.attrs
    params = tuple(node.inputs[1:3])
    kernel = graph.tensors[params[0]].shape[1:3]
    mode, x = lower_window_input(w, graph, node, kernel, a.dilation, "zero")
    opts = {"Padding": mode, "StrideW": a.stride[1], "StrideH": a.stride[0],
            "FusedActivationFunction": w.activation(node), "DilationWFactor": a.dilation[1],
            "DilationHFactor": a.dilation[0]}
    if node.op is Op.DEPTHWISE_CONV_2D:
        opts = {**opts, "DepthMultiplier": a.depth_multiplier}
    elif len(params) == 1 and graph.tensors[params[0]].dtype == "int8" and w.quantised(node.inputs[0]):
        params = (*params, w.zero_bias(node))
    w.op(node.op.value, (x, *params), node.outputs, opts)


DEFS = (
    OpDef(Op.CONV_2D, ConvAttrs,
          KernelContract(Op.CONV_2D, "conv", "kb_conv_params", local=True, window=conv_window, columns=True,
                         constraints="any kernel, stride, dilation and explicit padding; fused ReLU/ReLU6; a 1x1 "
                         "conv feeding only a residual ADD runs fused with it; pruned weights stored FWCS (DTMM's "
                         "filterlets) or CSR (`weight_format`) run kb_conv_fwcs / kb_conv_csr of kb_sparse_conv.c, "
                         "per layer"),
          params=True, weight_axis=0, fusable=True, builtin="CONV_2D", shape=_conv_shape,
          float_ref=_conv_float, int8_ref=_int8, emit=emit_conv, emit_tile=_emit_tile,
          lower=_lower),
    OpDef(Op.DEPTHWISE_CONV_2D, DepthwiseAttrs,
          KernelContract(Op.DEPTHWISE_CONV_2D, "depthwise", "kb_conv_params", local=True, window=conv_window,
                         inplace=InPlaceRule("inplace_depthwise", "first", elementwise=False),
                         constraints="depth multiplier 1; any kernel, stride, dilation and explicit padding"),
          params=True, weight_axis=3, fusable=True, builtin="DEPTHWISE_CONV_2D", shape=_depthwise_shape,
          float_ref=_depthwise_float, int8_ref=_int8, emit=emit_depthwise,
          emit_tile=_emit_tile, lower=_lower),
)
