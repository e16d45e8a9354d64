"""Search stage: `kilobyte search --strategy unas` — μNAS: aging evolution with random scalarisation over the granular
space, every candidate trained (with pruning when asked), quantised and measured on Kilobyte's own pipeline.

A candidate is a `Genome`: a μNAS architecture and, in a pruning-aware search, its target sparsity (random in the
dataset's range at first, inherited with a N(0, 0.05) perturbation, clipped). Evaluating it (`evaluate_genome`, on
a worker: this process, a local process pool or Ray):
1. resources of the unpruned architecture from `resources.ResourceEvaluator` (the compiler's plan; TinyNAS's
   evaluator, with the same cache); a candidate above `skip_factor` times a resource bound is not trained (error
   1.0, `trained: false`) — with the scalarisation's cap of 10 bounds it could not become a parent anyway, and on 2
   CPU cores a random 128-channel network at 28x28 would cost minutes; the random initial candidates are drawn
   below that line;
2. training with the recipe (`kilobyte.train.fit`) on the search's training split, with DPF pruning to the target
   (nas/dpf.py) — structured pruning removes channels and units for real, so resources are measured on the smaller
   architecture;
3. int8 PTQ and the int8 reference interpreter's error on the validation split (μNAS only measured float);
4. resources of the (pruned) architecture: peak SRAM without the caller-owned input (μNAS's convention;
   `input_bytes` says how much the input is), the linked firmware's Flash, the int8 constant bytes of the model
   (`weight_bytes`, μNAS's "model size") and MACs.

The search (`run_unas`) commits every issued candidate before it runs and every finished evaluation as it finishes
(DIR/search.sqlite), and saves the trained weights of each candidate non-dominated when it finishes
(DIR/weights/<index>.pt; a candidate dominated later never returns to the front). `--resume` restores the loop from
the store: finished evaluations are taken, issued but unfinished ones evaluated again, and with one evaluation in
flight the run continues exactly as an uninterrupted one would. At the end: the Pareto front over (error, peak SRAM,
model size, MACs) with held-out test accuracies, `pareto.png`, the member chosen for deployment (the most accurate
one inside every bound by validation, after a second, longer evaluation of the `finalists` best: `_shortlist`) trained
once more on all training images (`final_epochs`), compiled to C and verified against TensorFlow Lite Micro, and
`report.json`.
"""

from __future__ import annotations

import io
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import KilobyteError
from .aging import CAP, MNIST_BOUNDS, AgingConfig, Candidate, Issued, aging_evolution, hypervolume, pareto_front
from .plots import pyplot, save_png
from .unas_space import UArch, UnasSpace

OBJECTIVES = ("error", "peak_bytes", "weight_bytes", "macs")
CALIBRATION = 128  # PTQ calibration images: the first of the training split, as deploy_module takes them
PRUNE_MODES = ("structured", "unstructured", "none")
# μNAS Table 3 bounds for the bundled sets (digits: 8x8 images, 10 classes; our choice, scaled from MNIST's by input)
DEFAULT_BOUNDS = {"mnist": dict(MNIST_BOUNDS),
                  "digits": {"error": 0.05, "peak_bytes": 1024.0, "weight_bytes": 3e3, "macs": 1e6}}
SPARSITY_RANGE = {"mnist": (0.05, 0.80)}  # μNAS Table 5; other data: the same


class UnasError(KilobyteError):
    """A μNAS search that cannot run as asked (settings, data, a member to export that does not exist)."""


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
    val_images: int | None = None  # None: search.VAL_SHARE of the training split (1,000 of MNIST's 4,000)
    train_images: int | None = None
    skip_factor: float = CAP
    finalists: int = 5  # the front's most accurate members inside the bounds, evaluated again before choosing
    finalist_epochs: int = 20  # ... trained this long on the fit split (0: no second evaluation)
    final_epochs: int = 100  # the chosen member's final training before deployment (0: its search weights)
    in_flight: int = 1  # evaluations running at once (0: one per worker)
    core: str | None = None  # the Flash estimate's core
    kernels: str = "portable"

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
    def pruning(self) -> bool:
        return self.prune != "none"


# -- genomes -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Genome:
    arch: UArch
    sparsity: float = 0.0

    def dumps(self) -> str:
        return json.dumps({"arch": self.arch.to_json(), "sparsity": self.sparsity}, sort_keys=True)

    @staticmethod
    def loads(text: str) -> Genome:
        data = json.loads(text)
        return Genome(UArch.from_json(data["arch"]), float(data["sparsity"]))


