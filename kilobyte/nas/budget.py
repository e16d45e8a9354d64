"""Search stage: `--minutes` as a budget the search keeps (issue 26, item 5).

A fixed preset (epochs and generations tuned for MNIST, scaled by minutes / 15) runs far past its time on larger
images or networks. Instead the search measures what its steps cost for the chosen space and data, then sizes each
phase to a share of the time left:

1. space optimisation runs first (its samples scale with the minutes: `space_samples`); its time is spent;
2. `measure_costs` times a few training steps of the largest network and of the supernet's sandwich, and one subnet's
   fitness (BN recalibration + validation), on a copy of the supernet so the search's own weights are untouched;
3. `plan_phases` splits what is left, less a reserve for deployment (int8, C, verification), by `SHARES` and turns
   each share into epochs (population and generations for evolution);
4. before fine-tuning, `plan_finetune` sizes its epochs again from the time really left and the winner's own
   measured step (evolution's winner is known only then).

Plans are stored in the search's store when made, so a resumed search replays the same epochs whatever its own
timing. The report shows each phase's planned and spent seconds (`phase_times`). The search's side of this (`time_cap`,
`plan_budget`, `finetune_epochs`, `apply_plan`, `phase_times`) takes the search's context and configuration as they
are (nas/search.py), below the arithmetic.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from .build import build_module, network
from .resources import layer_counts
from .space import downsampling_schedules
from .supernet_train import SubnetScorer, batch_archs
from .task import CLASSIFY, task_for

SHARES = {"largest": 0.15, "supernet": 0.40, "evolution": 0.15, "finetune": 0.30}  # of the time after the space
DEPLOY_SECONDS = 30.0  # int8 PTQ, plan, C build, TFLM verification, int8 test accuracy, firmware measurement (6 s for
# MNIST's winner on an idle 2-core machine: bench/results/vs_hand.json)
# the supernet phases' real step over the step `measure_costs` times (its fixed batch, no augmentation, no per-epoch
# checkpoint): 1.84 (largest) and 1.56 (sandwich) in the first budgeted MNIST search (bench_vs_hand 32k/mnist/0)
LOOP_OVERHEAD = 1.7
MAX_EPOCHS = {"largest": 40, "supernet": 80, "finetune": 150}  # tiny data: stop early rather than over-train
POPULATION = (8, 40)  # evolution's population, at least and at most
MAX_GENERATIONS = 10
# The recipe's step (augmentation, label smoothing) and its per-epoch validation over a plain SGD step of the module:
# 1.43, 1.50 and 1.69 measured on bench_vs_hand's three MNIST 32 KB searches, whose fine-tuning at 1.25 overran its
# plan by 15-36 % once it ran every epoch (bench/results/vs_hand.json: runs 32k/mnist/*/search phase_times).
FINETUNE_OVERHEAD = 1.55
TIMED_STEPS = 3  # steps timed per phase, after one untimed (allocation, first-call overheads)


def space_samples(minutes: float) -> int:
    """Networks sampled per configuration in space optimisation: 150 for 15 minutes and more, fewer for less."""
    return int(min(150, max(40, round(10 * minutes))))


MIN_EPOCHS = {"largest": 2, "supernet": 4, "finetune": 4}  # a configuration must leave time for at least these
SANDWICH_COST = 6.0  # a supernet step over the largest network's step (4 random + largest + smallest, sliced)
SPACE_SHARE = 0.15  # of the budget, expected for space optimisation when the time cap is set


@dataclass(frozen=True)
class StepModel:
    """Seconds of one training step (a batch) of a standalone network of `macs` MACs: `fixed + per_mac * macs`,
    fitted on two networks of the space timed on this machine."""

    fixed: float
    per_mac: float

    def seconds(self, macs: float) -> float:
        return self.fixed + self.per_mac * macs


STEP_MODEL_ROUNDS = 3  # the two networks are timed in turn this often, each keeping its least time. A process's
# first timed steps run slow (one untimed step does not absorb PyTorch's first-call costs): with one round the small
# network's step came out 3x high and the detection search's cap at 35-43 M MACs where a second fit in the same
# process gave 56-68 M; three rounds gave 61-70 M in three fresh processes (issue 28, small-digit-scenes, 20 min)


def fit_step_model(modules_macs, x, y, batch_size: int, task=CLASSIFY) -> StepModel:
    """`StepModel` through the measured steps of two (module, MACs) pairs (a small and a large network), each the
    least of STEP_MODEL_ROUNDS timings taken in turn."""
    (m0, a), (m1, b) = modules_macs
    rounds = [[time_module_step(m, x, y, batch_size, task) for m in (m0, m1)] for _ in range(STEP_MODEL_ROUNDS)]
    t0, t1 = (min(r[i] for r in rounds) for i in (0, 1))
    per_mac = max(1e-12, (t1 - t0) / max(1.0, b - a))
    return StepModel(max(0.0, t0 - per_mac * a), per_mac)


def largest_macs_cap(minutes: float, model: StepModel, steps_per_epoch: int) -> float:
    """The most MACs a configuration's largest network may have so that, after space optimisation and deployment,
    the largest warm-up, the supernet and the fine-tuning still get MIN_EPOCHS each (evolution keeps its share)."""
    left = (minutes * 60 * (1 - SPACE_SHARE) - DEPLOY_SECONDS) * (1 - SHARES["evolution"])
    units = LOOP_OVERHEAD * (MIN_EPOCHS["largest"] + SANDWICH_COST * MIN_EPOCHS["supernet"]) + MIN_EPOCHS["finetune"]
    step = left / (units * steps_per_epoch)  # seconds one step of the largest network may take
    return max(0.0, (step - model.fixed) / model.per_mac)


@dataclass(frozen=True)
class StepCosts:
    """Seconds of the search's units of work, measured on this machine for the chosen space and data."""

    largest_step: float  # one training step (a batch) of the largest network
    sandwich_step: float  # one supernet step: every subnet of the batch, forward and backward
    evaluation: float  # one subnet's fitness on one thread (BN recalibration + validation)
    steps_per_epoch: int


