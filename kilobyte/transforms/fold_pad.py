"""Transforms stage: fold a zero PAD on H/W into the explicit padding of the convolutions that read it.

PyTorch's `F.pad` and TFLite's explicit PAD before a VALID conv both show up as a PAD node; the conv kernels pad
on the fly with the same value (zero, or the input zero point in int8), so the padded copy of the activation is a
wasted buffer. The PAD is folded when every reader of its output is a CONV_2D / DEPTHWISE_CONV_2D reading it as
the activation, and the pad touches only H and W. Not into average pooling (padding would change its divisor,
which counts in-image taps only) nor max pooling (which pads with -inf, not zero).
"""

from __future__ import annotations

import dataclasses

from ..ir import Graph, Node, Op
from .edit import drop_unused_tensors, rename_input

CONVS = frozenset({Op.CONV_2D, Op.DEPTHWISE_CONV_2D})


def fold_pad(graph: Graph) -> Graph:
    """Return `graph` with every foldable PAD summed into its readers' `(top, bottom, left, right)` padding.

    >>> import numpy as np
    >>> from kilobyte.ir import GraphBuilder, PadAttrs
    >>> b = GraphBuilder()
    >>> x = b.node(Op.PAD, [b.input((1, 4, 4, 3))], PadAttrs(((0, 0), (1, 1), (0, 2), (0, 0))))
    >>> y = b.node(Op.DEPTHWISE_CONV_2D, [x], params={"weight": np.ones((1, 3, 3, 3), np.float32)})
    >>> print(fold_pad(b.build([y])))
    graph model(%input:float32[1x4x4x3])
      %depthwise_conv_2d_0:float32[1x4x4x3] = DEPTHWISE_CONV_2D(%input:float32[1x4x4x3], \
%depthwise_conv_2d_0.weight) {padding=(1, 1, 0, 2)}  # depthwise_conv_2d_0
      return depthwise_conv_2d_0
    """
    for name in [n.name for n in graph.nodes if n.op is Op.PAD]:
        pad = graph.node(name)
        if _foldable(graph, pad):
            graph = _fold(graph, pad)
    return drop_unused_tensors(graph)


def _foldable(graph: Graph, pad: Node) -> bool:
    pads = pad.attrs.pads
    if len(pads) != 4 or pads[0] != (0, 0) or pads[3] != (0, 0) or min(pads[1] + pads[2]) < 0:
        return False
    x, y = pad.inputs[0], pad.outputs[0]
    src, dst = graph.tensors[x], graph.tensors[y]
    if y in graph.outputs or (src.dtype, src.qparams) != (dst.dtype, dst.qparams):
        return False
    readers = graph.consumers(y)
    return bool(readers) and all(r.op in CONVS and r.inputs.index(y) == 0 for r in readers)


def _fold(graph: Graph, pad: Node) -> Graph:
    (t, b), (left, r) = pad.attrs.pads[1], pad.attrs.pads[2]
    x, y = pad.inputs[0], pad.outputs[0]
    nodes = []
    for n in graph.nodes:
        if n.name == pad.name:
            continue
        if y in n.inputs:
            pt, pb, pl, pr = n.attrs.padding
            attrs = dataclasses.replace(n.attrs, padding=(pt + t, pb + b, pl + left, pr + r))
            n = dataclasses.replace(rename_input(n, y, x), attrs=attrs)
        nodes.append(n)
    return graph.replace(nodes=tuple(nodes))
