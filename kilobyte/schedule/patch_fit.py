"""Schedule stage: patch-aware resource evaluation for search — every patch schedule (n, p), and the cheapest that fits.

MCUNetV2 searches the network and its schedule together: for each sampled network, the patch stages (the first `n`
nodes of the graph's order run on a p x p grid, `PlanOptions(patch=(n, p))`) that fit the SRAM budget, and among
them the one with the fewest MACs. `patch_candidates` lists them all with their figures; `fit_patch` finds the
cheapest one whose arena fits, exactly as `estimate_resources` would plan it, without planning most of them.

How `fit_patch` stays fast and exact. The MACs of every (n, p) come from one backward walk over the nodes with
every row (column) range of every grid of every cut as a numpy lane (tile geometry is separable: `patch_eval.py`);
the pairs are then visited cheapest first, and a pair is planned only when lower bounds on its arena allow it fits:
(1) a per-node bound on every order of the nodes after the stage — a node's activation inputs are live at its step
(`_rest_bound`); (2) stage-output bytes plus the largest tile of a node read inside the stage (`_Lanes`); (3) per
stage length, its storage units and order (computed once, shared by all grids: they do not depend on p) give the
exact unit bytes of every step, to which the stage's working peak (`StageEvaluator`) is added. Only a pair that
passes all three is planned (`plan.plan_steps` with the shared units and order, `estimate.steps_resources`), and its
arena decides: the arena may be above the peak.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..analysis.macs import node_macs
from ..errors import KilobyteError
from ..ir import Graph, Op
from .estimate import Resources, steps_resources
from .inplace import find_aliases, planned_bytes
from .liveness import lifetimes
from .patch import GRIDS, axis_window, plan_patch_stage, split, stage_cuts, stage_plan
from .patch_eval import StageEvaluator
from .plan import StageDraft, plan_steps
from .plan_types import DEFAULT_OPTIONS, PatchStage, PlanOptions
from .reorder import best_order
from .scratch import base_scratch

FAR = 1 << 36  # an empty lane's range is (FAR, -FAR): min / max unions ignore it (x strides stays in int64)


class PatchFitError(KilobyteError):
    """A bad request to `fit_patch` (the message names the argument and the reason)."""


@dataclass(frozen=True)
class PatchCandidate:
    """One schedule: the per-layer plan (n_nodes 0, grid None) or a patch stage of the first `n_nodes` nodes of the
    graph's order on a `grid` x `grid` split of its output."""

    n_nodes: int
    grid: int | None
    macs: int  # the whole network's, the stage's repeated MACs included (`Plan.macs`)
    extra_macs: int  # macs - the per-layer MACs
    mac_overhead: float  # extra_macs / the per-layer MACs
    input_patch: int  # side of the largest input patch (0 per layer)
    stage_peak: int  # `patch.stage_peak` of the stage: working peak + stage-output bytes (0 per layer)
    total_peak: int  # `choose_patch`'s key: max(stage_peak, the per-layer plan's live bytes after the stage)

    @property
    def patch(self) -> tuple[int, int] | None:
        """The `PlanOptions.patch` value that plans this schedule."""
        return None if self.grid is None else (self.n_nodes, self.grid)


@dataclass(frozen=True)
class PatchFit:
    """The schedule `fit_patch` chose and `estimate_resources(graph, replace(options, patch=patch))` for it."""

    patch: tuple[int, int] | None
    resources: Resources


