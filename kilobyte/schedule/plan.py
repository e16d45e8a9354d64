"""Schedule stage: `make_plan` — Graph -> Plan: order, in-place rules, patch stage, scratch, arena offsets, verified.

The steps, in order: choose the patch stage (optional; it runs first, as one super-step), choose the order
(reorder.py; the patch stage is a forced prefix), compute liveness with the in-place rules (liveness.py), size the
scratch (scratch.py; model-adaptive im2col optionally), place every storage group, every step's scratch and the
patch working region with the arena planner (arena.py), derive each tensor's placement (concat slices get the
output's channel stride), and verify the result independently of how it was built: no two tensors alive at the same
step share a byte unless they are declared aliases, scratch overlaps nothing live, the arena holds everything and
is at least the peak. A violation is a bug and raises `PlanError`. Fused conv + ADD pairs (`Plan.fused`) are checked
too: adjacent in the order, the conv's output unplaced, the ADD's output exactly at the residual's bytes.
"""

from __future__ import annotations

import dataclasses

from ..analysis.macs import node_macs
from ..errors import KilobyteError
from ..ir import Graph
from .arena import plan_groups
from .inplace import Aliases, element_bytes, find_aliases, planned_bytes, slice_placement
from .liveness import Liveness, analyze
from .plan_types import PatchStage, Plan, PlanOptions, TensorPlacement
from .reorder import ReorderResult, best_order
from .scratch import adaptive_im2col, free_conv_columns

DEFAULT_OPTIONS = PlanOptions()

IM2COL_MODES = ("per-layer", "model-adaptive")
CONV_COLUMN_MODES = ("free", "wide")  # PlanOptions.conv_columns
ARENA_STRATEGIES = ("auto", "greedy", "exact")


class PlanError(RuntimeError):
    """A plan failed its own verification: a scheduler bug, not a user mistake."""


def _check_options(options: PlanOptions) -> None:
    patch = options.patch
    patch_ok = patch in (None, "off", "auto") or (
        isinstance(patch, tuple) and len(patch) == 2 and all(isinstance(x, int) and x >= 1 for x in patch))
    problems = [
        (patch_ok, f"patch must be None, 'off', 'auto' or (n_nodes, grid), not {patch!r}"),
        (options.im2col in IM2COL_MODES, f"im2col must be one of {IM2COL_MODES}, not {options.im2col!r}"),
        (options.conv_columns in CONV_COLUMN_MODES,
         f"conv_columns must be one of {CONV_COLUMN_MODES}, not {options.conv_columns!r}"),
        (options.arena_strategy in ARENA_STRATEGIES,
         f"arena_strategy must be one of {ARENA_STRATEGIES}, not {options.arena_strategy!r}"),
        (options.alignment >= 1, f"alignment must be >= 1, not {options.alignment}"),
        (options.exact_budget >= 0, f"exact_budget must be >= 0, not {options.exact_budget}"),
    ]
    for ok, message in problems:
        if not ok:
            raise KilobyteError(f"plan options: {message}")


def _patch_module():
    try:
        from . import patch
    except ImportError:
        raise NotImplementedError("patch-based plans need kilobyte/schedule/patch.py, which is not there yet") from None
    return patch


def _choose_order(graph: Graph, options: PlanOptions) -> tuple[ReorderResult, PatchStage | None, list[str]]:
    """The order and the patch stage (None when off, or when "auto" finds none that lowers the peak)."""
    if options.patch in (None, "off"):
        return best_order(graph, options), None, []
    patch = _patch_module()
    if options.patch == "auto":
        first = best_order(graph, options)
        stage = patch.choose_patch(graph, first.order, options)
        if stage is None:
            return first, None, ["patch auto: no patch stage lowers the peak of the per-layer plan"]
    else:
        n_nodes, grid = options.patch
        if n_nodes > len(graph.nodes):
            raise KilobyteError(f"patch stage of {n_nodes} nodes: graph '{graph.name}' has {len(graph.nodes)}")
        stage = patch.plan_patch_stage(graph, [n.name for n in graph.nodes], n_nodes, grid, options)
    pinned = _stage_tensors(graph, stage)
    return best_order(graph, options, prefix=stage.nodes, pinned=pinned), stage, []


