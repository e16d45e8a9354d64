"""Analysis stage: group nodes into blocks (inverted-residual blocks, the stem, the head) for per-block reports.

The rule, over nodes in execution order: a block *ends* after a boundary node, and the next node starts a new one.
Boundary nodes are
1. every ADD (a residual block ends at its add);
2. every CONV_2D whose output is not the branch end of an ADD (the later-produced operand of an ADD reading it —
   in that case rule 1 ends the block at the ADD), and that is either
   - a *projection*: a 1x1 conv reading a DEPTHWISE_CONV_2D output (possibly through RELU/RELU6/BN/IDENTITY), or
   - a *spatial* conv (kernel larger than 1x1), such as the stem conv of MobileNetV2.
Whatever follows the last boundary (e.g. a 1x1 head conv, pooling and the classifier) is the last block.

For MobileNetV2 this gives the papers' blocks: the stem conv alone, then one block per inverted-residual block
(expand 1x1, depthwise, project 1x1, and the ADD when there is one), then the head.
"""

from __future__ import annotations

from ..ir import Graph, Node, Op

PASS_THROUGH = frozenset({Op.RELU, Op.RELU6, Op.BATCH_NORM, Op.IDENTITY})


def group_blocks(graph: Graph) -> list[tuple[str, ...]]:
    """Node names grouped into consecutive blocks (see the module docstring for the rule).

    >>> import numpy as np
    >>> from kilobyte.ir import GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> x = b.node(Op.CONV_2D, [b.input((1, 4, 4, 2))], params={"weight": np.ones((2, 3, 3, 2), np.float32)})
    >>> y = b.node(Op.DEPTHWISE_CONV_2D, [x], params={"weight": np.ones((1, 1, 1, 2), np.float32)})
    >>> y = b.node(Op.CONV_2D, [y], params={"weight": np.ones((2, 1, 1, 2), np.float32)})
    >>> group_blocks(b.build([b.node(Op.ADD, [x, y])]))
    [('conv_2d_0',), ('depthwise_conv_2d_0', 'conv_2d_1', 'add_0')]
    """
    branch_ends = _add_branch_ends(graph)
    blocks: list[tuple[str, ...]] = []
    current: list[str] = []
    for node in graph.nodes:
        current.append(node.name)
        if _is_boundary(graph, node, branch_ends):
            blocks.append(tuple(current))
            current = []
    if current:
        blocks.append(tuple(current))
    return blocks


def block_ids(graph: Graph) -> list[int]:
    """For each node in execution order, the index of its block in `group_blocks(graph)`."""
    return [k for k, names in enumerate(group_blocks(graph)) for _ in names]


def _add_branch_ends(graph: Graph) -> set[str]:
    """For every ADD, the operand produced last (the end of the residual branch, not the skip)."""
    order = {t: i for i, n in enumerate(graph.nodes) for t in n.outputs}
    ends = set()
    for node in graph.nodes:
        if node.op is Op.ADD:
            ends.add(max(node.inputs, key=lambda t: order.get(t, -1)))
    return ends


def _is_boundary(graph: Graph, node: Node, branch_ends: set[str]) -> bool:
    if node.op is Op.ADD:
        return True
    if node.op is not Op.CONV_2D or node.outputs[0] in branch_ends:
        return False
    kh, kw = graph.tensors[node.inputs[1]].shape[1:3]
    return (kh, kw) != (1, 1) or _reads_depthwise(graph, node)


def _reads_depthwise(graph: Graph, node: Node) -> bool:
    producer = graph.producer(node.inputs[0])
    while producer is not None and producer.op in PASS_THROUGH:
        producer = graph.producer(producer.inputs[0])
    return producer is not None and producer.op is Op.DEPTHWISE_CONV_2D
