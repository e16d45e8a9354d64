"""Benchmark: μNAS on the bundled data (issue #15) — the MNIST search under μNAS's bounds, pruning-aware vs plain
search and aging evolution vs random search at equal evaluations (hypervolume over seeds), digits as a second task,
throughput and the time share of resource evaluation.

Each search is a `run_unas` into its own directory under --out (resumable: a killed benchmark continues where it
stopped when run again with the same arguments). The front's hypervolume is `front_hypervolume` of the validation
objectives (error as it is, resources in bound units, reference 1.0 / 2 bounds); the curve records it after every
10 % of the evaluations. Writes bench/results/unas.json and prints markdown tables.

    python bench/bench_unas.py [--out /tmp/bench-unas] [--workers 2] [--seeds 3] [--evaluations 120]
                               [--main-evaluations 600] [--main-seeds 3] [--digits-compare-evaluations 600] [--epochs 6]
                               [--only main|compare|digits|compare-digits|ceiling|proxy|final-seeds]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kilobyte.atomic import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MU_NAS_MNIST = {"accuracy": 0.9919, "peak_bytes": 480, "size": 488, "macs": 28.6e3}  # μNAS Table 4 (60k training)


def curve(out: Path, bounds: dict, points: int = 10) -> list[tuple[int, float]]:
    """Hypervolume of the front of the first n finished evaluations, n at every 1/points of the run."""
    from kilobyte.nas.aging import Candidate, pareto_front
    from kilobyte.nas.unas_eval import OBJECTIVES
    from kilobyte.nas.unas_front import front_hypervolume

    db = sqlite3.connect(f"file:{out / 'search.sqlite'}?mode=ro", uri=True)
    rows = [json.loads(r[0]) for r in db.execute("SELECT resources FROM evaluations ORDER BY generation")]
    db.close()
    cands = [Candidate(None, {k: r[k] for k in OBJECTIVES}, i) for i, r in enumerate(rows) if r["trained"]]
    order = {c.index: c for c in cands}
    result = []
    for k in range(1, points + 1):
        n = round(len(rows) * k / points)
        front = pareto_front([c for i, c in order.items() if i < n], OBJECTIVES)
        result.append((n, front_hypervolume([c.objectives for c in front], bounds)))
    return result


def search(out: Path, workers: int, **config) -> dict:
    from kilobyte.nas.unas_search import UnasConfig, run_unas

    cfg = UnasConfig(**config)
    resume = (out / "search.sqlite").exists()
    clock = out / "wall_seconds.txt"  # summed over the invocations that ran this search (a resumed one adds to it)
    before = float(clock.read_text()) if resume and clock.exists() else 0.0
    t0 = time.perf_counter()
    report = run_unas(cfg, out, resume=resume, workers=workers, progress=True, log=lambda *a: print(*a, flush=True),
                      deploy=config.get("final_epochs", 0) > 0)
    report["wall_seconds"] = before + time.perf_counter() - t0
    clock.write_text(str(report["wall_seconds"]))
    report["curve"] = curve(out, cfg.bounds)
    report["hypervolume_validation"] = report["curve"][-1][1]
    return report


def main() -> None:

    from kilobyte.nas.unas_search import DEFAULT_BOUNDS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-unas"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--evaluations", type=int, default=120, help="per comparison search")
    ap.add_argument("--main-evaluations", type=int, default=600)
    ap.add_argument("--main-seeds", type=int, default=3, help="MNIST searches of --main-evaluations, seeds 0..N-1")
    ap.add_argument("--digits-evaluations", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--digits-compare-evaluations", type=int, default=600,
                    help="per search of the aging vs random comparison on digits")
    ap.add_argument("--only", choices=("main", "compare", "digits", "compare-digits", "ceiling", "proxy",
                                       "final-seeds"),
                    default=None)
    args = ap.parse_args()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "unas.json"
    results = json.loads(path.read_text()) if path.exists() else {}

    def save():
        write_json(path, results)

    population = lambda n: min(100, max(10, n // 3))  # noqa: E731
    if args.only in (None, "main"):
        n = args.main_evaluations
        for seed in range(args.main_seeds):  # seed 0 is the one the docs show in full
            r = search(args.out / ("mnist-main" + (f"-s{seed}" if seed else "")), args.workers, data="mnist",
                       evaluations=n, population=population(n), sample=max(2, population(n) // 4), seed=seed,
                       epochs=args.epochs, prune="structured", final_epochs=100, in_flight=args.workers)
            if seed == 0:
                results["main"] = r
            results.setdefault("main_seeds", {}).setdefault(str(n), {})[str(seed)] = main_summary(r)
            save()
    def compare(key: str, n: int, kinds, prefix: str = "", **task):
        """Searches of `n` evaluations per (strategy, prune) in `kinds` and seed, into results[key]."""
        runs = results.setdefault(key, {})
        for seed in range(args.seeds):
            for strategy, prune in kinds:
                name = f"{strategy}-{prune}-s{seed}"
                if runs.get(name, {}).get("evaluations") == n:
                    continue  # finished and recorded by an earlier invocation
                r = search(args.out / f"{prefix}{name}", args.workers, evaluations=n, population=population(n),
                           sample=max(2, population(n) // 4), prune=prune, strategy=strategy, seed=seed,
                           finalists=0, final_epochs=0, in_flight=args.workers, **task)
                runs[name] = {k: r[k] for k in ("hypervolume_validation", "curve", "evaluations", "trained",
                                                "wall_seconds", "seconds_train", "seconds_resources",
                                                "resource_share")}
                runs[name]["pareto"] = r["pareto"]
                save()

    if args.only in (None, "compare"):
        compare("compare", args.evaluations, (("aging", "structured"), ("aging", "none"), ("random", "structured")),
                data="mnist", epochs=args.epochs)
    if args.only in (None, "compare-digits"):  # the same strategies, longer searches on the cheaper task
        compare("compare_digits", args.digits_compare_evaluations, (("aging", "structured"), ("random", "structured")),
                prefix="digits-", data="digits", epochs=args.epochs * 2, bounds=DEFAULT_BOUNDS["digits"],
                val_images=300)
    if args.only in (None, "digits"):
        n = args.digits_evaluations
        r = search(args.out / "digits", args.workers, data="digits", evaluations=n, population=population(n),
                   sample=max(2, population(n) // 4), epochs=args.epochs * 2, prune="structured",
                   bounds=DEFAULT_BOUNDS["digits"], val_images=300, final_epochs=100, in_flight=args.workers)
        results["digits"] = r
        save()
    if args.only in (None, "ceiling"):
        results["ceiling"] = ceiling(args.out / "mnist-main")
        save()
    if args.only in (None, "proxy"):
        results["proxy"] = proxy(args.epochs)
        save()
    if args.only in (None, "final-seeds"):
        results["final_seeds"] = final_seeds(args.out / "mnist-main")
        save()
    report(results, args.seeds)


def main_summary(r: dict) -> dict:
    """What the acceptance asks of one MNIST search: the chosen member, its held-out accuracy after the final
    training, its resources, whether its C is bit-exact and fits."""
    c = r["pareto"][r["chosen"]] if r["chosen"] is not None else None
    out = {"evaluations": r["evaluations"], "wall_seconds": r["wall_seconds"], "hypervolume": r["hypervolume"],
           "front": len(r["pareto"]), "inside": sum(m["within_bounds"] for m in r["pareto"])}
    if c is not None:
        out.update(description=c["description"], peak_bytes=c["peak_bytes"], input_bytes=c["input_bytes"],
                   weight_bytes=c["weight_bytes"], macs=c["macs"], sparsity=c["sparsity"],
                   search_val_accuracy=1 - c["val_error"],
                   finalist_val_accuracy=1 - c["finalist_val_error"] if "finalist_val_error" in c else None,
                   int8_accuracy=r["final"]["int8_accuracy"], float_accuracy=r["final"]["float_accuracy"])
    if r.get("deployed"):
        d = r["deployed"]
        out.update(c_int8_accuracy=d["int8_accuracy"], bit_exact=d["bit_exact"], verdict=d["verdict"])
    return out


HAND = {  # plain CNNs written by hand inside μNAS's MNIST bounds
    "c3x6s2 | c3x12s2, c3x16 | avg2 | fc10": [[["full", 3, 6, 2]], [["full", 3, 12, 2], ["full", 3, 16, 1]], "avg"],
    "c5x8s2 | dw3, pw16 | c3x16s2 | max2 | fc10": [[["full", 5, 8, 2]], [["depthwise", 3, 8, 1], ["1x1", 1, 16, 1]],
                                                   [["full", 3, 16, 2]], "max"],
}


def ceiling(main_dir: Path, epochs: int = 100, seeds: int = 2) -> list[dict]:
    """What the bounds allow with this data: the main search's 3 most accurate members inside the bounds (by
    validation) and the hand-written CNNs, each trained like the chosen member (`final_epochs` on all training
    images, from scratch), for `seeds` seeds; held-out int8 accuracy."""
    import numpy as np
    import torch

    from kilobyte.nas.core import load_split
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.unas_build import build_module
    from kilobyte.nas.unas_eval import quantise_module
    from kilobyte.nas.unas_search import UnasConfig
    from kilobyte.nas.unas_space import UArch, UnasSpace
    from kilobyte.train import TrainConfig, fit, int8_accuracy

    torch.set_num_threads(1)
    main = json.loads((RESULTS / "unas.json").read_text())["main"]
    inside = sorted((m for m in main["pareto"] if m["within_bounds"]), key=lambda m: m["val_error"])[:3]
    archs = {m["description"]: UArch.from_json(m["architecture"]) for m in inside} | hand_archs()
    cfg = UnasConfig()
    fit_d, val, test = load_split(cfg)
    x, y = np.concatenate([fit_d.x, val.x]), np.concatenate([fit_d.y, val.y])
    space = UnasSpace(input_shape=(28, 28, 1), num_classes=10)
    ev = ResourceEvaluator(space)
    rows = []
    for name, arch in archs.items():
        r = ev.evaluate(arch)
        accs = []
        for seed in range(seeds):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                module = build_module(space, arch)
            fit(module, x, y, TrainConfig(epochs=epochs, lr=cfg.lr, seed=seed, patience=None, validation_fraction=0.0,
                                          warmup_fraction=0.1))
            accs.append(int8_accuracy(quantise_module(space, module.eval(), x[:128]), test.x, test.y))
        rows.append({"architecture": name, "searched": name not in HAND, "peak_bytes": r.peak_bytes,
                     "weight_bytes": r.weight_bytes, "macs": r.macs, "int8_accuracy": accs})
        print(rows[-1], flush=True)
    return rows


def hand_archs() -> dict:
    from kilobyte.nas.unas_space import UArch, UBlock, ULayer

    archs = {}
    for name, spec in HAND.items():
        blocks = tuple(UBlock(tuple(ULayer(t, k, c, st, True, True) for t, k, c, st in b)) for b in spec[:-1])
        archs[name] = UArch(blocks, spec[-1], 2, (10,))
    return archs


def final_seeds(main_dir: Path, seeds: int = 5) -> dict:
    """How much of the chosen member's held-out accuracy is the final training's seed: the seed-0 MNIST search's
    chosen member trained exactly as its final training (`retrain_member`, `final_epochs` on all training images) with
    torch seeds 0..seeds-1 (seed 0 is the search's own final training), int8 on the held-out split. Reporting only:
    nothing is chosen by it."""
    from dataclasses import replace

    import numpy as np
    import torch

    from kilobyte.nas.core import load_split
    from kilobyte.nas.unas_eval import quantise_module
    from kilobyte.nas.unas_front import retrain_member
    from kilobyte.nas.unas_search import UnasConfig
    from kilobyte.nas.unas_space import UnasSpace
    from kilobyte.train import int8_accuracy

    torch.set_num_threads(1)
    report = json.loads((main_dir / "report.json").read_text())
    member = report["pareto"][report["chosen"]]
    space = UnasSpace.from_json(report["space"])
    config = UnasConfig(epochs=6)
    fit, val, test = load_split(config)
    x, y = np.concatenate([fit.x, val.x]), np.concatenate([fit.y, val.y])
    accs = []
    for seed in range(seeds):
        module = retrain_member(space, replace(config, seed=seed), main_dir, member, x, y, config.final_epochs)
        accs.append(int8_accuracy(quantise_module(space, module, fit.x[:128]), test.x, test.y))
        print(f"final training, seed {seed}: int8 held-out {accs[-1] * 100:.1f} %", flush=True)
    return {"architecture": member["description"], "epochs": config.final_epochs, "int8_accuracy": accs}


# the member the first version of the search chose (batch 64, 500 validation images, no second evaluation): 97.1 %
FIRST_CHOSEN = ("dw7s2+bn, c7x35+relu | max6 | fc31",
                {"blocks": [{"layers": [{"bn": True, "channels": 104, "kernel": 7, "relu": False, "stride": 2,
                                         "type": "depthwise"},
                                        {"bn": False, "channels": 35, "kernel": 7, "relu": True, "stride": 1,
                                         "type": "full"}], "parallel": False, "pool": False}],
                 "dense": [31], "pool_size": 6, "pooling": "max"})
PROXIES = {"batch 64, 500 validation images (first version)": {"batch_size": 64, "val_images": 500},
           "batch 32, 1,000 validation images (now)": {}}


def proxy(epochs: int, seeds: int = 2) -> list[dict]:
    """How the search's proxy ranks: the first version's chosen member and the hand CNNs evaluated exactly as a
    search candidate (`evaluate_genome`: `epochs` on the fit split, no pruning, int8 on the validation split), per
    seed, with the first version's candidate settings and with today's."""
    import torch

    from kilobyte.nas.core import load_split
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.unas_eval import Genome, UnasConfig, evaluate_genome
    from kilobyte.nas.unas_space import UArch, UnasSpace

    torch.set_num_threads(1)
    space = UnasSpace(input_shape=(28, 28, 1), num_classes=10)
    ev = ResourceEvaluator(space)
    archs = {FIRST_CHOSEN[0]: UArch.from_json(FIRST_CHOSEN[1]), **hand_archs()}
    rows = []
    for setting, extra in PROXIES.items():
        cfg = UnasConfig(prune="none", epochs=epochs, **extra)
        fit, val, _ = load_split(cfg)
        for name, arch in archs.items():
            accs = [1 - evaluate_genome(space, cfg, ev, Genome(arch, 0.0), (fit.x, fit.y), (val.x, val.y),
                                        seed)["error"] for seed in range(seeds)]
            rows.append({"setting": setting, "architecture": name, "searched": name not in HAND,
                         "val_int8_accuracy": accs})
            print(rows[-1], flush=True)
    return rows


def report(results: dict, seeds: int) -> None:
    import numpy as np

    if "main" in results:
        m = results["main"]
        print(f"\n## MNIST, μNAS bounds {m['bounds']}: {m['evaluations']} evaluations ({m['trained']} trained), "
              f"{m['wall_seconds'] / 60:.1f} min, {m['evaluations'] / (m['wall_seconds'] / 60):.1f} evaluations/min, "
              f"resource evaluation {m['resource_share'] * 100:.2f} % of training time\n")
        print("| # | int8 (held-out) | float | peak SRAM | + input | model size | Flash | MACs | sparsity | arch |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for i, p in enumerate(m["pareto"]):
            print(f"| {i}{'*' if i == m['chosen'] else ''} | {p['int8_accuracy'] * 100:.1f} | "
                  f"{p['float_accuracy'] * 100:.1f} | {p['peak_bytes']} | {p['peak_bytes'] + p['input_bytes']} | "
                  f"{p['weight_bytes']} | {p['flash_bytes']} | {p['macs']} | {p['sparsity']:.2f} | "
                  f"`{p['description']}` |")
        if m.get("deployed"):
            d, f = m["deployed"], m["final"]
            print(f"\nchosen (*), trained again {f['epochs']} epochs on all training images: "
                  f"int8 {f['int8_accuracy'] * 100:.1f} % held-out; "
                  f"compiled: int8 by the C {d['int8_accuracy'] * 100:.1f} %, bit-exact {d['bit_exact']}, "
                  f"{d['verdict']}")
    for n, by_seed in sorted(results.get("main_seeds", {}).items(), key=lambda kv: int(kv[0])):
        print(f"\n## MNIST, {n} evaluations, one search per seed: the chosen member after its final training\n")
        print("| seed | chosen | val (search / second evaluation) | peak SRAM (+ input) | size | MACs | int8 held-out "
              "| bit-exact | minutes |")
        print("|---|---|---|---|---|---|---|---|---|")
        for seed, m in sorted(by_seed.items()):
            if "description" not in m:
                print(f"| {seed} | none inside the bounds | | | | | | | {m['wall_seconds'] / 60:.1f} |")
                continue
            second = f"{m['finalist_val_accuracy'] * 100:.1f}" if m["finalist_val_accuracy"] is not None else "-"
            print(f"| {seed} | `{m['description']}` | {m['search_val_accuracy'] * 100:.1f} / {second} | "
                  f"{m['peak_bytes']:,} ({m['peak_bytes'] + m['input_bytes']:,}) | {m['weight_bytes']:,} | "
                  f"{m['macs']:,} | {m['int8_accuracy'] * 100:.1f} % | {m.get('bit_exact')} | "
                  f"{m['wall_seconds'] / 60:.1f} |")
    for key, task in (("compare", "MNIST"), ("compare_digits", "digits")):
        if key not in results:
            continue
        runs = results[key]
        print(f"\n## {task}: hypervolume at equal evaluations (validation front; mean ± sd over seeds)\n")
        print("| search | " + " | ".join(f"seed {s}" for s in range(seeds)) + " | mean | sd |")
        print("|---|" + "---|" * (seeds + 2))
        for kind in ("aging-structured", "aging-none", "random-structured"):
            hv = [runs[f"{kind}-s{s}"]["hypervolume_validation"] for s in range(seeds) if f"{kind}-s{s}" in runs]
            if hv:
                print(f"| {kind} | " + " | ".join(f"{v:.3f}" for v in hv) +
                      f" | {np.mean(hv):.3f} | {np.std(hv):.3f} |")
        curves = {kind: [runs[f"{kind}-s{s}"]["curve"] for s in range(seeds) if f"{kind}-s{s}" in runs]
                  for kind in ("aging-structured", "aging-none", "random-structured")}
        curves = {k: c for k, c in curves.items() if c}
        if curves:
            first = next(iter(curves.values()))[0]
            print("\n| evaluations | " + " | ".join(str(n) for n, _ in first) + " |")
            print("|---|" + "---|" * len(first))
            for kind, cs in curves.items():
                means = np.mean([[hv for _, hv in c] for c in cs], axis=0)
                print(f"| {kind} | " + " | ".join(f"{v:.2f}" for v in means) + " |")
    if "ceiling" in results:
        print("\n## Trained like the chosen member (100 epochs, all training images), held-out int8 per seed\n")
        print("| architecture | from | peak SRAM | size | MACs | int8 |")
        print("|---|---|---|---|---|---|")
        for r in results["ceiling"]:
            print(f"| `{r['architecture']}` | {'search' if r['searched'] else 'hand'} | {r['peak_bytes']} | "
                  f"{r['weight_bytes']} | {r['macs']} | {' / '.join(f'{a * 100:.1f}' for a in r['int8_accuracy'])} |")
    if "final_seeds" in results:
        f = results["final_seeds"]
        a = np.array(f["int8_accuracy"]) * 100
        print(f"\n## The chosen member's final training ({f['epochs']} epochs) over {len(a)} torch seeds: "
              f"`{f['architecture']}`\n")
        print("int8 held-out: " + ", ".join(f"{v:.1f}" for v in a) + f" % (mean {a.mean():.2f}, sd {a.std():.2f})")
    if "proxy" in results:
        print("\n## The search's proxy (a candidate's training), validation int8 per seed\n")
        for r in results["proxy"]:
            print(f"- {r.get('setting', '')}: `{r['architecture']}` ({'search' if r['searched'] else 'hand'}): "
                  + " / ".join(f"{a * 100:.1f}" for a in r["val_int8_accuracy"]))
    if "digits" in results:
        d = results["digits"]
        best = max(d["pareto"], key=lambda p: p["int8_accuracy"]) if d["pareto"] else None
        print(f"\n## digits: {d['evaluations']} evaluations, front of {len(d['pareto'])}, hypervolume "
              f"{d['hypervolume_validation']:.3f}" + (f"; most accurate member int8 {best['int8_accuracy'] * 100:.1f} "
                                                      f"%, peak {best['peak_bytes']} B, size {best['weight_bytes']} B"
                                                      if best else ""))


if __name__ == "__main__":
    main()