# -- the lanes: every row (column) range of every grid of every cut, walked back at once ----------------------------
class _Lanes:
    """Per (cut, grid) pair: total and largest output length of every stage node along each axis, the input patch,
    and whether the separable form holds (`patch_eval` module docstring). `pairs[k] = (n, p)`."""

    def __init__(self, graph: Graph, names: list[str], cuts: list[tuple[int, tuple[str, ...]]]):
        self.nodes = [graph.node(name) for name in names[:max((n for n, _ in cuts), default=0)]]
        self.pairs: list[tuple[int, int]] = []
        seeds = []  # per cut: its output, its lanes' first index, (H, W) and grids
        lanes = 0
        for n, outputs in cuts:
            hw = graph.tensors[outputs[0]].shape[1:3]
            grids = [p for p in GRIDS if p <= min(hw)]
            self.pairs += [(n, p) for p in grids]
            seeds.append((outputs[0], lanes, hw, grids))
            lanes += sum(grids)
        self.starts = np.cumsum([0] + [p for *_, grids in seeds for p in grids])[:-1]
        if not self.pairs:  # nothing to walk (reduceat needs at least one group)
            nothing = np.zeros((0, len(self.nodes)), np.int64)
            self.axes = [(nothing, nothing, np.zeros(0, np.int64), np.zeros(0, bool))] * 2
            return
        self.axes = [self._walk(graph, 0, lanes, seeds)]
        self.axes.append(self.axes[0] if self._square(graph, seeds) else self._walk(graph, 1, lanes, seeds))

    def _square(self, graph: Graph, seeds) -> bool:
        """Columns walk like rows: square maps and windows the same along both axes."""
        same = all(hw[0] == hw[1] for _, _, hw, _ in seeds)
        for node in self.nodes:
            window = axis_window(graph, node)
            shape = graph.tensors[graph.activation_inputs(node)[0]].shape
            same = same and (window is None or (window[0] == window[1] and shape[1] == shape[2]))
        return same

    def _walk(self, graph: Graph, axis: int, lanes: int, seeds):
        """(sums, maxima, input extent, exact) per pair: sums / maxima (pairs, nodes) of output lengths.

        A lane a node's output does not need holds (FAR, -FAR), which unions ignore and windows keep empty. Ranges
        are clipped to the map lazily, where a windowed reader may have left them outside it (clipping commutes
        with the unions of non-empty ranges; a range reading only padding marks its pair inexact)."""
        need: dict[str, tuple[np.ndarray, np.ndarray, bool]] = {}  # tensor -> (lo, hi, inside the map already)
        for t, first, hw, grids in seeds:
            lo, hi, _ = need.setdefault(t, (np.full(lanes, FAR, np.int64), np.full(lanes, -FAR, np.int64), True))
            for p in grids:
                lo[first:first + p], hi[first:first + p] = np.array(split(hw[axis], p), np.int64).T
                first += p
        out_len = np.zeros((len(self.nodes), lanes), np.int64)  # (nodes, lanes)
        bad = np.zeros(lanes, bool)
        image = None
        for k in range(len(self.nodes) - 1, -1, -1):
            node = self.nodes[k]
            if node.outputs[0] not in need:
                continue
            lo, hi, inside = need[node.outputs[0]]
            size_out = graph.tensors[node.outputs[0]].shape[1 + axis]
            if not inside:
                lo, hi = np.maximum(lo, 0), np.minimum(hi, size_out)
            np.maximum(np.subtract(hi, lo, out=out_len[k]), 0, out=out_len[k])
            ins = list(dict.fromkeys(graph.activation_inputs(node)))
            size = graph.tensors[ins[0]].shape[1 + axis]
            window = axis_window(graph, node)
            kk, s, d, before, _ = (1, 1, 1, 0, 0) if window is None else window[axis]
            if (kk, s, before) == (1, 1, 0):
                i0, i1, inside = lo, hi, size == size_out  # pointwise along this axis
            else:
                i0 = lo * s - before if (s, before) != (1, 0) else lo
                i1 = hi * s + (d * (kk - 1) + 1 - before - s)
                inside = False
                if (size_out - 1) * s - before >= size or d * (kk - 1) + 1 - before <= 0:  # may read only padding
                    bad |= (hi > lo) & ((i0 >= size) | (i1 <= 0))  # the box walk drops such a box whole
            for t in ins:
                if t in graph.inputs:
                    c0, c1 = np.maximum(i0, 0), np.minimum(i1, size)
                    image = (c0, c1) if image is None else (np.minimum(image[0], c0), np.maximum(image[1], c1))
                old = need.get(t)
                need[t] = (i0, i1, inside) if old is None else (
                    np.minimum(old[0], i0), np.maximum(old[1], i1), inside and old[2])
        sums = np.add.reduceat(out_len, self.starts, axis=1).T
        maxima = np.maximum.reduceat(out_len, self.starts, axis=1).T
        extent = np.zeros(lanes, np.int64) if image is None else np.maximum(image[1] - image[0], 0)
        exact = ~np.logical_or.reduceat(bad, self.starts)
        return sums, maxima, np.maximum.reduceat(extent, self.starts), exact

    def macs(self, weights: np.ndarray) -> np.ndarray:
        """Stage MACs per pair: per node its weights times the tiles' total area (rows x columns, separable)."""
        (rows, *_), (cols, *_) = self.axes
        return (rows * cols * weights[None, :rows.shape[1]]).sum(axis=1)

    def largest_tile(self, channels: np.ndarray, inside: np.ndarray) -> np.ndarray:
        """Per pair, the largest tile bytes of a node whose output is read inside the stage: every patch combines a
        row range with a column range, so the largest tile is the longest row by the longest column."""
        (_, rows, *_), (_, cols, *_) = self.axes
        ns = np.array([n for n, _ in self.pairs], np.int64)
        tiles = rows * cols * channels[None, :rows.shape[1]]
        return np.where(inside[None, :rows.shape[1]] < ns[:, None], tiles, 0).max(axis=1, initial=0)

    def input_patch(self) -> np.ndarray:
        return np.maximum(self.axes[0][2], self.axes[1][2])

    def exact(self) -> np.ndarray:
        return self.axes[0][3] & self.axes[1][3]