def _stage_tensors(graph: Graph, stage: PatchStage | None) -> frozenset:
    if stage is None:
        return frozenset()
    return frozenset(graph.node(name).outputs[0] for name in stage.nodes)


def _layout(live: Liveness, stage: PatchStage | None, options: PlanOptions):
    """(arena result, group ids, scratch steps) for a liveness."""
    groups, ids, steps = _arena_groups(live, stage)
    return plan_groups(groups, options.arena_strategy, options.alignment), ids, steps


def _sized(graph: Graph, order, options: PlanOptions, aliases: Aliases, stage):
    """Liveness and arena layout with per-layer scratch, or with model-adaptive im2col when asked. Adaptive sizes
    never raise the peak by construction; if they would make the planner's arena larger (fragmentation), the
    per-layer sizes are kept and a note says so. Returns (liveness, layout, notes)."""
    live = analyze(graph, order, options, aliases=aliases, stage=stage)
    layout = _layout(live, stage, options)
    skip = len(stage.nodes) if stage else 0
    if options.conv_columns == "wide":  # six columns for every conv, paid for with SRAM where there is no room
        wide = free_conv_columns(graph, order[skip:], live.live_bytes[skip:], live.scratch[skip:], None, live.fused)
        live = analyze(graph, order, options, aliases=aliases, stage=stage, scratch_override=wide)
        return live, _layout(live, stage, options), []
    def free_columns(wide: bool) -> dict[str, int]:
        return free_conv_columns(graph, order[skip:], live.live_bytes[skip:], live.scratch[skip:], live.peak,
                                 live.fused, wide)

    free = free_columns(True)  # six columns where they fit under the peak
    grown = _grown(graph, order, options, aliases, stage, (live, layout), free)
    if grown[0] is live:  # their layout would enlarge the arena (fragmentation): two columns for 1x1 convs only
        free = free_columns(False)
        grown = _grown(graph, order, options, aliases, stage, (live, layout), free)
    live, layout = grown[:2]
    if options.im2col != "model-adaptive":
        return live, layout, []
    sizes = adaptive_im2col(graph, order[skip:], live.live_bytes[skip:], live.scratch[skip:], live.peak)
    return _grown(graph, order, options, aliases, stage, (live, layout), {**free, **sizes},
                  "im2col: model-adaptive buffers would enlarge the arena; kept per-layer sizes")


def _grown(graph: Graph, order, options: PlanOptions, aliases: Aliases, stage, base, sizes: dict, note: str = ""):
    """(liveness, layout, notes) with the scratch `sizes`, or `base` (with the note) if they would raise the peak
    or enlarge the planner's arena (fragmentation)."""
    live, layout = base
    if not sizes:
        return live, layout, []
    grown = analyze(graph, order, options, aliases=aliases, stage=stage, scratch_override=sizes)
    grown_layout = _layout(grown, stage, options)
    if grown.peak > live.peak or grown_layout[0].arena_bytes > layout[0].arena_bytes:
        return live, layout, [note] if note else []
    return grown, grown_layout, []


def _arena_groups(live: Liveness, stage: PatchStage | None) -> tuple[list, list, list]:
    """Arena requests: one group per storage group (its units' lifetimes), one per step's scratch, one for the
    patch working region. Returns (groups, group ids, scratch steps)."""
    by_group: dict[str, list] = {}
    for r in live.first:
        by_group.setdefault(live.group[r], []).append((live.aliases.size[r], live.first[r], live.last[r]))
    ids = list(by_group)
    groups = [by_group[g] for g in ids]
    steps = [i for i, s in enumerate(live.scratch) if s > 0]
    groups += [[(live.scratch[i], i, i)] for i in steps]
    if stage is not None:
        groups.append([(stage.working_bytes, 0, len(stage.nodes) - 1)])
    return groups, ids, steps


