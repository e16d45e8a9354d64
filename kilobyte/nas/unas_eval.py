"""Search stage: what a μNAS candidate is and how a worker evaluates it — the search's settings (`UnasConfig`), the
genome (a granular architecture + its target sparsity) and its sampling and mutation (`GenomeSpace`, for
`aging.aging_evolution`), and `evaluate_genome`: resources from the shared `resources.ResourceEvaluator`, training
by the recipe (`kilobyte.train.fit`) with DPF pruning (`dpf.py`), int8 PTQ and the int8 reference's error
(`unas_search` has the steps and why). `make_worker` is the task `parallel.open_pool` runs on every worker.
"""

from __future__ import annotations

import io
import json
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import train as training  # training.fit looked up when called: tests/nas/test_core.py spies on it
from ..schedule.plan_types import PlanOptions
from ..train import TrainConfig, float_accuracy, int8_accuracy
from ..train.evaluate import quantise_module as quantise
from .aging import CAP, MNIST_BOUNDS
from .core import arch_json, load_arch
from .dpf import train_pruned
from .resources import ResourceEvaluator, figures
from .unas_build import build_module, input_shape
from .unas_space import UArch, UnasError, UnasSpace

OBJECTIVES = ("error", "peak_bytes", "weight_bytes", "macs")
CALIBRATION = 128  # PTQ calibration images: the first of the training split, as deploy_module takes them
PRUNE_MODES = ("structured", "unstructured", "none")
# μNAS Table 3 bounds for the bundled sets (digits: 8x8 images, 10 classes; our choice, scaled from MNIST's by input)
DEFAULT_BOUNDS = {"mnist": dict(MNIST_BOUNDS),
                  "digits": {"error": 0.05, "peak_bytes": 1024.0, "weight_bytes": 3e3, "macs": 1e6}}
SAMPLE_DRAWS = 200  # random architectures drawn for one random candidate (`GenomeSpace.sample`)
SPARSITY_RANGE = {"mnist": (0.05, 0.80)}  # μNAS Table 5; other data: the same


@dataclass(frozen=True)
class UnasConfig:
    """Everything that decides a μNAS search's result (stored with it, compared on `--resume`)."""

    data: str = "mnist"
    seed: int = 0
    evaluations: int = 2000
    population: int = 100
    sample: int = 25
    bounds: dict = field(default_factory=lambda: dict(MNIST_BOUNDS))
    strategy: str = "aging"  # or "random" (the baseline)
    prune: str = "structured"  # structured | unstructured | none
    sparsity: tuple[float, float] = (0.05, 0.80)
    epochs: int = 8
    lr: float = 0.1
    batch_size: int = 32  # a candidate's training steps: 32 separates networks better than 64 in a few epochs
    train_fraction: float = 0.8
    val_images: int | None = None  # None: core.VAL_SHARE of the training split (1,000 of MNIST's 4,000)
    train_images: int | None = None
    skip_factor: float = CAP
    finalists: int = 5  # the front's most accurate members inside the bounds, evaluated again before choosing
    finalist_epochs: int = 20  # ... trained this long on the fit split (0: no second evaluation)
    final_epochs: int = 100  # the chosen member's final training before deployment (0: its search weights)
    in_flight: int = 1  # evaluations running at once (0: one per worker)
    core: str | None = None  # the Flash estimate's core
    kernels: str = "portable"
    flash_bytes: int | None = None  # the budget's Flash: a hard limit on a candidate's whole firmware (see `limits`)
    minutes: float | None = None  # a time budget: the settings named in `planned` are sized to it (unas_budget.py)
    planned: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = sorted(set(self.bounds) - set(OBJECTIVES))
        if bad:
            raise UnasError(f"--bounds: unknown objective {bad[0]!r} (known: {', '.join(OBJECTIVES)})")
        if not self.bounds or any(not v > 0 for v in self.bounds.values()):
            raise UnasError("--bounds: every bound must be positive")
        if self.prune not in PRUNE_MODES:
            raise UnasError(f"--prune {self.prune}: expected one of {', '.join(PRUNE_MODES)}")
        lo, hi = self.sparsity
        if not 0 <= lo <= hi < 1:
            raise UnasError(f"--sparsity {lo},{hi}: expected 0 <= low <= high < 1")
        if self.population < 2 or not 1 <= self.sample or self.evaluations < 1 or self.epochs < 1:
            raise UnasError("μNAS search: population >= 2, sample >= 1, evaluations >= 1 and epochs >= 1")
        if self.batch_size < 1 or self.finalists < 0 or self.finalist_epochs < 0 or self.final_epochs < 0:
            raise UnasError("μNAS search: batch size >= 1; finalists, finalist epochs and final epochs >= 0")

    def settings(self) -> dict:
        return {"strategy_kind": "unas", **json.loads(json.dumps(asdict(self)))}

    @property
    def limits(self) -> dict:
        """The bounds a candidate must keep to be drawn, trained and chosen: `bounds`, and with `flash_bytes` the
        Flash estimate of its whole firmware (weights + the kernels it links + the rest: `schedule.flash`) — the
        model-size bound alone let a library with more kernel code than `device_bounds`' lower bound past a 16 KB
        budget (20.4 kB measured)."""
        if self.flash_bytes is None:
            return self.bounds
        return {**self.bounds, "flash_bytes": float(self.flash_bytes)}

    @property
    def split_seed(self) -> int:
        """The data split's shuffle (`core.load_split`): 0 whatever the search seed, so that searches of different
        seeds are scored on the same held-out images."""
        return 0

    @property
    def pruning(self) -> bool:
        return self.prune != "none"


