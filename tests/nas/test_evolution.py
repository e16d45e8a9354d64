"""Evolution and random search over a synthetic fitness (fast, exact): evolution finds better networks than random
search at equal evaluations; a search interrupted mid-generation and resumed from its store evaluates every network
once and ends exactly where an uninterrupted run ends; a damaged or mismatched store is a one-line error."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from kilobyte.nas.evolution import EvolutionConfig, evolve, random_search, serial_fitness
from kilobyte.nas.resources import Budget, ResourceEvaluator
from kilobyte.nas.space import MBSpace
from kilobyte.nas.store import SearchStore, StoreError

SPACE = MBSpace(num_classes=10, in_channels=1).with_config(0.3, 28)
BUDGET = Budget(16 * 1024, 400 * 1024)
SMALL = EvolutionConfig(population=16, parents=4, generations=4, seed=1)


def synthetic_accuracy(arch) -> float:
    """A smooth stand-in for accuracy: favours kernel 5 and expand 4 and deeper early stages."""
    blocks = arch.active_blocks()
    s = sum(-abs(k - 5) - abs(e - 4) for _, k, e in blocks) / len(blocks)
    return 0.9 + 0.01 * s + 0.002 * sum(arch.depths[:3])


@pytest.fixture(scope="module")
def evaluator():
    return ResourceEvaluator(SPACE)


def test_everything_evaluated_fits(evaluator):
    result = evolve(SPACE, evaluator, BUDGET, serial_fitness(synthetic_accuracy), SMALL)
    assert all(evaluator.fits(s.arch, BUDGET) for s in result.history)
    assert result.evaluations == len({s.arch.key() for s in result.history})
    assert result.best.accuracy == max(s.accuracy for s in result.history)


def test_evolution_beats_random_search_at_equal_evaluations(evaluator):
    wins = []
    for seed in range(3):
        cfg = EvolutionConfig(population=16, parents=4, generations=5, seed=seed)
        evo = evolve(SPACE, evaluator, BUDGET, serial_fitness(synthetic_accuracy), cfg)
        rnd = random_search(SPACE, evaluator, BUDGET, serial_fitness(synthetic_accuracy), evo.evaluations, seed=seed)
        assert rnd.evaluations == evo.evaluations
        wins.append(evo.best.accuracy - rnd.best.accuracy)
    assert np.mean(wins) > 0 and min(wins) >= 0


class Crash(Exception):
    pass


def test_interrupted_search_resumes_without_repeating_work(tmp_path, evaluator):
    whole = evolve(SPACE, evaluator, BUDGET, serial_fitness(synthetic_accuracy), SMALL)
    calls = []

    def counting(arch):
        calls.append(arch.key())
        if len(calls) in stops:
            raise Crash
        return synthetic_accuracy(arch)

    path, settings = tmp_path / "search.sqlite", {"seed": SMALL.seed}
    stops = {5, 23, 40}  # during generation 0, and later generations
    resume = False
    while True:
        store = SearchStore(path, settings, resume=resume)
        try:
            result = evolve(SPACE, evaluator, BUDGET, serial_fitness(counting), SMALL, store=store)
            break
        except Crash:
            resume = True
        finally:
            store.close()
    assert result.best == whole.best and result.history == whole.history
    crashed = len(stops)  # each crash lost the evaluation in flight (not committed), nothing else
    assert len(calls) == whole.evaluations + crashed
    assert len(set(calls)) == whole.evaluations


def test_store_errors_are_one_line(tmp_path):
    path = tmp_path / "s.sqlite"
    SearchStore(path, {"seed": 0}, resume=False).close()
    with pytest.raises(StoreError, match="already exists"):
        SearchStore(path, {"seed": 0}, resume=False)
    with pytest.raises(StoreError, match="seed=0, this run 1"):
        SearchStore(path, {"seed": 1}, resume=True)
    with pytest.raises(StoreError, match="no search store to resume"):
        SearchStore(tmp_path / "none.sqlite", {}, resume=True)
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="not a readable search store"):
        SearchStore(bad, {}, resume=True)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="no settings recorded"):
        SearchStore(other, {}, resume=True)
