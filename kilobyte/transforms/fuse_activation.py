"""Transforms stage: fuse a RELU / RELU6 node into its producer's `activation` attribute.

TFLite kernels (and ours) clamp the output of the ops whose `OpDef` says `fusable` (conv, depthwise, fully connected,
transposed conv, add, sub, mul, pooling, concat) for free, so a separate activation node only costs a pass over
memory and one more buffer. Fusion happens when the activation is the producer's sole reader (another reader must
still see the unclamped values) and the producer has no fused activation yet.
"""

from __future__ import annotations

import dataclasses

from ..ir import Activation, Graph, Node, Op
from ..ops import opdef
from .edit import bypass, drop_unused_tensors, plain_producer, replace_node

ACTIVATION = {Op.RELU: Activation.RELU, Op.RELU6: Activation.RELU6}


def fuse_activation(graph: Graph) -> Graph:
    """Return `graph` with every fusable RELU / RELU6 folded into its producer.

    >>> from kilobyte.ir import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.input((1, 2, 2, 3))
    >>> y = b.node(Op.RELU6, [b.node(Op.ADD, [x, x])])
    >>> print(fuse_activation(b.build([y])))
    graph model(%input:float32[1x2x2x3])
      %add_0:float32[1x2x2x3] = ADD(%input:float32[1x2x2x3], %input:float32[1x2x2x3]) {activation=RELU6}  # add_0
      return add_0
    """
    for name in [n.name for n in graph.nodes if n.op in ACTIVATION]:
        act = graph.node(name)
        producer = _fusable_producer(graph, act)
        if producer is None:
            continue
        attrs = dataclasses.replace(producer.attrs, activation=ACTIVATION[act.op])
        graph = replace_node(graph, dataclasses.replace(producer, attrs=attrs))
        graph = bypass(graph, act, producer.outputs[0])
    return drop_unused_tensors(graph)


def can_fuse(graph: Graph, act: Node) -> bool:
    """Whether `fuse_activation` would fold the RELU / RELU6 node `act` into its producer."""
    return _fusable_producer(graph, act) is not None


def _fusable_producer(graph: Graph, act: Node) -> Node | None:
    p = plain_producer(graph, act, lambda p: opdef(p.op).fusable)
    if p is None:
        return None
    x = act.inputs[0]
    src, dst = graph.tensors[x], graph.tensors[act.outputs[0]]
    if (src.dtype, src.qparams) != (dst.dtype, dst.qparams):
        return None  # int8: the activation also requantises; fusing would drop that
    return p
