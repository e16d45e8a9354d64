"""Search stage: `--minutes` as a budget μNAS keeps (issue 26, item 5) — TinyNAS's rule (`budget.py`: measure what
the work costs here, then size it to a share of the time) for a search whose every candidate is trained.

A μNAS search is four phases; of the budget, less `budget.DEPLOY_SECONDS` for deployment, `SHARES` gives:
1. evolution (60 %): it ends at its deadline, not at a count, when `--evaluations` is not given. The loop issues no
   new candidate once the measured mean seconds of an evaluation say it would end past the deadline (those in flight
   finish, so the phase ends about on time). The aging population is sized when the first `PROBE` evaluations have
   finished, from the evaluations that will then fit: a third of them (4 to the configured population), the sample
   a quarter of it — the CLI's rule for a given `--evaluations`, so that the random start leaves two thirds of the
   evaluations to evolution whether 30 or 3,000 fit (μNAS's 100 of 2,000 would leave 30 evaluations all random);
2. finalists (15 %): the front is measured on the held-out split, then the finalists' second evaluation gets the
   finalists' part of the time really left (15 : 25 with the final training); its epochs follow from the
   finalists' own measured seconds per epoch (their evaluations' training seconds over `--epochs`);
3. final (25 %): the chosen member's final training gets the time then left, at its measured seconds per epoch (its
   finalist training, else its evaluation's) scaled to the training and validation images it trains on;
4. deploy: int8, plan, C library, verification (`budget.DEPLOY_SECONDS` reserved).

Epochs are at least 1 and at most `MAX_EPOCHS` (tiny data ends early rather than over-train); a value given on the
command line is kept (`UnasConfig.planned` names what is not). Each plan is stored when made and the search's clock
(`budget.Clock`) at every commit, so a resumed search replays the plans and counts the time already spent. The
report's `phase_times` shows each phase's planned and spent seconds (`budget.planned_vs_spent`), as TinyNAS's.
"""

from __future__ import annotations

from dataclasses import replace

from .budget import DEPLOY_SECONDS, Clock, planned_vs_spent

SHARES = {"evolution": 0.60, "finalists": 0.15, "final": 0.25}  # of the budget less DEPLOY_SECONDS
PHASES = ("evolution", "finalists", "final", "deploy")
PROBE = 4  # evaluations finished before the population is sized
POPULATION_MIN = 4
MAX_EPOCHS = {"finalists": 60, "final": 200}
PLANNED = ("evaluations", "population", "sample", "finalist_epochs", "final_epochs")  # what --minutes may size


