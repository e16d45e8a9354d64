"""The pruning-strategy scheduler (kilobyte/prune/scheduler.py): its strategy meets the loss budget and the Flash
limit, is never slower than the best uniform ratio at the same budget (and faster when layers differ), matches
brute force on a small problem, and is a function of its seed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kilobyte.errors import PruneError
from kilobyte.prune.latency import LatencyModel
from kilobyte.prune.layers import ConvLayer
from kilobyte.prune.scheduler import Constraints, Problem, anneal, schedule, uniform_strategy

MODEL = LatencyModel(1.0, 4.0, 2.0, 12.0, lanes=16)
LAYERS = [ConvLayer(f"l{i}", n, c, 3, 3, s, s)
          for i, (n, c, s) in enumerate([(8, 1, 16), (16, 8, 8), (32, 16, 4), (32, 32, 4), (32, 32, 2)])]


def random_scores(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c.name: rng.gamma(0.7, 1e-4 * rng.uniform(0.2, 5), size=(c.filters, c.kh, c.kw)) for c in LAYERS}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_budget_respected_and_never_slower_than_uniform(seed):
    scores = random_scores(seed)
    budget = 0.05 * sum(s.sum() for s in scores.values())
    dense_flash = Problem(LAYERS, scores, MODEL, Constraints(budget)).flash([0] * len(LAYERS))
    constraints = Constraints(budget, flash_bytes=int(0.8 * dense_flash) + 5000, fixed_flash=5000)
    best, uniform = schedule(LAYERS, scores, MODEL, constraints, seed=seed, steps=5000)
    assert best.feasible and uniform.feasible
    assert best.loss <= budget and best.flash_bytes <= constraints.flash_bytes
    assert best.latency <= uniform.latency
    assert best.latency < 0.97 * uniform.latency  # layers differ in cost and scores: uniform is not optimal
    assert all(0 <= r <= constraints.max_ratio for r in best.ratios.values())


def test_equals_brute_force_on_a_small_problem():
    layers = [ConvLayer("a", 2, 3, 1, 2, 4, 4), ConvLayer("b", 3, 17, 1, 2, 2, 2), ConvLayer("c", 2, 40, 1, 3, 3, 3)]
    rng = np.random.default_rng(5)
    scores = {c.name: rng.random((c.filters, c.kh, c.kw)) for c in layers}
    constraints = Constraints(loss_budget=2.0, max_ratio=1.0)
    problem = Problem(layers, scores, MODEL, constraints)
    feasible = [problem.strategy(k) for k in itertools.product(*[range(c.filterlets + 1) for c in layers])]
    optimum = min((s for s in feasible if s.feasible), key=lambda s: s.latency)
    found = anneal(problem, seed=0, steps=5000)
    assert found.latency == pytest.approx(optimum.latency)
    assert found.loss <= 2.0


def test_same_seed_same_strategy_and_infeasible_budgets_raise():
    scores = random_scores(3)
    c = Constraints(0.02 * sum(s.sum() for s in scores.values()))
    assert schedule(LAYERS, scores, MODEL, c, seed=4, steps=2000)[0] == schedule(LAYERS, scores, MODEL, c, seed=4,
                                                                                 steps=2000)[0]
    tiny_flash = Constraints(1e-12, flash_bytes=100)
    with pytest.raises(PruneError, match="Flash"):
        schedule(LAYERS, scores, MODEL, tiny_flash, steps=500)


def test_uniform_is_the_largest_shared_ratio_within_the_budget():
    scores = random_scores(4)
    budget = 0.1 * sum(s.sum() for s in scores.values())
    problem = Problem(LAYERS, scores, MODEL, Constraints(budget))
    u = uniform_strategy(problem)
    assert u.loss <= budget
    bigger = [min(round((max(u.ratios.values()) + 0.002) * c.filterlets), c.filterlets) for c in LAYERS]
    assert problem.loss(bigger) > budget
