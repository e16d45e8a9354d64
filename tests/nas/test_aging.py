"""μNAS's aging evolution with random scalarisation (issue #15 item 4): the scalarisation formula, parent choice,
population ageing, determinism, in-flight evaluations, and a search on a synthetic objective that it must beat
random search on; Pareto fronts against a brute-force definition."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kilobyte.nas.aging import (
    AgingConfig,
    Candidate,
    aging_evolution,
    choose_parent,
    dominates,
    pareto_front,
    scalarised,
)
from kilobyte.nas.unas_build import network
from kilobyte.nas.unas_space import UnasSpace

SPACE = UnasSpace(input_shape=(12, 12, 1), num_classes=4)
BOUNDS = {"error": 0.1, "size": 1000.0}


def synthetic(arch) -> dict:
    """A cheap stand-in for training: 'error' falls with depth and width, 'size' is the real parameter count."""
    net = network(SPACE, arch)
    params = sum(s.cout * (s.kernel[0] * s.kernel[1] * (1 if s.depthwise else s.cin) + 1) if s.kind == "conv"
                 else s.cout * (s.cin + 1) if s.kind == "dense" else 0 for s in net.steps)
    convs = [s for s in net.steps if s.kind == "conv"]
    capacity = sum(s.cout for s in convs) + 5 * len(convs)
    return {"error": 1.0 / (1.0 + 0.02 * capacity), "size": float(params)}


def test_scalarisation_is_mu_nas_formula():
    objs = {"error": 0.05, "size": 3000.0}
    u = np.array([0.5, 0.25])
    assert scalarised(objs, BOUNDS, u) == pytest.approx(max(0.5 / 0.5, 3.0 / 0.25))
    assert scalarised({"error": 50.0, "size": 0.0}, BOUNDS, np.array([1.0, 1.0])) == 10.0  # capped at 10 bounds


def test_parent_is_the_scalarised_best_of_the_sample():
    pop = [Candidate(i, {"error": e, "size": s}, i)
           for i, (e, s) in enumerate([(0.5, 10), (0.01, 5000), (0.02, 200), (0.6, 20)])]
    chosen = set()
    for seed in range(200):
        got = choose_parent(pop, BOUNDS, np.random.default_rng(seed), 25)
        r = np.random.default_rng(seed)  # replay the same draws by hand
        u = 1.0 - r.random(2)
        picks = [pop[int(i)] for i in r.integers(4, size=25)]
        assert got is min(picks, key=lambda c: (scalarised(c.objectives, BOUNDS, u), c.index))
        assert not (got.index == 3 and pop[0] in picks)  # (0.6, 20) is dominated by (0.5, 10): never preferred
        chosen.add(got.index)
    assert {0, 1, 2} <= chosen  # every non-dominated trade-off wins under some weights


def test_population_ages_and_runs_are_deterministic():
    cfg = AgingConfig(population=12, sample=4, rounds=60, bounds=BOUNDS, seed=3)
    seen = []
    runs = [aging_evolution(SPACE, synthetic, cfg, on_result=seen.append) for _ in range(2)]
    assert [c.arch for c in runs[0]] == [c.arch for c in runs[1]] and len(runs[0]) == 60
    assert [c.index for c in runs[0]] == list(range(60)) and seen[:60] == runs[0]
    assert all(c.parent is None for c in runs[0][:12]) and all(c.parent is not None for c in runs[0][12:])
    for c in runs[0][12:]:  # a parent is a member of the population alive when the child was issued: not too old
        assert c.index - 12 <= c.parent < c.index
        assert not SPACE.problems(c.arch) and c.morphism in SPACE.morphisms


def test_in_flight_evaluations_complete_in_any_order():
    """With 3 in flight and results coming back out of order, every issued evaluation is collected once."""
    cfg = AgingConfig(population=8, sample=3, rounds=40, bounds=BOUNDS, in_flight=3, seed=1)
    queue = []
    rng = np.random.default_rng(9)

    def submit(index, arch):
        queue.append((index, synthetic(arch)))

    def collect():
        return queue.pop(int(rng.integers(len(queue))))

    history = aging_evolution(SPACE, None, cfg, submit=submit, collect=collect)
    assert sorted(c.index for c in history) == list(range(40)) and not queue
    assert [c.index for c in history] != list(range(40))  # the order really was shuffled


class Killed(Exception):
    pass


@pytest.mark.parametrize("where,kill_after", [("result", 5), ("result", 12), ("issue", 12), ("issue", 30),
                                              ("result", 40)])
def test_resumed_run_issues_what_an_uninterrupted_one_would(where, kill_after):
    """Killed after `kill_after` results, or right after candidate `kill_after` was issued (recorded, never
    evaluated) — in the initial population, at its end, during breeding — then resumed from what finished and what
    was issued: the same candidates, parents and morphisms as one uninterrupted run, and nothing evaluated twice."""
    cfg = AgingConfig(population=12, sample=4, rounds=50, bounds=BOUNDS, seed=7)
    whole = aging_evolution(SPACE, synthetic, cfg)
    finished, issued, calls = [], {}, []

    def counted(arch):
        calls.append(arch)
        return synthetic(arch)

    def on_result(c):
        finished.append(c)
        if where == "result" and len(finished) == kill_after:
            raise Killed

    def on_issue(i):
        issued[i.index] = i
        if where == "issue" and i.index == kill_after:
            raise Killed

    with pytest.raises(Killed):
        aging_evolution(SPACE, counted, cfg, on_result=on_result, on_issue=on_issue)
    unfinished = [i for k, i in issued.items() if k not in {c.index for c in finished}]
    assert len(unfinished) == (where == "issue")
    rest = aging_evolution(SPACE, counted, cfg, history=finished, unfinished=unfinished,
                           on_issue=lambda i: issued.__setitem__(i.index, i))
    assert [(c.arch, c.parent, c.morphism, c.objectives) for c in rest] == \
        [(c.arch, c.parent, c.morphism, c.objectives) for c in whole]
    assert len(calls) == 50


def test_random_strategy_breeds_nothing():
    cfg = AgingConfig(population=5, sample=2, rounds=20, bounds=BOUNDS, seed=2, strategy="random")
    history = aging_evolution(SPACE, synthetic, cfg)
    assert len(history) == 20 and all(c.parent is None and c.morphism is None for c in history)
    assert len({c.arch for c in history}) > 15


def hypervolume_2d(points, ref) -> float:
    """Area dominated by `points` (minimised) inside the box below `ref`."""
    pts = sorted((x, y) for x, y in points if x < ref[0] and y < ref[1])
    area, best_y = 0.0, ref[1]  # sweep: between consecutive x, the lowest y so far bounds the strip
    xs = [x for x, _ in pts] + [ref[0]]
    for i, (x, y) in enumerate(pts):
        best_y = min(best_y, y)
        area += (xs[i + 1] - x) * (ref[1] - best_y)
    return area


def test_beats_random_search_on_a_synthetic_objective():
    """Mean over 3 seeds of the dominated area (error x size, inside the bounds): evolution > random search at
    equal evaluations."""
    bounds = {"error": 0.5, "size": 20000.0}

    def hv(history):
        return hypervolume_2d([(c.objectives["error"], c.objectives["size"]) for c in history],
                              (bounds["error"], bounds["size"]))

    evo, rnd = [], []
    for seed in range(3):
        cfg = AgingConfig(population=20, sample=5, rounds=200, bounds=bounds, seed=seed)
        evo.append(hv(aging_evolution(SPACE, synthetic, cfg)))
        rng = np.random.default_rng(1000 + seed)
        rnd.append(hv([Candidate(a, synthetic(a), i) for i, a in enumerate(SPACE.sample(rng) for _ in range(200))]))
    assert np.mean(evo) > np.mean(rnd) > 0, (evo, rnd)


def test_hypervolume_2d_by_hand():
    assert hypervolume_2d([(1, 3), (2, 1)], (4, 4)) == 1 * 1 + 2 * 3  # x in [1,2): 1 tall; [2,4): 3 tall
    assert hypervolume_2d([(5, 1)], (4, 4)) == 0.0


def test_pareto_front_matches_brute_force():
    rng = np.random.default_rng(4)
    cands = [Candidate(i, {"a": float(rng.integers(10)), "b": float(rng.integers(10)), "c": float(rng.integers(4))}, i)
             for i in range(60)]
    names = ("a", "b", "c")
    front = pareto_front(cands, names)
    for c in cands:
        dominated = any(dominates(o.objectives, c.objectives, names) for o in cands)
        duplicate = any(o.index < c.index and all(o.objectives[n] == c.objectives[n] for n in names) for o in cands)
        assert (c in front) == (not dominated and not duplicate)
    for x, y in itertools.combinations(front, 2):
        assert not dominates(x.objectives, y.objectives, names) and not dominates(y.objectives, x.objectives, names)


def test_hypervolume_equals_counting_cells():
    """Integer points in [0, 6)^3: the dominated volume below (6, 6, 6) is the number of unit cells some point is at or
    below in every objective; also in 1-D and 2-D, and the general function agrees with the 2-D sweep."""
    from kilobyte.nas.aging import hypervolume

    rng = np.random.default_rng(5)
    for _ in range(30):
        pts = [tuple(int(v) for v in rng.integers(0, 6, 3)) for _ in range(int(rng.integers(1, 9)))]
        cells = sum(any(all(p[i] <= c[i] for i in range(3)) for p in pts)
                    for c in itertools.product(range(6), repeat=3))
        assert hypervolume(pts, (6, 6, 6)) == cells
        flat = [p[:2] for p in pts]
        assert hypervolume(flat, (6, 6)) == hypervolume_2d(flat, (6, 6))
    assert hypervolume([(2,), (4,)], (5,)) == 3 and hypervolume([(7, 1)], (6, 6)) == 0


def test_stop_ends_issuing_and_resize_changes_the_population():
    """A time budget's hooks (nas/unas_budget.py): `stop` true issues nothing more though `rounds` is far off, and a
    population resized after 5 results to 6 breeds from then on (every later candidate has a parent) while the first
    6 stay random; the sample size given by `resize` is the one parents are drawn with."""
    from dataclasses import replace

    cfg = AgingConfig(population=100, sample=25, rounds=1000, bounds=BOUNDS, seed=4)
    history, seen = [], []

    def resize(done, issued):
        seen.append(issued)
        return replace(cfg, population=6, sample=2) if len(done) >= 5 else cfg

    result = aging_evolution(SPACE, synthetic, cfg, on_result=history.append, stop=lambda: len(history) >= 20,
                             resize=resize)
    assert len(result) == 20 and seen[0] == 0
    assert all(c.parent is None for c in result[:6]) and all(c.parent is not None for c in result[6:])
    assert all(c.parent >= c.index - 6 for c in result[6:])  # parents come from the 6 youngest
