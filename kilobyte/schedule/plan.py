"""Schedule stage: `make_plan` — Graph -> Plan, as a literal list of named steps, each computed once.

    draft   = draft_patch_stage(graph, options)   StageDraft: the patch stage (region-relative offsets) or None
    storage = storage_units(graph, draft)          Aliases: RESHAPE aliases, CONCAT slices, in-place candidates
    order   = execution_order(graph, draft, ...)   ReorderResult: the order with the smallest peak (stage first)
    life    = lifetimes(graph, order, storage)     Lifetimes: live steps, in-place groups, fused pairs, held bytes
    scratch = size_scratch(graph, life, options)   ScratchSizes: per-step scratch the kernel set reads, and tiers of
                                                   extra im2col columns from free bytes
    layout  = lay_out_arena(life, scratch, ...)    ArenaLayout: offsets of every group, the scratch tier kept
    plan    = assemble_plan(graph, steps)          Plan: placements, scratch offsets, the placed patch stage
    verify_plan(graph, plan, storage)              independent check; a violation is a bug (`PlanError`)

`plan_steps` runs the first six (`estimate_resources` stops there: no verification, no C); `make_plan` all eight.
A per-layer plan finds its storage units and order inside the draft step (it needs them to choose a stage with
`patch="auto"`) and reuses them; a patch stage pins its tensors, so its plan finds them again with the stage first.

Verification is independent of how the plan was built: no two tensors alive at the same step share a byte unless they
are declared aliases, scratch overlaps nothing live, the arena holds everything and is at least the peak. Fused conv
+ ADD pairs (`Plan.fused`) are checked too: adjacent in the order, the conv's output unplaced, the ADD's output
exactly at the residual's bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..analysis.macs import node_macs
from ..errors import KilobyteError
from ..ir import Graph
from ..kernels import KERNEL_SETS
from . import patch as patching
from .arena import ArenaResult, plan_groups
from .inplace import Aliases, element_bytes, find_aliases, planned_bytes, slice_placement
from .liveness import Lifetimes, lifetimes
from .plan_types import DEFAULT_OPTIONS, PatchStage, Plan, PlanOptions, TensorPlacement
from .reorder import ReorderResult, best_order
from .scratch import adaptive_im2col, base_scratch, free_conv_columns

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
        (options.kernels in KERNEL_SETS, f"kernels must be one of {KERNEL_SETS}, not {options.kernels!r}"),
    ]
    for ok, message in problems:
        if not ok:
            raise KilobyteError(f"plan options: {message}")


# -- the values passed between the steps ---------------------------------------------------------------------------
@dataclass(frozen=True)
class StageDraft:
    """The patch stage (tile offsets relative to its working region) or None; for a per-layer plan, the storage
    units and order already found (reused by the next steps); notes."""

    stage: PatchStage | None
    storage: Aliases | None = None
    order: ReorderResult | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScratchSizes:
    """Per-step scratch: `base` (what each kernel reads per layer) and the tiers of more im2col columns from free
    bytes, best first: each (columns, model-adaptive sizes or None). `wide`: the first tier is taken whatever it
    costs (conv_columns="wide")."""

    base: tuple[int, ...]
    tiers: tuple[tuple[tuple[int, ...], tuple[int, ...] | None], ...]
    wide: bool = False


@dataclass(frozen=True)
class ArenaLayout:
    """The packed arena: one offset per storage group (`groups`), per scratch step (`scratch_steps`) and, last, the
    patch working region; the scratch per step it was packed with, and the live bytes that gives."""

    arena: ArenaResult
    groups: tuple[str, ...]
    scratch_steps: tuple[int, ...]
    scratch: tuple[int, ...]
    live_bytes: tuple[int, ...]
    notes: tuple[str, ...] = ()

    @property
    def peak(self) -> int:
        return max(self.live_bytes, default=0)


@dataclass(frozen=True)
class PlanSteps:
    """Every step's value, in order (module docstring)."""

    options: PlanOptions
    draft: StageDraft
    storage: Aliases
    order: ReorderResult
    life: Lifetimes
    scratch: ScratchSizes
    layout: ArenaLayout

    @property
    def scratch_bytes(self) -> int:
        """The largest scratch of any step, or of any patch tile."""
        stage = self.draft.stage
        tiles = max((b for _, b in stage.tile_scratch.values()), default=0) if stage else 0
        return max([tiles, *self.layout.scratch])


# -- the steps --------------------------------------------------------------------------------------------------------
def plan_steps(graph: Graph, options: PlanOptions = DEFAULT_OPTIONS, *, draft: StageDraft | None = None,
               storage: Aliases | None = None, order: ReorderResult | None = None) -> PlanSteps:
    """Run the planner's steps up to the arena layout (no verification). `draft`, `storage`, `order`: the values of
    those steps for `options` when the caller already has them (`patch_fit` reuses one stage length's storage units
    and order for every grid); they must be exactly what the steps would compute."""
    _check_options(options)
    draft = draft or draft_patch_stage(graph, options)
    storage = storage or storage_units(graph, draft, options)
    order = order or execution_order(graph, draft, storage, options)
    life = lifetimes(graph, order.order, storage, draft.stage)
    scratch = size_scratch(graph, life, options)
    layout = lay_out_arena(life, scratch, draft.stage, options)
    return PlanSteps(options, draft, storage, order, life, scratch, layout)


