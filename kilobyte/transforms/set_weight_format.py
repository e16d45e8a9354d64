"""Transforms stage: choose how each CONV_2D's weights are stored in the generated C — dense, FWCS or CSR.

A pure pass: it only sets `ConvAttrs.weight_format` (`ops/sparse.py`); the weight tensor stays dense, so the
reference interpreter, the `.tflite` export and TFLite Micro see the same numbers. Only CONV_2D (the standard,
groups = 1 convolution) takes a sparse format; a layer whose weights have no zeros, or fewer than `min_sparsity`,
stays dense.
"""

from __future__ import annotations

import dataclasses

from ..errors import KilobyteError
from ..ir import Graph, Op
from ..ops.sparse import FORMATS, encode, sparsity
from .edit import replace_node


def set_weight_format(graph: Graph, fmt: str | dict[str, str], min_sparsity: float | None = 0.0) -> Graph:
    """`graph` with each CONV_2D's `weight_format` set: `fmt` for all of them, or per node name (a dict; nodes it
    does not name are left as they are). A sparse format is set only where the weights have zeros and at least
    `min_sparsity` of them; otherwise the layer is set dense. `min_sparsity=None` sets the format even on weights
    without a zero (so that a firmware whose convolutions are all sparse links no dense convolution code).

    >>> import numpy as np
    >>> from kilobyte.ir import ConvAttrs, GraphBuilder
    >>> b = GraphBuilder()
    >>> w = np.zeros((4, 3, 3, 2), np.float32); w[0, 1, 1] = 1.0
    >>> y = b.node(Op.CONV_2D, [b.input((1, 5, 5, 2))], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": w})
    >>> set_weight_format(b.build([y]), "fwcs").nodes[0].attrs.weight_format
    'fwcs'
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 5, 5, 2))], ConvAttrs(), params={"weight": np.ones((4, 3, 3, 2))})
    >>> [set_weight_format(b.build([y]), "fwcs", m).nodes[0].attrs.weight_format for m in (0.0, None)]
    ['dense', 'fwcs']
    """
    wanted = fmt if isinstance(fmt, dict) else {n.name: fmt for n in graph.nodes if n.op is Op.CONV_2D}
    for name, f in wanted.items():
        node = graph.node(name) if name in {n.name for n in graph.nodes} else None
        if node is None:
            raise KilobyteError(f"set_weight_format: graph '{graph.name}' has no node '{name}'")
        if f not in FORMATS:
            raise KilobyteError(f"set_weight_format: node '{name}': unknown weight format {f!r}; choose one of "
                                f"{', '.join(FORMATS)}")
        if f != "dense" and node.op is not Op.CONV_2D:
            raise KilobyteError(f"set_weight_format: node '{name}' is {node.op.value}: only CONV_2D takes a sparse "
                                "weight format")
        if node.op is not Op.CONV_2D:
            continue
        w = graph.tensors[node.inputs[1]]
        if w.data is None:
            raise KilobyteError(f"set_weight_format: node '{name}': weights '{w.name}' are not a constant")
        s = sparsity(w.data)
        chosen = f if min_sparsity is None or (s > 0 and s >= min_sparsity) else "dense"
        if chosen != "dense" and w.dtype == "int8":
            encode(w.data, chosen, f"node '{name}'")  # refuses what 16-bit indices cannot hold, here and now
        graph = replace_node(graph, dataclasses.replace(node, attrs=dataclasses.replace(node.attrs,
                                                                                          weight_format=chosen)))
    return graph
