"""Issue 26 diagnosis: does the sandwich supernet phase learn on this data? Each phase's validation accuracy.

Trains the largest network, then the supernet, with `kilobyte.nas` functions directly (no CLI), on a subset, and
prints the largest network's validation accuracy after its warm-up, then the largest, the smallest and random
subnets after the supernet phase (each after BN recalibration), and per-step loss / gradient-norm traces.

    nice -n 10 python bench/diag_supernet.py --data letters --images 2000 --width 0.25 --resolution 32 \
        --largest-epochs 2 --supernet-epochs 2
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch

from kilobyte.nas.search import SearchConfig, _space, split_data
from kilobyte.nas.supernet import SuperNet
from kilobyte.nas.supernet_train import SubnetScorer, SupernetTraining, train_phase
from kilobyte.train import to_nchw_tensor


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="letters")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--width", type=float, default=0.25)
    ap.add_argument("--resolution", type=int, default=32)
    ap.add_argument("--largest-epochs", type=int, default=2)
    ap.add_argument("--supernet-epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--supernet-lr", type=float, default=None, help="the supernet phase's peak rate (default: --lr)")
    ap.add_argument("--subnets", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    fit, val, _ = split_data(a.data, a.seed, 0.8, 300, a.images)
    n_classes = int(max(fit.y.max(), val.y.max())) + 1
    space = _space(SearchConfig(device="x", sram_bytes=1, flash_bytes=1), fit.x.shape[-1], n_classes, fit.x.shape[1])
    cfg = SupernetTraining(largest_epochs=a.largest_epochs, supernet_epochs=a.supernet_epochs)
    if a.lr is not None:
        cfg = dataclasses.replace(cfg, lr=a.lr)
    torch.manual_seed(a.seed)
    net = SuperNet(space, a.width, a.resolution)
    x, y = to_nchw_tensor(fit.x, a.resolution), torch.from_numpy(fit.y)
    scorer = SubnetScorer(net, x[:640], to_nchw_tensor(val.x, a.resolution), torch.from_numpy(val.y), calib_batches=10)
    rng = np.random.default_rng(123)
    randoms = [net.space.sample(rng) for _ in range(a.subnets)]
    t = time.perf_counter()
    for phase in ("largest", "supernet"):
        if phase == "supernet" and a.supernet_lr is not None:
            cfg = dataclasses.replace(cfg, lr=a.supernet_lr)
        hist = train_phase(net, phase, x, y, cfg, a.seed)
        print(phase, "losses", [round(h["loss"], 3) for h in hist], f"{time.perf_counter() - t:.0f}s")
        accs = {"largest": scorer(net.largest_arch)}
        if phase == "supernet":
            accs["smallest"] = scorer(net.space.smallest())
            accs["random"] = [round(scorer(r), 3) for r in randoms]
        print(phase, "val accuracy", accs, f"(chance {1 / n_classes:.3f})")


if __name__ == "__main__":
    main()