def draft_patch_stage(graph: Graph, options: PlanOptions) -> StageDraft:
    """The patch stage: none ("off"), the one asked for ((n_nodes, grid), on the graph's order), or the one with the
    smallest total peak on the per-layer plan ("auto"; None when none lowers it)."""
    if isinstance(options.patch, tuple):
        n_nodes, grid = options.patch
        if n_nodes > len(graph.nodes):
            raise KilobyteError(f"patch stage of {n_nodes} nodes: graph '{graph.name}' has {len(graph.nodes)}")
        return StageDraft(patching.plan_patch_stage(graph, [n.name for n in graph.nodes], n_nodes, grid, options))
    storage = find_aliases(graph, options)
    order = best_order(graph, options, aliases=storage)
    if options.patch != "auto":
        return StageDraft(None, storage, order)
    life = lifetimes(graph, order.order, storage)
    live = [u + s for u, s in zip(life.unit_bytes, base_scratch(graph, life, options.kernels))]
    notes: list[str] = []
    stage = patching.choose_patch(graph, order.order, options, live, notes)
    if stage is None:
        notes.insert(0, "patch auto: no patch stage lowers the peak of the per-layer plan"
                     + (" within the MAC limit" if notes else ""))
        return StageDraft(None, storage, order, tuple(notes))
    return StageDraft(stage, notes=tuple(notes))


def _stage_tensors(graph: Graph, stage: PatchStage | None) -> frozenset:
    if stage is None:
        return frozenset()
    return frozenset(graph.node(name).outputs[0] for name in stage.nodes)


def storage_units(graph: Graph, draft: StageDraft, options: PlanOptions) -> Aliases:
    """The storage units (inplace.py): the draft's for a per-layer plan; with a stage, its tensors pinned."""
    return draft.storage or find_aliases(graph, options, _stage_tensors(graph, draft.stage))


def execution_order(graph: Graph, draft: StageDraft, storage: Aliases, options: PlanOptions) -> ReorderResult:
    """The order with the smallest peak (reorder.py): the draft's, or with the patch stage as a forced prefix."""
    if draft.order is not None:
        return draft.order
    return best_order(graph, options, prefix=draft.stage.nodes, pinned=_stage_tensors(graph, draft.stage),
                      aliases=storage)


def size_scratch(graph: Graph, life: Lifetimes, options: PlanOptions) -> ScratchSizes:
    """Per-layer scratch and the tiers of more columns (scratch.py): six columns where they fit under the peak, else
    two for 1x1 convs; with model-adaptive im2col each tier also offers its adaptive sizes."""
    base = base_scratch(graph, life, options.kernels)
    k, order = life.n_stage, life.order
    held = [u + s for u, s in zip(life.unit_bytes, base)]
    peak = max(held, default=0)

    def with_sizes(sizes: dict[str, int], start: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sizes.get(name, s) for name, s in zip(order, start))

    def columns(room: int | None, wide: bool) -> tuple[int, ...]:
        return with_sizes(free_conv_columns(graph, order[k:], held[k:], base[k:], room, life.fused, options.kernels,
                                            wide), base)

    if options.conv_columns == "wide":  # six columns for every conv, paid for with SRAM where there is no room
        return ScratchSizes(base, ((columns(None, True), None),), wide=True)
    tiers = []
    for cols in (columns(peak, True), columns(peak, False), base):
        adaptive = None
        if options.im2col == "model-adaptive":
            live = [u + s for u, s in zip(life.unit_bytes, cols)]
            adaptive = with_sizes(adaptive_im2col(graph, order[k:], live[k:], cols[k:], peak, options.kernels), cols)
        tiers.append((cols, adaptive))
    return ScratchSizes(base, tuple(tiers))


def lay_out_arena(life: Lifetimes, scratch: ScratchSizes, stage: PatchStage | None,
                  options: PlanOptions) -> ArenaLayout:
    """Pack the arena (arena.py): the first tier of scratch whose layout neither raises the peak nor enlarges the
    arena of the per-layer scratch (fragmentation), its model-adaptive sizes when they do not either."""
    if scratch.wide:
        return _pack(life, scratch.tiers[0][0], stage, options)
    base: list = []  # packed lazily: only needed when a tier's arena is above the peak

    def fits(layout: ArenaLayout) -> bool:
        if not base:
            base.append(_pack(life, scratch.base, stage, options))
        bound = base[0]
        if layout.peak > bound.peak:
            return False
        return layout.arena.arena_bytes <= bound.peak or layout.arena.arena_bytes <= bound.arena.arena_bytes

    for columns, adaptive in scratch.tiers:
        layout = _pack(life, columns, stage, options) if columns != scratch.base or not base else base[0]
        if not fits(layout):
            continue
        if adaptive is None or adaptive == columns:
            return layout
        grown = _pack(life, adaptive, stage, options)
        if fits(grown):
            return grown
        return dataclasses.replace(layout, notes=("im2col: model-adaptive buffers would enlarge the arena; kept "
                                                  "per-layer sizes",))
    return base[0]


