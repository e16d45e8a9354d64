"""Analysis stage: receptive fields relative to the graph input (thesis Sec. 4.1.3, Eq. 4.1; MCUNetV2 Sec. 3).

For a node m, the receptive field is the side of the input region one output pixel of m depends on. Walking back
from m to the input, each window op (conv, depthwise, pooling) with kernel k, stride s and dilation d maps a region
of side R on its output to `(R - 1) * s + d * (k - 1) + 1` on its input — Eq. 4.1, `R^{i->m-1} = (R^{i->m} - 1)
* s^{m-1} + k^{m-1}`, with the dilated kernel span. 1x1 convs, ADD, PAD, CONCAT, activations keep R; a node with
several activation inputs takes the max over its branches. Global reductions (MEAN or REDUCE_MAX over H/W, a
RESHAPE that flattens H/W, FULLY_CONNECTED) depend on their whole input map, so R becomes that map's extent; so,
conservatively, does a TRANSPOSE or STRIDED_SLICE that does not keep H and W in place.

`input_region` starts from R = out_pixels instead of 1: the input patch needed for an output patch (the patch size
IP of patch-based inference for output patch OP). Padding is ignored, as in Eq. 4.1, and values are not clamped
to the image: R larger than the input side means "the whole image".
"""

from __future__ import annotations

from ..ir import Graph, Node, Op
from .shapes import spatial_extent

WINDOW_OPS = frozenset({Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.AVG_POOL_2D, Op.MAX_POOL_2D})

Region = tuple[int, int]  # (rows, cols) of a square-ish patch


def input_region(graph: Graph, node: Node | str, out_pixels: int = 1) -> int:
    """Side of the graph-input patch needed to compute an `out_pixels` x `out_pixels` patch of `node`'s output.

    The larger of the row and column sides (they agree for square kernels and strides).

    >>> import numpy as np
    >>> from kilobyte.ir import ConvAttrs, GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 16, 16, 1))], ConvAttrs(stride=(2, 2)),
    ...            params={"weight": np.zeros((1, 3, 3, 1), np.float32)})
    >>> g = b.build([y])
    >>> input_region(g, "conv_2d_0"), input_region(g, "conv_2d_0", 4)
    (3, 9)
    """
    node = graph.node(node) if isinstance(node, str) else node
    need = _regions_on_inputs(graph, node, (out_pixels, out_pixels))
    return max((max(need[t]) for t in graph.inputs if t in need), default=out_pixels)


def receptive_field(graph: Graph, node: Node | str) -> int:
    """Receptive field of one output pixel of `node` on the graph input (`input_region` with one pixel)."""
    return input_region(graph, node, 1)


def receptive_fields(graph: Graph, out_pixels: int = 1) -> dict[str, int]:
    """Node name -> `input_region(graph, node, out_pixels)` for every node, in execution order."""
    return {n.name: input_region(graph, n, out_pixels) for n in graph.nodes}


def _regions_on_inputs(graph: Graph, target: Node, out: Region) -> dict[str, Region]:
    """Walk back from `target` in reverse execution order; return the region needed of every tensor it reaches."""
    need: dict[str, Region] = {target.outputs[0]: out}
    stop = graph.nodes.index(target)
    for node in reversed(graph.nodes[:stop + 1]):
        region = need.get(node.outputs[0])
        if region is None:
            continue  # `target` does not depend on this node
        for t in graph.activation_inputs(node):
            before = region_before(graph, node, region)
            old = need.get(t, (0, 0))
            need[t] = (max(old[0], before[0]), max(old[1], before[1]))  # max over branches
    return need


def region_before(graph: Graph, node: Node, region: Region) -> Region:
    """Region of `node`'s (first) activation input that a `region` of its output depends on (Eq. 4.1 step)."""
    rows, cols = region
    x = graph.tensors[node.inputs[0]].shape
    if node.op in WINDOW_OPS:
        kh, kw = _kernel(graph, node)
        sh, sw = node.attrs.stride
        dh, dw = getattr(node.attrs, "dilation", (1, 1))
        return ((rows - 1) * sh + dh * (kh - 1) + 1, (cols - 1) * sw + dw * (kw - 1) + 1)
    if node.op is Op.FULLY_CONNECTED or _collapses_space(graph, node):
        return spatial_extent(x)
    return region


def _kernel(graph: Graph, node: Node) -> tuple[int, int]:
    if node.op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        return node.attrs.kernel
    w = graph.tensors[node.inputs[1]].shape  # OHWI or (1, kh, kw, C)
    return (w[1], w[2])


def _collapses_space(graph: Graph, node: Node) -> bool:
    """MEAN or REDUCE_MAX over H or W, or a RESHAPE, TRANSPOSE or STRIDED_SLICE that does not keep (H, W) in place:
    counted as seeing the whole map (a slice's window moves and strides, a transpose may put C where H was)."""
    x = graph.tensors[node.inputs[0]].shape
    if len(x) != 4:
        return False
    if node.op in (Op.MEAN, Op.REDUCE_MAX):
        return bool({a % 4 for a in node.attrs.axes} & {1, 2})
    if node.op in (Op.RESHAPE, Op.TRANSPOSE, Op.STRIDED_SLICE):
        y = graph.tensors[node.outputs[0]].shape
        moved = node.op is Op.TRANSPOSE and tuple(node.attrs.perm[1:3]) != (1, 2)
        return moved or len(y) != 4 or tuple(y[1:3]) != tuple(x[1:3])
    return False
