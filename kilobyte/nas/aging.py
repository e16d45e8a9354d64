"""Search stage: μNAS's aging evolution with random scalarisation, and Pareto fronts (papers/003 §3.5, Eq. 2;
papers/search-specs.md C.3).

Each candidate has objective values f (to minimise: error, peak SRAM, Flash / model size, MACs, ...) and each
objective a soft bound b. Whenever a parent is chosen, fresh weights are drawn — 1/λᵢ ~ U[0, bᵢ] — and the candidate
with the smallest maxᵢ λᵢ·fᵢ wins, so that over many rounds every trade-off between the objectives is explored
(the equivalent form μNAS's code computes is used: maxᵢ min(fᵢ/bᵢ, 10) / uᵢ with uᵢ ~ U(0, 1); the cap keeps one
far-out objective from deciding alone).

`aging_evolution` is the steady-state loop: `population` random architectures first, then each round samples
`sample` members of the population (with replacement), takes the scalarised best as parent, applies one morphism,
evaluates the child, appends it and removes the oldest member. Evaluation goes through `submit` / `collect`
callbacks so that several can be in flight (a local pool or Ray): a new child is produced as soon as any evaluation
finishes, as μNAS's Ray scheduler did; with one in flight the run is fully deterministic for a seed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# μNAS Table 3, MNIST: error, peak memory (bytes), model size (parameters ~ bytes at int8), MACs
MNIST_BOUNDS = {"error": 0.035, "peak_bytes": 2.5 * 1024, "weight_bytes": 4.5e3, "macs": 30e6}
CAP = 10.0


@dataclass(frozen=True)
class AgingConfig:
    population: int = 100
    sample: int = 25
    rounds: int = 2000  # evaluations in all, the initial population included
    bounds: dict = field(default_factory=lambda: dict(MNIST_BOUNDS))
    in_flight: int = 1
    seed: int = 0
    strategy: str = "aging"  # or "random": every candidate sampled, none bred (the baseline of equal evaluations)


@dataclass(frozen=True)
class Candidate:
    arch: object
    objectives: dict  # name -> value (smaller is better)
    index: int  # evaluation order
    parent: int | None = None  # index of the parent (None: random initial)
    morphism: str | None = None


def scalarised(objectives: dict, bounds: dict, u: np.ndarray) -> float:
    """maxᵢ min(fᵢ / bᵢ, CAP) / uᵢ over the bounded objectives (in `bounds`' order), u ∈ (0, 1]."""
    ratios = [min(objectives[name] / bound, CAP) for name, bound in bounds.items()]
    return float(max(r / ui for r, ui in zip(ratios, u)))


def choose_parent(population: Sequence[Candidate], bounds: dict, rng: np.random.Generator, sample: int) -> Candidate:
    """The scalarised best of `sample` members drawn with replacement, under freshly drawn weights."""
    u = 1.0 - rng.random(len(bounds))  # (0, 1]: never divide by zero
    picks = [population[int(i)] for i in rng.integers(len(population), size=sample)]
    return min(picks, key=lambda c: (scalarised(c.objectives, bounds, u), c.index))


@dataclass(frozen=True)
class Issued:
    """A candidate handed to evaluation: what a resumed search must evaluate again if it never finished."""

    index: int
    arch: object
    parent: int | None = None
    morphism: str | None = None


def aging_evolution(space, evaluate: Callable[[object], dict] | None, config: AgingConfig,
                    on_result: Callable[[Candidate], None] | None = None, submit=None, collect=None, *,
                    history: Sequence[Candidate] = (), unfinished: Sequence[Issued] = (),
                    on_issue: Callable[[Issued], None] | None = None, stop: Callable[[], bool] | None = None,
                    resize: Callable[[list[Candidate], int], AgingConfig] | None = None) -> list[Candidate]:
    """Run the loop (module doc); returns every evaluated candidate in the order evaluations finished. `evaluate(arch)`
    gives the objectives; or `submit(index, arch)` starts one and `collect()` returns a finished (index, objectives).

    Resuming: `history` is what finished before (in finishing order) and `unfinished` what was issued but never
    finished; those are submitted again first, then the loop goes on from the next index. Each issue draws from its
    own generator (seeded by the search seed and the candidate's index), so with one evaluation in flight a resumed
    run issues exactly what an uninterrupted one would. `on_issue` sees every candidate before it is submitted.

    A time budget (nas/unas_budget.py): `stop()` true issues no new candidate (those in flight finish), and
    `resize(history, issued)`, asked before each issue, may return the config with another population, sample or
    rounds (the population sized once the first evaluations say how many will fit)."""
    if config.strategy not in ("aging", "random"):
        raise ValueError(f"aging_evolution: strategy {config.strategy!r} (aging or random)")
    pending: dict[int, Issued] = {}
    if submit is None:
        done: deque = deque()

        def submit(index, arch):
            done.append((index, evaluate(arch)))

        def collect():
            return done.popleft()

    history = list(history)
    if resize is not None:
        config = resize(history, 1 + max([c.index for c in history] + [i.index for i in unfinished], default=-1))
    population: deque[Candidate] = deque(history[-config.population:])
    issued = 1 + max([c.index for c in history] + [i.index for i in unfinished], default=-1)

    def start(item: Issued) -> None:
        pending[item.index] = item
        submit(item.index, item.arch)

    def issue() -> None:
        nonlocal issued
        rng = np.random.default_rng([config.seed, issued])
        if issued < config.population or config.strategy == "random":
            item = Issued(issued, space.sample(rng))
        else:
            p = choose_parent(list(population), config.bounds, rng, config.sample)
            child, name = space.mutate(p.arch, rng)
            item = Issued(issued, child, p.index, name)
        issued += 1
        if on_issue is not None:
            on_issue(item)
        start(item)

    for item in unfinished:
        start(item)

    def top_up() -> None:
        nonlocal config
        if resize is not None:
            config = resize(history, issued)
            while len(population) > config.population:
                population.popleft()
        while issued < config.rounds and len(pending) < config.in_flight and not (stop is not None and stop()):
            if config.strategy == "aging" and issued >= config.population and \
                    len(population) < min(config.population, issued):
                return  # the initial population is not all back yet: breed from all of it
            issue()

    top_up()
    while pending:
        index, objectives = collect()
        item = pending.pop(index)
        cand = Candidate(item.arch, dict(objectives), index, item.parent, item.morphism)
        history.append(cand)
        population.append(cand)
        if len(population) > config.population:
            population.popleft()  # the oldest dies
        if on_result is not None:
            on_result(cand)
        top_up()
    return history


def weakly_dominates(a: dict, b: dict, names: Sequence[str]) -> bool:
    """`a` is at least as good as `b` in every objective of `names` (all minimised)."""
    return all(a[n] <= b[n] for n in names)


def dominates(a: dict, b: dict, names: Sequence[str]) -> bool:
    return weakly_dominates(a, b, names) and any(a[n] < b[n] for n in names)


def pareto_front(candidates: Sequence[Candidate], names: Sequence[str]) -> list[Candidate]:
    """The non-dominated candidates over objectives `names` (all minimised), in evaluation order; of candidates with
    equal objectives the first evaluated stays."""
    front = []
    for c in candidates:
        if any(dominates(o.objectives, c.objectives, names) or
               (all(o.objectives[n] == c.objectives[n] for n in names) and o.index < c.index) for o in candidates):
            continue
        front.append(c)
    return front


def hypervolume(points: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    """Volume dominated by `points` (all objectives minimised) inside the box below reference point `ref`: slabs
    between consecutive values of the first objective, each the hypervolume of the points at or before it in the
    other objectives (exact; O(n^d), fine for the fronts of a search)."""
    pts = sorted((tuple(p) for p in points if all(x < r for x, r in zip(p, ref))), key=lambda p: p[0])
    if not pts:
        return 0.0
    if len(ref) == 1:
        return float(ref[0] - pts[0][0])
    volume = 0.0
    for i, p in enumerate(pts):
        width = (pts[i + 1][0] if i + 1 < len(pts) else ref[0]) - p[0]
        if width > 0:
            volume += width * hypervolume([q[1:] for q in pts[:i + 1]], ref[1:])
    return float(volume)