# -- bounds and exact figures per stage length ------------------------------------------------------------------------
def _rest_bound(graph: Graph, names: list[str]) -> list[int]:
    """[n]: a lower bound on the live bytes after a stage of the first n nodes (n = 0: per layer), in any order.
    At a node's step its activation inputs are live, in place or not (the caller-owned graph input aside; a conv
    output read by an ADD aside: fused with it, it takes no bytes). A CONV_2D never runs in place, so a single-input
    one not fused with an ADD also holds its output: input + output."""
    convs = {n.outputs[0] for n in graph.nodes if n.op is Op.CONV_2D}
    adds = {t for n in graph.nodes if n.op is Op.ADD for t in n.inputs}
    bound = [0] * (len(names) + 1)
    for k in range(len(names) - 1, -1, -1):
        node = graph.node(names[k])
        ins = [t for t in dict.fromkeys(graph.activation_inputs(node)) if t not in graph.inputs]
        held = [planned_bytes(graph, t) for t in ins if not (node.op is Op.ADD and t in convs)]
        if node.op is Op.CONV_2D and len(ins) == 1 and len(graph.activation_inputs(node)) == 1 \
                and node.outputs[0] not in adds:
            held.append(held[0] + planned_bytes(graph, node.outputs[0]))
        bound[k] = max([bound[k + 1], *held])
    return bound


@dataclass(frozen=True)
class _Prefix:
    """A stage of the first n nodes, whatever its grid: storage units and order (`plan_steps`' values), and the most
    unit bytes at a stage step (the working peak aside) and after the stage."""

    storage: object
    order: object
    stage_units: int
    rest_units: int


