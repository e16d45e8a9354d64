"""Schedule stage: liveness and live bytes of a graph for ONE given execution order, with the in-place rules.

Time is counted in steps: step i runs `order[i]`. A storage unit (see inplace.py) is live from the first step that
produces any of its tensors to the last step that reads any of them, inclusive (graph outputs: to the last step), so
an op's inputs and output are live together at its step. An in-place node's output unit joins its dying input's
*group*: the group is placed at one arena offset, and at the in-place step it occupies max(input, output) bytes, not
the sum. Scratch is live at its step only. The caller-owned graph input is not counted.

A fusable conv + ADD pair (inplace.py) is fused when the ADD runs right after the conv and the residual's unit dies
at the ADD (it is no graph output): then the conv's output unit takes no bytes at all, and the ADD's output joins
the residual's group as an in-place ADD does. (Fusing never costs more than running the pair apart.)

This is the reference model: the reorder search computes the same numbers incrementally over sets of nodes, and the
tests check both against each other and against brute force.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Graph, Op
from .inplace import Aliases, find_aliases
from .plan_types import PatchStage, PlanOptions
from .scratch import kernel_scratch

DEFAULT_OPTIONS = PlanOptions()


@dataclass(frozen=True)
class Liveness:
    order: tuple[str, ...]
    first: dict[str, int]  # unit root -> first live step
    last: dict[str, int]  # unit root -> last live step
    inplace: dict[str, str]  # node -> the input tensor whose bytes it overwrites
    group: dict[str, str]  # unit root -> group id (root of the oldest unit of its in-place chain)
    scratch: tuple[int, ...]  # scratch bytes per step
    live_bytes: tuple[int, ...]  # unit + scratch bytes live at each step
    aliases: Aliases
    fused: dict[str, str] = field(default_factory=dict)  # conv node -> the ADD it runs with (one kernel call)
    consumed: dict[str, str] = field(default_factory=dict)  # CONV_2D node -> its input, whose unit dies at its step

    @property
    def peak(self) -> int:
        return max(self.live_bytes, default=0)


def unit_lifetimes(graph: Graph, order, aliases: Aliases) -> tuple[dict[str, int], dict[str, int]]:
    """First and last step of every storage unit under `order`."""
    pos = {name: i for i, name in enumerate(order)}
    last_step = len(order) - 1
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for n in graph.nodes:
        for t in n.outputs:
            r = aliases.root[t]
            first[r] = min(first.get(r, pos[n.name]), pos[n.name])
            last[r] = max(last.get(r, pos[n.name]), pos[n.name])
            if t in graph.outputs:
                last[r] = last_step
        for t in n.inputs:
            r = aliases.root.get(t)  # constants and graph inputs have no unit
            if r is not None:
                last[r] = max(last.get(r, pos[n.name]), pos[n.name])
    return first, last


def output_units(graph: Graph, aliases: Aliases) -> set[str]:
    return {aliases.root[t] for t in graph.outputs if t in aliases.root}


def choose_inplace(node: str, step: int, aliases: Aliases, last: dict[str, int], outs: set[str]) -> str | None:
    """The input `node` overwrites at `step`: the first candidate whose unit dies there (never a graph output)."""
    for c in aliases.candidates.get(node, ()):
        r = aliases.root[c]
        if last[r] == step and r not in outs:
            return c
    return None


def fused_pairs(order, aliases: Aliases, last: dict[str, int], outs: set[str], start: int = 0) -> dict[str, str]:
    """conv -> ADD for the fusable pairs (`aliases.fusable`) that run as one step under `order`: the ADD right after
    the conv, at or after step `start` (the end of a patch stage), the residual's unit dying at the ADD."""
    pos = {name: i for i, name in enumerate(order)}
    fused: dict[str, str] = {}
    for conv, pair in aliases.fusable.items():
        i, r = pos[conv], aliases.root[pair.residual]
        if i >= start and pos[pair.add] == i + 1 and last.get(r) == i + 1 and r not in outs:
            fused[conv] = pair.add
    return fused


