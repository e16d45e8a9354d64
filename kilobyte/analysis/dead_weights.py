"""Analysis stage: dead weights — convolution taps that only ever multiply padding.

A 3x3 convolution with padding 1 on a 1x1 map reads its one real pixel through the centre tap only; the other 8 taps
see padding at every output position, so their weights can be zeroed with no change to any output. A network that
runs convolutions on maps that small has that share of its weights "prunable" for free, which says nothing about
how well a pruning method finds redundancy. `kilobyte prune` reports this fraction of the dense model next to the
sparsity it reaches, so a high sparsity is read against it.

A tap (ky, kx) is live if some output position reads a real input pixel through it. The axes are independent (an
output position is a row and a column), so a tap is live exactly when its row offset is live along H and its
column offset along W. Counted over the standard convolutions (CONV_2D), the weights `kilobyte prune` prunes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph, Node, Op


def live_taps(size: int, out: int, k: int, stride: int, pad_before: int, dilation: int = 1) -> list[bool]:
    """Per kernel offset along one axis: does any of the `out` output positions read a real input through it?

    Output o reads input `o * stride - pad_before + i * dilation` through offset i; [0, size) is real.

    >>> live_taps(1, 1, 3, 1, 1)   # 3-wide kernel, padding 1, on a 1-pixel map: only the centre
    [False, True, False]
    >>> live_taps(2, 2, 3, 1, 1)   # on 2 pixels every offset reads a real one somewhere
    [True, True, True]
    """
    return [any(0 <= o * stride - pad_before + i * dilation < size for o in range(out)) for i in range(k)]


@dataclass(frozen=True)
class DeadWeights:
    """Weights of the standard convolutions that only ever multiply padding: per node, and in total."""

    per_node: dict[str, tuple[int, int]]  # node name -> (dead weights, weights)

    @property
    def dead(self) -> int:
        return sum(d for d, _ in self.per_node.values())

    @property
    def total(self) -> int:
        return sum(t for _, t in self.per_node.values())

    @property
    def fraction(self) -> float:
        return self.dead / self.total if self.total else 0.0


def node_dead_weights(graph: Graph, node: Node) -> tuple[int, int]:
    """(dead, total) weights of one CONV_2D: input (1,H,W,Cin), weight (Cout,kh,kw,Cin), output (1,Ho,Wo,Cout)."""
    _, h, w, _ = graph.tensors[node.inputs[0]].shape
    cout, kh, kw, cin = graph.tensors[node.inputs[1]].shape
    _, ho, wo, _ = graph.tensors[node.outputs[0]].shape
    top, _, left, _ = node.attrs.padding
    rows = live_taps(h, ho, kh, node.attrs.stride[0], top, node.attrs.dilation[0])
    cols = live_taps(w, wo, kw, node.attrs.stride[1], left, node.attrs.dilation[1])
    live = sum(rows) * sum(cols)  # live taps: live row offset and live column offset
    return (kh * kw - live) * cin * cout, kh * kw * cin * cout


def dead_weights(graph: Graph) -> DeadWeights:
    """Dead weights of every CONV_2D in `graph` (float or int8: only shapes and attributes are read)."""
    return DeadWeights({n.name: node_dead_weights(graph, n) for n in graph.nodes if n.op is Op.CONV_2D})
