"""Reference stage: a numpy float interpreter for any IR graph — the oracle that proves frontends and passes right.

Written for clarity, not speed: every op is a few lines of numpy over NHWC arrays, with the same explicit
`(top, bottom, left, right)` padding and weight layouts the IR defines.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Op
from ..ops import opdef
from ..ops.types import apply_activation as _act
from ..ops.window import pad_hw, windows


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


def _conv(node: Node, x, w, b=None):
    a = node.attrs
    win = windows(pad_hw(x, a.padding), w.shape[1], w.shape[2], a.stride, a.dilation)
    y = np.einsum("nhwijc,oijc->nhwo", win, w, optimize=True)
    return _act(y + (b if b is not None else 0.0), a.activation)


def _depthwise(node: Node, x, w, b=None):
    a = node.attrs
    if a.depth_multiplier != 1:
        x = np.repeat(x, a.depth_multiplier, axis=3)
    win = windows(pad_hw(x, a.padding), w.shape[1], w.shape[2], a.stride, a.dilation)
    y = np.einsum("nhwijc,ijc->nhwc", win, w[0], optimize=True)
    return _act(y + (b if b is not None else 0.0), a.activation)


def _eval(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """The op's own float reference (`OpDef.float_ref`), or for the ops still pending in the registry the rules
    below."""
    op = node.op
    ref = opdef(op).float_ref
    if ref is not None:
        return ref(node, args)
    if op is Op.CONV_2D:
        return _conv(node, *args)
    if op is Op.DEPTHWISE_CONV_2D:
        return _depthwise(node, *args)
    raise NotImplementedError(f"node '{node.name}': no float kernel for {op.value}")