# -- genomes -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Genome:
    arch: UArch
    sparsity: float = 0.0

    def dumps(self) -> str:
        """The architecture's JSON envelope (`core.arch_json`) with the genome's "sparsity"."""
        return json.dumps({**arch_json(self.arch), "sparsity": self.sparsity}, sort_keys=True)

    @staticmethod
    def loads(text: str) -> Genome:
        """A genome from `dumps`, or from the {"arch": ..., "sparsity": ...} of stores written before the envelope."""
        data = json.loads(text)
        sparsity = float(data.pop("sparsity"))
        return Genome(load_arch(data.get("arch", data), "unas"), sparsity)


class GenomeSpace:
    """`sample` / `mutate` over genomes for `aging_evolution`: Table 1's architectures and morphisms, plus the
    sparsity gene in a pruning-aware search. A random candidate is the first of up to `SAMPLE_DRAWS` draws inside
    every resource bound, else the draw closest to them (the smallest largest ratio to a bound): at small budgets
    most random networks are far outside (MNIST at 4 KB SRAM / 16 KB Flash: 2 % of draws inside, 37 % within 10x),
    and each one trained costs the time budget an evaluation that cannot be chosen. Mutation's children are not
    redrawn: evolution's scalarisation steers them (μNAS)."""

    def __init__(self, space: UnasSpace, config: UnasConfig, evaluator):
        self.space, self.config, self.evaluator = space, config, evaluator

    def sample(self, rng: np.random.Generator) -> Genome:
        arch, closest = None, math.inf
        for _ in range(SAMPLE_DRAWS):  # ~20 ms a draw (the compiler's planner)
            draw = self.space.sample(rng)
            ratio = excess(self.evaluator.evaluate(draw), self.config.limits)
            if ratio < closest:
                arch, closest = draw, ratio
            if ratio <= 1.0:
                break
        lo, hi = self.config.sparsity
        return Genome(arch, float(rng.uniform(lo, hi)) if self.config.pruning else 0.0)

    def mutate(self, genome: Genome, rng: np.random.Generator) -> tuple[Genome, str]:
        child, name = self.space.mutate(genome.arch, rng)
        sparsity = genome.sparsity
        if self.config.pruning:
            lo, hi = self.config.sparsity
            sparsity = float(np.clip(sparsity + rng.normal(0.0, 0.05), lo, hi))
        return Genome(child, sparsity), name


def excess(resources, bounds: dict) -> float:
    """The largest ratio of a bounded resource objective of `resources` to its bound (at most 1: inside them all)."""
    return max((getattr(resources, k) / b for k, b in bounds.items() if k != "error"), default=0.0)


def within(resources, bounds: dict, factor: float) -> bool:
    """Whether every bounded resource objective of `resources` is at most `factor` times its bound."""
    return all(getattr(resources, k) <= factor * b for k, b in bounds.items() if k != "error")


