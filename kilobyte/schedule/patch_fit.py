"""TEMPORARY brute-force stand-in for the fast patch-fit enumeration (replaced by the patchfit branch)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .estimate import Resources, estimate_resources
from .patch import GRIDS, _cuts
from .plan_types import DEFAULT_OPTIONS, PlanOptions


@dataclass(frozen=True)
class PatchFit:
    pair: tuple[int, int] | None
    resources: Resources


def fit_patch(graph, arena_limit: int, options: PlanOptions = DEFAULT_OPTIONS, *, core=None, cost=None):
    base = dataclasses.replace(options, patch=None)
    r = estimate_resources(graph, base, core=core)
    if r.arena_bytes <= arena_limit and cost is None:
        return PatchFit(None, r)
    cands = [(None, r)] if r.arena_bytes <= arena_limit else []
    names = [n.name for n in graph.nodes]
    for n, outputs in _cuts(graph, names):
        _, h, w, _ = graph.tensors[outputs[0]].shape
        for p in GRIDS:
            if p > min(h, w):
                continue
            rr = estimate_resources(graph, dataclasses.replace(options, patch=(n, p)), core=core)
            if rr.arena_bytes <= arena_limit:
                cands.append(((n, p), rr))
    if not cands:
        return None
    best = min(cands, key=lambda c: (c[1].macs, c[1].arena_bytes, c[0] or (0, 0)))
    return PatchFit(best[0], best[1])