class GenomeSpace:
    """`sample` / `mutate` over genomes for `aging_evolution`: Table 1's architectures and morphisms, plus the
    sparsity gene in a pruning-aware search. Random candidates are drawn below `skip_factor` times every resource
    bound (up to 200 draws; module doc)."""

    def __init__(self, space: UnasSpace, config: UnasConfig, evaluator):
        self.space, self.config, self.evaluator = space, config, evaluator

    def trainable(self, arch: UArch) -> bool:
        return within(self.evaluator.evaluate(arch), self.config.bounds, self.config.skip_factor)

    def sample(self, rng: np.random.Generator) -> Genome:
        for _ in range(200):
            arch = self.space.sample(rng)
            if self.trainable(arch):
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


def within(resources, bounds: dict, factor: float) -> bool:
    """Whether every bounded resource objective of `resources` is at most `factor` times its bound."""
    return all(getattr(resources, k) <= factor * b for k, b in bounds.items() if k != "error")


# -- evaluating one candidate (on a worker) ----------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalSpec:
    """What every worker needs: the space, the training and validation splits, the settings."""

    space: dict  # UnasSpace fields
    config: dict  # UnasConfig.settings()
    fit_x: np.ndarray
    fit_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray


def space_of(data: dict) -> UnasSpace:
    return UnasSpace(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _config_of(settings: dict) -> UnasConfig:
    data = {k: v for k, v in settings.items() if k not in ("strategy_kind", "schema")}
    data["sparsity"] = tuple(data["sparsity"])
    return UnasConfig(**data)


def make_worker(spec: EvalSpec):
    """The evaluation function a worker runs: (index, genome JSON) -> objectives and trained weights."""
    from ..schedule.plan_types import PlanOptions
    from .resources import ResourceEvaluator

    space, config = space_of(spec.space), _config_of(spec.config)
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

    from ..train import fit as train
    from .unas_build import build_module

    cfg = _recipe(config, config.epochs, seed)
    if config.pruning and genome.sparsity > 0:
        from .dpf import train_pruned

        r = train_pruned(space, genome.arch, genome.sparsity, config.prune, fit[0], fit[1], cfg)
        return r.module.eval(), r.arch, float(r.sparsity)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_module(space, genome.arch)
    train(module, fit[0], fit[1], cfg)
    return module.eval(), genome.arch, 0.0


def _recipe(config: UnasConfig, epochs: int, seed: int):
    """The training recipe of every network of a μNAS search (candidates, finalists, the chosen one): `fit`'s
    one-cycle SGD at `config.lr`, no early stopping, no validation carved from the images given."""
    from ..train import TrainConfig

    return TrainConfig(epochs=epochs, lr=config.lr, batch_size=config.batch_size, seed=seed, patience=None,
                       validation_fraction=0.0, warmup_fraction=0.1)


def quantise_module(space: UnasSpace, module, calib_x: np.ndarray):
    """The int8 graph of a trained candidate: `from_torch` + `prepare_for_inference` + PTQ on `calib_x`."""
    from ..train.evaluate import quantise_module as quantise
    from .unas_build import input_shape

    return quantise(module, input_shape(space), calib_x)


def evaluate_genome(space: UnasSpace, config: UnasConfig, evaluator, genome: Genome, fit, val, seed: int) -> dict:
    """The objectives of one candidate (module doc) and its trained weights (`weights`: torch.save bytes or None)."""
    import torch

    from ..train import float_accuracy, int8_accuracy

    t0 = time.perf_counter()
    dense = evaluator.evaluate(genome.arch)
    t_res = time.perf_counter() - t0
    out = {"trained": within(dense, config.bounds, config.skip_factor), "sparsity": 0.0,
           "arch": genome.arch.to_json(), "weights": None}
    if not out["trained"]:
        res, t_train = dense, 0.0
        out.update(error=1.0, float_error=1.0)
    else:
        t1 = time.perf_counter()
        module, arch, sparsity = train_candidate(space, config, genome, fit, seed)
        int8 = quantise_module(space, module, fit[0][:CALIBRATION])
        out.update(error=1.0 - int8_accuracy(int8, val[0], val[1]),
                   float_error=1.0 - float_accuracy(module, val[0], val[1]), sparsity=sparsity, arch=arch.to_json())
        buf = io.BytesIO()
        torch.save(module.state_dict(), buf)
        out["weights"] = buf.getvalue()
        t_train = time.perf_counter() - t1
        t2 = time.perf_counter()
        res = evaluator.evaluate(arch)
        t_res += time.perf_counter() - t2
    out.update(peak_bytes=res.peak_bytes, input_bytes=res.input_bytes, flash_bytes=res.flash_bytes,
               weight_bytes=res.weight_bytes, macs=res.macs, seconds_train=t_train, seconds_resources=t_res)
    return out


# -- the search --------------------------------------------------------------------------------------------------------
def load_split(config: UnasConfig):
    """(fit, val, test) of the data: the held-out test split is the last 1 - train_fraction of the images in a fixed
    order (seed 0, whatever the search seed, so searches of different seeds are scored on the same images), the
    validation split the last `val_images` of the rest (default a quarter of it)."""
    from .search import split_data

    return split_data(config.data, 0, config.train_fraction, config.val_images, config.train_images)


def _candidate(e) -> Candidate:
    r = dict(e.resources)
    return Candidate(Genome.loads(e.arch), {k: r[k] for k in OBJECTIVES}, e.idx, r.get("parent"), r.get("morphism"))


def run_unas(config: UnasConfig, out_dir, *, resume: bool = False, workers: int = 1, ray_address: str | None = None,
             progress: bool = False, log=print, device=None, deploy: bool = True) -> dict:
    """Run (or resume) a μNAS search into `out_dir`; returns the report (also written to `report.json`)."""
    from tqdm import tqdm

    from ..schedule.plan_types import PlanOptions
    from .parallel import one_thread, open_pool
    from .resources import ResourceEvaluator
    from .store import Evaluation, SearchStore

    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "weights").mkdir(exist_ok=True)
    store = SearchStore(out_dir / "search.sqlite", config.settings(), resume=resume, growable=("evaluations",))
    try:
        fit, val, test = load_split(config)
        n_classes = int(max(fit.y.max(), val.y.max(), test.y.max())) + 1
        space = UnasSpace(input_shape=tuple(int(d) for d in fit.x.shape[1:]), num_classes=n_classes)
        evaluator = ResourceEvaluator(space, PlanOptions(kernels=config.kernels), core=config.core)
        genomes = GenomeSpace(space, config, evaluator)
        phase = config.strategy
        history = [_candidate(e) for e in sorted(store.evaluations(phase), key=lambda e: e.generation)]
        unfinished = [Issued(i, Genome.loads(a), p, m) for i, a, p, m in store.unfinished(phase)]
        spec = EvalSpec(asdict(space), config.settings(), fit.x, fit.y, val.x, val.y)
        front: list[Candidate] = pareto_front([c for c in history if c.objectives["error"] < 1.0], OBJECTIVES)
        if history or unfinished:
            log(f"resuming: {len(history)} evaluations stored, {len(unfinished)} to run again")
        log(f"μNAS {config.strategy} search: {config.evaluations} evaluations, population {config.population}, "
            f"sample {config.sample}, pruning {config.prune}, {config.epochs} epochs each "
            f"({'Ray ' + ray_address if ray_address else f'{workers} worker(s)'}) ...")
        bar = tqdm(total=config.evaluations, initial=len(history), desc="μNAS", unit="eval", disable=not progress)
        with open_pool(make_worker, spec, workers, ray_address) as pool:
            in_flight = config.in_flight or pool.capacity
            aging = AgingConfig(config.population, config.sample, config.evaluations, config.bounds, in_flight,
                                config.seed, config.strategy)
            results: dict[int, dict] = {}

            def on_issue(item: Issued) -> None:
                store.issue(phase, item.index, item.arch.dumps(), item.parent, item.morphism)

            def submit(index, genome):
                pool.submit(index, (index, genome.dumps()))

            def collect():
                index, out = pool.collect()
                results[index] = out
                return index, {k: out[k] for k in OBJECTIVES}

            def on_result(c: Candidate) -> None:
                nonlocal front
                out = results.pop(c.index)
                weights = out.pop("weights")
                if out["trained"] and not any(_dominates_or_equals(o, c) for o in front):
                    _atomic_write(out_dir / "weights" / f"{c.index}.pt", weights)
                    front = [o for o in front if not _dominates_or_equals(c, o)] + [c]
                resources = {**out, "parent": c.parent, "morphism": c.morphism}
                store.add(Evaluation(phase, len(history_box), c.index, c.arch.dumps(), c.arch.arch.dumps(),
                                     config.seed, 1.0 - out["error"], resources,
                                     out["seconds_train"] + out["seconds_resources"]))
                history_box.append(c)
                bar.update(1)
                bar.set_postfix(best=f"{(1 - min(o.objectives['error'] for o in front)) * 100:.1f}%" if front else "-")

            history_box = list(history)
            aging_evolution(genomes, None, aging, on_result, submit, collect, history=history,
                            unfinished=unfinished, on_issue=on_issue)
            nodes = dict(pool.nodes)
        bar.close()
        report = _report(store, config, space, out_dir, fit, test, log)
        report.update(nodes=nodes, seconds=time.perf_counter() - started, out_dir=str(out_dir),
                      repeated=store.repeated())
        if report["chosen"] is not None:
            with one_thread():  # as the evaluations: the chosen member does not depend on this machine's cores
                _shortlist(store, space, config, report, out_dir, fit, val, log)
                report["final"] = _final_training(store, space, config, report, out_dir, fit, val, test, log)
            if deploy:
                report["deployed"] = _deploy(space, config, report, out_dir, fit, test, device, progress, log)
        _write_pareto_plot(report, config, out_dir)
        tmp = out_dir / "report.json.tmp"
        tmp.write_text(json.dumps(report, indent=1))
        os.replace(tmp, out_dir / "report.json")
        return report
    finally:
        store.close()