class _Schedules:
    """What every (n, p) of one graph shares: cuts, lanes, the stage evaluator, per-n prefixes, the per-layer plan."""

    def __init__(self, graph: Graph, options: PlanOptions, core: str | None):
        self.graph, self.core = graph, core
        self.options = dataclasses.replace(options, patch=None)
        self.names = [n.name for n in graph.nodes]
        self.cuts = stage_cuts(graph, self.names)
        self.outputs = dict(self.cuts)
        self.lanes = _Lanes(graph, self.names, self.cuts)
        self.base_macs = sum(node_macs(graph, n) for n in graph.nodes)
        self.evaluator = StageEvaluator(graph, self.names, self.options)
        stage_macs = self.lanes.macs(self.evaluator.weights)
        self.macs = [self.base_macs - self.evaluator.base_macs(n) + int(m)
                     for (n, _), m in zip(self.lanes.pairs, stage_macs)]
        self.exact = self.lanes.exact()
        self.out_bytes = {n: sum(graph.tensors[t].numel for t in outs) for n, outs in self.cuts}
        inside = self._first_inside_reader()
        tiles = self.lanes.largest_tile(self.evaluator.channels, inside)
        self.rest_bound = _rest_bound(graph, self.names)
        self.bound = [max(self.out_bytes[n] + int(t), self.rest_bound[n]) if ok else self.rest_bound[n]
                      for (n, _), t, ok in zip(self.lanes.pairs, tiles, self.exact)]
        self._prefixes: dict[int, _Prefix] = {}
        self._per_layer = None
        for k, (n, p) in enumerate(self.lanes.pairs):
            if not self.exact[k]:  # the separable form does not hold: the box walk's figures
                plan = stage_plan(graph, self.names, n, p, self.options, place=False)
                self.macs[k] = self.base_macs - plan.base_macs + plan.macs

    def _first_inside_reader(self) -> np.ndarray:
        """Per node of the longest stage, the index of its first reader (a node's tile buffer exists in stages that
        hold that reader)."""
        first = np.full(len(self.lanes.nodes), 1 << 30, np.int64)
        step = {n.outputs[0]: k for k, n in enumerate(self.lanes.nodes)}
        for i, node in enumerate(self.lanes.nodes):
            for t in self.graph.activation_inputs(node):
                if t in step:
                    first[step[t]] = min(first[step[t]], i)
        return first

    def per_layer(self):
        """The per-layer plan's steps and `Resources`."""
        if self._per_layer is None:
            steps = plan_steps(self.graph, self.options)
            self._per_layer = steps, steps_resources(self.graph, steps, self.core)
        return self._per_layer

    def prefix(self, n: int) -> _Prefix:
        if n not in self._prefixes:
            nodes = tuple(self.names[:n])
            stub = PatchStage(n_nodes=n, grid=1, nodes=nodes, outputs=self.outputs[n], tiles=(), input_patch=0,
                              stage_output_bytes=0, working_bytes=0)
            pinned = frozenset(self.graph.node(x).outputs[0] for x in nodes)  # plan._stage_tensors
            storage = find_aliases(self.graph, self.options, pinned)
            order = best_order(self.graph, self.options, prefix=nodes, pinned=pinned, aliases=storage)
            units = lifetimes(self.graph, order.order, storage, stub).unit_bytes
            self._prefixes[n] = _Prefix(storage, order, max(units[:n]), max(units[n:], default=0))
        return self._prefixes[n]

    def working_peak(self, k: int) -> int:
        n, p = self.lanes.pairs[k]
        outputs = self.outputs[n]
        _, h, w, _ = self.graph.tensors[outputs[0]].shape
        fast = self.evaluator.evaluate(n, outputs, split(h, p), split(w, p)) if self.exact[k] else None
        if fast is not None:
            return fast[0]
        return stage_plan(self.graph, self.names, n, p, self.options, place=False).working_peak

    def peak_bound(self, k: int) -> int:
        """The pair's exact unit bytes at its worst step: its plan's peak is at least this (scratch aside)."""
        n, _ = self.lanes.pairs[k]
        prefix = self.prefix(n)
        return max(prefix.stage_units + self.working_peak(k), prefix.rest_units)

    def resources(self, k: int) -> Resources:
        """`estimate_resources(graph, replace(options, patch=pair))`, sharing the stage length's units and order."""
        n, p = self.lanes.pairs[k]
        prefix = self.prefix(n)
        options = dataclasses.replace(self.options, patch=(n, p))
        stage = plan_patch_stage(self.graph, self.names, n, p, options)
        steps = plan_steps(self.graph, options, draft=StageDraft(stage), storage=prefix.storage, order=prefix.order)
        return steps_resources(self.graph, steps, self.core)


