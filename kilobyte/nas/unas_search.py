"""Search stage: `kilobyte search --strategy unas` — μNAS: aging evolution with random scalarisation over the granular
space, every candidate trained (with pruning when asked), quantised and measured on Kilobyte's own pipeline.

A candidate is a `Genome`: a μNAS architecture and, in a pruning-aware search, its target sparsity (random in the
dataset's range at first, inherited with a N(0, 0.05) perturbation, clipped). Evaluating it
(`unas_eval.evaluate_genome`, on a worker: this process, a local process pool or Ray):
1. resources of the unpruned architecture from `resources.ResourceEvaluator` (the compiler's plan; TinyNAS's
   evaluator, with the same cache); a candidate above `skip_factor` times a resource bound is not trained (error
   1.0, `trained: false`) — with the scalarisation's cap of 10 bounds it could not become a parent anyway, and on 2
   CPU cores a random 128-channel network at 28x28 would cost minutes; the random initial candidates are drawn
   inside the bounds (the first of up to 200 draws that is, else the closest: `unas_eval.GenomeSpace.sample`);
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
one inside every bound by validation, after a second, longer evaluation of the `finalists` best:
`unas_front.shortlist`) trained once more on all training images (`final_epochs`), compiled to C and verified
against TensorFlow Lite Micro, and `report.json` (`unas_front.py`; files written by `report.py`). With a time
budget (`minutes`, the CLI's `--minutes`) the evolution ends at its deadline instead of a count and the finalists'
and final training's epochs are sized to the time left; the report shows planned vs spent per phase
(`unas_budget.py`).

The candidate's settings, genome and evaluation live in `unas_eval.py`; the resource evaluator, the store, the
worker pool, the recipe and the report writer are the ones TinyNAS uses (`core.py` lists them).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from ..atomic import write_bytes
from ..schedule.plan_types import PlanOptions
from . import (
    parallel,  # parallel.open_pool looked up when called: tests/nas/test_core.py spies on it
    unas_front,
)
from . import unas_eval as ev
from .aging import AgingConfig, Candidate, Issued, aging_evolution, pareto_front, weakly_dominates
from .core import load_split
from .report import write_report
from .resources import ResourceEvaluator
from .store import Evaluation, SearchStore
from .unas_budget import UnasBudget
from .unas_eval import DEFAULT_BOUNDS, OBJECTIVES, UnasConfig
from .unas_front import export_member
from .unas_space import UnasSpace

# what the CLI reaches through this module (with `run_unas`)
__all__ = ["DEFAULT_BOUNDS", "UnasConfig", "export_member", "run_unas"]


def run_unas(config: UnasConfig, out_dir, *, resume: bool = False, workers: int = 1, ray_address: str | None = None,
             progress: bool = False, log=print, device=None, deploy: bool = True) -> dict:
    """Run (or resume) a μNAS search into `out_dir`; returns the report (also written to `report.json`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "weights").mkdir(exist_ok=True)
    store = SearchStore(out_dir / "search.sqlite", config.settings(), resume=resume, growable=("evaluations",))
    try:
        phase = config.strategy
        budget = UnasBudget(config, store, phase)  # its clock starts here (with the time stored before a resume)
        fit, val, test = load_split(config)
        n_classes = int(max(fit.y.max(), val.y.max(), test.y.max())) + 1
        space = UnasSpace(input_shape=tuple(int(d) for d in fit.x.shape[1:]), num_classes=n_classes)
        evaluator = ResourceEvaluator(space, PlanOptions(kernels=config.kernels), core=config.core)
        genomes = ev.GenomeSpace(space, config, evaluator)
        history = [unas_front.candidate(e) for e in sorted(store.evaluations(phase), key=lambda e: e.generation)]
        unfinished = [Issued(i, ev.Genome.loads(a), p, m) for i, a, p, m in store.unfinished(phase)]
        spec = ev.EvalSpec(space.to_json(), config.settings(), fit.x, fit.y, val.x, val.y)
        front: list[Candidate] = pareto_front([c for c in history if c.objectives["error"] < 1.0], OBJECTIVES)
        if history or unfinished:
            log(f"resuming: {len(history)} evaluations stored, {len(unfinished)} to run again")
        log(f"μNAS {config.strategy} search: {_count_line(config, budget)}, pruning {config.prune}, "
            f"{config.epochs} epochs each ({'Ray ' + ray_address if ray_address else f'{workers} worker(s)'}) ...")
        bar = tqdm(total=None if budget.by_deadline else config.evaluations, initial=len(history), desc="μNAS",
                   unit="eval", disable=not progress)
        with parallel.open_pool(ev.make_worker, spec, workers, ray_address) as pool:
            in_flight = budget.in_flight = config.in_flight or pool.capacity
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
                if out["trained"] and not any(weakly_dominates(o.objectives, c.objectives, OBJECTIVES) for o in front):
                    write_bytes(out_dir / "weights" / f"{c.index}.pt", weights)
                    front = [o for o in front if not weakly_dominates(c.objectives, o.objectives, OBJECTIVES)] + [c]
                resources = {**out, "parent": c.parent, "morphism": c.morphism}
                store.add(Evaluation(phase, len(history_box), c.index, c.arch.dumps(), c.arch.arch.dumps(),
                                     config.seed, 1.0 - out["error"], resources,
                                     out["seconds_train"] + out["seconds_resources"]))
                budget.record(out["seconds_train"] + out["seconds_resources"])
                history_box.append(c)
                bar.update(1)
                bar.set_postfix(best=f"{(1 - min(o.objectives['error'] for o in front)) * 100:.1f}%" if front else "-")

            history_box = list(history)
            aging_evolution(genomes, None, aging, on_result, submit, collect, history=history,
                            unfinished=unfinished, on_issue=on_issue, stop=budget.stop,
                            resize=lambda h, i: budget.resize(aging, h, i))
            nodes = dict(pool.nodes)
        bar.close()
        budget.mark("evolution")
        report = unas_front.front_report(store, config, space, out_dir, fit, test, log)
        report.update(nodes=nodes, out_dir=str(out_dir), repeated=store.repeated(),
                      population=store.phase_result("unas-population"))
        if report["chosen"] is not None:
            _train_chosen(store, space, config, budget, report, out_dir, (fit, val, test), log)
            if deploy:
                report["deployed"] = unas_front.deploy_chosen(space, config, report, out_dir, fit, test, device,
                                                              progress, log)
                budget.mark("deploy")
        report.update(minutes=config.minutes, phase_times=budget.phase_times(), seconds=budget.clock.save())
        unas_front.write_pareto_plot(report, config, out_dir)
        write_report(out_dir, report)
        return report
    finally:
        store.close()