def _dominates_or_equals(a: Candidate, b: Candidate) -> bool:
    return all(a.objectives[n] <= b.objectives[n] for n in OBJECTIVES)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def load_member(space: UnasSpace, out_dir: Path, member: dict):
    """The trained module of a Pareto member of the report (its architecture, its saved weights)."""
    import torch

    from .unas_build import build_module

    module = build_module(space, UArch.from_json(member["architecture"]))
    path = Path(out_dir) / "weights" / f"{member['index']}.pt"
    if not path.exists():
        raise UnasError(f"{path}: the weights of Pareto member {member['index']} are missing")
    module.load_state_dict(torch.load(path, weights_only=True))
    return module.eval()


def _report(store, config: UnasConfig, space: UnasSpace, out_dir: Path, fit, test, log) -> dict:
    """The front (held-out accuracies measured here), hypervolume, throughput and the member chosen to deploy."""
    from ..train import float_accuracy, int8_accuracy

    evals = store.evaluations(config.strategy)
    cands = {e.idx: (_candidate(e), e) for e in evals}
    front = pareto_front(sorted((c for c, e in cands.values() if e.resources["trained"]), key=lambda c: c.index),
                         OBJECTIVES)
    log(f"Pareto front: {len(front)} members; measuring them on the held-out test split ...")
    members = []
    for c in sorted(front, key=lambda c: c.objectives["error"]):
        r = cands[c.index][1].resources
        member = {"index": c.index, "architecture": r["arch"], "description": UArch.from_json(r["arch"]).describe(),
                  "sparsity": r["sparsity"], "target_sparsity": c.arch.sparsity,
                  "val_error": r["error"], "peak_bytes": r["peak_bytes"], "input_bytes": r["input_bytes"],
                  "flash_bytes": r["flash_bytes"], "weight_bytes": r["weight_bytes"], "macs": r["macs"]}
        module = load_member(space, out_dir, member)
        int8 = quantise_module(space, module, fit.x[:CALIBRATION])
        member["int8_accuracy"] = int8_accuracy(int8, test.x, test.y)
        member["float_accuracy"] = float_accuracy(module, test.x, test.y)
        member["within_bounds"] = all(member[k] <= b for k, b in config.bounds.items() if k != "error")
        members.append(member)
    for stale in (out_dir / "weights").glob("*.pt"):  # weights of candidates dominated since they were saved
        if stale.stem not in {str(m["index"]) for m in members}:
            stale.unlink()
    inside = [m for m in members if m["within_bounds"]]
    # by validation alone (ties: the smaller model, then the smaller peak); the held-out split never chooses
    chosen = min(inside, key=lambda m: _rank(m, "val_error"), default=None)
    t_train = sum(e.resources["seconds_train"] for e in evals)
    t_res = sum(e.resources["seconds_resources"] for e in evals)
    return {"strategy": "unas", "search": config.strategy, "prune": config.prune, "evaluations": len(evals),
            "space": asdict(space),
            "trained": sum(1 for e in evals if e.resources["trained"]), "bounds": config.bounds,
            "pareto": members, "chosen": None if chosen is None else members.index(chosen), "finalists": [],
            "hypervolume": front_hypervolume([c.objectives for c in front], config.bounds),
            "seconds_train": t_train, "seconds_resources": t_res,
            "resource_share": t_res / (t_train + t_res) if t_train + t_res else 0.0}


