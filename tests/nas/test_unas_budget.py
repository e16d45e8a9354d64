"""μNAS's time budget (issue 26 item 5, nas/unas_budget.py) on a real store with evaluations of known seconds and a
clock set by hand: the evolution's deadline, the population sized from the evaluations that fit and replayed from
the store, the finalists' and final training's epochs from measured seconds per epoch, values given kept, and
planned vs spent per phase. The end-to-end search against the wall clock: tests/nas/test_unas_search.py."""

from __future__ import annotations

import pytest

from kilobyte.nas.aging import AgingConfig
from kilobyte.nas.budget import DEPLOY_SECONDS
from kilobyte.nas.store import Evaluation, SearchStore
from kilobyte.nas.unas_budget import PLANNED, UnasBudget
from kilobyte.nas.unas_eval import UnasConfig


def _store(tmp_path, config):
    return SearchStore(tmp_path / "search.sqlite", config.settings(), resume=False)


def _add(store, idx: int, seconds: float, seconds_train: float | None = None):
    train = seconds if seconds_train is None else seconds_train
    store.add(Evaluation("aging", idx, idx, "{}", "{}", 0, 0.5, {"seconds_train": train}, seconds))


def _budget(store, config, elapsed: float) -> UnasBudget:
    budget = UnasBudget(config, store, "aging")
    budget.clock.before = elapsed  # a run that has spent `elapsed` seconds (this one's own: a few milliseconds)
    return budget


def test_evolution_stops_when_the_next_evaluation_would_pass_its_deadline(tmp_path):
    config = UnasConfig(data="digits", minutes=10, planned=PLANNED)
    store = _store(tmp_path, config)
    try:
        budget = _budget(store, config, 0.0)
        assert budget.deadline == pytest.approx(0.6 * (600 - DEPLOY_SECONDS))  # 342 s
        assert not budget.stop()  # nothing measured yet: the first candidates are issued
        for i in range(4):
            _add(store, i, 30.0)
            budget.record(30.0)
        budget.clock.before = 342 - 31  # an evaluation issued now ends at 341 s
        assert not budget.stop()
        budget.clock.before = 342 - 29  # ... at 343 s: past the deadline
        assert budget.stop()
        given = UnasConfig(data="digits", minutes=10, planned=tuple(p for p in PLANNED if p != "evaluations"))
        assert not UnasBudget(given, store, "aging").stop()  # --evaluations given: a count, no deadline
    finally:
        store.close()


def test_population_sized_from_the_evaluations_that_fit_and_replayed(tmp_path):
    config = UnasConfig(data="digits", minutes=10, planned=PLANNED)
    aging = AgingConfig(population=100, sample=25, rounds=2000, in_flight=2)
    store = _store(tmp_path, config)
    try:
        budget = _budget(store, config, 42.0)
        budget.in_flight = 2
        for i in range(3):
            _add(store, i, 3.0)
            budget.record(3.0)
        assert budget.resize(aging, [], 5) == aging  # fewer than PROBE finished: every candidate random
        _add(store, 3, 3.0)
        budget.record(3.0)
        budget.clock.before = 45.0
        sized = budget.resize(aging, [], 6)
        # left 342 - 45 = 297 s, 2 in flight at 3 s: 198 more + 4 done = 202 -> a third: 67, sample 16
        assert (sized.population, sized.sample, sized.rounds) == (67, 16, 2000)
        later = _budget(store, config, 300.0)  # resumed later, other timing: the stored sizes
        assert later.resize(aging, [], 9) == sized
        keep = UnasConfig(data="digits", minutes=10, planned=tuple(p for p in PLANNED if p != "sample"))
        assert UnasBudget(keep, store, "aging").resize(aging, [], 9).sample == 25  # --sample given: kept
    finally:
        store.close()


def test_training_epochs_from_measured_seconds_per_epoch(tmp_path):
    config = UnasConfig(data="digits", minutes=10, planned=PLANNED, epochs=8)
    store = _store(tmp_path, config)
    try:
        _add(store, 0, 50.0, seconds_train=16.0)  # 2 s per epoch
        _add(store, 1, 50.0, seconds_train=8.0)  # 1 s per epoch
        budget = _budget(store, config, 400.0)
        budget.mark("evolution")
        # left 600 - 400 - 30 = 170 s; the finalists' part 15/40: 63.75 s at 3 s per epoch (both) -> 21 epochs
        assert budget.finalist_epochs([0, 1]) == 21
        budget.clock.before = 500.0
        # left 70 s; member 1's finalist training: 42 s for 21 epochs = 2 s/epoch, x 1.5 the images -> 23 epochs
        assert budget.final_epochs(1, {"seconds": 42.0}, 21, 1.5) == 23
        assert budget.final_epochs(1, None, 21, 1.5) == 23  # stored: replayed whatever is measured now
        # another member chosen (a resumed search's finalists chose otherwise): planned again, no time left
        budget.clock.before = 599.0
        assert budget.final_epochs(0, None, 21, 1.0) == 1  # never below one epoch
        given = UnasConfig(data="digits", minutes=10, final_epochs=7, finalist_epochs=3,
                           planned=("evaluations", "population", "sample"))
        assert UnasBudget(given, store, "aging").final_epochs(0, None, 3, 1.0) == 7
        assert UnasBudget(given, store, "aging").finalist_epochs([0, 1]) == 3
    finally:
        store.close()


def test_phase_times_planned_and_spent(tmp_path):
    config = UnasConfig(data="digits", minutes=10, planned=PLANNED)
    store = _store(tmp_path, config)
    try:
        _add(store, 0, 50.0, seconds_train=16.0)
        _add(store, 1, 50.0, seconds_train=8.0)
        budget = _budget(store, config, 340.0)
        budget.mark("evolution")
        budget.clock.before = 350.0
        epochs = budget.finalist_epochs([0, 1])  # left 220 s -> 82.5 s at 3 s/epoch: 27 epochs
        budget.clock.before = 440.0
        budget.mark("finalists")
        budget.mark("evolution")  # already marked: kept
        times = budget.phase_times()
        assert list(times) == ["evolution", "finalists", "final", "deploy"]
        assert times["evolution"]["spent"] == pytest.approx(340.0, abs=0.5)
        assert times["evolution"]["planned"] == pytest.approx(342.0)
        assert times["finalists"]["spent"] == pytest.approx(100.0, abs=0.5)
        assert epochs == 27 and times["finalists"]["planned"] == pytest.approx(10.0 + 27 * 3.0, abs=0.5)
        assert times["final"] == {"planned": None, "spent": None}  # not yet run
        assert times["deploy"]["planned"] == DEPLOY_SECONDS
    finally:
        store.close()
