"""Benchmark: evolution vs random search at equal evaluations, on a trained supernet (thesis Fig. 5-6).

Takes the output directory of a finished (or at least supernet-trained) `kilobyte search`: its settings, chosen space
and trained supernet. For each seed, runs TinyNAS evolution and random search with exactly as many distinct subnets
evaluated, on the same fitness (held-out validation accuracy with inherited weights after BN recalibration) and
the same constraints, and records the best-so-far curves; the two winners are also scored on the test split (1,000
images no search sees), since the best of hundreds of scores on the same 500 validation images is biased upward
for both methods alike. Writes bench/results/evolution.json and
bench/results/evolution_curves.png, prints a markdown table.

    python bench/bench_evolution.py kilobyte-search --seeds 3 [--population 40 --generations 6] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    import torch

    from kilobyte.nas.evolution import EvolutionConfig, evolve, random_search
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.search import SearchConfig, load_split, plan_options, search_budget, search_space
    from kilobyte.nas.store import SearchStore
    from kilobyte.nas.supernet import SuperNet
    from kilobyte.nas.supernet_train import ScorerSpec, SubnetScorer, SupernetTraining, load_weights, open_fitness
    from kilobyte.train import to_nchw_tensor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("search_dir", type=Path)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--population", type=int, default=40)
    ap.add_argument("--generations", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    settings = json.loads(dict(__import__("sqlite3").connect(args.search_dir / "search.sqlite").execute(
        "SELECT key, value FROM meta"))["settings"])
    settings.pop("schema")
    settings["training"] = SupernetTraining(**settings["training"])
    settings["evolution"] = EvolutionConfig(**settings["evolution"])
    settings["widths"] = tuple(settings["widths"])
    if settings["resolutions"] is not None:
        settings["resolutions"] = tuple(settings["resolutions"])
    config = SearchConfig(**settings)
    store = SearchStore(args.search_dir / "search.sqlite", config.settings(), resume=True)
    space_choice = store.phase_result("space")
    store.close()
    fit, val, test = load_split(config)
    n_classes = int(max(fit.y.max(), val.y.max(), test.y.max())) + 1
    space = search_space(config, fit.x.shape[-1], n_classes, fit.x.shape[1])
    w, r = space_choice["width"], space_choice["resolution"]
    net = SuperNet(space, w, r)
    load_weights(net, args.search_dir / "supernet.pt")
    x = to_nchw_tensor(fit.x, r)
    spec = ScorerSpec.of(net, x[:20 * 64], to_nchw_tensor(val.x, r), torch.from_numpy(val.y))
    sub = net.space
    from kilobyte.targets.devices import get_device

    evaluator = ResourceEvaluator(sub, plan_options(config), core=get_device(config.device).core)
    test_score = SubnetScorer(net, x[:20 * 64], to_nchw_tensor(test.x, r), torch.from_numpy(test.y))
    budget = search_budget(config)
    rows, curves = [], {}
    start = time.perf_counter()
    with open_fitness(spec, args.workers) as fitness:
        for seed in range(args.seeds):
            cfg = EvolutionConfig(population=args.population, parents=max(2, args.population // 4),
                                  generations=args.generations, seed=seed)
            evo = evolve(sub, evaluator, budget, fitness, cfg)
            rnd = random_search(sub, evaluator, budget, fitness, evo.evaluations, seed=seed)
            rows.append({"seed": seed, "evaluations": evo.evaluations, "evolution": evo.best.accuracy,
                         "random": rnd.best.accuracy, "evolution_test": test_score(evo.best.arch),
                         "random_test": test_score(rnd.best.arch), "evolution_arch": evo.best.arch.describe(),
                         "random_arch": rnd.best.arch.describe()})
            curves[seed] = {"evolution": evo.best_so_far(), "random": rnd.best_so_far()}
            print(f"seed {seed}: evolution {evo.best.accuracy:.4f}  random {rnd.best.accuracy:.4f}  "
                  f"({evo.evaluations} evaluations each)", flush=True)
    seconds = time.perf_counter() - start
    evo_mean = float(np.mean([r["evolution"] for r in rows]))
    rnd_mean = float(np.mean([r["random"] for r in rows]))
    evo_test = float(np.mean([r["evolution_test"] for r in rows]))
    rnd_test = float(np.mean([r["random_test"] for r in rows]))
    print("\n| seeds | evaluations each | best validation accuracy, evolution / random (mean) | "
          "the winners on the test split, evolution / random (mean) | seconds |")
    print("|---|---|---|---|---|")
    print(f"| {args.seeds} | {rows[0]['evaluations']} | {evo_mean * 100:.2f} % / {rnd_mean * 100:.2f} % | "
          f"{evo_test * 100:.2f} % / {rnd_test * 100:.2f} % | {seconds:.0f} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "evolution.json").write_text(json.dumps({"space": {"width": w, "resolution": r}, "rows": rows,
                                                        "curves": curves, "seconds": seconds}, indent=1))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for seed, c in curves.items():
        ax.plot(np.asarray(c["evolution"]) * 100, color="tab:blue", alpha=0.7, label="evolution" if seed == 0 else None)
        ax.plot(np.asarray(c["random"]) * 100, color="tab:gray", alpha=0.7, label="random" if seed == 0 else None)
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best validation accuracy so far (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "evolution_curves.png", dpi=110)


if __name__ == "__main__":
    main()