HV_REFERENCE = 2.0  # bound units of each resource objective; the error's reference is 1.0 (any error)


def front_hypervolume(objectives: list[dict], bounds: dict) -> float:
    """Hypervolume of a front, the measure the benchmarks compare fronts by: the error as it is (reference 1.0) and
    each bounded resource objective in units of its bound (reference `HV_REFERENCE` bounds: the bounds are soft, so
    a network a little above one still counts; one far above adds nothing)."""
    names = [n for n in OBJECTIVES if n in bounds and n != "error"]
    return hypervolume([[o["error"]] + [o[n] / bounds[n] for n in names] for o in objectives],
                       [1.0] + [HV_REFERENCE] * len(names))


def retrain_member(space, config: UnasConfig, out_dir: Path, member: dict, x: np.ndarray, y: np.ndarray, epochs: int):
    """A Pareto member trained again for `epochs` on (x, y) with the recipe (no early stopping; the one-cycle rate
    ends low), in eval mode. Structured or no pruning: its architecture (the pruned one) from scratch, seeded by the
    search's seed; unstructured: from its search weights, the pruned weights kept at zero. 0 epochs: its search
    weights."""
    import torch

    from ..prune.masks import ParameterMasks
    from ..train import fit as train
    from .unas_build import build_module

    module = load_member(space, out_dir, member)
    if not epochs:
        return module
    keep_pruned = ParameterMasks([])
    if config.prune == "unstructured":
        keep_pruned = ParameterMasks([(p, (p != 0).float()) for p in module.parameters() if p.ndim > 1])
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            module = build_module(space, UArch.from_json(member["architecture"]))
    train(module, x, y, _recipe(config, epochs, config.seed), on_step=keep_pruned)
    return module.eval()