class UnasBudget:
    """The search's clock, the evolution's deadline and the plans of a μNAS search (module doc)."""

    def __init__(self, config, store, phase: str):
        self.config, self.store, self.clock = config, store, Clock(store)
        self.seconds = [e.seconds for e in store.evaluations(phase)]  # each finished evaluation's, on its worker
        self.in_flight = 1
        usable = 0.0 if config.minutes is None else max(0.0, config.minutes * 60 - DEPLOY_SECONDS)
        self.deadline = SHARES["evolution"] * usable if self.by_deadline else None

    @property
    def by_deadline(self) -> bool:
        return self.config.minutes is not None and "evaluations" in self.config.planned

    def mean_seconds(self) -> float:
        return sum(self.seconds) / len(self.seconds) if self.seconds else 0.0

    def record(self, seconds: float) -> None:
        """A finished evaluation's seconds (called after it is committed): the mean, and the clock saved."""
        self.seconds.append(seconds)
        self.clock.save()

    def stop(self) -> bool:
        """True when a candidate issued now would end past the evolution's deadline (never without one)."""
        return self.deadline is not None and self.clock.elapsed() + self.mean_seconds() > self.deadline

    def resize(self, aging, history, issued: int):
        """`aging` (an `AgingConfig`) with the population and sample sized to the evaluations that fit, once PROBE
        have finished (stored: a resumed search keeps them); unchanged when they were given or without a deadline."""
        planned = set(self.config.planned) & {"population", "sample"}
        if not self.by_deadline or not planned:
            return aging
        done = self.store.phase_result("unas-population")
        if done is None:
            if len(self.seconds) < PROBE:
                return aging  # the population's upper bound: every candidate so far is a random one
            left = max(0.0, self.deadline - self.clock.elapsed())
            fit = len(self.seconds) + left * self.in_flight / max(1e-9, self.mean_seconds())
            population = int(min(aging.population, max(POPULATION_MIN, fit // 3)))
            done = {"population": population, "sample": max(2, population // 4), "expected_evaluations": int(fit),
                    "mean_seconds": self.mean_seconds()}
            self.store.finish_phase("unas-population", done)
        return replace(aging, population=done["population"] if "population" in planned else aging.population,
                       sample=done["sample"] if "sample" in planned else aging.sample)

    # -- the training phases ---------------------------------------------------------------------------------------
    def left(self) -> float:
        """Seconds of the budget left for training, less the deployment's reserve."""
        return max(0.0, self.config.minutes * 60 - self.clock.elapsed() - DEPLOY_SECONDS)

    def epoch_seconds(self, index: int) -> float:
        """Seconds of one training epoch of evaluation `index`'s network, as its evaluation measured them."""
        e = next(e for e in self.store.evaluations(self.config.strategy) if e.idx == index)
        return e.resources["seconds_train"] / self.config.epochs

    def finalist_epochs(self, indices) -> int:
        """The finalists' epochs for their part of the time left (stored; given: kept)."""
        if self.config.minutes is None or "finalist_epochs" not in self.config.planned or len(indices) < 2:
            return self.config.finalist_epochs
        done = self.store.phase_result("unas-finalists-plan")
        if done is None:
            per_epoch = sum(self.epoch_seconds(i) for i in indices)
            share = self.left() * SHARES["finalists"] / (SHARES["finalists"] + SHARES["final"])
            epochs = min(MAX_EPOCHS["finalists"], max(1, int(share / max(1e-9, per_epoch))))
            spent = self.clock.elapsed() - self.marks().get("evolution", 0.0)  # the front's measurement
            done = {"epochs": epochs, "seconds": spent + epochs * per_epoch, "epoch_seconds": per_epoch}
            self.store.finish_phase("unas-finalists-plan", done)
        return done["epochs"]

    def final_epochs(self, index: int, finalist: dict | None, finalist_epochs: int, images_ratio: float) -> int:
        """The chosen member's final epochs for the time left, at its measured seconds per epoch (its finalist
        training's, else its evaluation's) times `images_ratio` (the images it trains on over the fit split's)."""
        if self.config.minutes is None or "final_epochs" not in self.config.planned:
            return self.config.final_epochs
        done = self.store.phase_result("unas-final-plan")
        if done is None or done["index"] != index:
            per_epoch = (finalist["seconds"] / finalist_epochs if finalist and "seconds" in finalist and
                         finalist_epochs else self.epoch_seconds(index)) * images_ratio
            epochs = min(MAX_EPOCHS["final"], max(1, int(self.left() / max(1e-9, per_epoch))))
            done = {"index": index, "epochs": epochs, "seconds": epochs * per_epoch, "epoch_seconds": per_epoch}
            self.store.finish_phase("unas-final-plan", done)
        return done["epochs"]

    # -- planned vs spent ------------------------------------------------------------------------------------------
    def marks(self) -> dict:
        return self.store.phase_result("unas-marks") or {}

    def mark(self, phase: str) -> None:
        """The clock at `phase`'s end (kept from the first run that finished it)."""
        marks = self.marks()
        if phase not in marks:
            self.store.finish_phase("unas-marks", {**marks, phase: self.clock.save()})

    def phase_times(self) -> dict:
        """Each phase's planned and spent seconds for the report (planned None: not sized to the budget)."""
        marks, start, spent = self.marks(), 0.0, {}
        for phase in PHASES:
            if phase in marks:
                spent[phase], start = marks[phase] - start, marks[phase]
        sized = self.config.minutes is not None and bool(self.config.planned)  # else nothing was planned
        planned = {"evolution": self.deadline, "deploy": DEPLOY_SECONDS if sized else None}
        for phase, key in (("finalists", "unas-finalists-plan"), ("final", "unas-final-plan")):
            planned[phase] = (self.store.phase_result(key) or {}).get("seconds")
        return planned_vs_spent(PHASES, planned, spent)
