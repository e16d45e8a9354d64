"""Benchmark: DTMM-style pruning on the bundled MNIST subset (issue #16) — filterlet, unstructured (CSR) and channel
pruning of vgg-small and resnet-small at equal sparsity, and the scheduler against uniform ratios under a Flash limit.

Each model is trained once with the recipe on the first 4,000 MNIST images (28 px), then pruned by every method to
each sparsity with 3 epochs of retraining; accuracy is on the other 1,000 images, float and int8 (the int8 reference
interpreter). Flash is the whole model's (the planner's Flash model for a Cortex-M4), pruned layers in their formats.
The scheduler rows (ΔL_max 0.05 and 0.2; Flash unconstrained, then cut by 30 %) give the modelled latency ΣT̂ with the
latency constants fitted on Cortex-M7 instruction counts (`shipped_model`; docs/prune.md's table predates them and
used `PROVISIONAL_MODEL`), in instructions, not cycles; the uniform ratio at the same budget, when one fits, is
retrained the same way beside it. bench_dtmm_e2e.py measures the compiled models' instructions. Writes
bench/results/prune.json and prints a markdown table.

    python bench/bench_prune.py [--epochs 8] [--sparsity 0.5 0.75] [--width 0.5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"


def trained(name: str, width: float, epochs: int, train):
    import torch

    from kilobyte.train import TrainConfig, fit
    from kilobyte.zoo.small_cnns import build_resnet, build_vgg

    torch.manual_seed(0)
    module = (build_vgg if name == "vgg-small" else build_resnet)(width, 10, 1)
    fit(module, train.x, train.y, TrainConfig(epochs=epochs, seed=0))
    return module.eval()


def row(model: str, method: str, target, r, seconds: float) -> dict:
    return {"model": model, "method": method, "target": target, "sparsity": r.sparsity,
            "float_before": r.accuracy_before["float"], "float_after": r.accuracy_after["float"],
            "int8_before": r.accuracy_before["int8"], "int8_after": r.accuracy_after["int8"],
            "weight_bytes": r.weight_bytes, "index_bytes": r.index_bytes, "flash_bytes": r.flash_bytes,
            "dense_flash_bytes": r.dense_flash_bytes, "seconds": seconds,
            "latency": None if r.strategy is None else r.strategy.latency,
            "uniform_latency": None if r.uniform is None else r.uniform.latency,
            "uniform_ratio": None if r.uniform is None else max(r.uniform.ratios.values()),
            "uniform_feasible": None if r.uniform is None else r.uniform.feasible}


def main() -> None:
    import torch

    from kilobyte.data import load_dataset
    from kilobyte.errors import PruneError
    from kilobyte.prune import prune_model
    from kilobyte.targets.devices import Device
    from kilobyte.train import TrainConfig

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--sparsity", type=float, nargs="+", default=[0.5, 0.75])
    p.add_argument("--width", type=float, default=0.5)
    p.add_argument("--flash-cut", type=float, default=0.3, help="scheduler rows: Flash limit = (1 - cut) x dense")
    p.add_argument("--loss-budget", type=float, nargs="+", default=[0.05, 0.2], help="scheduler rows: ΔL_max")
    args = p.parse_args()
    torch.set_num_threads(1)
    train, test = load_dataset("mnist").split(4000)
    data = ((train.x, train.y), (test.x, test.y))
    retrain = TrainConfig.plain(epochs=3, lr=1e-3)
    rows = []
    for model in ("vgg-small", "resnet-small"):
        module = trained(model, args.width, args.epochs, train)
        for s in args.sparsity:
            for method in ("filterlet", "csr", "channel"):
                t0 = time.perf_counter()
                r = prune_model(module, data, method, sparsity=s, config=retrain)
                rows.append(row(model, method, s, r, time.perf_counter() - t0))
                print(json.dumps(rows[-1]), flush=True)
        dense = rows[-1]["dense_flash_bytes"]
        for budget, cut in itertools.product(args.loss_budget, (0.0, args.flash_cut)):
            device = Device("limit", "cortex-m4", 1 << 20, int((1 - cut) * dense), 100_000_000)
            target = f"ΔL ≤ {budget}, Flash ≤ {device.flash_bytes} B"
            t0 = time.perf_counter()
            try:
                r = prune_model(module, data, "filterlet", device=device, loss_budget=budget, config=retrain)
            except PruneError as e:
                rows.append({"model": model, "method": "filterlet+scheduler", "target": target, "error": str(e)})
                print(json.dumps(rows[-1]), flush=True)
                continue
            rows.append(row(model, "filterlet+scheduler", target, r, time.perf_counter() - t0))
            print(json.dumps(rows[-1]), flush=True)
            if r.uniform.feasible:  # the uniform ratio at the same budget, retrained the same way
                t0 = time.perf_counter()
                u = prune_model(module, data, "filterlet", ratios=r.uniform.ratios, config=retrain)
                rows.append(row(model, "filterlet uniform", target, u, time.perf_counter() - t0))
                rows[-1]["latency"] = r.uniform.latency
                print(json.dumps(rows[-1]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "prune.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("\n| model | method | target | sparsity | int8 before → after | weights + index B | Flash B (dense) "
          "| modelled ΣT̂ |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['method']} | {r['target']} | infeasible: {r['error']} |")
            continue
        print(f"| {r['model']} | {r['method']} | {r['target']} | {r['sparsity']:.1%} | "
              f"{r['int8_before']:.1%} → {r['int8_after']:.1%} | {r['weight_bytes']} + {r['index_bytes']} | "
              f"{r['flash_bytes']} ({r['dense_flash_bytes']}) | {r['latency'] or ''} |")


if __name__ == "__main__":
    main()
