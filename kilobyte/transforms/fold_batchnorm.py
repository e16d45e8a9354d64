"""Transforms stage: fold BATCH_NORM into the preceding CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED.

At inference a batch norm is a per-channel affine map, `y = x * scale + shift` with `scale = gamma / sqrt(var + eps)`
and `shift = beta - mean * scale`, so it folds exactly into the weights and bias of the linear op producing `x`:
`w' = w * scale` (per output channel) and `b' = b * scale + shift` (a bias is created when there was none).

A BN is folded only when it is the sole reader of that output (another reader would see the changed values), the
producer has no fused activation (BN after ReLU is not affine in the conv output) and float weights of its own.
Any other BN stays in the graph: the float interpreter runs it, later stages reject it with a clear error.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node, Op
from .edit import (
    bypass,
    const_tensor,
    drop_unused_tensors,
    fresh_tensor_name,
    plain_producer,
    replace_node,
    with_tensors,
)

FOLDABLE = frozenset({Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED})


def fold_batchnorm(graph: Graph) -> Graph:
    """Return `graph` with every foldable BATCH_NORM folded into its producer (see the module docstring).

    >>> from kilobyte.ir import GraphBuilder
    >>> b = GraphBuilder()
    >>> c = np.ones(4, np.float32)
    >>> y = b.node(Op.FULLY_CONNECTED, [b.input((1, 3))], params={"weight": np.ones((4, 3), np.float32)})
    >>> y = b.node(Op.BATCH_NORM, [y], params={"gamma": c, "beta": c, "mean": c, "var": c})
    >>> print(fold_batchnorm(b.build([y])))
    graph model(%input:float32[1x3])
      %fully_connected_0:float32[1x4] = FULLY_CONNECTED(%input:float32[1x3], %fully_connected_0.weight, \
%fully_connected_0.bias)  # fully_connected_0
      return fully_connected_0
    """
    for name in [n.name for n in graph.nodes if n.op is Op.BATCH_NORM]:
        bn = graph.node(name)  # re-read: folding an earlier BN may have rewired this one's input
        producer = _foldable_producer(graph, bn)
        if producer is not None:
            graph = _fold(graph, producer, bn)
    return drop_unused_tensors(graph)


def can_fold(graph: Graph, bn: Node) -> bool:
    """Whether `fold_batchnorm` would fold the BATCH_NORM node `bn` into its producer."""
    return _foldable_producer(graph, bn) is not None


def _foldable_producer(graph: Graph, bn: Node) -> Node | None:
    p = plain_producer(graph, bn, lambda p: p.op in FOLDABLE)
    if p is None:
        return None
    x = bn.inputs[0]
    channels = graph.tensors[x].shape[-1]
    if any(graph.tensors[t].shape != (channels,) for t in bn.inputs[1:]):
        return None  # not a per-channel BN on this tensor's last (channel) axis
    params = [graph.tensors[t] for t in p.inputs[1:]]
    if any(t.dtype != "float32" or t.qparams is not None for t in params):
        return None  # already quantised
    if any(len(graph.consumers(t.name)) > 1 for t in params):
        return None  # weights shared with another node: scaling them would change that node too
    return p


def _fold(graph: Graph, p: Node, bn: Node) -> Graph:
    gamma, beta, mean, var = (graph.tensors[t].data.astype(np.float64) for t in bn.inputs[1:])
    scale = gamma / np.sqrt(var + bn.attrs.eps)  # (C,)
    shift = beta - mean * scale  # (C,)
    w_name = p.inputs[1]
    w = graph.tensors[w_name].data.astype(np.float64)
    if p.op is Op.CONV_2D:
        w = w * scale[:, None, None, None]  # OHWI: one filter per output channel
    elif p.op is Op.DEPTHWISE_CONV_2D:
        w = w * scale  # (1, kh, kw, C): the last axis is the output channel
    else:
        w = w * scale[:, None]  # (out, in)
    if len(p.inputs) > 2:
        b_name = p.inputs[2]
        bias = graph.tensors[b_name].data.astype(np.float64) * scale + shift
    else:
        b_name = fresh_tensor_name(graph, f"{p.name}.bias")
        bias = shift
    graph = with_tensors(graph, const_tensor(w_name, w), const_tensor(b_name, bias))
    graph = replace_node(graph, dataclasses.replace(p, inputs=(p.inputs[0], w_name, b_name)))
    return bypass(graph, bn, p.outputs[0])
