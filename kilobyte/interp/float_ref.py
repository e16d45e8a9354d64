"""Reference stage: a numpy float interpreter for any IR graph — the oracle that proves frontends and passes right.

Written for clarity, not speed: every op is a few lines of numpy over NHWC arrays, with the same explicit
`(top, bottom, left, right)` padding and weight layouts the IR defines.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Op
from ..ops import opdef
from ..ops.types import apply_activation as _act
from .movement import move_values


def run_float(graph: Graph, inputs, *, keep_all: bool = False) -> dict[str, np.ndarray]:
    """Execute `graph` in float64 and return its outputs (or every tensor with `keep_all`) as float32 arrays.

    `inputs` is one array (single-input graphs) or a dict name -> array, in the graph's NHWC shapes.
    """
    if not isinstance(inputs, dict):
        inputs = {graph.inputs[0]: inputs}
    env: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        x = np.asarray(inputs[name], np.float64)
        if x.shape != graph.tensors[name].shape:
            raise ValueError(f"input '{name}': shape {x.shape}, graph expects {graph.tensors[name].shape}")
        env[name] = x
    for t in graph.tensors.values():
        if t.is_const:
            env[t.name] = t.data.astype(np.float64)
    for node in graph.nodes:
        env[node.outputs[0]] = _eval(node, [env[t] for t in node.inputs])
    names = [t for t in env if not graph.tensors[t].is_const] if keep_all else list(graph.outputs)
    return {k: env[k].astype(np.float32) for k in names}


def _pad_nhwc(x: np.ndarray, pad, value: float = 0.0) -> np.ndarray:
    t, b, left, r = pad
    return np.pad(x, ((0, 0), (t, b), (left, r), (0, 0)), constant_values=value)


def _windows(x: np.ndarray, kh: int, kw: int, stride, dilation=(1, 1)) -> np.ndarray:
    """(1,H,W,C) padded input -> (1,Ho,Wo,kh,kw,C) view of every window."""
    sh, sw = stride
    dh, dw = dilation
    ho = (x.shape[1] - dh * (kh - 1) - 1) // sh + 1
    wo = (x.shape[2] - dw * (kw - 1) - 1) // sw + 1
    v = np.lib.stride_tricks.sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(1, 2))
    v = v[:, ::sh, ::sw][:, :ho, :wo, :, ::dh, ::dw]  # (1,Ho,Wo,C,kh,kw)
    return np.moveaxis(v, 3, 5)


def _conv(node: Node, x, w, b=None):
    a = node.attrs
    win = _windows(_pad_nhwc(x, a.padding), w.shape[1], w.shape[2], a.stride, a.dilation)
    y = np.einsum("nhwijc,oijc->nhwo", win, w, optimize=True)
    return _act(y + (b if b is not None else 0.0), a.activation)


def _depthwise(node: Node, x, w, b=None):
    a = node.attrs
    if a.depth_multiplier != 1:
        x = np.repeat(x, a.depth_multiplier, axis=3)
    win = _windows(_pad_nhwc(x, a.padding), w.shape[1], w.shape[2], a.stride, a.dilation)
    y = np.einsum("nhwijc,ijc->nhwc", win, w[0], optimize=True)
    return _act(y + (b if b is not None else 0.0), a.activation)


def _pool(node: Node, x):
    a = node.attrs
    kh, kw = a.kernel
    if node.op is Op.MAX_POOL_2D:
        win = _windows(_pad_nhwc(x, a.padding, -np.inf), kh, kw, a.stride)
        return _act(win.max(axis=(3, 4)), a.activation)
    # Average over in-image taps only (TFLite and PyTorch count_include_pad=False agree on this).
    win = _windows(_pad_nhwc(x, a.padding), kh, kw, a.stride)
    ones = _windows(_pad_nhwc(np.ones_like(x[..., :1]), a.padding), kh, kw, a.stride)
    return _act(win.sum(axis=(3, 4)) / ones.sum(axis=(3, 4)), a.activation)


def _softmax(x, beta):
    z = beta * (x - x.max(axis=-1, keepdims=True))
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _log_softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _eval(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """The op's own float reference (`OpDef.float_ref`), or for the ops still pending in the registry the rules
    below."""
    op, a = node.op, node.attrs
    ref = opdef(op).float_ref
    if ref is not None:
        return ref(node, args)
    if op is Op.CONV_2D:
        return _conv(node, *args)
    if op is Op.DEPTHWISE_CONV_2D:
        return _depthwise(node, *args)
    if op is Op.FULLY_CONNECTED:
        y = args[0] @ args[1].T + (args[2] if len(args) > 2 else 0.0)
        return _act(y, a.activation)
    if op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        return _pool(node, args[0])
    if op is Op.ADD:
        return _act(args[0] + args[1], a.activation)
    if op is Op.SUB:
        return _act(args[0] - args[1], a.activation)
    if op is Op.MUL:
        return _act(args[0] * args[1], a.activation)
    if op in (Op.MAXIMUM, Op.MINIMUM):
        return (np.maximum if op is Op.MAXIMUM else np.minimum)(args[0], args[1])
    if op is Op.MEAN:
        return args[0].mean(axis=tuple(a.axes), keepdims=a.keepdims)
    if op is Op.PAD:
        return np.pad(args[0], a.pads)
    if op is Op.RESHAPE:
        return args[0].reshape(a.shape)
    if op is Op.CONCAT:
        return _act(np.concatenate(args, axis=a.axis), a.activation)
    if op in (Op.TRANSPOSE, Op.STRIDED_SLICE, Op.TILE, Op.REDUCE_MAX):
        return move_values(node, args[0])
    if op is Op.SOFTMAX:
        return _softmax(args[0], a.beta)
    if op is Op.LOG_SOFTMAX:
        return _log_softmax(args[0])
    if op is Op.BATCH_NORM:
        x, gamma, beta, mean, var = args
        return (x - mean) / np.sqrt(var + a.eps) * gamma + beta
    if op is Op.PRELU:
        return np.where(args[0] >= 0, args[0], args[0] * args[1])
    if op in (Op.IDENTITY, Op.QUANTIZE, Op.DEQUANTIZE):
        return args[0]
    raise NotImplementedError(f"node '{node.name}': no float kernel for {op.value}")
