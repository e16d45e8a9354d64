"""Issue 26 diagnosis: does the sandwich supernet phase learn on this data? Each phase's validation accuracy.

Trains the largest network, then the supernet, with `kilobyte.nas` functions directly (no CLI) and the search's own
split (`split_data`: 500 validation images), and prints / appends to `--json` the largest network's validation
accuracy after its warm-up, then the largest, the smallest and `--subnets` random subnets after the supernet phase
(each after BN recalibration on `--calib` batches of 64 training images, as `SubnetScorer`), the random subnets'
mean as a share of the largest's ("ratio", issue 26's acceptance: >= 0.8), and the supernet phase's seconds per
epoch. Any `SupernetTraining` field is set with `--set name=value` (e.g. `--set distill=1.0`), so each technique is
one controlled run: same seed, same data, same warm-up (cached in `--cache`, since it does not depend on the
supernet phase's settings), same random subnets. One thread, as the search's trainer on a shared machine.

    nice -n 10 python bench/diag_supernet.py --data letters --images 2000 --width 0.25 --resolution 32 \
        --set distill=1.0 --label letters-distill --json bench/results/diag_supernet.json

docs/search.md ("Why random subnets lagged the largest") has the table of every run in bench/results/diag_supernet.json
and how to repeat each.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kilobyte.nas.search import SearchConfig, search_space, split_data  # noqa: E402
from kilobyte.nas.supernet import SuperNet  # noqa: E402
from kilobyte.nas.supernet_train import SubnetScorer, SupernetTraining, chance, train_phase  # noqa: E402
from kilobyte.train import to_nchw_tensor  # noqa: E402

WARMUP_FIELDS = ("largest_epochs", "batch_size", "lr", "weight_decay", "momentum", "shift")


def _value(field: dataclasses.Field, text: str):
    if text == "None":
        return None
    if field.type in ("bool", bool):
        return text.lower() in ("1", "true", "yes")
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def training_config(a) -> SupernetTraining:
    cfg = SupernetTraining(largest_epochs=a.largest_epochs, supernet_epochs=a.supernet_epochs)
    fields = {f.name: f for f in dataclasses.fields(SupernetTraining)}
    for item in a.set:
        name, _, text = item.partition("=")
        cfg = dataclasses.replace(cfg, **{name: _value(fields[name], text)})
    return cfg


def warm_up(net, x, y, cfg, a) -> tuple[float, Path]:
    """The largest phase, from the cache when the same warm-up ran before; returns (seconds, checkpoint)."""
    key = json.dumps([a.data, a.images, a.width, a.resolution, a.seed, cfg.zero_residual,
                      [getattr(cfg, f) for f in WARMUP_FIELDS]])
    path = Path(a.cache) / f"warmup-{hashlib.sha1(key.encode()).hexdigest()[:12]}.pt"
    if path.exists():
        net.load_state_dict(torch.load(path, weights_only=False))
        return 0.0, path
    t = time.perf_counter()
    train_phase(net, "largest", x, y, cfg, a.seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), path)
    return time.perf_counter() - t, path


def score(net, scorer, archs) -> list[float]:
    return [round(scorer(arch), 4) for arch in archs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="letters")
    ap.add_argument("--images", type=int, default=None, help="at most this many training images (default: all)")
    ap.add_argument("--width", type=float, default=0.25)
    ap.add_argument("--resolution", type=int, default=32)
    ap.add_argument("--largest-epochs", type=int, default=4)
    ap.add_argument("--supernet-epochs", type=int, default=6)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a SupernetTraining field")
    ap.add_argument("--subnets", type=int, default=8, help="random subnets scored")
    ap.add_argument("--calib", default="20", help="BN recalibration batches of 64, comma-separated (scored for each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default="/tmp/diag_supernet")
    ap.add_argument("--label", default="")
    ap.add_argument("--json", default=None, help="append the result to this JSON list")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = training_config(a)
    fit, val, _ = split_data(a.data, a.seed, 0.8, 500, a.images)
    n_classes = int(max(fit.y.max(), val.y.max())) + 1
    native = fit.x.shape[1]
    space = search_space(SearchConfig(device="x", sram_bytes=1, flash_bytes=1), fit.x.shape[-1], n_classes, native,
                   (native, native))
    torch.manual_seed(a.seed)
    net = SuperNet(space, a.width, a.resolution)
    x, y = to_nchw_tensor(fit.x, a.resolution), torch.from_numpy(fit.y)
    val_x, val_y = to_nchw_tensor(val.x, a.resolution), torch.from_numpy(val.y)
    scorer = SubnetScorer(net, x, val_x, val_y)
    rng = np.random.default_rng(123)
    randoms = [net.space.sample(rng) for _ in range(a.subnets)]
    warm_seconds, _ = warm_up(net, x, y, cfg, a)
    warm = scorer(net.largest_arch)
    print(f"largest after warm-up {warm:.3f} ({warm_seconds:.0f} s; chance {chance(val.y):.3f})", flush=True)
    t = time.perf_counter()
    history = train_phase(net, "supernet", x, y, cfg, a.seed) if cfg.supernet_epochs else []
    seconds = time.perf_counter() - t
    result = {"label": a.label, "data": a.data, "train_images": len(fit.x), "val_images": len(val.x),
              "width": a.width, "resolution": a.resolution, "seed": a.seed,
              "training": dataclasses.asdict(cfg),
              "chance": chance(val.y), "largest_warmup": round(warm, 4),
              "supernet_losses": [round(h["loss"], 4) for h in history],
              "seconds_per_epoch": round(seconds / max(1, cfg.supernet_epochs), 1), "scores": {}}
    for calib in (int(c) for c in a.calib.split(",")):
        scorer = SubnetScorer(net, x, val_x, val_y, calib_batches=calib)
        largest, smallest, *random = score(net, scorer, [net.largest_arch, net.space.smallest(), *randoms])
        mean = float(np.mean(random))
        result["scores"][calib] = {"largest": largest, "smallest": smallest, "random": random,
                                   "random_mean": round(mean, 4), "ratio": round(mean / largest, 3)}
    print(json.dumps(result), flush=True)
    if a.json:
        path = Path(a.json)
        rows = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps(rows + [result], indent=1) + "\n")


if __name__ == "__main__":
    main()