def _count_line(config: UnasConfig, budget: UnasBudget) -> str:
    """`evaluations until 8.7 min (the evolution's share of 15), population sized after the first evaluations`, or
    `300 evaluations, population 100, sample 25` for a given count."""
    if not budget.by_deadline:
        return f"{config.evaluations} evaluations, population {config.population}, sample {config.sample}"
    sized = "population sized after the first evaluations" if "population" in config.planned else \
        f"population {config.population}"
    return f"evaluations until {budget.deadline / 60:.1f} min (the evolution's share of {config.minutes:g}), {sized}"


def _train_chosen(store, space, config: UnasConfig, budget: UnasBudget, report: dict, out_dir: Path, splits,
                  log) -> None:
    """The finalists' second evaluation and the chosen member's final training, their epochs sized to the time left
    (`UnasBudget`; given ones kept); sets `report["final"]`."""
    fit, val, test = splits
    ranked = unas_front.finalist_ranking(report, config)
    chosen = replace(config, finalist_epochs=budget.finalist_epochs([report["pareto"][i]["index"] for i in ranked]))
    with parallel.one_thread():  # as the evaluations: the chosen member does not depend on this machine's cores
        unas_front.shortlist(store, space, chosen, report, out_dir, fit, val, log)
        budget.mark("finalists")
        member = report["pareto"][report["chosen"]]
        finalist = store.phase_result(f"finalist-{member['index']}-{chosen.finalist_epochs}")
        epochs = budget.final_epochs(member["index"], finalist, chosen.finalist_epochs,
                                     (len(fit.x) + len(val.x)) / len(fit.x))
        report["final"] = unas_front.final_training(store, space, replace(chosen, final_epochs=epochs), report,
                                                    out_dir, fit, val, test, log)
        budget.mark("final")