# -- the public functions ---------------------------------------------------------------------------------------------
def patch_candidates(graph: Graph, options: PlanOptions = DEFAULT_OPTIONS) -> list[PatchCandidate]:
    """The per-layer plan, then every (n, p) `PlanOptions(patch=(n, p))` plans: the cuts `choose_patch` tries
    (`candidate_cuts` on the graph's own order, the order an explicit stage runs in) x p in `GRIDS` up to the stage
    output's side, with no MAC limit; `options.patch` is ignored.

    `stage_peak`, `macs` and `input_patch` are exactly those of `plan_patch_stage` for the pair. `total_peak` is
    `choose_patch`'s key, max(stage peak, the per-layer plan's live bytes at its steps after the first n). The plan
    of the pair, `make_plan(graph, replace(options, patch=(n, p)))`, peaks at `peak_bytes` >= `stage_peak` always
    (the stage steps hold the stage outputs and the working peak). It equals `total_peak` on every pair
    `tests/schedule/test_patch_fit.py` draws (small MBSpace networks, random nets), but that is not guaranteed:
    after the stage the plan is re-ordered with the stage tensors pinned, which may change its live bytes either
    way. `fit_patch` decides on the exact arena, never on `total_peak`.

    >>> from kilobyte.ir import ConvAttrs, GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 8, 8, 1))], ConvAttrs((2, 2), (1, 1, 1, 1)),
    ...            params={"weight": np.zeros((4, 3, 3, 1))})
    >>> [(c.patch, c.extra_macs, c.input_patch) for c in patch_candidates(b.build([y]))]  # the last patch's rows
    [(None, 0, 0), ((1, 2), 0, 5), ((1, 3), 0, 5), ((1, 4), 0, 3)]
    """
    s = _Schedules(graph, options, None)
    steps, _ = s.per_layer()
    live = [u + b for u, b in zip(steps.life.unit_bytes, base_scratch(graph, steps.life, s.options.kernels))]
    per_layer = max(live, default=0)
    found = [PatchCandidate(0, None, s.base_macs, 0, 0.0, 0, 0, per_layer)]
    input_patch = s.lanes.input_patch()
    for k, (n, p) in enumerate(s.lanes.pairs):
        if s.exact[k]:
            stage_peak, side = s.working_peak(k) + s.out_bytes[n], int(input_patch[k])
        else:
            plan = stage_plan(graph, s.names, n, p, s.options, place=False)
            stage_peak, side = plan.working_peak + plan.stage_output_bytes, plan.input_patch
        extra = s.macs[k] - s.base_macs
        found.append(PatchCandidate(n, p, s.macs[k], extra, extra / s.base_macs if s.base_macs else 0.0, side,
                                    stage_peak, max(stage_peak, max(live[n:], default=0))))
    return found


def fit_patch(graph: Graph, arena_limit: int, options: PlanOptions = DEFAULT_OPTIONS, *, core: str | None = None,
              cost: Callable[[PatchCandidate], float] | None = None) -> PatchFit | None:
    """The schedule — per layer or a patch stage (n, p) of `patch_candidates` — whose arena (`estimate_resources(
    graph, replace(options, patch=...)).arena_bytes`) is at most `arena_limit` bytes, with the fewest MACs; ties: the
    smaller arena, then the smaller n (per layer is n = 0), then the smaller p. None if nothing fits.

    `cost`: a key over a `PatchCandidate` to minimise instead of MACs (e.g. a latency model); every candidate is then
    evaluated first (`patch_candidates`), which is slower. `core`: as in `estimate_resources` (Flash only).
    `options.patch` is ignored. The returned `Resources` are `estimate_resources`' for the chosen pair, exactly.
    """
    if isinstance(arena_limit, bool) or not isinstance(arena_limit, (int, np.integer)) or arena_limit < 0:
        raise PatchFitError(f"fit_patch: arena_limit must be a number of bytes >= 0, not {arena_limit!r}")
    s = _Schedules(graph, options, core)
    if cost is None:
        keys = [(s.base_macs, 0, 0, -1)] + [(m, n, p, k) for k, ((n, p), m) in enumerate(zip(s.lanes.pairs, s.macs))]
    else:
        found = patch_candidates(graph, options)
        keys = [(cost(c), c.n_nodes, c.grid or 0, k - 1) for k, c in enumerate(found)]
    best: tuple | None = None  # (key, arena, k, resources)
    for key in sorted(keys):
        if best is not None and key[0] > best[0][0]:
            break  # costlier than a schedule that fits
        cap = arena_limit if best is None else min(arena_limit, best[1] - 1)  # a tie must have a smaller arena
        resources = _fitting(s, key[3], cap)
        if resources is not None:
            best = (key, resources.arena_bytes, key[3], resources)
    if best is None:
        return None
    return PatchFit(None if best[2] < 0 else s.lanes.pairs[best[2]], best[3])


def _fitting(s: _Schedules, k: int, cap: int) -> Resources | None:
    """Pair k's (-1: per layer) `Resources` if its arena is at most `cap`; None once a lower bound rules it out."""
    if k < 0:
        if s.rest_bound[0] > cap:
            return None
        resources = s.per_layer()[1]
    elif s.bound[k] > cap or s.peak_bound(k) > cap:
        return None
    else:
        resources = s.resources(k)
    return resources if resources.arena_bytes <= cap else None