def _placements(graph: Graph, live: Liveness, root_offset: dict[str, int]) -> dict[str, TensorPlacement]:
    """Every tensor that exists whole: its unit's offset plus its slice offset. (Patch-stage tensors read only
    inside the stage never exist whole: they live in `PatchStage.tile_offsets`.)"""
    al = live.aliases
    out: dict[str, TensorPlacement] = {}
    for t, r in al.root.items():
        if r in root_offset:
            delta, stride = slice_placement(al, graph, t)
            out[t] = TensorPlacement(root_offset[r] + delta, planned_bytes(graph, t), stride)
    return out


def _macs(graph: Graph, stage: PatchStage | None) -> tuple[int, float]:
    base = sum(node_macs(graph, n) for n in graph.nodes)
    macs = base if stage is None else base - stage.base_macs + stage.macs
    return macs, (macs - base) / base if base else 0.0


def make_plan(graph: Graph, options: PlanOptions = DEFAULT_OPTIONS) -> Plan:
    """Plan `graph` for one static arena: int8 graphs at their tensors' real sizes (a float32 softmax tail takes 4 B
    per element), float graphs as if int8 (1 B per element).

    >>> import numpy as np
    >>> from kilobyte.ir import ConvAttrs, GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> x = b.input((1, 8, 8, 4))
    >>> y = b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": np.zeros((8, 3, 3, 4))})
    >>> p = make_plan(b.build([b.node(Op.RELU, [y])]))
    >>> p.peak_bytes, p.arena_bytes, p.scratch, p.input_bytes
    (1024, 1024, {'conv_2d_0': (512, 432)}, 256)
    """
    _check_options(options)
    chosen, stage, notes = _choose_order(graph, options)
    aliases = find_aliases(graph, options, _stage_tensors(graph, stage))
    live, (arena, ids, steps), more = _sized(graph, chosen.order, options, aliases, stage)
    group_offset = dict(zip(ids, arena.offsets))
    root_offset = {r: group_offset[live.group[r]] for r in live.first}
    scratch = {chosen.order[i]: (o, live.scratch[i]) for i, o in zip(steps, arena.offsets[len(ids):])}
    if stage is not None:
        stage = _patch_module().place_stage(stage, arena.offsets[-1])
    macs, overhead = _macs(graph, stage)
    tile_scratch = max((b for _, b in stage.tile_scratch.values()), default=0) if stage else 0
    lower = max(chosen.lower_bound, live.live_bytes[0] if stage else 0)
    plan = Plan(
        order=chosen.order, placements=_placements(graph, live, root_offset), scratch=scratch,
        arena_bytes=arena.arena_bytes, peak_bytes=live.peak, scratch_bytes=max([tile_scratch, *live.scratch]),
        input_bytes=sum(planned_bytes(graph, t) for t in graph.inputs), macs=macs, mac_overhead=overhead,
        optimal=chosen.optimal, lower_bound=lower, live_bytes=live.live_bytes, patch=stage,
        options=options, notes=(*chosen.notes, *notes, *more), inplace=dict(live.inplace), fused=dict(live.fused),
        consumed=dict(live.consumed))
    verify_plan(graph, plan, aliases)
    return plan


def plan_to_dict(plan: Plan) -> dict:
    """The plan's figures as plain JSON-ready values (what `kilobyte plan --json` prints)."""
    patch = None
    if plan.patch is not None:
        p = plan.patch
        patch = {"n_nodes": p.n_nodes, "grid": p.grid, "input_patch": p.input_patch,
                 "stage_output_bytes": p.stage_output_bytes, "working_bytes": p.working_bytes,
                 "nodes": list(p.nodes)}
    return {
        "peak_bytes": plan.peak_bytes, "arena_bytes": plan.arena_bytes, "scratch_bytes": plan.scratch_bytes,
        "macs": plan.macs, "input_bytes": plan.input_bytes, "mac_overhead": plan.mac_overhead,
        "optimal": plan.optimal, "order": list(plan.order), "patch": patch, "lower_bound": plan.lower_bound,
        "live_bytes": list(plan.live_bytes), "notes": list(plan.notes),
        "fragmentation": (plan.arena_bytes - plan.peak_bytes) / plan.arena_bytes if plan.arena_bytes else 0.0,
        "placements": {t: dataclasses.asdict(p) for t, p in plan.placements.items()},
        "scratch": {n: {"offset": o, "bytes": b} for n, (o, b) in plan.scratch.items()},
        "inplace": dict(plan.inplace), "fused": dict(plan.fused), "consumed": dict(plan.consumed),
    }


