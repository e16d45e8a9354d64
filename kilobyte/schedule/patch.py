"""Schedule stage: the patch-based first stage (MCUNetV2) — tiles with exact halos, per-patch memory, auto choice.

The first `n` nodes of the execution order run once per spatial patch instead of once per layer. The stage output
(the stage tensors read after the stage, e.g. MobileNetV2's first 28x28 map) is split into p x p patches; for each
patch we walk the stage backwards and give every node the output box its in-stage readers need (the union over
readers) and the input box that box reads — kernel, stride, dilation and the layer's explicit padding, clipped to
the image, so a clipped box gets zero-point padding only on sides where the layer itself pads (thesis Eq. 4.1, but
exact at the borders). A node's tile lives in a per-patch tile buffer until its last in-stage reader; the stage
output tensors are kept whole. The model input is caller-owned and read patch by patch, so it is not counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..errors import KilobyteError
from ..ir import Graph, Node, Op
from .plan_types import PatchStage, PlanOptions, Tile

Box = tuple[int, int, int, int]  # (y0, y1, x0, x1), half-open
EMPTY: Box = (0, 0, 0, 0)

WINDOW_OPS = frozenset({Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.AVG_POOL_2D, Op.MAX_POOL_2D, Op.PAD})
POINTWISE_OPS = frozenset({Op.ADD, Op.CONCAT, Op.RELU, Op.RELU6, Op.IDENTITY, Op.QUANTIZE, Op.DEQUANTIZE,
                           Op.BATCH_NORM})
GRIDS = range(2, 9)  # p tried by `choose_patch`


class PatchStageError(KilobyteError):
    """The requested patch stage cannot be built; the message names the node and the reason."""


# -- geometry -----------------------------------------------------------------------------------------------------
def split(size: int, p: int) -> list[tuple[int, int]]:
    """Split `size` into `p` even ranges, the remainder going to the last one.

    >>> split(28, 4), split(10, 3)
    ([(0, 7), (7, 14), (14, 21), (21, 28)], [(0, 3), (3, 6), (6, 10)])
    """
    step = size // p
    return [(i * step, (i + 1) * step if i < p - 1 else size) for i in range(p)]


def box_area(box: Box) -> int:
    return max(box[1] - box[0], 0) * max(box[3] - box[2], 0)


def union(a: Box | None, b: Box) -> Box:
    if a is None or box_area(a) == 0:
        return b
    if box_area(b) == 0:
        return a
    return (min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3]))


def axis_window(graph: Graph, node: Node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(kernel, stride, dilation, pad_before, pad_after) along H and along W; None for pointwise ops."""
    a = node.attrs
    if node.op is Op.PAD:
        (t, b), (left, r) = a.pads[1], a.pads[2]
        return (1, 1, 1, t, b), (1, 1, 1, left, r)
    if node.op not in WINDOW_OPS:
        return None
    if node.op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        (kh, kw), (dh, dw) = a.kernel, (1, 1)
    else:
        _, kh, kw, _ = graph.tensors[node.inputs[1]].shape
        dh, dw = a.dilation
    t, b, left, r = a.padding
    return (kh, a.stride[0], dh, t, b), (kw, a.stride[1], dw, left, r)


