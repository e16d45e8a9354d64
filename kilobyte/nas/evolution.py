"""Search stage: TinyNAS evolution and its random-search baseline, over any fitness function, resumable.

Evolution (thesis Appendix; OFA's EvolutionFinder where the thesis is silent — papers/search-specs.md A.4):
- generation 0: `population` random architectures that fit the budget (infeasible samples are redrawn);
- each later generation: the `parents` best of the previous generation and its parents (elitist, as OFA keeps
  its parents) breed `population // 2` mutation children (a random parent, each gene redrawn with `mutate_prob`)
  and `population // 2` crossover children (two random parents, uniform per gene); infeasible children are redrawn;
- fitness = held-out accuracy (the caller's `fitness`); the best architecture seen is the result.
Random search draws the same number of fitting architectures uniformly.

Determinism and resume: generation g draws from its own generator seeded by (seed, g), and its population depends
only on the stored accuracies of earlier generations, so replaying the schedule against the store (`SearchStore`)
rebuilds every generation; an evaluation found in the store is taken from it, the rest are computed by `fitness` and
committed one by one as they finish. A network already evaluated in this search (same `Arch.key()`) is not
evaluated again: its accuracy is reused and the store records it once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np

from .core import arch_json
from .resources import Budget, ResourceEvaluator, figures
from .space import Arch, MBSpace
from .store import Evaluation, SearchStore

# fitness(archs) yields (index into archs, accuracy) as each evaluation finishes, in any order
Fitness = Callable[[list[Arch]], Iterable[tuple[int, float]]]
MAX_DRAWS = 10_000


class NothingFitsError(RuntimeError):
    pass


@dataclass(frozen=True)
class EvolutionConfig:
    """`generations` rounds after generation 0, each of `population` fitting networks bred from the `parents` best so
    far: half by mutation (each gene redrawn with `mutate_prob`), half by crossover (see the module doc)."""

    population: int = 100
    parents: int = 20
    generations: int = 30
    mutate_prob: float = 0.1
    seed: int = 0


@dataclass(frozen=True)
class Scored:
    """An evaluated network: its validation accuracy and the generation that first scored it."""

    arch: Arch
    accuracy: float  # the fitness: held-out validation accuracy
    generation: int  # 0: the initial random population


@dataclass(frozen=True)
class SearchResult:
    """What `evolve` returns: the best network and the whole history."""

    best: Scored
    history: tuple[Scored, ...]  # every evaluated network in schedule order (first evaluation of each)
    evaluations: int  # distinct networks evaluated

    def best_so_far(self) -> list[float]:
        """Best accuracy after each evaluation (the thesis's Fig. 5-6 curve)."""
        return list(np.maximum.accumulate([s.accuracy for s in self.history])) if self.history else []


def _draw(make: Callable[[], Arch], feasible: Callable[[Arch], bool]) -> Arch:
    """`make()` until it gives a feasible architecture."""
    for _ in range(MAX_DRAWS):
        arch = make()
        if feasible(arch):
            return arch
    raise NothingFitsError(f"no feasible architecture in {MAX_DRAWS} draws")


class _Run:
    """Book-keeping shared by evolution and random search: store replay, dedup by network, history."""

    def __init__(self, space: MBSpace, resources: ResourceEvaluator, budget: Budget, fitness: Fitness,
                 store: SearchStore | None, phase: str, seed: int, on_result=None):
        self.space, self.resources, self.budget = space, resources, budget
        self.fitness, self.store, self.phase, self.seed = fitness, store, phase, seed
        self.on_result = on_result
        self.known: dict[tuple, float] = {}
        self.history: list[Scored] = []

    def feasible(self, arch: Arch) -> bool:
        return self.resources.fits(arch, self.budget)

    def score(self, generation: int, archs: list[Arch]) -> list[float]:
        """Accuracies of `archs` (generation `generation`): from this run, from the store, or computed now. Fresh
        results are committed as they arrive; the history lists the generation in schedule order whatever order
        the workers finish in."""
        found: dict[int, float] = {}
        pending: dict[tuple, int] = {}  # one evaluation per distinct network of the generation
        for i, arch in enumerate(archs):
            stored = self.store.get(self.phase, generation, i) if self.store else None
            if stored is not None and stored.arch_key == repr(arch.key()):
                found[i] = stored.accuracy
                self._notify(arch, stored.accuracy, generation)
            elif arch.key() not in self.known:
                pending.setdefault(arch.key(), i)
        unique = list(pending.values())
        started = time.perf_counter()
        for j, accuracy in self.fitness([archs[i] for i in unique]):
            i = unique[j]
            found[i] = float(accuracy)
            self._commit(generation, i, archs[i], found[i], time.perf_counter() - started)
            self._notify(archs[i], found[i], generation)
        for i, arch in enumerate(archs):
            if i in found and arch.key() not in self.known:
                self.known[arch.key()] = found[i]
                self.history.append(Scored(arch, found[i], generation))
        return [self.known[a.key()] for a in archs]

    def _commit(self, generation: int, idx: int, arch: Arch, accuracy: float, seconds: float) -> None:
        if self.store is None:
            return
        r = self.resources.fitting(arch, self.budget) or self.resources.evaluate(arch)
        stored = figures(r)
        if self.resources.patch:
            stored["patch"] = self.resources.schedule(arch, self.budget)
        self.store.add(Evaluation(self.phase, generation, idx, json.dumps(arch_json(arch), sort_keys=True),
                                  repr(arch.key()), self.seed, accuracy, stored, seconds))

    def _notify(self, arch: Arch, accuracy: float, generation: int) -> None:
        if self.on_result is not None:
            self.on_result(Scored(arch, accuracy, generation))

    def result(self) -> SearchResult:
        best = max(self.history, key=lambda s: s.accuracy)  # first of equals: schedule order
        return SearchResult(best, tuple(self.history), len(self.history))


def evolve(space: MBSpace, resources: ResourceEvaluator, budget: Budget, fitness: Fitness,
           config: EvolutionConfig = EvolutionConfig(), *, store: SearchStore | None = None,
           phase: str = "evolution", on_result=None, on_generation=None) -> SearchResult:
    """TinyNAS evolution (see the module doc); `space` should be the chosen (w, r) sub-space."""
    run = _Run(space, resources, budget, fitness, store, phase, config.seed, on_result)
    rng = np.random.default_rng([config.seed, 0])
    population = [_draw(partial(space.sample, rng), run.feasible) for _ in range(config.population)]
    scores = run.score(0, population)
    elite: list[tuple[float, int, Arch]] = []
    for g in range(1, config.generations + 1):
        ranked = sorted(elite + [(s, -i, a) for i, (s, a) in enumerate(zip(scores, population))],
                        key=lambda t: (-t[0], -t[1]))
        seen, elite = set(), []
        for s, order, a in ranked:
            if a.key() not in seen and len(elite) < config.parents:
                seen.add(a.key())
                elite.append((s, order, a))
        parents = [a for _, _, a in elite]
        if on_generation is not None:
            on_generation(g - 1, elite[0][0])
        rng = np.random.default_rng([config.seed, g])
        n_mut = config.population // 2
        mutant = partial(_mutant, space, parents, rng, config.mutate_prob)
        cross = partial(_cross, space, parents, rng)
        children = [_draw(mutant, run.feasible) for _ in range(n_mut)]
        children += [_draw(cross, run.feasible) for _ in range(config.population - n_mut)]
        population, scores = children, run.score(g, children)
    return run.result()


def _mutant(space: MBSpace, parents: list[Arch], rng: np.random.Generator, prob: float) -> Arch:
    return space.mutate(parents[int(rng.integers(len(parents)))], rng, prob)


def _cross(space: MBSpace, parents: list[Arch], rng: np.random.Generator) -> Arch:
    return space.crossover(parents[int(rng.integers(len(parents)))], parents[int(rng.integers(len(parents)))], rng)


def random_search(space: MBSpace, resources: ResourceEvaluator, budget: Budget, fitness: Fitness,
                  evaluations: int, *, seed: int = 0, batch: int = 100, store: SearchStore | None = None,
                  phase: str = "random", on_result=None) -> SearchResult:
    """`evaluations` distinct fitting architectures drawn uniformly; the best one."""
    run = _Run(space, resources, budget, fitness, store, phase, seed, on_result)
    g = 0
    while len(run.history) < evaluations:
        rng = np.random.default_rng([seed, 1_000_000 + g])
        need = min(batch, evaluations - len(run.history))
        archs = [_draw(partial(space.sample, rng), run.feasible) for _ in range(need)]
        run.score(g, archs)
        g += 1
    return run.result()


def serial_fitness(evaluate: Callable[[Arch], float]) -> Fitness:
    """A `Fitness` that evaluates one architecture after another in this process."""
    def fitness(archs: list[Arch]) -> Iterator[tuple[int, float]]:
        for i, arch in enumerate(archs):
            yield i, float(evaluate(arch))
    return fitness
