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

import numpy as np

from ..analysis.macs import node_macs
from ..errors import KilobyteError
from ..ir import Graph, Node, Op
from ..kernels import contract_for, inplace_rule, is_local
from .arena import plan_groups
from .liveness import analyze
from .patch_eval import StageEvaluator, axis_in
from .plan_types import DEFAULT_OPTIONS, PatchStage, PlanOptions, Tile
from .scratch import kernel_scratch

Box = tuple[int, int, int, int]  # (y0, y1, x0, x1), half-open
EMPTY: Box = (0, 0, 0, 0)

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
    """Pixels in `box` (0 for an empty box)."""
    return max(box[1] - box[0], 0) * max(box[3] - box[2], 0)


def union(a: Box | None, b: Box) -> Box:
    """The bounding box of `a` and `b`; empty boxes (and None) are ignored."""
    if a is None or box_area(a) == 0:
        return b
    if box_area(b) == 0:
        return a
    return (min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3]))


def axis_window(graph: Graph, node: Node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(kernel, stride, dilation, pad_before, pad_after) along H and along W (the kernel contract's window); None for
    pointwise ops."""
    window = contract_for(node).window
    return None if window is None else window(graph, node)


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
    _, h, w, _ = graph.tensors[graph.activation_inputs(node)[0]].shape
    return _box_in(axis_window(graph, node), (h, w), out_box)


def _box_in(window, hw: tuple[int, int], out_box: Box) -> tuple[Box, tuple[int, int, int, int]]:
    if box_area(out_box) == 0:
        return EMPTY, (0, 0, 0, 0)  # nothing needed: read nothing
    if window is None:
        return out_box, (0, 0, 0, 0)
    (y0, y1), (pt, pb) = axis_in(out_box[0], out_box[1], window[0], hw[0])
    (x0, x1), (pl, pr) = axis_in(out_box[2], out_box[3], window[1], hw[1])
    return (y0, y1, x0, x1), (pt, pb, pl, pr)


def _geometry(graph: Graph, stage: Sequence[Node]) -> list[tuple]:
    """Per stage node, what the tile walk needs: (window or None, input (H, W), activation inputs)."""
    geometry = []
    for node in stage:
        ins = graph.activation_inputs(node)
        _, h, w, _ = graph.tensors[ins[0]].shape
        geometry.append((axis_window(graph, node), (h, w), ins))
    return geometry


def patch_tiles(graph: Graph, stage: Sequence[Node], outputs: Sequence[str], box: Box,
                geometry: list | None = None) -> tuple[Tile, ...]:
    """Tiles of one patch: walk `stage` backwards from `box` of every stage output (union over readers)."""
    geometry = geometry or _geometry(graph, stage)
    need: dict[str, Box] = {t: box for t in outputs}
    tiles: list[Tile] = []
    for node, (window, hw, ins) in zip(reversed(stage), reversed(geometry)):
        out_box = need.get(node.outputs[0], EMPTY)
        in_box, padding = _box_in(window, hw, out_box)
        tiles.append(Tile(node.name, out_box, in_box, padding))
        for t in ins:
            need[t] = union(need.get(t), in_box)
    return tuple(reversed(tiles))


# -- the stage's nodes and outputs -----------------------------------------------------------------------------
def stage_nodes(graph: Graph, order: Sequence, n_nodes: int) -> tuple[list[Node], tuple[str, ...]]:
    """The first `n_nodes` of `order` and the stage outputs; raise `PatchStageError` if they cannot be a stage."""
    by_name = {n.name: n for n in graph.nodes}
    nodes = [by_name[x] if isinstance(x, str) else x for x in order]
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
    if node.op is Op.CONV_2D and not is_local(node):
        raise PatchStageError(f"patch stage: node '{node.name}' stores its weights {node.attrs.weight_format} and runs "
                              "per layer (kb_sparse_conv.c); end the stage before it")
    # an ADD broadcasting an operand (a constant's terms, a (1,1,1,C) map) is no tile-by-tile sum (kb_add_const)
    add_ok = node.op is not Op.ADD or all(graph.tensors[t].shape == shape and not graph.tensors[t].is_const
                                          for t in node.inputs)
    if not is_local(node) or not (concat_ok and pad_ok and add_ok) or len(shape) != 4:
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


# -- per-patch working memory ---------------------------------------------------------------------------------
@dataclasses.dataclass
class _Memory:
    """Per-patch working memory of a stage; steps index the stage nodes."""

    step_of: dict[str, int]  # stage tensor -> the step producing it
    groups: list[list[int]]  # tile buffers: the steps whose output tile lives in each (an in-place chain shares one)
    home: dict[int, int]  # step -> its tile buffer (steps whose output is only read after the stage have none)
    last: dict[int, int]  # step -> the last step that reads its output tile
    size: dict[int, int]  # step -> its tile bytes, max over patches
    scratch: list[int]  # step -> scratch bytes, max over patches
    live: list[int]  # step -> working bytes live (tiles + scratch), max over patches


def _tile_bytes(graph: Graph, stage: Sequence[Node], tile: Tile, step: int) -> int:
    return box_area(tile.out_box) * graph.tensors[stage[step].outputs[0]].shape[3]


def _padded_channel(tile: Tile) -> int:
    y0, y1, x0, x1 = tile.in_box
    t, b, left, r = tile.padding
    return (y1 - y0 + t + b) * (x1 - x0 + left + r)


def _inplace_host(graph: Graph, stage: Sequence[Node], i: int, tiles, mem: _Memory, options: PlanOptions) -> int | None:
    """The step whose tile buffer node i overwrites in place (that tile dies at i), or None. The contract's in-place
    rule, per tile: an elementwise op (ADD) needs the dying input's box to equal its own in every patch; a
    channel-planar one (DW) an output tile no larger than its input tile and a padded channel smaller than it."""
    node, step_of = stage[i], mem.step_of
    rule = inplace_rule(graph, node, options)
    hosts = [step_of[t] for t in dict.fromkeys(graph.activation_inputs(node))
             if t in step_of and step_of[t] in mem.home and mem.last[step_of[t]] == i]
    if rule is None or not hosts:
        return None
    if rule.elementwise:
        same = [h for h in hosts if all(p[h].out_box == p[i].out_box for p in tiles)]
        return same[0] if same else None
    j = hosts[0]
    fits = all(_tile_bytes(graph, stage, p[i], i) <= _tile_bytes(graph, stage, p[j], j) for p in tiles)
    saves = max(_padded_channel(p[i]) for p in tiles) < max(_tile_bytes(graph, stage, p[i], i) for p in tiles)
    return j if fits and saves else None


def _step_scratch(graph: Graph, node: Node, tile: Tile, inplace: bool, kernels: str) -> int:
    if node.op is Op.DEPTHWISE_CONV_2D:
        return _padded_channel(tile) if inplace else 0
    return kernel_scratch(graph, node, kernels)  # im2col columns do not depend on the tile size


def working_memory(graph: Graph, stage: Sequence[Node], tiles, options: PlanOptions) -> _Memory:
    """Tile buffers (in-place rules applied), their lifetimes in stage steps, and the working bytes per step."""
    mem = _Memory({n.outputs[0]: i for i, n in enumerate(stage)}, [], {}, {}, {}, [], [])
    for i, n in enumerate(stage):
        for t in graph.activation_inputs(n):
            if t in mem.step_of:
                mem.last[mem.step_of[t]] = i
    for i in range(len(stage)):
        if i not in mem.last:
            continue  # read only after the stage: written straight into the whole stage-output tensor
        host = _inplace_host(graph, stage, i, tiles, mem, options)
        if host is None:
            mem.home[i] = len(mem.groups)
            mem.groups.append([i])
        else:
            mem.home[i] = mem.home[host]
            mem.groups[mem.home[i]].append(i)
    sizes = np.array([[_tile_bytes(graph, stage, t, i) for i, t in enumerate(p)] for p in tiles])  # (P, n)
    mem.size = {i: int(sizes[:, i].max()) for i in mem.home}
    inplace = {i for i in mem.home if mem.groups[mem.home[i]][0] != i}
    scratch = np.array([[_step_scratch(graph, n, p[i], i in inplace, options.kernels) for i, n in enumerate(stage)]
                        for p in tiles])
    mem.scratch = [int(v) for v in scratch.max(axis=0)]
    mem.live = [int(v) for v in (_live_tiles(sizes, mem) + scratch).max(axis=0)]
    return mem


def _live_tiles(sizes: np.ndarray, mem: _Memory) -> np.ndarray:
    """(patches, steps) bytes of the tile buffers live at each step; an in-place chain counts its largest live
    member (input and output share the buffer at the in-place step)."""
    total = np.zeros_like(sizes)
    for group in mem.groups:
        held = np.zeros_like(sizes)
        for s in group:
            span = slice(s, mem.last[s] + 1)
            held[:, span] = np.maximum(held[:, span], sizes[:, s:s + 1])
        total += held
    return total


# -- the stage plan ---------------------------------------------------------------------------------------------
def plan_patch_stage(graph: Graph, order: Sequence, n_nodes: int, grid: int,
                     options: PlanOptions = DEFAULT_OPTIONS) -> PatchStage:
    """Run the first `n_nodes` of `order` patch by patch on a `grid` x `grid` split of the stage output.

    Tile offsets and tile scratch are relative to the working region; `place_stage` moves them into the arena.
    """
    return stage_plan(graph, order, n_nodes, grid, options, place=True)


def stage_plan(graph: Graph, order: Sequence, n_nodes: int, grid: int, options: PlanOptions,
               place: bool) -> PatchStage:
    """`plan_patch_stage`; without `place` the working region is not laid out (working_bytes = working_peak)."""
    stage, outputs = stage_nodes(graph, order, n_nodes)
    geometry = _geometry(graph, stage)
    tiles = [patch_tiles(graph, stage, outputs, box, geometry) for box in _grid_boxes(graph, outputs, grid)]
    mem = working_memory(graph, stage, tiles, options)
    tile_offsets, tile_scratch, region = _place(stage, mem, options) if place else ({}, {}, max(mem.live))
    weights = [graph.tensors[n.inputs[1]].numel if n.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D) else 0 for n in stage]
    return PatchStage(
        n_nodes=n_nodes, grid=grid, nodes=tuple(n.name for n in stage), outputs=outputs,
        tiles=tuple(tiles), input_patch=_input_patch(graph, stage, tiles),
        stage_output_bytes=sum(graph.tensors[t].numel for t in outputs),
        working_bytes=region, tile_offsets=tile_offsets,
        macs=sum(w * box_area(p[i].out_box) for p in tiles for i, w in enumerate(weights) if w),
        base_macs=sum(node_macs(graph, n) for n in stage),
        working_peak=max(mem.live), tile_scratch=tile_scratch)


def _place(stage: Sequence[Node], mem: _Memory, options: PlanOptions) -> tuple[dict, dict, int]:
    """Offsets of the tile buffers and per-step scratch inside the working region (arena.py's group planner: an
    in-place chain is one group at one offset), and the region's size."""
    groups = [[(mem.size[s], s, mem.last[s]) for s in g] for g in mem.groups]
    scratch_steps = [i for i, s in enumerate(mem.scratch) if s > 0]
    groups += [[(mem.scratch[i], i, i)] for i in scratch_steps]
    result = plan_groups(groups, options.arena_strategy, options.alignment)
    offsets = result.offsets
    tile_offsets = {stage[i].name: offsets[b] for i, b in mem.home.items()}
    base = len(mem.groups)
    tile_scratch = {stage[i].name: (offsets[base + k], mem.scratch[i]) for k, i in enumerate(scratch_steps)}
    return tile_offsets, tile_scratch, result.arena_bytes


def _input_patch(graph: Graph, stage: Sequence[Node], tiles) -> int:
    side = 0
    for patch in tiles:
        box: Box | None = None
        for node, tile in zip(stage, patch):
            if any(t in graph.inputs for t in node.inputs):
                box = union(box, tile.in_box)
        if box is not None:
            side = max(side, box[1] - box[0], box[3] - box[2])
    return side


def place_stage(stage: PatchStage, offset: int) -> PatchStage:
    """The stage with its working region placed at arena `offset` (tile and scratch offsets made absolute)."""
    shift = offset - stage.working_offset
    return dataclasses.replace(
        stage, working_offset=offset, tile_offsets={k: v + shift for k, v in stage.tile_offsets.items()},
        tile_scratch={k: (o + shift, b) for k, (o, b) in stage.tile_scratch.items()})


def stage_peak(stage: PatchStage) -> int:
    """Peak live bytes while the stage runs: the working peak plus the whole stage-output tensors (the arena may
    need a few more: the working region is `working_bytes`, laid out by the arena planner)."""
    return stage.working_peak + stage.stage_output_bytes


# -- automatic choice -------------------------------------------------------------------------------------------
def candidate_cuts(graph: Graph, order: Sequence) -> list[int]:
    """Stage lengths `choose_patch` tries: every prefix of spatially local nodes whose cut is crossed by exactly
    one tensor (nothing else is held across it), with that tensor smaller in H x W than the graph input — a stage
    that does not down-sample cannot lower the peak below the input map's own size. Cuts inside a residual block
    (two tensors cross) are skipped: their outputs would differ in size or double the stage-output bytes."""
    return [n for n, _ in stage_cuts(graph, order)]


def stage_cuts(graph: Graph, order: Sequence) -> list[tuple[int, tuple[str, ...]]]:
    """`candidate_cuts` with each cut's stage outputs, in one pass over `order`: the prefixes `stage_nodes` accepts
    whose stage outputs are one tensor smaller than the image. Once a node fails `_check_node` or is dead (its output
    read by nothing), no longer prefix is a stage."""
    nodes = [graph.node(x) if isinstance(x, str) else x for x in order]
    readers: dict[str, int] = {}  # tensor -> nodes of `order` reading it
    for node in nodes:
        for t in set(node.inputs):
            readers[t] = readers.get(t, 0) + 1
    image = max(graph.tensors[t].shape[1] * graph.tensors[t].shape[2] for t in graph.inputs)
    kept = set(graph.outputs)
    made: set[str] = set()
    crossing: dict[str, int] = {}  # stage tensors read after the prefix -> readers not yet in the prefix
    cuts = []
    for n, node in enumerate(nodes, start=1):
        out = node.outputs[0]
        try:
            _check_node(graph, node, made)
        except PatchStageError:
            break
        if not readers.get(out) and out not in kept:
            break  # dead code: `stage_nodes` refuses every prefix holding it
        made.add(out)
        for t in set(node.inputs):
            if t in crossing:
                crossing[t] -= 1
                if not crossing[t] and t not in kept:
                    del crossing[t]
        crossing[out] = readers.get(out, 0)
        if len(crossing) == 1:
            (t,) = crossing
            _, h, w, _ = graph.tensors[t].shape
            if h * w < image:
                cuts.append((n, (t,)))
    return cuts


def choose_patch(graph: Graph, order: Sequence, options: PlanOptions = DEFAULT_OPTIONS,
                 live: Sequence[int] | None = None, notes: list[str] | None = None) -> PatchStage | None:
    """The patch stage ("auto") with the smallest total peak, ties broken by fewer MACs; None if none beats the
    per-layer plan. Total peak = max(stage peak, planned live bytes of the per-layer steps after the stage).

    Tries `candidate_cuts` x p in 2..8 (p <= the stage output's H and W); with `options.max_mac_overhead` a plan
    whose extra MACs exceed that fraction of the network's MACs is skipped. Exact pruning: a cut is skipped when
    its stage-output bytes or the rest's peak cannot beat the best so far, and a grid when its centre patch alone
    cannot (the peak is a max over patches). Grids run coarse to fine and stop once the stage is no longer the
    bottleneck: finer grids only add MACs. `live`: the per-layer plan's live bytes per step of `order`, when the
    caller has them. `notes` (a list) receives a line when a stage over the MAC limit would lower the peak further.
    """
    names = [x if isinstance(x, str) else x.name for x in order]
    if live is None:
        live = analyze(graph, names, dataclasses.replace(options, patch=None)).live_bytes
    rest = [max(live[n:], default=0) for n in range(len(live) + 1)]
    budget = None if options.max_mac_overhead is None else options.max_mac_overhead * sum(
        node_macs(graph, n) for n in graph.nodes)
    evaluator = StageEvaluator(graph, names, options)
    best: list = [None, (max(live, default=0), 0)]  # (n, p), (total peak, extra MACs); per-layer to start
    over: tuple | None = None  # the best (total peak, extra MACs) the MAC limit ruled out
    for n, outputs in stage_cuts(graph, names):
        stage = [graph.node(name) for name in names[:n]]
        _, h, w, _ = graph.tensors[outputs[0]].shape
        out_bytes = sum(graph.tensors[t].numel for t in outputs)
        for p in (p for p in GRIDS if p <= min(h, w)):
            rows, cols = split(h, p), split(w, p)
            centre = evaluator.evaluate(n, outputs, [rows[p // 2]], [cols[p // 2]])
            centre_peak = centre[0] + out_bytes if centre else _centre_patch_peak(graph, stage, outputs, p, options)
            bound = max(rest[n], centre_peak)
            if bound > best[1][0] or (bound == best[1][0] and best[0] is None):
                continue
            peak, extra = _stage_figures(graph, names, evaluator, n, outputs, p, options)
            key = (max(peak, rest[n]), extra)
            if budget is not None and extra > budget:
                over = key if over is None or key < over else over
            elif key < best[1]:
                best = [(n, p), key]
            if peak <= rest[n]:
                break
    if notes is not None and over is not None and over[0] < best[1][0]:
        base = sum(node_macs(graph, x) for x in graph.nodes)
        notes.append(f"patch auto: a stage costing +{100 * over[1] / base:.0f} % MACs would lower the peak from "
                     f"{best[1][0]} B to {over[0]} B; max_mac_overhead={options.max_mac_overhead:g} "
                     f"(--max-mac-overhead) rules it out")
    return None if best[0] is None else plan_patch_stage(graph, names, *best[0], options)


def _stage_figures(graph: Graph, names, evaluator, n: int, outputs, p: int, options: PlanOptions) -> tuple[int, int]:
    """(stage peak, extra MACs) of the first `n` nodes on a p x p grid: by the separable evaluator, or by the box walk
    where that does not apply."""
    _, h, w, _ = graph.tensors[outputs[0]].shape
    fast = evaluator.evaluate(n, outputs, split(h, p), split(w, p))
    if fast is not None:
        return fast[0] + sum(graph.tensors[t].numel for t in outputs), fast[1] - evaluator.base_macs(n)
    plan = stage_plan(graph, names, n, p, options, place=False)
    return stage_peak(plan), plan.macs - plan.base_macs


def _centre_patch_peak(graph: Graph, stage: Sequence[Node], outputs, grid: int, options: PlanOptions) -> int:
    """Stage peak of the centre patch of a grid alone: a lower bound on the grid's stage peak (a patch's in-place
    choices made alone never cost it more bytes than the grid's shared ones)."""
    boxes = _grid_boxes(graph, outputs, grid)
    tiles = [patch_tiles(graph, stage, outputs, boxes[(grid // 2) * grid + grid // 2])]
    return max(working_memory(graph, stage, tiles, options).live) + sum(graph.tensors[t].numel for t in outputs)
