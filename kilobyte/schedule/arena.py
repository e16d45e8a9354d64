"""Schedule stage: arena offsets for buffers with known lifetimes (TFLite Micro's memory-planner interface).

A request is `(size, first_use, last_use)` in steps, inclusive; two requests whose step ranges intersect must not
share bytes. `plan_arena` returns one offset per request, the arena size, the peak live bytes, the fragmentation
`(arena - peak) / arena`, the strategy that ran and whether the arena is proven minimal. Strategies:
- `greedy`: greedy by size (TFLM's GreedyMemoryPlanner): largest first, each at the lowest aligned offset that
  does not overlap any already-placed buffer alive at an intersecting step;
- `exact`: the smallest arena, by branch and bound over placement orders (up to `EXACT_NODE_BUDGET` placements,
  then the best found, `optimal=False`). Any optimal packing is reproduced by
  placing its buffers in increasing-offset order, each at its lowest feasible offset (every buffer can only move
  down), so searching orders with lowest-offset placement is exact. Seeded with the best greedy order, pruned by
  the best arena found and stopped early when it reaches the lower bound (the peak of the aligned sizes);
- `auto`: exact for at most `EXACT_MAX` buffers, else the best of three greedy placement orders (by size as TFLM,
  by first use, by area; see `GREEDY_ORDERS`; tried in that order until one reaches the lower bound), improved by
  a local search over perturbed placement orders when it is above the bound (`strategy` then ends in "+search").

The planner packs *groups*: several lifetimes that must share one offset (a storage unit chain whose in-place ops
write over their inputs; a step's scratch; the patch working region). `plan_groups` takes, per group, a list of
`(size, first, last)` all placed at the group's offset.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

EXACT_MAX = 10  # buffers (groups) up to which `auto` runs the exact search
EXACT_NODE_BUDGET = 200_000  # placements tried by the exact search before it settles for the best so far

Interval = tuple[int, int, int]  # (size, first_use, last_use)


@dataclass(frozen=True)
class ArenaResult:
    offsets: tuple[int, ...]
    arena_bytes: int
    peak_bytes: int  # most requested bytes alive at one step (before alignment)
    fragmentation: float  # (arena - peak) / arena
    strategy: str  # what ran: "exact", "greedy" (by size), "greedy-first-use" or "greedy-area"
    optimal: bool  # arena proven minimal (exact finished, or greedy met the lower bound)


def plan_arena(requests: Sequence[Interval], strategy: str = "auto", alignment: int = 4) -> ArenaResult:
    """Offsets for `(size, first_use, last_use)` requests.

    >>> r = plan_arena([(100, 0, 1), (50, 1, 2), (100, 2, 3)], strategy="greedy")
    >>> r.offsets, r.arena_bytes, r.peak_bytes
    ((0, 100, 0), 152, 150)
    """
    return plan_groups([[tuple(r)] for r in requests], strategy, alignment)


def plan_offsets(sizes: Sequence[int], first: Sequence[int], last: Sequence[int], alignment: int = 4,
                 strategy: str = "auto") -> tuple[int, ...]:
    """`plan_arena` in column form (sizes, first uses, last uses) -> offsets.

    >>> plan_offsets([10, 6, 6], [0, 0, 1], [0, 1, 1])
    (0, 12, 0)
    """
    return plan_arena(list(zip(sizes, first, last)), strategy, alignment).offsets


def plan_groups(groups: Sequence[Sequence[Interval]], strategy: str = "auto", alignment: int = 4) -> ArenaResult:
    """Offsets for groups of lifetimes, each group placed at one offset (see the module docstring)."""
    if strategy not in ("auto", "greedy", "exact"):
        raise ValueError(f"arena strategy must be 'auto', 'greedy' or 'exact', not {strategy!r}")
    if alignment < 1:
        raise ValueError("alignment must be >= 1")
    aligned = [[(_align(s, alignment), f, last) for s, f, last in g if s > 0] for g in groups]
    peak = _peak(groups)
    floor = _peak(aligned)
    orders = ["size"] if strategy == "greedy" else list(GREEDY_ORDERS)
    tried = []
    for k in orders:  # stop at the first order that reaches the lower bound: no other can beat it
        offs = _greedy(aligned, alignment, k)
        tried.append((_extent(aligned, offs), k, offs))
        if tried[-1][0] <= floor:
            break
    arena, ran, offsets = min(tried, key=lambda x: x[0])
    if strategy == "auto" and len(groups) > EXACT_MAX and arena > floor:
        offsets, better = _local_search(aligned, alignment, offsets, arena, floor)
        ran, arena = (f"{ran}+search" if better < arena else ran), better
    optimal = arena <= floor
    ran = "greedy" if ran == "size" else ("greedy-" + ran if not ran.startswith("size") else "greedy" + ran[4:])
    if strategy == "exact" or (strategy == "auto" and len(groups) <= EXACT_MAX):
        ran = "exact"
        if not optimal:
            offsets, arena, optimal = _exact(aligned, alignment, offsets, arena, floor)
    frag = (arena - peak) / arena if arena else 0.0
    return ArenaResult(tuple(offsets), arena, peak, frag, ran, optimal)


def _align(x: int, alignment: int) -> int:
    return -(-x // alignment) * alignment


def _peak(groups: Sequence[Sequence[Interval]]) -> int:
    """Most bytes alive at one step; a group counts the largest of its lifetimes alive at that step."""
    delta: dict[int, int] = {}
    for g in groups:
        points = sorted({f for _, f, _ in g} | {last + 1 for _, _, last in g})
        before = 0
        for t in points:  # the group's occupancy changes only where one of its lifetimes starts or ends
            now = max((s for s, f, last in g if f <= t <= last), default=0)
            delta[t] = delta.get(t, 0) + now - before
            before = now
    best = running = 0
    for t in sorted(delta):
        running += delta[t]
        best = max(best, running)
    return best


def _extent(groups, offsets) -> int:
    return max((o + s for g, o in zip(groups, offsets) for s, _, _ in g), default=0)


def _lowest_offset(group, placed, alignment: int) -> int:
    """Lowest aligned offset for `group` clear of every placed (group, offset) alive at an intersecting step."""
    forbidden = []  # open ranges (lo, hi) the offset may not fall in
    for other, o in placed:
        for s, f, last in group:
            for s2, f2, last2 in other:
                if f <= last2 and f2 <= last:
                    forbidden.append((o - s, o + s2))
    for cand in sorted({0} | {_align(hi, alignment) for _, hi in forbidden}):
        if all(not (lo < cand < hi) for lo, hi in forbidden):
            return cand
    raise AssertionError("unreachable: the top of the highest buffer is always free")


def _greedy(groups, alignment: int, order: str = "size") -> list[int]:
    """Place groups one by one at their lowest offset, in the order `GREEDY_ORDERS[order]` (ties: request order)."""
    key = GREEDY_ORDERS[order]
    return _place(groups, alignment, sorted((i for i in range(len(groups)) if groups[i]),
                                            key=lambda i: (*key(groups[i]), i)))


def _place(groups, alignment: int, sequence: Sequence[int]) -> list[int]:
    """Lowest-offset placement of the groups in `sequence` order."""
    offsets = [0] * len(groups)
    placed = []
    for i in sequence:
        offsets[i] = _lowest_offset(groups[i], placed, alignment)
        placed.append((groups[i], offsets[i]))
    return offsets


def _local_search(groups, alignment: int, offsets: list[int], arena: int, floor: int, rounds: int = 150):
    """Improve a greedy packing by re-placing in perturbed orders (deterministic; stops at the floor).

    Lowest-offset placement in increasing-offset order reproduces any packing, so the order of the best packing so
    far is a good start: move one buffer earlier in it and re-place. Returns (offsets, arena).
    """
    rng = random.Random(0)
    best = sorted((i for i in range(len(groups)) if groups[i]), key=lambda i: (offsets[i], i))
    for _ in range(rounds):
        if arena <= floor or len(best) < 2:
            break
        seq = list(best)
        j = rng.randrange(1, len(seq))
        seq.insert(rng.randrange(0, j), seq.pop(j))
        offs = _place(groups, alignment, seq)
        extent = _extent(groups, offs)
        if extent < arena:
            arena, offsets, best = extent, offs, sorted(seq, key=lambda i: (offs[i], i))
    return offsets, arena


def _biggest(g) -> int:
    return max(s for s, _, _ in g)


def _first(g) -> int:
    return min(f for _, f, _ in g)


def _duration(g) -> int:
    return max(last for _, _, last in g) - _first(g) + 1


# Placement orders: TFLM's greedy-by-size, then two that `auto` also tries on big problems, keeping the smallest
# arena: left-edge (by first use; optimal for plain intervals when lifetimes nest like a stack) and by area
# (bytes x steps). Patch plans need left-edge: the working region and the stage outputs end where the next
# stage's buffers begin, and by-size ordering strands a small long-lived buffer above them.
GREEDY_ORDERS = {
    "size": lambda g: (-_biggest(g), _first(g)),
    "first-use": lambda g: (_first(g), -_biggest(g)),
    "area": lambda g: (-_biggest(g) * _duration(g), _first(g)),
}


def _exact(groups, alignment: int, offsets: list[int], arena: int, floor: int):
    """Branch and bound over placement orders (lowest-offset placement). Returns (offsets, arena, proven)."""
    todo = [i for i in range(len(groups)) if groups[i]]
    best = {"arena": arena, "offsets": list(offsets), "nodes": 0}

    def place(placed: list, top: int, left: list[int]) -> None:
        if best["arena"] <= floor or best["nodes"] > EXACT_NODE_BUDGET:
            return
        if not left:
            best["arena"], best["offsets"] = top, _offsets_of(placed, len(groups))
            return
        for k, i in enumerate(left):
            best["nodes"] += 1
            o = _lowest_offset(groups[i], [(groups[j], oj) for j, oj in placed], alignment)
            new_top = max(top, o + max(s for s, _, _ in groups[i]))
            if new_top < best["arena"]:
                place(placed + [(i, o)], new_top, left[:k] + left[k + 1:])

    place([], 0, todo)
    proven = best["nodes"] <= EXACT_NODE_BUDGET or best["arena"] <= floor
    return best["offsets"], best["arena"], proven


def _offsets_of(placed, n: int) -> list[int]:
    offsets = [0] * n
    for i, o in placed:
        offsets[i] = o
    return offsets
