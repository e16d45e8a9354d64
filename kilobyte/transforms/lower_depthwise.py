"""Transforms stage: a DEPTHWISE_CONV_2D with depth multiplier M > 1 becomes an equivalent CONV_2D.

TFLite's depthwise conv with multiplier M computes output channel c*M + m from input channel c alone. A CONV_2D whose
weight (Cin*M, kh, kw, Cin) holds the depthwise taps at [c*M + m, :, :, c] and zeros elsewhere computes the same
integer sums (the zero taps add nothing), with the same per-output-channel bias and requantisation, so the result is
bit-exact in int8 and exact in float. With one input channel (micro_speech, person_detect's first layer) no MAC is
wasted; otherwise the conv does Cin times the MACs — correct, and rare in practice. The C runtime's depthwise
kernels then only ever see multiplier 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import ConvAttrs, Graph, Node, Op, QParams, Tensor


def lower_depthwise_multiplier(graph: Graph) -> Graph:
    """`graph` with every depthwise conv of multiplier > 1 replaced by the equivalent CONV_2D (same node name).

    >>> from kilobyte.ir import DepthwiseAttrs, GraphBuilder
    >>> b = GraphBuilder()
    >>> y = b.node(Op.DEPTHWISE_CONV_2D, [b.input((1, 4, 4, 1))], DepthwiseAttrs(depth_multiplier=3),
    ...            params={"weight": np.ones((1, 3, 3, 3), np.float32)})
    >>> g = lower_depthwise_multiplier(b.build([y]))
    >>> g.nodes[0].op.value, g.tensors[g.nodes[0].inputs[1]].shape
    ('CONV_2D', (3, 3, 3, 1))
    """
    tensors, nodes = dict(graph.tensors), []
    for n in graph.nodes:
        if n.op is Op.DEPTHWISE_CONV_2D and n.attrs.depth_multiplier > 1:
            n = _as_conv(graph, n, tensors)
        nodes.append(n)
    return graph.replace(tensors=tensors, nodes=tuple(nodes)).verify()


def _as_conv(graph: Graph, node: Node, tensors: dict[str, Tensor]) -> Node:
    w = graph.tensors[node.inputs[1]]
    cin = graph.tensors[node.inputs[0]].shape[3]
    _, kh, kw, cout = w.shape
    m = node.attrs.depth_multiplier
    conv_w = np.zeros((cout, kh, kw, cin), w.data.dtype)
    for o in range(cout):
        conv_w[o, :, :, o // m] = w.data[0, :, :, o]  # output channel c*M + m reads input channel c
    q = w.qparams
    qparams = None if q is None else QParams(q.scale, q.zero_point, 0 if q.axis is not None else None)
    tensors[w.name] = Tensor(w.name, conv_w.shape, w.dtype, conv_w, qparams)
    a = node.attrs
    attrs = ConvAttrs(a.stride, a.padding, a.dilation, a.activation)
    return dataclasses.replace(node, op=Op.CONV_2D, attrs=attrs)
