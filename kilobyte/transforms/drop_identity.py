"""Transforms stage: remove IDENTITY nodes (frontends emit them for `nn.Identity`, dropout and no-op views).

Readers of an identity's output read its input instead. If the identity produced a graph output, that output slot
now names the identity's input: `outputs[i]` keeps its position and its value.
"""

from __future__ import annotations

from ..ir import Graph, Op
from .edit import bypass, drop_unused_tensors


def drop_identity(graph: Graph) -> Graph:
    """Return `graph` without IDENTITY nodes.

    An identity that changes dtype or quantisation params (a requantisation in disguise) is kept.

    >>> from kilobyte.ir import GraphBuilder
    >>> b = GraphBuilder()
    >>> y = b.node(Op.RELU, [b.node(Op.IDENTITY, [b.input((1, 2, 2, 3))])])
    >>> print(drop_identity(b.build([y])))
    graph model(%input:float32[1x2x2x3])
      %relu_0:float32[1x2x2x3] = RELU(%input:float32[1x2x2x3])  # relu_0
      return relu_0
    """
    for name in [n.name for n in graph.nodes if n.op is Op.IDENTITY]:
        node = graph.node(name)
        src, dst = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if (src.dtype, src.qparams) != (dst.dtype, dst.qparams):
            continue
        graph = bypass(graph, node, src.name)
    return drop_unused_tensors(graph)
