"""Random small activation DAGs for the schedule tests, built with `GraphBuilder` (4x4 maps, 1-8 channels)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kilobyte.ir import ConcatAttrs, ConvAttrs, DepthwiseAttrs, GraphBuilder, Op, PoolAttrs, ReshapeAttrs

OPS = ("conv1", "conv3", "dw", "add", "concat", "reshape", "relu", "pool")


def _weight(cout, k, cin):
    return np.zeros((cout, k, k, cin), np.float32)


def _add_node(b: GraphBuilder, kind: str, picks: list[str], channels: int) -> str:
    x = picks[0]
    c = b.shape(x)[3]
    if kind == "conv1":
        return b.node(Op.CONV_2D, [x], ConvAttrs(), params={"weight": _weight(channels, 1, c)})
    if kind == "conv3":
        return b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": _weight(channels, 3, c)})
    if kind == "dw":
        return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs(padding=(1, 1, 1, 1)),
                      params={"weight": np.zeros((1, 3, 3, c), np.float32)})
    if kind == "add":
        same = [t for t in picks[1:] if b.shape(t) == b.shape(x)]
        return b.node(Op.ADD, [x, same[0] if same else x])
    if kind == "concat":
        ins = [t for t in dict.fromkeys(picks) if b.shape(t)[1:3] == b.shape(x)[1:3]]
        return b.node(Op.CONCAT, ins, ConcatAttrs(axis=3))
    if kind == "reshape":
        n, h, w, c = b.shape(x)
        return b.node(Op.RESHAPE, [x], ReshapeAttrs((n, w, h, c)))
    if kind == "pool":
        return b.node(Op.MAX_POOL_2D, [x], PoolAttrs((3, 3), (1, 1), (1, 1, 1, 1)))
    return b.node(Op.RELU, [x])


@st.composite
def dags(draw, max_nodes: int = 9, min_nodes: int = 1, ops=OPS, extra_output: bool = True):
    """A random DAG of activations; outputs are the sinks (plus, sometimes, one inner tensor)."""
    b = GraphBuilder("dag")
    tensors = [b.input((1, 4, 4, draw(st.integers(1, 8))))]
    for _ in range(draw(st.integers(min_nodes, max_nodes))):
        kind = draw(st.sampled_from(ops))
        picks = [draw(st.sampled_from(tensors)) for _ in range(3)]
        tensors.append(_add_node(b, kind, picks, draw(st.integers(1, 8))))
    consumed = {t for n in b.nodes for t in n.inputs}
    outs = [t for t in tensors[1:] if t not in consumed]
    if extra_output and draw(st.booleans()):
        outs.append(draw(st.sampled_from(tensors[1:])))
    return b.build(list(dict.fromkeys(outs)))


def topological_orders(graph):
    """Every topological order of the graph's nodes (brute force; small graphs only)."""
    names = [n.name for n in graph.nodes]
    preds = {n.name: {graph.producer(t).name for t in n.inputs if graph.producer(t) is not None} for n in graph.nodes}

    def extend(prefix: list[str], done: set[str]):
        if len(prefix) == len(names):
            yield tuple(prefix)
            return
        for v in names:
            if v not in done and preds[v] <= done:
                done.add(v)
                prefix.append(v)
                yield from extend(prefix, done)
                prefix.pop()
                done.remove(v)

    yield from extend([], set())
