"""Search stage: the end of a μNAS search — its Pareto front measured on the held-out split, the member chosen for
deployment (a second, longer evaluation of the most accurate `finalists`: `shortlist`), that member's final
training and its verified C library, `pareto.png`, and `export_member` for any member of a finished search. Every
file is written whole or not at all (`report.py`), every finished step committed to the store as a phase, so a
resumed search does not train anything again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from .. import train as training  # training.fit looked up when called: tests/nas/test_core.py spies on it
from ..atomic import save_torch, write_bytes
from ..errors import KilobyteError
from ..prune.masks import ParameterMasks
from ..schedule.plan_types import PlanOptions
from ..targets.devices import get_device
from ..train import float_accuracy, int8_accuracy
from .aging import Candidate, hypervolume, pareto_front
from .core import load_arch, load_split
from .deploy import deploy_module
from .report import Panel, pareto_png
from .store import SearchStore
from .unas_build import build_module
from .unas_eval import CALIBRATION, OBJECTIVES, Genome, UnasConfig, UnasError, config_of, quantise_module, recipe
from .unas_space import UnasSpace


def candidate(e) -> Candidate:
    """The aging-evolution candidate of a stored evaluation."""
    r = dict(e.resources)
    return Candidate(Genome.loads(e.arch), {k: r[k] for k in OBJECTIVES}, e.idx, r.get("parent"), r.get("morphism"))


def load_member(space: UnasSpace, out_dir: Path, member: dict):
    """The trained module of a Pareto member of the report (its architecture, its saved weights)."""
    import torch

    module = build_module(space, load_arch(member["architecture"], "unas"))
    path = Path(out_dir) / "weights" / f"{member['index']}.pt"
    if not path.exists():
        raise UnasError(f"{path}: the weights of Pareto member {member['index']} are missing")
    module.load_state_dict(torch.load(path, weights_only=True))
    return module.eval()


def front_report(store, config: UnasConfig, space: UnasSpace, out_dir: Path, fit, test, log) -> dict:
    """The front (held-out accuracies measured here), hypervolume, throughput and the member chosen to deploy."""
    evals = store.evaluations(config.strategy)
    cands = {e.idx: (candidate(e), e) for e in evals}
    front = pareto_front(sorted((c for c, e in cands.values() if e.resources["trained"]), key=lambda c: c.index),
                         OBJECTIVES)
    log(f"Pareto front: {len(front)} members; measuring them on the held-out test split ...")
    members = []
    for c in sorted(front, key=lambda c: c.objectives["error"]):
        r = cands[c.index][1].resources
        member = {"index": c.index, "architecture": r["arch"], "description": load_arch(r["arch"], "unas").describe(),
                  "sparsity": r["sparsity"], "target_sparsity": c.arch.sparsity,
                  "val_error": r["error"], "peak_bytes": r["peak_bytes"], "input_bytes": r["input_bytes"],
                  "flash_bytes": r["flash_bytes"], "weight_bytes": r["weight_bytes"], "macs": r["macs"]}
        module = load_member(space, out_dir, member)
        int8 = quantise_module(space, module, fit.x[:CALIBRATION])
        member["int8_accuracy"] = int8_accuracy(int8, test.x, test.y)
        member["float_accuracy"] = float_accuracy(module, test.x, test.y)
        member["within_bounds"] = all(member[k] <= b for k, b in config.limits.items() if k != "error")
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
            "space": space.to_json(),
            "trained": sum(1 for e in evals if e.resources["trained"]), "bounds": config.limits,
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

    module = load_member(space, out_dir, member)
    if not epochs:
        return module
    keep_pruned = ParameterMasks([])
    if config.prune == "unstructured":
        keep_pruned = ParameterMasks([(p, (p != 0).float()) for p in module.parameters() if p.ndim > 1])
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            module = build_module(space, load_arch(member["architecture"], "unas"))
    training.fit(module, x, y, recipe(config, epochs, config.seed), on_step=keep_pruned)
    return module.eval()


def shortlist(store, space, config: UnasConfig, report: dict, out_dir: Path, fit, val, log) -> None:
    """A second, longer evaluation before choosing: the `finalists` most accurate members inside every bound (by the
    search's validation error) trained again for `finalist_epochs` on the fit split and scored int8 on the
    validation split; the chosen member becomes the best of them (ties: the smaller model, then the smaller peak).
    A few epochs rank networks that learn fast above ones that end more accurate, and one validation score carries
    about half a point of noise at 97 %; this re-ranks the candidates that matter with the deployment's training.
    Each finalist's result is committed as its own phase, so a resumed search does not train it again. Updates
    `report` (`finalists`, `chosen`, and `finalist_val_error` on those members)."""
    ranked = finalist_ranking(report, config)
    if not config.finalist_epochs or len(ranked) < 2:
        return
    log(f"second evaluation of the {len(ranked)} most accurate members inside the bounds: {config.finalist_epochs} "
        f"epochs each ...")
    for n, i in enumerate(ranked):
        member = report["pareto"][i]
        key = f"finalist-{member['index']}-{config.finalist_epochs}"
        done = store.phase_result(key)
        if done is None:
            since = time.perf_counter()
            module = retrain_member(space, config, out_dir, member, fit.x, fit.y, config.finalist_epochs)
            int8 = quantise_module(space, module, fit.x[:CALIBRATION])
            done = {"val_error": 1.0 - int8_accuracy(int8, val.x, val.y), "seconds": time.perf_counter() - since}
            store.finish_phase(key, done)
        member["finalist_val_error"] = done["val_error"]
        log(f"  finalist {n + 1}/{len(ranked)}: member {i} {member['description']}: validation int8 "
            f"{(1 - member['val_error']) * 100:.1f} % -> {(1 - done['val_error']) * 100:.1f} %")
    report["finalists"] = ranked
    report["chosen"] = min(ranked, key=lambda i: _rank(report["pareto"][i], "finalist_val_error"))


def finalist_ranking(report: dict, config: UnasConfig) -> list[int]:
    """The `finalists` most accurate members inside every bound (by the search's validation error), as indices of
    `report["pareto"]`, best first."""
    inside = [i for i, m in enumerate(report["pareto"]) if m["within_bounds"]]
    return sorted(inside, key=lambda i: _rank(report["pareto"][i], "val_error"))[:config.finalists]


def _rank(member: dict, error: str) -> tuple:
    return member[error], member["weight_bytes"], member["peak_bytes"]


def final_training(store, space, config, report, out_dir, fit, val, test, log) -> dict:
    """The chosen member trained once more, the way a chosen network is: on the training and validation images
    together, for `final_epochs` (`retrain_member`). Saved to DIR/final.pt; held-out accuracies after it. Deterministic,
    and committed as the store's "final" phase: a resumed search takes it from there."""
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
    save_torch(module.state_dict(), ckpt)
    int8 = quantise_module(space, module, fit.x[:CALIBRATION])
    result = {"index": member["index"], "epochs": config.final_epochs,
              "int8_accuracy": int8_accuracy(int8, test.x, test.y),
              "float_accuracy": float_accuracy(module, test.x, test.y)}
    store.finish_phase("final", result)
    return result




def deploy_chosen(space, config, report, out_dir, fit, test, device, progress, log) -> dict:
    """The chosen member after its final training to a verified C library in DIR/model (`search.deploy_module`)."""
    import torch

    member = report["pareto"][report["chosen"]]
    log(f"deploying Pareto member {report['chosen']} (index {member['index']}): int8, plan, C library, verification "
        f"against TFLite Micro ...")
    module = load_member(space, out_dir, member)
    module.load_state_dict(torch.load(out_dir / "final.pt", weights_only=True))
    return deploy_module(module, tuple(space.input_shape[:2]), fit, test, out_dir / "model",
                         PlanOptions(kernels=config.kernels), device or get_device("stm32f410"), name="unas",
                         progress=progress, max_flash=config.flash_bytes)


def export_member(search_dir, n: int, out_path) -> dict:
    """Write Pareto member `n` of a finished search in `search_dir` as an int8 `.tflite` (for `kilobyte compile`)."""
    from ..export.tflite import to_tflite  # defers tflite

    search_dir = Path(search_dir)
    try:
        report = json.loads((search_dir / "report.json").read_text())
        settings = SearchStore.stored_settings(search_dir / "search.sqlite")
    except (OSError, json.JSONDecodeError, KeyError, KilobyteError) as e:
        raise UnasError(f"{search_dir}: not a finished μNAS search ({type(e).__name__}: {e})") from None
    if report.get("strategy") != "unas":
        raise UnasError(f"{search_dir}: --export needs a μNAS search (--strategy unas)")
    members = report["pareto"]
    if not 0 <= n < len(members):
        raise UnasError(f"--export {n}: the Pareto front of {search_dir} has members 0..{len(members) - 1}")
    fit, _, _ = load_split(config_of(settings))
    space = UnasSpace.from_json(report["space"])
    module = load_member(space, search_dir, members[n])
    int8 = quantise_module(space, module, fit.x[:CALIBRATION])
    out_path = write_bytes(out_path, to_tflite(int8))  # its folder made when missing
    return {**members[n], "member": n, "tflite": str(out_path)}




def write_pareto_plot(report: dict, config: UnasConfig, out_dir: Path) -> None:
    """`pareto.png`: held-out int8 accuracy of the front against peak SRAM, model size and MACs, bounds dashed."""
    members = report["pareto"]
    panels = [Panel(label, {"front": [(m[key] / scale, m["int8_accuracy"] * 100) for m in members]},
                    config.bounds[key] / scale if key in config.bounds else None, log=True)
              for key, label, scale in (("peak_bytes", "peak SRAM (KB, input excluded)", 1024),
                                        ("weight_bytes", "model size (KB of int8 constants)", 1024),
                                        ("macs", "MACs (M)", 1e6))]
    pareto_png(out_dir / "pareto.png", panels, "int8 accuracy, held-out test (%)",
               f"μNAS Pareto front ({len(members)} members, {report['evaluations']} evaluations)")