# -- evaluating one candidate (on a worker) ----------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalSpec:
    """What every worker needs: the space, the training and validation splits, the settings."""

    space: dict  # UnasSpace.to_json()
    config: dict  # UnasConfig.settings()
    fit_x: np.ndarray
    fit_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray


def config_of(settings: dict) -> UnasConfig:
    """The `UnasConfig` of stored settings (`UnasConfig.settings()`)."""
    data = {k: v for k, v in settings.items() if k not in ("strategy_kind", "schema")}
    data["sparsity"] = tuple(data["sparsity"])
    data["planned"] = tuple(data.get("planned", ()))
    return UnasConfig(**data)


def make_worker(spec: EvalSpec):
    """The evaluation function a worker runs: (index, genome JSON) -> objectives and trained weights."""
    space, config = UnasSpace.from_json(spec.space), config_of(spec.config)
    evaluator = ResourceEvaluator(space, PlanOptions(kernels=config.kernels), core=config.core)

    def run(payload: tuple[int, str]) -> dict:
        index, text = payload
        return evaluate_genome(space, config, evaluator, Genome.loads(text), (spec.fit_x, spec.fit_y),
                               (spec.val_x, spec.val_y), seed=config.seed * 1_000_003 + index)
    return run


def train_candidate(space: UnasSpace, config: UnasConfig, genome: Genome, fit, seed: int):
    """(trained module in eval mode, the architecture it has, achieved sparsity): the recipe for `config.epochs`
    epochs, with DPF pruning to the genome's sparsity in a pruning-aware search."""
    import torch

    cfg = recipe(config, config.epochs, seed)
    if config.pruning and genome.sparsity > 0:
        r = train_pruned(space, genome.arch, genome.sparsity, config.prune, fit[0], fit[1], cfg)
        return r.module.eval(), r.arch, float(r.sparsity)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_module(space, genome.arch)
    training.fit(module, fit[0], fit[1], cfg)
    return module.eval(), genome.arch, 0.0


def recipe(config: UnasConfig, epochs: int, seed: int):
    """The training recipe of every network of a μNAS search (candidates, finalists, the chosen one): `fit`'s
    one-cycle SGD at `config.lr`, no early stopping, no validation carved from the images given."""
    return TrainConfig(epochs=epochs, lr=config.lr, batch_size=config.batch_size, seed=seed, patience=None,
                       validation_fraction=0.0, warmup_fraction=0.1)


def quantise_module(space: UnasSpace, module, calib_x: np.ndarray):
    """The int8 graph of a trained candidate: `from_torch` + `prepare_for_inference` + PTQ on `calib_x`."""
    return quantise(module, input_shape(space), calib_x)


def evaluate_genome(space: UnasSpace, config: UnasConfig, evaluator, genome: Genome, fit, val, seed: int) -> dict:
    """The objectives of one candidate (module doc) and its trained weights (`weights`: torch.save bytes or None)."""
    import torch

    t0 = time.perf_counter()
    dense = evaluator.evaluate(genome.arch)
    t_res = time.perf_counter() - t0
    out = {"trained": within(dense, config.limits, config.skip_factor), "sparsity": 0.0,
           "arch": arch_json(genome.arch), "weights": None}
    if not out["trained"]:
        res, t_train = dense, 0.0
        out.update(error=1.0, float_error=1.0)
    else:
        t1 = time.perf_counter()
        module, arch, sparsity = train_candidate(space, config, genome, fit, seed)
        int8 = quantise_module(space, module, fit[0][:CALIBRATION])
        out.update(error=1.0 - int8_accuracy(int8, val[0], val[1]),
                   float_error=1.0 - float_accuracy(module, val[0], val[1]), sparsity=sparsity, arch=arch_json(arch))
        buf = io.BytesIO()
        torch.save(module.state_dict(), buf)
        out["weights"] = buf.getvalue()
        t_train = time.perf_counter() - t1
        t2 = time.perf_counter()
        res = evaluator.evaluate(arch)
        t_res += time.perf_counter() - t2
    out.update(figures(res), seconds_train=t_train, seconds_resources=t_res)
    return out
