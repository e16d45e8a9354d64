"""Prune stage: DTMM's pruning-strategy scheduler (§III-C) — per-layer filterlet ratios α_i that minimise the latency
model's ΣT̂ subject to an accuracy budget and the device's Flash, by simulated annealing.

- Accuracy (C_acc): the sum of the Taylor scores of the removed filterlets (importance.py) is at most ΔL_max. A layer
  always removes its lowest-scored filterlets first, so removing k of them costs the sum of its k lowest scores.
- Flash (C_mem, Size(s) ≤ Mem_f): the pruned layers in FWCS (storage.py; a layer with nothing removed stays dense)
  plus `fixed_flash`, everything else the firmware holds.
- SRAM (Ram(s) ≤ Mem_r) is not a variable here: filterlet pruning removes no output channel (DTMM's M_i = α_i·N_i·…
  shrinks channels its own pruning keeps; papers/search-specs.md D.3 "Ambiguous"), so the activations are the dense
  model's, checked once by the pipeline against the device.

The decision variable is the number k_i of filterlets removed per layer (α_i = k_i / (N_i·KH_i·KW_i)), at most
`max_ratio` of a layer's (the paper leaves fully pruned layers open; a layer with no weights outputs a constant).
Annealing starts from the best uniform ratio (the largest α every layer can share within the constraints), so its
answer is never worse than uniform; it walks with single-layer and paired moves on an energy of normalised latency
plus a penalty on violated constraints, and returns the best feasible state it met. Randomness comes from `seed`
only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import PruneError
from .latency import LatencyModel
from .layers import ConvLayer
from .storage import dense_bytes, fwcs_bytes

PENALTY = 4.0  # energy per unit of relative constraint violation (latency is normalised to the dense model's: 1.0)


def removal_loss(scores: np.ndarray) -> np.ndarray:
    """(units + 1,): entry k is the sum of the k lowest scores — the budget removing k units spends.

    >>> removal_loss(np.array([[0.3, 0.1], [0.2, 0.0]])).round(6).tolist()
    [0.0, 0.0, 0.1, 0.3, 0.6]
    """
    return np.concatenate([[0.0], np.cumsum(np.sort(scores.ravel(), kind="stable"))])


@dataclass(frozen=True)
class Constraints:
    loss_budget: float  # ΔL_max
    flash_bytes: int | None = None  # the device's Flash (None: unconstrained)
    fixed_flash: int = 0  # Flash of everything but the pruned layers' weights, indices and per-channel data
    max_ratio: float = 0.95  # no layer loses more of its filterlets (one pruned to nothing outputs a constant)


@dataclass(frozen=True)
class Strategy:
    removed: tuple[int, ...]  # filterlets removed per layer
    ratios: dict[str, float]  # α per layer name
    latency: float  # ΣT̂ of the model's layers
    loss: float  # summed Taylor scores of the removed filterlets
    flash_bytes: int  # pruned layers + fixed_flash
    feasible: bool


class Problem:
    """The layers, their removal costs, the latency model and the constraints: evaluates any choice of k_i."""

    def __init__(self, layers: list[ConvLayer], scores: dict[str, np.ndarray], model: LatencyModel,
                 constraints: Constraints):
        self.layers, self.model, self.constraints = layers, model, constraints
        self.loss_tables = [removal_loss(scores[c.name]) for c in layers]
        self.sizes = [c.filterlets for c in layers]
        self.limits = [math.floor(constraints.max_ratio * n) for n in self.sizes]  # most k_i per layer
        self.dense_latency = [model.layer(c, 0.0) for c in layers]
        self.saving = [model.per_filterlet(c) for c in layers]  # T̂ saved per filterlet removed
        self.reference = max(sum(self.dense_latency), 1e-12)

    def layer_flash(self, i: int, k: int) -> int:
        c = self.layers[i]
        return (dense_bytes(c) if k == 0 else fwcs_bytes(c, c.filterlets - k)).total

    def latency(self, removed) -> float:
        return sum(d - s * k for d, s, k in zip(self.dense_latency, self.saving, removed))

    def loss(self, removed) -> float:
        return float(sum(t[k] for t, k in zip(self.loss_tables, removed)))

    def flash(self, removed) -> int:
        return self.constraints.fixed_flash + sum(self.layer_flash(i, k) for i, k in enumerate(removed))

    def violation(self, loss: float, flash: int) -> float:
        """Relative amount by which the constraints are broken (0 when met)."""
        c = self.constraints
        v = max(0.0, loss - c.loss_budget) / max(c.loss_budget, 1e-12)
        if c.flash_bytes is not None:
            v += max(0, flash - c.flash_bytes) / c.flash_bytes
        return v

    def strategy(self, removed) -> Strategy:
        removed = tuple(int(k) for k in removed)
        loss, flash = self.loss(removed), self.flash(removed)
        ratios = {c.name: k / c.filterlets for c, k in zip(self.layers, removed)}
        return Strategy(removed, ratios, self.latency(removed), loss, flash, self.violation(loss, flash) == 0)


def uniform_strategy(problem: Problem, resolution: int = 1000) -> Strategy:
    """The largest ratio α on a grid of 1/`resolution` that every layer can share within the constraints (the
    baseline the scheduler must not lose to); α = 0 if none is feasible (then `feasible` says whether even that is)."""
    best = problem.strategy([0] * len(problem.layers))
    for step in range(1, resolution + 1):
        alpha = step / resolution
        s = problem.strategy([min(round(alpha * n), m) for n, m in zip(problem.sizes, problem.limits)])
        if s.loss > problem.constraints.loss_budget:
            break  # the loss only grows with α
        if s.feasible and (not best.feasible or s.latency <= best.latency):
            best = s
    return best


def anneal(problem: Problem, seed: int = 0, steps: int = 20000, t_start: float = 0.05, t_end: float = 1e-5,
           start: Strategy | None = None) -> Strategy:
    """Simulated annealing from `start` (default: the uniform strategy) with a geometric temperature schedule; the
    best feasible state seen. Raises PruneError if no state it visited meets the constraints."""
    rng = np.random.default_rng(seed)
    start = start or uniform_strategy(problem)
    state = list(start.removed)
    energy = _energy(problem, state)[0]
    best = start if start.feasible else None
    cooling = (t_end / t_start) ** (1.0 / max(steps - 1, 1))
    temperature = t_start
    for _ in range(steps):
        candidate = _move(problem, state, rng)
        e, latency, feasible = _energy(problem, candidate)
        if e <= energy or rng.random() < math.exp((energy - e) / temperature):
            state, energy = candidate, e
            if feasible and (best is None or latency < best.latency):
                best = problem.strategy(state)
        temperature *= cooling
    if best is None:
        c = problem.constraints
        raise PruneError(f"pruning scheduler: no filterlet ratios meet ΔL ≤ {c.loss_budget:g} and Flash ≤ "
                         f"{c.flash_bytes} B (removing the filterlets of least score per byte up to the budget "
                         f"leaves {leanest_within_budget(problem).flash_bytes} B); raise the loss budget or pick a "
                         "larger device")
    return best


def leanest_within_budget(problem: Problem) -> Strategy:
    """The filterlets of least score per Flash byte (Cin + 2 B each) removed across layers while the loss budget
    lasts: the greedy answer to "how small can the budget make the model" (for error messages)."""
    removed = [0] * len(problem.layers)
    sorted_scores = [np.diff(t) for t in problem.loss_tables]  # each layer's scores, lowest first
    items = sorted((score / (c.cin + 2), i) for i, (c, scores) in enumerate(zip(problem.layers, sorted_scores))
                   for score in scores[:problem.limits[i]])
    loss = 0.0
    for _, i in items:
        score = sorted_scores[i][removed[i]]
        if loss + score > problem.constraints.loss_budget:
            break
        loss += score
        removed[i] += 1
    return problem.strategy(removed)


def _energy(problem: Problem, removed) -> tuple[float, float, bool]:
    """(energy, latency, whether the constraints hold) of a state."""
    latency, violation = problem.latency(removed), problem.violation(problem.loss(removed), problem.flash(removed))
    return latency / problem.reference + PENALTY * violation, latency, violation == 0


def _move(problem: Problem, state: list[int], rng: np.random.Generator) -> list[int]:
    """A neighbour: one layer's count up or down by a random step (up to an eighth of its filterlets), and with
    probability 1/2 another layer's the other way — a move along the budget's edge."""
    new = list(state)
    layers = rng.permutation(len(state))[:2] if len(state) > 1 and rng.random() < 0.5 else [rng.integers(len(state))]
    sign = 1 if rng.random() < 0.5 else -1
    for i in layers:
        step = int(rng.integers(1, max(1, problem.sizes[i] // 8) + 1))
        new[i] = min(max(new[i] + sign * step, 0), problem.limits[i])
        sign = -sign
    return new


def schedule(layers: list[ConvLayer], scores: dict[str, np.ndarray], model: LatencyModel, constraints: Constraints,
             seed: int = 0, steps: int = 20000) -> tuple[Strategy, Strategy]:
    """(the annealed strategy, the uniform baseline) for `layers` with per-filterlet `scores`."""
    problem = Problem(layers, scores, model, constraints)
    uniform = uniform_strategy(problem)
    return anneal(problem, seed, steps, start=uniform), uniform