# -- verification ---------------------------------------------------------------------------------------------
def _span(graph: Graph, t: str, p: TensorPlacement) -> tuple[int, int]:
    """First and one-past-last byte a (possibly channel-strided) tensor touches."""
    channels = graph.tensors[t].shape[-1]
    rows = graph.tensors[t].numel // channels
    return p.offset, p.offset + ((rows - 1) * p.channel_stride + channels) * element_bytes(graph, t)


def _lifetimes(graph: Graph, plan: Plan) -> dict[str, tuple[int, int]]:
    """Per-tensor [first, last] step, independent of the storage units (stage tensors start at step 0)."""
    pos = {name: i for i, name in enumerate(plan.order)}
    n_stage = plan.patch.n_nodes if plan.patch else 0
    life: dict[str, list[int]] = {}
    for n in graph.nodes:
        start = 0 if pos[n.name] < n_stage else pos[n.name]
        life[n.outputs[0]] = [start, pos[n.name]]
    for n in graph.nodes:
        for t in n.inputs:
            if t in life:
                life[t][1] = max(life[t][1], pos[n.name])
    for t in graph.outputs:
        if t in life:
            life[t][1] = len(plan.order) - 1
    return {t: (a, b) for t, (a, b) in life.items()}


def _same_unit_ok(graph: Graph, al: Aliases, a: str, b: str) -> bool:
    """Two tensors of one unit may share bytes only if one contains the other or their channels are disjoint."""
    def chain(t):
        seen = [t]
        while t in al.slice_of:
            t = al.slice_of[t][0]
            seen.append(t)
        return seen

    if a not in al.slice_of or b not in al.slice_of or a in chain(b) or b in chain(a):
        return True
    (da, _), (db, _) = slice_placement(al, graph, a), slice_placement(al, graph, b)
    ca, cb = graph.tensors[a].shape[-1], graph.tensors[b].shape[-1]
    return da + ca <= db or db + cb <= da


def _items_by_step(graph: Graph, plan: Plan) -> list[list]:
    """Per step: (lo, hi, tensor or None) of everything that must hold its bytes at that step."""
    steps: list[list] = [[] for _ in plan.order]
    life = _lifetimes(graph, plan)
    for t, p in plan.placements.items():
        lo, hi = _span(graph, t, p)
        for i in range(life[t][0], life[t][1] + 1):
            steps[i].append((lo, hi, t))
    pos = {name: i for i, name in enumerate(plan.order)}
    for name, (o, b) in plan.scratch.items():
        steps[pos[name]].append((o, o + b, None))
    if plan.patch is not None:
        region = (plan.patch.working_offset, plan.patch.working_offset + plan.patch.working_bytes, None)
        for i in range(plan.patch.n_nodes):
            steps[i].append(region)
    return steps


def _check_step(graph: Graph, plan: Plan, al: Aliases, i: int, items: list) -> None:
    node = plan.order[i]
    inplace = {al.root[plan.inplace[node]], al.root[graph.node(node).outputs[0]]} if node in plan.inplace else set()
    items = sorted(x for x in items if x[1] > x[0])
    for k, (lo, hi, a) in enumerate(items):
        for lo2, hi2, b in items[k + 1:]:
            if lo2 >= hi:
                break
            if a is not None and b is not None:
                if al.root[a] == al.root[b] and _same_unit_ok(graph, al, a, b):
                    continue
                if {al.root[a], al.root[b]} == inplace:
                    continue
            raise PlanError(f"plan of '{graph.name}': step {i} ({node}): {a or 'scratch'} [{lo}, {hi}) overlaps "
                            f"{b or 'scratch'} [{lo2}, {hi2})")