def _shortlist(store, space, config: UnasConfig, report: dict, out_dir: Path, fit, val, log) -> None:
    """A second, longer evaluation before choosing: the `finalists` most accurate members inside every bound (by the
    search's validation error) trained again for `finalist_epochs` on the fit split and scored int8 on the
    validation split; the chosen member becomes the best of them (ties: the smaller model, then the smaller peak).
    A few epochs rank networks that learn fast above ones that end more accurate, and one validation score carries
    about half a point of noise at 97 %; this re-ranks the candidates that matter with the deployment's training.
    Each finalist's result is committed as its own phase, so a resumed search does not train it again. Updates
    `report` (`finalists`, `chosen`, and `finalist_val_error` on those members)."""
    from ..train import int8_accuracy

    inside = [i for i, m in enumerate(report["pareto"]) if m["within_bounds"]]
    ranked = sorted(inside, key=lambda i: _rank(report["pareto"][i], "val_error"))[:config.finalists]
    if not config.finalist_epochs or len(ranked) < 2:
        return
    log(f"second evaluation of the {len(ranked)} most accurate members inside the bounds: {config.finalist_epochs} "
        f"epochs each ...")
    for n, i in enumerate(ranked):
        member = report["pareto"][i]
        key = f"finalist-{member['index']}-{config.finalist_epochs}"
        done = store.phase_result(key)
        if done is None:
            module = retrain_member(space, config, out_dir, member, fit.x, fit.y, config.finalist_epochs)
            int8 = quantise_module(space, module, fit.x[:CALIBRATION])
            done = {"val_error": 1.0 - int8_accuracy(int8, val.x, val.y)}
            store.finish_phase(key, done)
        member["finalist_val_error"] = done["val_error"]
        log(f"  finalist {n + 1}/{len(ranked)}: member {i} {member['description']}: validation int8 "
            f"{(1 - member['val_error']) * 100:.1f} % -> {(1 - done['val_error']) * 100:.1f} %")
    report["finalists"] = ranked
    report["chosen"] = min(ranked, key=lambda i: _rank(report["pareto"][i], "finalist_val_error"))


def _rank(member: dict, error: str) -> tuple:
    return member[error], member["weight_bytes"], member["peak_bytes"]


