"""Reference stage: a numpy float interpreter for any IR graph — the oracle that proves frontends and passes right.

Written for clarity, not speed: every op is a few lines of numpy over NHWC arrays, with the same explicit
`(top, bottom, left, right)` padding and weight layouts the IR defines.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ops import opdef


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


def _eval(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """The op's own float reference (`OpDef.float_ref`)."""
    op = node.op
    ref = opdef(op).float_ref
    if ref is not None:
        return ref(node, args)
    raise NotImplementedError(f"node '{node.name}': no float kernel for {op.value}")
