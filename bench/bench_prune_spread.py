"""Benchmark: the per-layer cap of filterlet pruning at a target sparsity (`prune_model(spread=...)`, issue #16) —
resnet-small on the bundled MNIST subset at 75 %, where allocating by Taylor score per weight alone puts 88-93 % of
the last convolutions' filterlets away. Each spread prunes the same trained model (bench_prune.py's recipe: width 0.5,
6 epochs on 4,000 images, 3 epochs of retraining, int8 accuracy on the other 1,000).

    python bench/bench_prune_spread.py    # about 6 minutes on one core; writes bench/results/prune_spread.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SPREADS = (None, 0.0, 0.05, 0.1, 0.15)


def main() -> None:
    import torch
    from bench_prune import trained

    from kilobyte.data import load_dataset
    from kilobyte.prune import prune_model
    from kilobyte.train import TrainConfig

    torch.set_num_threads(1)
    train, test = load_dataset("mnist").split(4000)
    data = ((train.x, train.y), (test.x, test.y))
    module = trained("resnet-small", 0.5, 6, train)
    rows = []
    for spread in SPREADS:
        t0 = time.perf_counter()
        r = prune_model(module, data, "filterlet", sparsity=0.75, spread=spread,
                        config=TrainConfig.plain(epochs=3, lr=1e-3))
        rows.append({"spread": spread, "sparsity": r.sparsity, "int8_before": r.accuracy_before["int8"],
                     "int8_after": r.accuracy_after["int8"], "max_layer_ratio": max(r.ratios.values()),
                     "ratios": r.ratios, "seconds": round(time.perf_counter() - t0, 1)})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "ratios"}), flush=True)
    out = Path(__file__).resolve().parent / "results" / "prune_spread.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print("\n| spread | sparsity | largest layer ratio | int8 before → after |\n|---|---:|---:|---|")
    for r in rows:
        print(f"| {r['spread']} | {100 * r['sparsity']:.1f} % | {100 * r['max_layer_ratio']:.1f} % | "
              f"{100 * r['int8_before']:.1f} → {100 * r['int8_after']:.1f} % |")


if __name__ == "__main__":
    main()