def _final_training(store, space, config, report, out_dir, fit, val, test, log) -> dict:
    """The chosen member trained once more, the way a chosen network is: on the training and validation images
    together, for `final_epochs` (`retrain_member`). Saved to DIR/final.pt; held-out accuracies after it. Deterministic,
    and committed as the store's "final" phase: a resumed search takes it from there."""
    from ..train import float_accuracy, int8_accuracy

    member = report["pareto"][report["chosen"]]
    ckpt = out_dir / "final.pt"
    done = store.phase_result("final")
    if done is not None and done["index"] == member["index"] and ckpt.exists():
        return done
    if config.final_epochs:
        log(f"final training of Pareto member {report['chosen']}: {config.final_epochs} epochs on the training and "
            f"validation images ...")
    x, y = np.concatenate([fit.x, val.x]), np.concatenate([fit.y, val.y])
    module = retrain_member(space, config, out_dir, member, x, y, config.final_epochs)
    _atomic_torch_save(module.state_dict(), ckpt)
    int8 = quantise_module(space, module, fit.x[:CALIBRATION])
    result = {"index": member["index"], "epochs": config.final_epochs,
              "int8_accuracy": int8_accuracy(int8, test.x, test.y),
              "float_accuracy": float_accuracy(module, test.x, test.y)}
    store.finish_phase("final", result)
    return result


def _atomic_torch_save(obj, path: Path) -> None:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    _atomic_write(path, buf.getvalue())


def _deploy(space, config, report, out_dir, fit, test, device, progress, log) -> dict:
    """The chosen member after its final training to a verified C library in DIR/model (`search.deploy_module`)."""
    import torch

    from ..schedule.plan_types import PlanOptions
    from ..targets.devices import get_device
    from .search import deploy_module

    member = report["pareto"][report["chosen"]]
    log(f"deploying Pareto member {report['chosen']} (index {member['index']}): int8, plan, C library, verification "
        f"against TFLite Micro ...")
    module = load_member(space, out_dir, member)
    module.load_state_dict(torch.load(out_dir / "final.pt", weights_only=True))
    return deploy_module(module, tuple(space.input_shape[:2]), fit, test, out_dir / "model",
                         PlanOptions(kernels=config.kernels), device or get_device("stm32f410"), name="unas",
                         progress=progress)


def export_member(search_dir, n: int, out_path) -> dict:
    """Write Pareto member `n` of a finished search in `search_dir` as an int8 `.tflite` (for `kilobyte compile`)."""
    from ..export.tflite import to_tflite

    search_dir = Path(search_dir)
    try:
        report = json.loads((search_dir / "report.json").read_text())
        settings = json.loads(dict(_meta(search_dir / "search.sqlite"))["settings"])
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise UnasError(f"{search_dir}: not a finished μNAS search ({type(e).__name__}: {e})") from None
    if report.get("strategy") != "unas":
        raise UnasError(f"{search_dir}: --export needs a μNAS search (--strategy unas)")
    members = report["pareto"]
    if not 0 <= n < len(members):
        raise UnasError(f"--export {n}: the Pareto front of {search_dir} has members 0..{len(members) - 1}")
    fit, _, _ = load_split(_config_of(settings))
    space = space_of(report["space"])
    module = load_member(space, search_dir, members[n])
    int8 = quantise_module(space, module, fit.x[:CALIBRATION])
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_path, to_tflite(int8))
    return {**members[n], "member": n, "tflite": str(out_path)}


def _meta(path: Path):
    import sqlite3

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(db.execute("SELECT key, value FROM meta"))
    finally:
        db.close()


def _write_pareto_plot(report: dict, config: UnasConfig, out_dir: Path) -> None:
    """`pareto.png`: held-out int8 accuracy of the front against peak SRAM, model size and MACs, bounds dashed."""
    plt = pyplot()
    if plt is None:
        return
    members = report["pareto"]
    if not members:
        return
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5), sharey=True)
    for ax, key, label, scale in ((axes[0], "peak_bytes", "peak SRAM (KB, input excluded)", 1024),
                                  (axes[1], "weight_bytes", "model size (KB of int8 constants)", 1024),
                                  (axes[2], "macs", "MACs (M)", 1e6)):
        ax.scatter([m[key] / scale for m in members], [m["int8_accuracy"] * 100 for m in members], s=14)
        if key in config.bounds:
            ax.axvline(config.bounds[key] / scale, color="red", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel(label)
    axes[0].set_ylabel("int8 accuracy, held-out test (%)")
    fig.suptitle(f"μNAS Pareto front ({len(members)} members, {report['evaluations']} evaluations)", fontsize=10)
    save_png(fig, out_dir / "pareto.png")
