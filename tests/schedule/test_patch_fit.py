"""Tests for schedule/patch_fit.py: every patch schedule's figures, and the cheapest schedule that fits an arena.

Oracles: `plan_patch_stage`, `estimate_resources` and `make_plan` for each (n, p) — the planner's own figures —, a
brute force that plans every schedule `patch_candidates` lists and applies `fit_patch`'s rule, and the definition of
a cut (`stage_nodes` on every prefix).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from random_nets import random_graph, valid_cuts

from kilobyte.nas.build import build_graph
from kilobyte.nas.space import MBSpace
from kilobyte.quant.quantize import int8_structure
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.liveness import analyze
from kilobyte.schedule.patch import plan_patch_stage, stage_cuts, stage_peak
from kilobyte.schedule.patch_fit import PatchFitError, _Schedules, fit_patch, patch_candidates
from kilobyte.schedule.plan import make_plan
from kilobyte.schedule.plan_types import PlanOptions

# small MCUNet-like networks (stem, MB1 block, three stages of one or two MBConv blocks, head), 16-32 px: every block
# kind and cut kind of the real space, few enough schedules that a brute force takes a few tens of ms
SMALL = MBSpace(stage_widths=(16, 24, 40), stage_strides=(2, 2, 1), stage_depths=((1, 2), (1, 2), (1,)),
                widths=(0.2, 0.3), resolutions=(16, 24, 32))


def _network(rng: np.random.Generator):
    space = dataclasses.replace(SMALL, in_channels=int(rng.integers(1, 4)), num_classes=int(rng.integers(2, 20)))
    return int8_structure(build_graph(space, space.sample(rng), verify=False), verify=False)


class _BruteForce:
    """`fit_patch`'s rule by brute force: `estimate_resources` for every schedule `patch_candidates` lists, in rule
    order (cost, n, p); a schedule costlier than one that fits cannot win, so the walk may stop there (memoised, so
    one network serves several limits)."""

    def __init__(self, graph, options=PlanOptions(), cost=None):
        self.graph, self.options = graph, options
        found = patch_candidates(graph, options)
        self.rows = sorted((c.macs if cost is None else cost(c), c.n_nodes, c.grid or 0, c.patch) for c in found)
        self.done: dict[int, object] = {}

    def resources(self, i: int):
        if i not in self.done:
            patch = self.rows[i][3]
            self.done[i] = estimate_resources(self.graph, dataclasses.replace(self.options, patch=patch))
        return self.done[i]

    def best(self, limit: int):
        best = None
        for i, (key, n, p, patch) in enumerate(self.rows):
            if best is not None and key > best[0][0]:
                break
            r = self.resources(i)
            if r.arena_bytes <= limit and (best is None or (key, r.arena_bytes, n, p) < best[0]):
                best = ((key, r.arena_bytes, n, p), patch, r)
        return None if best is None else best[1:]

    def limits(self, rng, everything: bool) -> list[int]:
        """A tight limit (some schedule's arena exactly: one of the cheapest eight, or any with `everything`) and
        one byte below it, a loose one (twice the per-layer arena); with `everything`, also one byte below the
        smallest arena of all (infeasible)."""
        pick = int(rng.integers(len(self.rows) if everything else min(8, len(self.rows))))
        tight = self.resources(pick).arena_bytes
        per_layer = next(i for i, row in enumerate(self.rows) if row[3] is None)
        limits = [tight, tight - 1, 2 * self.resources(per_layer).arena_bytes]
        if everything:
            limits.append(min(self.resources(i).arena_bytes for i in range(len(self.rows))) - 1)
        return limits


def test_cuts_are_the_prefixes_stage_nodes_accepts():
    rng = np.random.default_rng(0)
    graphs = [random_graph(seed) for seed in range(30)] + [_network(rng) for _ in range(10)]
    for g in graphs:
        image = max(g.tensors[t].shape[1] * g.tensors[t].shape[2] for t in g.inputs)
        expected = [(n, outs) for n, outs in valid_cuts(g)
                    if len(outs) == 1 and np.prod(g.tensors[outs[0]].shape[1:3]) < image]
        assert stage_cuts(g, [n.name for n in g.nodes]) == expected


def test_candidates_have_the_planners_figures():
    rng = np.random.default_rng(1)
    graphs = [_network(rng) for _ in range(6)] + [random_graph(seed) for seed in range(6)]
    checked = 0
    for g in graphs:
        names = [n.name for n in g.nodes]
        for options in (PlanOptions(), PlanOptions(inplace_depthwise=False, kernels="dsp")):
            found = patch_candidates(g, options)
            per_layer = analyze(g, make_plan(g, options).order, options).live_bytes
            assert found[0].patch is None and found[0].total_peak == make_plan(g, options).peak_bytes
            assert [c.patch[0] for c in found[1:]] == sorted(c.patch[0] for c in found[1:])
            for c in found[1:]:
                stage = plan_patch_stage(g, names, *c.patch, options)
                r = estimate_resources(g, dataclasses.replace(options, patch=c.patch))
                assert (c.stage_peak, c.input_patch) == (stage_peak(stage), stage.input_patch)
                assert c.macs == r.macs and c.extra_macs == r.macs - found[0].macs
                assert c.total_peak == max(c.stage_peak, max(per_layer[c.n_nodes:], default=0))
                assert r.peak_bytes >= c.stage_peak
                assert r.peak_bytes == c.total_peak  # true on every graph drawn here (docstring)
                checked += 1
    assert checked > 300


def test_bounds_never_exceed_the_planned_peak():
    """The lower bounds `fit_patch` skips with: rest-of-network bound <= the re-planned rest, cheap bound <= exact
    unit peak <= the planned peak of every pair."""
    rng = np.random.default_rng(2)
    for g in [_network(rng) for _ in range(5)] + [random_graph(seed) for seed in range(8)]:
        s = _Schedules(g, PlanOptions(), None)
        assert s.rest_bound[0] <= estimate_resources(g).peak_bytes
        for n, _ in s.cuts:
            assert s.rest_bound[n] <= s.prefix(n).rest_units
        for k, pair in enumerate(s.lanes.pairs):
            peak = estimate_resources(g, PlanOptions(patch=pair)).peak_bytes
            assert s.bound[k] <= s.peak_bound(k) <= peak


def test_fit_patch_equals_brute_force_on_200_networks():
    rng = np.random.default_rng(3)
    outcomes = {"per-layer": 0, "patch": 0, "none": 0}
    for i in range(200):
        g = _network(rng)
        brute = _BruteForce(g)
        limits = brute.limits(rng, everything=i % 20 == 0)
        for limit in (limits if i % 20 == 0 else [limits[i % 3]]):
            got, want = fit_patch(g, limit), brute.best(limit)
            assert (None if got is None else (got.patch, got.resources)) == want, (i, limit)
            outcomes["none" if got is None else "per-layer" if got.patch is None else "patch"] += 1
    assert min(outcomes.values()) >= 10, outcomes


def test_fit_patch_with_a_cost_key_equals_brute_force():
    def cost(c):
        return c.input_patch + c.macs // 1000  # any key: latency models plug in here

    rng = np.random.default_rng(4)
    for _ in range(6):
        g = _network(rng)
        brute = _BruteForce(g, cost=cost)
        for limit in brute.limits(rng, everything=True):
            got, want = fit_patch(g, limit, cost=cost), brute.best(limit)
            assert (None if got is None else (got.patch, got.resources)) == want


def test_chosen_schedule_compiles_to_the_same_figures():
    rng = np.random.default_rng(5)
    for options in (PlanOptions(), PlanOptions(kernels="dsp", fuse_add=False)):
        for _ in range(6):
            g = _network(rng)
            brute = _BruteForce(g, options)
            got = fit_patch(g, brute.limits(rng, everything=False)[0], options, core="cortex-m4")
            plan = make_plan(g, dataclasses.replace(options, patch=got.patch))
            assert (got.resources.arena_bytes, got.resources.peak_bytes, got.resources.macs) == (
                plan.arena_bytes, plan.peak_bytes, plan.macs)
            assert got.resources == estimate_resources(g, dataclasses.replace(options, patch=got.patch),
                                                       core="cortex-m4")


@pytest.mark.parametrize("limit", [-1, 1.5, "64k", True])
def test_bad_limit_is_refused(limit):
    g = random_graph(0)
    with pytest.raises(PatchFitError, match="arena_limit"):
        fit_patch(g, limit)
