"""Analysis stage: per-tensor shapes and activation bytes, counted at int8 whatever the graph's dtype.

The papers (and the memory model in DESIGN.md) count activation memory at 1 byte per element, so a float graph
straight from a frontend and its int8 version report the same bytes. Constants (weights, biases) are not
activations; the graph inputs are.
"""

from __future__ import annotations

from ..ir import Graph, Node

ACTIVATION_BYTES_PER_ELEMENT = 1  # int8


def activation_bytes(graph: Graph, tensor: str) -> int:
    """Bytes of activation `tensor` at int8 (one byte per element)."""
    return graph.tensors[tensor].numel * ACTIVATION_BYTES_PER_ELEMENT


def activation_tensors(graph: Graph) -> list[str]:
    """Every activation tensor in execution order: graph inputs, then each node's output."""
    return list(graph.inputs) + [t for n in graph.nodes for t in n.outputs]


def activation_inputs(graph: Graph, node: Node) -> list[str]:
    """The distinct non-constant inputs of `node` (`ADD(x, x)` reads one buffer), in order."""
    return list(dict.fromkeys(graph.activation_inputs(node)))


def output_shape(graph: Graph, node: Node) -> tuple[int, ...]:
    return tuple(graph.tensors[node.outputs[0]].shape)


def spatial_extent(shape: tuple[int, ...]) -> tuple[int, int]:
    """(H, W) of an NHWC tensor; a tensor without spatial axes (e.g. (1, C)) counts as 1x1."""
    return (shape[1], shape[2]) if len(shape) == 4 else (1, 1)


def in_bytes(graph: Graph, node: Node) -> int:
    """Bytes of the activation inputs `node` reads (each buffer once)."""
    return sum(activation_bytes(graph, t) for t in activation_inputs(graph, node))


def out_bytes(graph: Graph, node: Node) -> int:
    return sum(activation_bytes(graph, t) for t in node.outputs)
