"""Transforms stage: small graph-editing helpers shared by the passes (none of them is a pass itself).

Every helper returns a new `Graph`; the input graph, its node tuple and its tensor dict are never modified. Passes
combine them: edit the node list with `replace_node` / `bypass`, then tidy up with `drop_unused_tensors`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Activation, Graph, Node, Tensor


def sole_reader(graph: Graph, tensor: str) -> Node | None:
    """The one node reading `tensor`, or None if it has several readers, none, or is a graph output.

    Passes fuse a producer into its reader only in this case: otherwise another reader (or the caller, for a graph
    output) would see the changed value.
    """
    if tensor in graph.outputs:
        return None
    readers = graph.consumers(tensor)
    return readers[0] if len(readers) == 1 else None


def plain_producer(graph: Graph, node: Node, accepts) -> Node | None:
    """The producer of `node`'s first input if `node` may be folded into it: `accepts(producer)`, `node` is its
    output's sole reader, and the producer has no fused activation yet. None otherwise (or for a graph input)."""
    x = node.inputs[0]
    p = graph.producer(x)
    if p is None or not accepts(p) or sole_reader(graph, x) is not node:
        return None
    return p if p.attrs.activation is Activation.NONE else None


def replace_node(graph: Graph, new: Node) -> Graph:
    """The graph with the node named `new.name` replaced by `new` (same position)."""
    nodes = tuple(new if n.name == new.name else n for n in graph.nodes)
    return graph.replace(nodes=nodes)


def bypass(graph: Graph, node: Node, keep: str) -> Graph:
    """Remove `node`; whoever read its output (readers and graph outputs) reads tensor `keep` instead.

    Graph outputs are renamed in place (same position), so `outputs[i]` still holds the same value.
    """
    old = node.outputs[0]
    nodes = tuple(rename_input(n, old, keep) for n in graph.nodes if n.name != node.name)
    outputs = tuple(keep if o == old else o for o in graph.outputs)
    return graph.replace(nodes=nodes, outputs=outputs)


def rename_input(node: Node, old: str, new: str) -> Node:
    """`node` reading tensor `new` wherever it read `old` (the same object if it never read `old`)."""
    if old not in node.inputs:
        return node
    return dataclasses.replace(node, inputs=tuple(new if t == old else t for t in node.inputs))


def with_tensors(graph: Graph, *tensors: Tensor) -> Graph:
    """The graph with these tensors added or replaced (by name) in a copy of its tensor dict."""
    table = dict(graph.tensors)
    for t in tensors:
        table[t.name] = t
    return graph.replace(tensors=table)


def const_tensor(name: str, data: np.ndarray) -> Tensor:
    """A read-only float32 constant, as `GraphBuilder.const` makes them."""
    data = np.ascontiguousarray(data, dtype=np.float32)
    data.setflags(write=False)
    return Tensor(name, tuple(data.shape), "float32", data)


def fresh_tensor_name(graph: Graph, base: str) -> str:
    """`base` if no tensor has that name yet, else `base_1`, `base_2`, ..."""
    name, k = base, 0
    while name in graph.tensors:
        k += 1
        name = f"{base}_{k}"
    return name


def drop_unused_tensors(graph: Graph) -> Graph:
    """Remove tensors no node reads or writes and that are neither graph inputs nor outputs.

    After a pass this drops the constants of folded nodes (e.g. a BN's gamma/beta/mean/var) and the outputs of
    removed nodes.

    >>> from kilobyte.ir import GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> x = b.input((1, 2, 2, 3))
    >>> _ = b.const("unused", np.zeros(3, np.float32))
    >>> sorted(drop_unused_tensors(b.build([b.node(Op.RELU, [x])])).tensors)
    ['input', 'relu_0']
    """
    used = set(graph.inputs) | set(graph.outputs)
    for n in graph.nodes:
        used.update(n.inputs)
        used.update(n.outputs)
    if used.issuperset(graph.tensors):
        return graph
    return graph.replace(tensors={k: t for k, t in graph.tensors.items() if k in used})
