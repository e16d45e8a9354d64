"""Op registry: AVG_POOL_2D and MAX_POOL_2D — TFLite's int8 pools (the average over in-image taps only, rounded as
TFLite rounds; the maximum with padded taps never winning), input and output sharing quantisation params, one
`kb_avg_pool` / `kb_max_pool` call (runtime/c/kb_pool.c). Spatially local: they may run inside a patch stage (their
tile emitter is in `codegen/patch_loop.py`)."""

from __future__ import annotations

import numpy as np

from .c_text import c_struct
from .contract import KernelContract, pool_window
from .layer_code import Buffers, LayerCode, window_params
from .node_params import activation_range_of, require_same_qparams
from .opdef import OpDef
from .tile_code import WindowSpec, emit_window
from .types import Op, PoolAttrs, apply_activation
from .window import lower_window_input, out_hw, pad_hw, taps, window_shape, windows


def avg_pool_int8(x, kernel, stride, padding, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 AVG_POOL_2D: mean of the in-image taps, rounded as TFLite does (`(sum ± count/2) / count`, truncating)."""
    kh, kw = kernel
    ho, wo = out_hw(x, kh, kw, stride, padding)
    xp = pad_hw(x.astype(np.int64), padding)
    ones = pad_hw(np.ones((1,) + x.shape[1:3] + (1,), np.int64), padding)
    total = np.zeros((x.shape[0], ho, wo, x.shape[3]), np.int64)
    count = np.zeros((1, ho, wo, 1), np.int64)
    for (_, _, view), (_, _, ones_view) in zip(taps(xp, kh, kw, stride, (1, 1), (ho, wo)),
                                               taps(ones, kh, kw, stride, (1, 1), (ho, wo))):
        total += view
        count += ones_view
    half = count // 2
    mean = np.where(total > 0, (total + half) // count, -((half - total) // count))  # C division truncates
    return np.clip(mean, act_min, act_max).astype(np.int8)


def max_pool_int8(x, kernel, stride, padding, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 MAX_POOL_2D: maximum over the in-image taps (padded taps never win), then the activation clamp."""
    kh, kw = kernel
    ho, wo = out_hw(x, kh, kw, stride, padding)
    xp = pad_hw(x.astype(np.int16), padding, value=-129)  # below every int8: padded taps are ignored
    best = np.full((x.shape[0], ho, wo, x.shape[3]), -129, np.int16)
    for _, _, view in taps(xp, kh, kw, stride, (1, 1), (ho, wo)):
        np.maximum(best, view, out=best)
    return np.clip(best, act_min, act_max).astype(np.int8)


def _shape(attrs, shapes) -> tuple[int, ...]:
    x = tuple(shapes[0])
    return window_shape(x, attrs.kernel[0], attrs.kernel[1], attrs, x[3])


def _float(node, args) -> np.ndarray:
    x, a = args[0], node.attrs
    kh, kw = a.kernel
    if node.op is Op.MAX_POOL_2D:
        win = windows(pad_hw(x, a.padding, -np.inf), kh, kw, a.stride)
        return apply_activation(win.max(axis=(3, 4)), a.activation)
    # Average over in-image taps only (TFLite and PyTorch count_include_pad=False agree on this).
    win = windows(pad_hw(x, a.padding), kh, kw, a.stride)
    ones = windows(pad_hw(np.ones_like(x[..., :1]), a.padding), kh, kw, a.stride)
    return apply_activation(win.sum(axis=(3, 4)) / ones.sum(axis=(3, 4)), a.activation)


def _int8(graph, node, args) -> np.ndarray:
    require_same_qparams(graph, node)
    a = node.attrs
    lo, hi = activation_range_of(graph, node)
    pool = avg_pool_int8 if node.op is Op.AVG_POOL_2D else max_pool_int8
    return pool(args[0], a.kernel, a.stride, a.padding, lo, hi)


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    zp = int(graph.tensors[node.inputs[0]].qparams.zero_point[0])
    act = activation_range_of(graph, node)
    params = window_params(graph, node, bufs, node.attrs.kernel, (zp, zp), act)
    fn = FUNCTION[node.op]
    return LayerCode(body=[c_struct("kb_conv_params", params),
                           f"{fn}(&p, {bufs.ptr(node.inputs[0])}, {bufs.ptr(node.outputs[0])});"],
                     families={"pool"})


def _lower(w, graph, node) -> None:
    a = node.attrs
    mode, x = lower_window_input(w, graph, node, a.kernel, (1, 1), "min" if node.op is Op.MAX_POOL_2D else "none")
    w.op(BUILTIN[node.op], (x,), node.outputs,
         {"Padding": mode, "StrideW": a.stride[1], "StrideH": a.stride[0], "FilterWidth": a.kernel[1],
          "FilterHeight": a.kernel[0], "FusedActivationFunction": w.activation(node)})


def _emit_tile(g, k: int, code: LayerCode) -> str:
    """The pooling of node k on a patch stage's tiles (`tile_code.emit_window`)."""
    graph, node = g.graph, g.nodes[k]
    code.families.add("pool")
    zp = int(graph.tensors[node.inputs[0]].qparams.zero_point[0])
    spec = WindowSpec(FUNCTION[node.op], tuple(node.attrs.kernel), (zp, zp), activation_range_of(graph, node))
    return emit_window(g, k, code, spec)


FUNCTION = {Op.AVG_POOL_2D: "kb_avg_pool", Op.MAX_POOL_2D: "kb_max_pool"}
BUILTIN = {Op.AVG_POOL_2D: "AVERAGE_POOL_2D", Op.MAX_POOL_2D: "MAX_POOL_2D"}
DEFS = tuple(
    OpDef(op, PoolAttrs,
          KernelContract(op, "pool", "kb_conv_params", local=True, window=pool_window,
                         constraints="input and output share quantisation params"),
          fusable=True, qparams="shared", builtin=BUILTIN[op], function=FUNCTION[op], shape=_shape, float_ref=_float,
          int8_ref=_int8, emit=_emit, emit_tile=_emit_tile, lower=_lower)
    for op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D))
