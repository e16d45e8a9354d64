"""Benchmark: the supernet's sandwich rule, measured (issue #14 asks whether it helps).

Trains the largest network once, then the weight-sharing supernet twice from that same checkpoint and seed — with
the sandwich rule (each batch: 4 random subnets + the largest + the smallest) and without (4 random subnets) — and
scores the same subnets on both: the largest, the smallest and `--subnets` random ones that fit the device, each
with inherited weights after BN recalibration (20 x 64 images) on the search's validation split, as evolution
scores them. Writes bench/results/sandwich.json and prints a markdown table.

    python bench/bench_sandwich.py [--device stm32f410] [--width 0.2 --resolution 40] [--epochs 4,6] [--subnets 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    import tempfile

    import torch

    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.search import SearchConfig, load_split, plan_options, search_budget, search_space
    from kilobyte.nas.supernet import SuperNet
    from kilobyte.nas.supernet_train import SubnetScorer, SupernetTraining, load_weights, train_phase
    from kilobyte.targets.devices import get_device
    from kilobyte.train import to_nchw_tensor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="stm32f410")
    ap.add_argument("--width", type=float, default=0.2)
    ap.add_argument("--resolution", type=int, default=40)
    ap.add_argument("--epochs", default="4,6", help="largest,supernet epochs (default: the search's preset)")
    ap.add_argument("--subnets", type=int, default=40, help="random fitting subnets scored (besides both ends)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    largest_epochs, supernet_epochs = (int(v) for v in args.epochs.split(","))
    device = get_device(args.device)
    config = SearchConfig(device.name, device.sram_bytes, device.flash_bytes, seed=args.seed)
    fit, val, test = load_split(config)
    space = search_space(config, fit.x.shape[-1], int(fit.y.max()) + 1, fit.x.shape[1])
    x, y = to_nchw_tensor(fit.x, args.resolution), torch.from_numpy(fit.y)
    val_x, val_y = to_nchw_tensor(val.x, args.resolution), torch.from_numpy(val.y)

    torch.manual_seed(args.seed)
    net = SuperNet(space, args.width, args.resolution)
    sub = net.space
    evaluator = ResourceEvaluator(sub, plan_options(config), core=device.core)
    budget = search_budget(config)
    rng = np.random.default_rng(args.seed + 1)
    archs, seen = [sub.largest(), sub.smallest()], set()
    while len(archs) < args.subnets + 2:
        arch = sub.sample(rng)
        if arch.key() not in seen and evaluator.fits(arch, budget):
            seen.add(arch.key())
            archs.append(arch)

    base = SupernetTraining(largest_epochs=largest_epochs, supernet_epochs=supernet_epochs)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "largest.pt"
        t0 = time.perf_counter()
        train_phase(net, "largest", x, y, base, args.seed, ckpt, progress=True)
        largest_seconds = time.perf_counter() - t0
        for sandwich in (True, False):
            load_weights(net, ckpt)
            cfg = replace(base, sandwich=sandwich)
            t0 = time.perf_counter()
            train_phase(net, "supernet", x, y, cfg, args.seed, None, progress=True)
            seconds = time.perf_counter() - t0
            scorer = SubnetScorer(net, x[:20 * 64], val_x, val_y)
            acc = [scorer(a) for a in archs]
            rows["sandwich" if sandwich else "no sandwich"] = {
                "train_seconds": round(seconds, 1), "largest": acc[0], "smallest": acc[1],
                "random_mean": float(np.mean(acc[2:])), "random_min": float(np.min(acc[2:])),
                "random_max": float(np.max(acc[2:])), "top5_mean": float(np.mean(sorted(acc[2:])[-5:])),
                "accuracies": acc}
    result = {"device": device.name, "width": args.width, "resolution": args.resolution,
              "largest_epochs": largest_epochs, "supernet_epochs": supernet_epochs,
              "largest_seconds": round(largest_seconds, 1), "subnets": [a.describe() for a in archs], **rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sandwich.json").write_text(json.dumps(result, indent=1) + "\n")
    print("| supernet training | seconds | largest | smallest | random subnets: mean (min–max) | best 5 mean |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['train_seconds']:.0f} | {r['largest'] * 100:.1f} % | {r['smallest'] * 100:.1f} % | "
              f"{r['random_mean'] * 100:.1f} % ({r['random_min'] * 100:.1f}–{r['random_max'] * 100:.1f}) | "
              f"{r['top5_mean'] * 100:.1f} % |")


if __name__ == "__main__":
    main()