def analyze(graph: Graph, order, options: PlanOptions = DEFAULT_OPTIONS, *, aliases: Aliases | None = None,
            scratch_override: dict[str, int] | None = None, stage: PatchStage | None = None) -> Liveness:
    """Live bytes per step of `graph` run in `order` (a topological order of all node names).

    With a patch `stage` (its nodes first in `order`) the first `stage.n_nodes` steps are one super-step: units
    holding a stage output are live from step 0, units read only inside the stage live in tiles (not counted here),
    and those steps hold `stage.working_peak` more bytes; in-place rules, fusion and scratch apply after the stage.
    """
    aliases = aliases or find_aliases(graph, options)
    order = tuple(order)
    nodes = {n.name: n for n in graph.nodes}
    first, last = unit_lifetimes(graph, order, aliases)
    n_stage = stage.n_nodes if stage else 0
    if stage:
        _stage_units(graph, stage, aliases, first, last)
    outs = output_units(graph, aliases)
    fused = fused_pairs(order, aliases, last, outs, n_stage)
    fused_adds = _unstore_fused(aliases, fused, first, last)
    inplace: dict[str, str] = {}
    group = {r: r for r in first}
    scratch = [0] * len(order)
    overlap = [0] * len(order)  # bytes counted twice at an in-place step (input and output share them)
    for i, name in enumerate(order[n_stage:], start=n_stage):
        c = fused_adds.get(name) or choose_inplace(name, i, aliases, last, outs)
        if c is not None:
            inplace[name] = c
            src, dst = aliases.root[c], aliases.root[nodes[name].outputs[0]]
            group[dst] = group[src]
            overlap[i] = min(aliases.size[src], aliases.size[dst])
        scratch[i] = _scratch(graph, nodes[name], c is not None and name not in fused_adds, aliases, scratch_override)
    diff = [0] * (len(order) + 1)
    for r in first:
        diff[first[r]] += aliases.size[r]
        diff[last[r] + 1] -= aliases.size[r]
    live, running = [], 0
    for i in range(len(order)):
        running += diff[i]
        working = stage.working_peak if i < n_stage else 0
        live.append(running - overlap[i] + scratch[i] + working)
    return Liveness(order, first, last, inplace, group, tuple(scratch), tuple(live), aliases, fused,
                    consumed_inputs(graph, order, aliases, last, outs, n_stage))


def consumed_inputs(graph: Graph, order, aliases: Aliases, last: dict[str, int], outs: set[str],
                    start: int) -> dict[str, str]:
    """CONV_2D node -> its activation input, for the convs (fused with an ADD or not) at or after step `start` whose
    input unit dies at their step (no graph input or output): nothing reads those bytes after the conv, so its kernel
    may overwrite the input rows it has finished reading (the DSP kernels keep im2col columns there)."""
    nodes = {n.name: n for n in graph.nodes}
    consumed: dict[str, str] = {}
    for i, name in enumerate(order[start:], start=start):
        node = nodes[name]
        if node.op is not Op.CONV_2D:
            continue
        r = aliases.root.get(node.inputs[0])
        if r is not None and last[r] == i and r not in outs:
            consumed[name] = node.inputs[0]
    return consumed


def _unstore_fused(aliases: Aliases, fused: dict[str, str], first: dict, last: dict) -> dict[str, str]:
    """Drop the units of fused convs' outputs (never stored); return each fused ADD's residual (it overwrites)."""
    for conv in fused:
        y = aliases.root[aliases.fusable[conv].conv_out]
        del first[y], last[y]
    return {add: aliases.fusable[conv].residual for conv, add in fused.items()}


def _scratch(graph: Graph, node, inplace: bool, aliases: Aliases, override: dict | None) -> int:
    if override and node.name in override:
        return override[node.name]
    return aliases.inplace_scratch[node.name] if inplace else kernel_scratch(graph, node)


def _stage_units(graph: Graph, stage: PatchStage, aliases: Aliases, first: dict, last: dict) -> None:
    """Drop the units that live only in a patch stage's tiles; start the stage outputs' units at step 0."""
    inside = {graph.node(name).outputs[0] for name in stage.nodes}
    for r, members in aliases.members.items():
        if not any(t in inside for t in members):
            continue
        if any(t in stage.outputs or t not in inside for t in members):
            first[r] = 0
        else:
            del first[r], last[r]


def check_order(graph: Graph, order) -> None:
    """Raise ValueError unless `order` is a topological order of all of `graph`'s nodes."""
    names = {n.name for n in graph.nodes}
    if len(order) != len(names) or set(order) != names:
        raise ValueError("order must list every node of the graph exactly once")
    done = set(graph.inputs) | {k for k, t in graph.tensors.items() if t.is_const}
    nodes = {n.name: n for n in graph.nodes}
    for name in order:
        missing = [t for t in nodes[name].inputs if t not in done]
        if missing:
            raise ValueError(f"node '{name}' runs before its input '{missing[0]}' is produced")
        done.update(nodes[name].outputs)