def _pack(life: Lifetimes, scratch: tuple[int, ...], stage: PatchStage | None, options: PlanOptions) -> ArenaLayout:
    """Arena requests: one group per storage group (its units' lifetimes), one per step's scratch, one for the
    patch working region; packed by the arena planner."""
    by_group: dict[str, list] = {}
    for r in life.first:
        by_group.setdefault(life.group[r], []).append((life.aliases.size[r], life.first[r], life.last[r]))
    ids = tuple(by_group)
    groups = [by_group[g] for g in ids]
    steps = tuple(i for i, s in enumerate(scratch) if s > 0)
    groups += [[(scratch[i], i, i)] for i in steps]
    if stage is not None:
        groups.append([(stage.working_bytes, 0, len(stage.nodes) - 1)])
    arena = plan_groups(groups, options.arena_strategy, options.alignment)
    live = tuple(u + s for u, s in zip(life.unit_bytes, scratch))
    return ArenaLayout(arena, ids, steps, tuple(scratch), live)


def assemble_plan(graph: Graph, steps: PlanSteps) -> Plan:
    """The `Plan`: every tensor's placement, each step's scratch offset, the patch stage placed in the arena."""
    life, layout, order, stage = steps.life, steps.layout, steps.order, steps.draft.stage
    group_offset = dict(zip(layout.groups, layout.arena.offsets))
    root_offset = {r: group_offset[life.group[r]] for r in life.first}
    offsets = layout.arena.offsets[len(layout.groups):]
    scratch = {order.order[i]: (o, layout.scratch[i]) for i, o in zip(layout.scratch_steps, offsets)}
    if stage is not None:
        stage = patching.place_stage(stage, layout.arena.offsets[-1])
    macs, overhead = plan_macs(graph, stage)
    return Plan(
        order=order.order, placements=_placements(graph, life, root_offset), scratch=scratch,
        arena_bytes=layout.arena.arena_bytes, peak_bytes=layout.peak,
        scratch_bytes=steps.scratch_bytes, input_bytes=input_bytes(graph),
        macs=macs, mac_overhead=overhead, optimal=order.optimal,
        lower_bound=max(order.lower_bound, layout.live_bytes[0] if stage else 0), live_bytes=layout.live_bytes,
        patch=stage, options=steps.options, notes=(*order.notes, *steps.draft.notes, *layout.notes),
        inplace=dict(life.inplace), fused=dict(life.fused), consumed=dict(life.consumed))


def _placements(graph: Graph, life: Lifetimes, root_offset: dict[str, int]) -> dict[str, TensorPlacement]:
    """Every tensor that exists whole: its unit's offset plus its slice offset. (Patch-stage tensors read only
    inside the stage never exist whole: they live in `PatchStage.tile_offsets`.)"""
    al = life.aliases
    out: dict[str, TensorPlacement] = {}
    for t, r in al.root.items():
        if r in root_offset:
            delta, stride = slice_placement(al, graph, t)
            out[t] = TensorPlacement(root_offset[r] + delta, planned_bytes(graph, t), stride)
    return out


def input_bytes(graph: Graph) -> int:
    """The caller-owned input buffer(s)."""
    return sum(planned_bytes(graph, t) for t in graph.inputs)


def output_bytes(graph: Graph) -> int:
    """The caller-owned output buffer(s) (the firmware's `fw_output`, an application's result array)."""
    return sum(planned_bytes(graph, t) for t in graph.outputs)


def plan_macs(graph: Graph, stage: PatchStage | None) -> tuple[int, float]:
    """(MACs with the patch stage's repeated ones, overhead as a fraction of the per-layer MACs)."""
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
    >>> y = b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": np.zeros((16, 3, 3, 4))})
    >>> p = make_plan(b.build([b.node(Op.RELU, [y])]))
    >>> p.peak_bytes, p.arena_bytes, p.scratch, p.input_bytes
    (2048, 2048, {}, 256)
    >>> make_plan(b.build([b.node(Op.RELU, [y])]), PlanOptions(kernels="dsp")).scratch  # DSP: 6 columns, free bytes
    {'conv_2d_0': (1024, 432)}
    """
    steps = plan_steps(graph, options)
    plan = assemble_plan(graph, steps)
    verify_plan(graph, plan, steps.storage)
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