def verify_plan(graph: Graph, plan: Plan, aliases: Aliases) -> None:
    """Raise `PlanError` unless no two buffers alive at one step overlap (except declared aliases), everything
    fits in the arena, and lower bound <= peak <= arena."""
    if not plan.lower_bound <= plan.peak_bytes <= plan.arena_bytes:
        raise PlanError(f"plan of '{graph.name}': need lower bound {plan.lower_bound} <= peak {plan.peak_bytes} "
                        f"<= arena {plan.arena_bytes}")
    if plan.patch is not None:
        _check_tiles(graph, plan.patch)
    _check_fused(graph, plan)
    _check_consumed(graph, plan, aliases)
    steps = _items_by_step(graph, plan)
    for i, items in enumerate(steps):
        for lo, hi, t in items:
            if lo < 0 or hi > plan.arena_bytes:
                raise PlanError(f"plan of '{graph.name}': {t or 'scratch'} [{lo}, {hi}) is outside the arena "
                                f"of {plan.arena_bytes} B")
        _check_step(graph, plan, aliases, i, items)


def _check_fused(graph: Graph, plan: Plan) -> None:
    """Each fused pair: the ADD right after the conv, the conv's output unplaced, the ADD's output exactly over the
    residual (the other ADD input), declared in place."""
    pos = {name: i for i, name in enumerate(plan.order)}
    for conv, add in plan.fused.items():
        y, node = graph.node(conv).outputs[0], graph.node(add)
        residual = next((t for t in node.inputs if t != y), None)
        out, res = plan.placements.get(node.outputs[0]), plan.placements.get(residual)
        ok = (pos[add] == pos[conv] + 1 and y in node.inputs and y not in plan.placements and plan.inplace.get(add)
              == residual and out is not None and res is not None
              and (out.offset, out.channel_stride) == (res.offset, res.channel_stride))
        if not ok:
            raise PlanError(f"plan of '{graph.name}': fused pair {conv} + {add} is not adjacent, or its ADD output is "
                            f"not exactly over the residual '{residual}'")


def _check_consumed(graph: Graph, plan: Plan, aliases: Aliases) -> None:
    """Each consumed conv input: no graph input or output, and no tensor of its unit read at a later step (its
    kernel may overwrite the input rows it has read)."""
    pos = {name: i for i, name in enumerate(plan.order)}
    for conv, t in plan.consumed.items():
        root = aliases.root.get(t)
        later = [n.name for n in graph.nodes if pos[n.name] > pos[conv]
                 and any(aliases.root.get(u) == root for u in n.inputs)]
        if root is None or graph.node(conv).inputs[0] != t or later or any(
                aliases.root.get(u) == root for u in graph.outputs):
            raise PlanError(f"plan of '{graph.name}': {conv} may overwrite its input '{t}', but "
                            f"{later[0] if later else 'a graph input or output'} still needs it")


def _check_tiles(graph: Graph, stage: PatchStage) -> None:
    """Every tile buffer and tile scratch lies inside the patch working region."""
    top = stage.working_offset + stage.working_bytes
    boxes = list(stage.tile_scratch.values())
    for k, name in enumerate(stage.nodes):
        if name in stage.tile_offsets:
            channels = graph.tensors[graph.node(name).outputs[0]].shape[-1]
            area = max((b[1] - b[0]) * (b[3] - b[2]) for b in (patch[k].out_box for patch in stage.tiles))
            boxes.append((stage.tile_offsets[name], area * channels))
    if any(o < stage.working_offset or o + b > top for o, b in boxes):
        raise PlanError(f"plan of '{graph.name}': a patch tile buffer leaves the working region")
