"""Analysis stage: activation liveness and the analytic per-layer memory — figure 1 of DESIGN.md's memory model.

The rule of the papers (MCUNet, MCUNetV2): while node i runs, memory holds its inputs, its outputs and every
activation produced earlier that a later node still needs (a residual branch held across its block). Weights live
in Flash and are excluded; the graph input is an activation (live until its last reader); graph outputs stay live
to the end. No in-place tricks and no reordering: that is the *planned* peak, computed by `schedule/`.

A tensor's lifetime is `(first, last)` in node indices, the shape of the arena planner's `(size, first_use,
last_use)` interface: produced by node `first` (0 for graph inputs), read last by node `last`.
"""

from __future__ import annotations

from ..ir import Graph
from .shapes import activation_bytes, activation_tensors


def tensor_lifetimes(graph: Graph) -> dict[str, tuple[int, int]]:
    """Activation tensor -> (first, last) node index, in execution order of the graph's nodes.

    >>> from kilobyte.ir import GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> x = b.input((1, 2, 2, 1))
    >>> y = b.node(Op.RELU, [x])
    >>> g = b.build([b.node(Op.ADD, [x, b.node(Op.RELU6, [y])])])
    >>> tensor_lifetimes(g)
    {'input': (0, 2), 'relu_0': (0, 1), 'relu6_0': (1, 2), 'add_0': (2, 2)}
    """
    last_index = len(graph.nodes) - 1
    life: dict[str, list[int]] = {t: [0, 0] for t in graph.inputs}
    for i, n in enumerate(graph.nodes):
        for t in n.inputs:
            if t in life:  # constants are not tracked
                life[t][1] = i
        for t in n.outputs:
            life[t] = [i, i]
    for t in graph.outputs:
        if t in life:
            life[t][1] = max(last_index, life[t][0])
    return {t: (life[t][0], life[t][1]) for t in activation_tensors(graph)}


def live_tensors(graph: Graph) -> list[list[str]]:
    """For each node, the activations in memory while it runs: inputs, outputs and tensors held for later."""
    life = tensor_lifetimes(graph)
    return [[t for t, (first, last) in life.items() if first <= i <= last] for i in range(len(graph.nodes))]


def live_bytes(graph: Graph) -> list[int]:
    """For each node, the bytes (int8) of `live_tensors` — the analytic per-layer memory."""
    return [sum(activation_bytes(graph, t) for t in live) for live in live_tensors(graph)]


def analytic_peak(graph: Graph) -> int:
    """Max over nodes of `live_bytes`: the analytic per-layer peak (0 for a graph without nodes)."""
    return max(live_bytes(graph), default=0)