def _axis_in(o0: int, o1: int, window: tuple[int, ...], size: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Input range read by outputs [o0, o1) along one axis, clipped to [0, size), and the padding outside it."""
    k, s, d, before, _ = window
    i0 = o0 * s - before
    i1 = (o1 - 1) * s - before + d * (k - 1) + 1
    lo = min(max(i0, 0), size)
    hi = max(min(i1, size), lo)
    pad_lo = min(max(-i0, 0), i1 - i0)
    return (lo, hi), (pad_lo, (i1 - i0) - pad_lo - (hi - lo))


def input_box(graph: Graph, node: Node, out_box: Box) -> tuple[Box, tuple[int, int, int, int]]:
    """The box of `node`'s activation input(s) that `out_box` of its output reads, and the padding it needs.

    >>> import numpy as np
    >>> from kilobyte.ir import ConvAttrs, GraphBuilder
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 8, 8, 1))], ConvAttrs((2, 2), (1, 1, 1, 1)),
    ...            params={"weight": np.zeros((1, 3, 3, 1), np.float32)})
    >>> g = b.build([y])
    >>> input_box(g, g.nodes[0], (0, 2, 2, 4))  # rows 0-1 need input rows -1..3: one row of top padding
    ((0, 4, 3, 8), (1, 0, 0, 0))
    """
    win = axis_window(graph, node)
    if win is None or box_area(out_box) == 0:
        return out_box, (0, 0, 0, 0)
    _, h, w, _ = graph.tensors[graph.activation_inputs(node)[0]].shape
    (y0, y1), (pt, pb) = _axis_in(out_box[0], out_box[1], win[0], h)
    (x0, x1), (pl, pr) = _axis_in(out_box[2], out_box[3], win[1], w)
    return (y0, y1, x0, x1), (pt, pb, pl, pr)


def patch_tiles(graph: Graph, stage: Sequence[Node], outputs: Sequence[str], box: Box) -> tuple[Tile, ...]:
    """Tiles of one patch: walk `stage` backwards from `box` of every stage output (union over readers)."""
    need: dict[str, Box] = {t: box for t in outputs}
    tiles: dict[str, Tile] = {}
    for node in reversed(stage):
        out_box = need.get(node.outputs[0], EMPTY)
        in_box, padding = input_box(graph, node, out_box)
        tiles[node.name] = Tile(node.name, out_box, in_box, padding)
        for t in graph.activation_inputs(node):
            need[t] = union(need.get(t), in_box)
    return tuple(tiles[n.name] for n in stage)


def tile_macs(graph: Graph, node: Node, out_box: Box) -> int:
    """MACs of `node` on `out_box` (weight elements x output pixels, the convention of `analysis.macs`)."""
    if node.op not in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D):
        return 0
    return graph.tensors[node.inputs[1]].numel * box_area(out_box)


# -- the stage's nodes and outputs -----------------------------------------------------------------------------
def stage_nodes(graph: Graph, order: Sequence, n_nodes: int) -> tuple[list[Node], tuple[str, ...]]:
    """The first `n_nodes` of `order` and the stage outputs; raise `PatchStageError` if they cannot be a stage."""
    nodes = [graph.node(x) if isinstance(x, str) else x for x in order]
    if not 1 <= n_nodes <= len(nodes):
        raise PatchStageError(f"patch stage of {n_nodes} nodes: the graph has {len(nodes)}")
    stage, rest = nodes[:n_nodes], nodes[n_nodes:]
    made: set[str] = set()
    for node in stage:
        _check_node(graph, node, made)
        made.add(node.outputs[0])
    read_later = {t for n in rest for t in n.inputs} | set(graph.outputs)
    outputs = tuple(n.outputs[0] for n in stage if n.outputs[0] in read_later)
    read_inside = {t for n in stage for t in n.inputs}
    for node in stage:
        if node.outputs[0] not in read_inside and node.outputs[0] not in outputs:
            raise PatchStageError(f"patch stage: node '{node.name}' output is never read (run dead-code removal)")
    _check_outputs(graph, outputs, stage[-1])
    return stage, outputs


def _check_node(graph: Graph, node: Node, made: set[str]) -> None:
    for t in graph.activation_inputs(node):
        if t not in made and t not in graph.inputs:
            raise PatchStageError(f"patch stage: node '{node.name}' reads '{t}', which is produced after the "
                                  f"stage; the stage must be a prefix of the order closed under inputs")
    concat_ok = node.op is not Op.CONCAT or node.attrs.axis % 4 == 3
    pad_ok = node.op is not Op.PAD or (node.attrs.pads[0] == (0, 0) and node.attrs.pads[3] == (0, 0))
    shape = graph.tensors[node.outputs[0]].shape
    if node.op not in WINDOW_OPS | POINTWISE_OPS or not (concat_ok and pad_ok) or len(shape) != 4:
        raise PatchStageError(f"patch stage: node '{node.name}' ({node.op.value}) is not spatially local; end "
                              f"the stage before it")


def _check_outputs(graph: Graph, outputs: tuple[str, ...], last: Node) -> None:
    if not outputs:
        raise PatchStageError(f"patch stage ending at '{last.name}': nothing after the stage reads its tensors")
    sizes = {tuple(graph.tensors[t].shape[1:3]) for t in outputs}
    if len(sizes) != 1:
        raise PatchStageError(f"patch stage ending at '{last.name}': its outputs {list(outputs)} differ in "
                              f"height/width {sorted(sizes)}; end the stage where one map crosses the cut")


def _grid_boxes(graph: Graph, outputs: tuple[str, ...], grid: int) -> list[Box]:
    _, h, w, _ = graph.tensors[outputs[0]].shape
    if grid < 1 or grid > min(h, w):
        raise PatchStageError(f"patch grid {grid}x{grid} does not fit the {h}x{w} stage output '{outputs[0]}'")
    return [(y0, y1, x0, x1) for y0, y1 in split(h, grid) for x0, x1 in split(w, grid)]