@dataclass(frozen=True)
class PhasePlan:
    """Epochs, population and generations for the budget, and the seconds each phase is planned to take."""

    budget_seconds: float
    largest_epochs: int
    supernet_epochs: int
    population: int
    generations: int
    finetune_epochs: int
    seconds: dict  # phase -> planned seconds (space: spent)
    costs: dict  # StepCosts as a dict

    def to_json(self) -> dict:
        return asdict(self)


def _timed(step, n: int = TIMED_STEPS) -> float:
    step()
    start = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - start) / n


def measure_costs(net, x, y, cfg, scorer_factory, seed: int, task=CLASSIFY) -> StepCosts:
    """Time the largest network's and the sandwich's training steps and one subnet evaluation, on a deep copy of
    the supernet `net` (`scorer_factory(copy)` gives the copy's `SubnetScorer`); `y`: the `task`'s targets."""
    import torch

    trial = copy.deepcopy(net)
    opt = torch.optim.SGD(trial.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    xb, yb = x[:cfg.batch_size], task.take(y, np.arange(min(len(x), cfg.batch_size)))
    rng = np.random.default_rng([seed, 99])

    def step(archs):
        def run():
            trial.train()
            opt.zero_grad(set_to_none=True)
            chosen = archs()
            for arch in chosen:
                trial.set_active(arch)
                (task.loss(trial(xb), yb) / len(chosen)).backward()  # the mean, as train_phase steps
            opt.step()
        return run

    largest = _timed(step(lambda: [trial.largest_arch]))
    sandwich = _timed(step(lambda: batch_archs(trial, "supernet", cfg, rng)))
    scorer = scorer_factory(trial)
    evaluation = _timed(lambda: scorer(trial.space.sample(rng)), 1)
    return StepCosts(largest, sandwich, evaluation, math.ceil(len(x) / cfg.batch_size))


def plan_phases(budget_seconds: float, spent: float, costs: StepCosts, workers: int,
                finetune_step: float) -> PhasePlan:
    """Epochs per phase for what is left of `budget_seconds` after `spent`, less DEPLOY_SECONDS: evolution takes its
    SHARES part (at most MAX_GENERATIONS generations: beyond, a small supernet's subnets have been ranked), and the
    rest goes to the three training phases in proportion to their SHARES. `finetune_step`: the expected seconds of a
    fine-tuning step (re-planned before fine-tuning)."""
    left = max(0.0, budget_seconds - spent - DEPLOY_SECONDS)
    evaluations = SHARES["evolution"] * left * max(1, workers) / costs.evaluation
    population = int(min(POPULATION[1], max(POPULATION[0], evaluations // 4)))
    generations = int(min(MAX_GENERATIONS, max(1, evaluations // population - 1)))
    seconds = {"evolution": population * (generations + 1) * costs.evaluation / max(1, workers)}
    training = max(0.0, left - seconds["evolution"])
    per_epoch = {"largest": LOOP_OVERHEAD * costs.largest_step * costs.steps_per_epoch,
                 "supernet": LOOP_OVERHEAD * costs.sandwich_step * costs.steps_per_epoch,
                 "finetune": finetune_step * costs.steps_per_epoch}
    weight = sum(SHARES[p] for p in per_epoch)
    epochs = {p: min(MAX_EPOCHS[p], max(1, int(SHARES[p] / weight * training / per_epoch[p]))) for p in per_epoch}
    seconds.update({p: epochs[p] * per_epoch[p] for p in per_epoch})
    seconds["space"] = spent
    seconds["deploy"] = DEPLOY_SECONDS
    return PhasePlan(budget_seconds, epochs["largest"], epochs["supernet"], population, generations,
                     epochs["finetune"], seconds, asdict(costs))


def plan_finetune(seconds_left: float, step_seconds: float, steps_per_epoch: int) -> int:
    """Fine-tuning epochs that fit `seconds_left` (less DEPLOY_SECONDS) at the winner's measured step."""
    left = max(0.0, seconds_left - DEPLOY_SECONDS)
    return min(MAX_EPOCHS["finetune"], max(1, int(left / (step_seconds * steps_per_epoch))))


def time_module_step(module, x, y, batch_size: int, task=CLASSIFY) -> float:
    """Seconds of one training step (forward, backward, SGD) of a standalone `module`, on a deep copy; `y`: the
    `task`'s targets of `x`."""
    import torch

    trial = copy.deepcopy(module).train()
    opt = torch.optim.SGD(trial.parameters(), lr=0.01, momentum=0.9)
    xb, yb = x[:batch_size], task.take(y, np.arange(min(len(x), batch_size)))

    def run():
        opt.zero_grad(set_to_none=True)
        task.loss(trial(xb), yb).backward()
        opt.step()
    return _timed(run)


class Clock:
    """A search's seconds so far, earlier runs of a resumed search included: what the last run stored (`save`, at
    every commit) plus this run's own (the time between a run's last save and its kill is not counted)."""

    KEY = "clock"

    def __init__(self, store):
        self.store, self.started = store, time.perf_counter()
        self.before = (store.phase_result(self.KEY) or {}).get("seconds", 0.0)

    def elapsed(self) -> float:
        return self.before + time.perf_counter() - self.started

    def save(self) -> float:
        now = self.elapsed()
        self.store.finish_phase(self.KEY, {"seconds": now})
        return now


# -- the search's side: the cap before space optimisation, the plan after it, the fine-tuning's, the report -------
def time_cap(config, space, fit) -> float | None:
    """The time budget's cap on a configuration's largest network (`budget.largest_macs_cap`), from two networks of
    the space's middle configuration timed on this machine; None without a budget (or for the joint search of a
    classifier, whose wide resolution grid is the point; a detector's joint search is capped as the per-layer one
    is, both searching one grid)."""

    if config.minutes is None or not config.planned or (config.patch and not space.detect_heads):
        return None
    w, r = space.widths[len(space.widths) // 2], space.resolutions[len(space.resolutions) // 2]
    sub = space.with_config(w, r, downsampling_schedules(space, r)[0])
    pairs = [(build_module(sub, a), layer_counts(network(sub, a))[1]) for a in (sub.smallest(), sub.largest())]
    batch = config.training.batch_size
    task = task_for(sub, fit, r, config.seed)
    x, y = task.tensors(fit.take(slice(0, batch)), r)
    model = fit_step_model(pairs, x, y, batch, task)
    return largest_macs_cap(config.minutes, model, math.ceil(len(task.images(fit)) / batch))


def plan_budget(ctx, net, x, y, calib_x, val_x, val_y):
    """`ctx.config` with its `planned` settings sized to `minutes` (`budget.plan_phases`, from step costs measured
    on a copy of the supernet); the plan is stored, so a resumed search replays it."""
    config = ctx.config
    done = ctx.store.phase_result("plan")
    if done is None:
        costs = measure_costs(net, x, y, config.training,
                              lambda n: SubnetScorer(n, calib_x, val_x, val_y, task=ctx.task), config.seed, ctx.task)
        largest_macs = layer_counts(network(net.space, net.largest_arch))[1]
        share = min(1.0, ctx.store.phase_result("space")["mean_macs"] / largest_macs)  # a typical fitting subnet
        plan = plan_phases(config.minutes * 60, ctx.elapsed(), costs, ctx.workers,
                           FINETUNE_OVERHEAD * costs.largest_step * share)
        done = plan.to_json()
        ctx.store.finish_phase("plan", done)
        ctx.log(f"      budget {config.minutes:g} min: largest {plan.largest_epochs} epochs, supernet "
                f"{plan.supernet_epochs} epochs, evolution {plan.population} x {plan.generations + 1}, fine-tuning "
                f"up to {plan.finetune_epochs} epochs (a step: largest {costs.largest_step * 1e3:.0f} ms, sandwich "
                f"{costs.sandwich_step * 1e3:.0f} ms; a subnet's fitness {costs.evaluation:.2f} s)")
    return apply_plan(config, done)


def apply_plan(config, plan: dict):
    """`config` with the settings it leaves to the budget (`planned`) taken from `plan`."""
    training, evolution = config.training, config.evolution
    for name in ("largest_epochs", "supernet_epochs"):
        if name in config.planned:
            training = replace(training, **{name: plan[name]})
    if "population" in config.planned:
        evolution = replace(evolution, population=plan["population"], parents=max(2, plan["population"] // 4))
    if "generations" in config.planned:
        evolution = replace(evolution, generations=plan["generations"])
    finetune = plan["finetune_epochs"] if "finetune_epochs" in config.planned else config.finetune_epochs
    return replace(config, training=training, evolution=evolution, finetune_epochs=finetune)


def planned_vs_spent(phases, planned: dict, spent: dict) -> dict:
    """The report's `phase_times` (both strategies; the CLI's time line): phase -> {"planned": seconds or None,
    "spent": seconds or None}, in `phases`' order."""
    return {p: {"planned": planned.get(p), "spent": spent.get(p)} for p in phases}


def phase_times(store, deploy_seconds: float) -> dict:
    """Each phase's planned seconds (None without a budget) and spent seconds (None when it ran before this was
    recorded), for the report."""
    plan = store.phase_result("plan") or {}
    phases = ("space", "largest", "supernet", "evolution", "finetune", "deploy")
    spent = {p: (store.phase_result(p) or {}).get("seconds") for p in phases[:-1]}
    out = planned_vs_spent(phases, plan.get("seconds", {}), {**spent, "deploy": deploy_seconds})
    ft = store.phase_result("finetune_plan")
    if ft is not None and out["finetune"]["planned"] is not None:  # re-planned from the time left
        out["finetune"]["planned"] = ft["epochs"] * ft["step_seconds"] * plan["costs"]["steps_per_epoch"]
    return out


def finetune_epochs(ctx, module, fit, resolution: int, batch_size: int) -> int:
    """The fine-tuning epochs for the time left (`budget.plan_finetune`, at the winner's measured step), stored
    before training so that a resumed search replays them."""
    done = ctx.store.phase_result("finetune_plan")
    if done is None:
        n = len(ctx.task.images(fit))
        x, y = ctx.task.tensors(fit.take(slice(0, batch_size)), resolution)
        step = FINETUNE_OVERHEAD * time_module_step(module, x, y, batch_size, ctx.task)
        left = ctx.config.minutes * 60 - ctx.elapsed()
        done = {"epochs": plan_finetune(left, step, math.ceil(n / batch_size)), "step_seconds": step,
                "seconds_left": left}
        ctx.store.finish_phase("finetune_plan", done)
    return done["epochs"]
