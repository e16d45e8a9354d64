"""Transforms stage: lower a BATCH_NORM that could not be folded into MUL and SUB by per-channel constants.

`fold_batchnorm` folds a batch norm (and the constant scale / shift the frontends express as one) into the conv / FC
before it. One that stays — after an ADD, a MUL, a conv with a fused activation, at the graph input — is still an
affine map `y = x * scale + shift` with `scale = gamma / sqrt(var + eps)` and `shift = beta - mean * scale`; TFLite
has no batch norm op, and its converter writes the same map as MUL and ADD by constants. Here it becomes
`MUL(x, scale)` then `SUB(., -shift)` (SUB broadcasts a (1, .., 1, C) constant in the IR, ADD does not), each left out
when it would do nothing (scale all ones, shift all zeros). `quantize` runs this pass on whatever
`prepare_for_inference` left, so int8 graphs never hold a BATCH_NORM.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import AddAttrs, Graph, Node, Op, Tensor
from .edit import bypass, const_tensor, drop_unused_tensors, fresh_tensor_name, with_tensors


def lower_batchnorm(graph: Graph) -> Graph:
    """Return `graph` with every BATCH_NORM replaced by MUL / SUB by constants (see the module docstring).

    >>> from kilobyte.ir import GraphBuilder
    >>> b = GraphBuilder()
    >>> c = np.full(2, 2.0, np.float32)
    >>> y = b.node(Op.BATCH_NORM, [b.input((1, 2))], params={"gamma": c, "beta": c, "mean": 0 * c, "var": 1 + 0 * c})
    >>> print(lower_batchnorm(b.build([y])))  # doctest: +NORMALIZE_WHITESPACE
    graph model(%input:float32[1x2])
      %batch_norm_0_scale:float32[1x2] = MUL(%input:float32[1x2], %batch_norm_0.scale)  # batch_norm_0_scale
      %batch_norm_0:float32[1x2] = SUB(%batch_norm_0_scale:float32[1x2], %batch_norm_0.shift)  # batch_norm_0
      return batch_norm_0
    """
    for name in [n.name for n in graph.nodes if n.op is Op.BATCH_NORM]:
        graph = _lower(graph, graph.node(name))
    return drop_unused_tensors(graph).verify()


def _lower(graph: Graph, bn: Node) -> Graph:
    gamma, beta, mean, var = (graph.tensors[t].data.astype(np.float64) for t in bn.inputs[1:])
    scale = gamma / np.sqrt(var + bn.attrs.eps)  # (C,)
    shift = beta - mean * scale  # (C,)
    x, y = bn.inputs[0], bn.outputs[0]
    shape = graph.tensors[x].shape
    const_shape = (1,) * (len(shape) - 1) + (shape[-1],)  # one value per channel, broadcast over the rest
    steps = [(Op.MUL, scale)] if np.any(scale != 1) else []
    steps += [(Op.SUB, -shift)] if np.any(shift != 0) else []
    if not steps:
        return bypass(graph, bn, x)
    new_nodes, new_tensors = [], []
    for k, (op, values) in enumerate(steps):
        last = k == len(steps) - 1
        name = bn.name if last else fresh_tensor_name(graph, f"{bn.name}_scale")
        out = y if last else name
        const = const_tensor(fresh_tensor_name(graph, f"{bn.name}.{'scale' if op is Op.MUL else 'shift'}"),
                             values.reshape(const_shape))
        new_tensors.append(const)
        if not last:
            new_tensors.append(Tensor(out, shape, "float32"))
        new_nodes.append(dataclasses.replace(bn, name=name, op=op, inputs=(x, const.name), outputs=(out,),
                                             attrs=AddAttrs()))
        x = out
    nodes = []
    for n in graph.nodes:
        nodes.extend(new_nodes if n.name == bn.name else [n])
    return with_tensors(graph, *new_tensors).replace(nodes=tuple(nodes))
