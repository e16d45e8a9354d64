"""Schedule stage: lifetimes and live bytes of a graph for ONE given execution order, with the in-place rules.

Time is counted in steps: step i runs `order[i]`. A storage unit (see inplace.py) is live from the first step that
produces any of its tensors to the last step that reads any of them, inclusive (graph outputs: to the last step), so
an op's inputs and output are live together at its step. An in-place node's output unit joins its dying input's
*group*: the group is placed at one arena offset, and at the in-place step it occupies max(input, output) bytes, not
the sum. A fused conv + ADD's conv output takes no bytes at all (inplace.py decides both). Scratch is live at its
step only and is added by the caller (`with_scratch`); the caller-owned graph input is not counted.

`lifetimes` is the planner's step; `analyze` (lifetimes + the per-layer scratch) is the reference model: the reorder
search computes the same numbers incrementally over sets of nodes, and the tests check both against each other and
against brute force.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..ir import Graph
from .inplace import Aliases, consumed_inputs, decide_inplace, find_aliases, output_units, unit_lifetimes
from .plan_types import DEFAULT_OPTIONS, PatchStage, PlanOptions
from .scratch import base_scratch


@dataclass(frozen=True)
class Lifetimes:
    """Storage units under one order: their live steps, in-place groups and the bytes they hold per step."""

    order: tuple[str, ...]
    first: dict[str, int]  # unit root -> first live step
    last: dict[str, int]  # unit root -> last live step
    inplace: dict[str, str]  # node -> the input tensor whose bytes it overwrites
    group: dict[str, str]  # unit root -> group id (root of the oldest unit of its in-place chain)
    unit_bytes: tuple[int, ...]  # unit bytes live at each step (+ the patch working peak during the stage)
    aliases: Aliases
    fused: dict[str, str] = field(default_factory=dict)  # conv node -> the ADD it runs with (one kernel call)
    consumed: dict[str, str] = field(default_factory=dict)  # CONV_2D node -> its input, whose unit dies at its step
    n_stage: int = 0  # steps of the patch stage (one super-step)


@dataclass(frozen=True)
class Liveness:
    """Lifetimes plus each step's scratch: the live bytes per step of a plan."""

    order: tuple[str, ...]
    first: dict[str, int]
    last: dict[str, int]
    inplace: dict[str, str]
    group: dict[str, str]
    scratch: tuple[int, ...]  # scratch bytes per step
    live_bytes: tuple[int, ...]  # unit + scratch bytes live at each step
    aliases: Aliases
    fused: dict[str, str] = field(default_factory=dict)
    consumed: dict[str, str] = field(default_factory=dict)

    @property
    def peak(self) -> int:
        return max(self.live_bytes, default=0)


def lifetimes(graph: Graph, order: Sequence[str], aliases: Aliases, stage: PatchStage | None = None) -> Lifetimes:
    """Lifetimes of `graph`'s storage units run in `order` (a topological order of all node names).

    With a patch `stage` (its nodes first in `order`) the first `stage.n_nodes` steps are one super-step: units
    holding a stage output are live from step 0, units read only inside the stage live in tiles (not counted here),
    and those steps hold `stage.working_peak` more bytes; in-place rules, fusion and scratch apply after the stage.
    """
    order = tuple(order)
    first, last = unit_lifetimes(graph, order, aliases)
    n_stage = stage.n_nodes if stage else 0
    if stage:
        _stage_units(graph, stage, aliases, first, last)
    outs = output_units(graph, aliases)
    choice = decide_inplace(graph, order, aliases, first, last, outs, n_stage)
    diff = [0] * (len(order) + 1)
    for r in first:
        diff[first[r]] += aliases.size[r]
        diff[last[r] + 1] -= aliases.size[r]
    held, running = [], 0
    for i in range(len(order)):
        running += diff[i]
        held.append(running - choice.overlap[i] + (stage.working_peak if i < n_stage else 0))
    return Lifetimes(order, first, last, choice.inplace, choice.group, tuple(held), aliases, choice.fused,
                     consumed_inputs(graph, order, aliases, last, outs, n_stage), n_stage)


def with_scratch(life: Lifetimes, scratch: Sequence[int]) -> Liveness:
    """The live bytes of `life` with `scratch[i]` bytes of scratch at step i."""
    live = tuple(u + s for u, s in zip(life.unit_bytes, scratch))
    return Liveness(life.order, life.first, life.last, life.inplace, life.group, tuple(scratch), live, life.aliases,
                    life.fused, life.consumed)


def analyze(graph: Graph, order, options: PlanOptions = DEFAULT_OPTIONS, *, aliases: Aliases | None = None,
            stage: PatchStage | None = None) -> Liveness:
    """Live bytes per step of `graph` run in `order`, each kernel with its per-layer scratch (`options.kernels`)."""
    life = lifetimes(graph, order, aliases or find_aliases(graph, options), stage)
    return with_scratch(life, base_scratch(graph, life, options.kernels))


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
