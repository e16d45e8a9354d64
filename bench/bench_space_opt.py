"""Benchmark: TinyNAS search-space optimisation with the real planner — 108 (width, resolution) spaces x 1,000 samples.

The thesis's grid (W = 0.2..1.0 step 0.1 x R = 48..224 step 16) of the ImageNet MBConv space (1000 classes, RGB),
each sampled network measured by `nas.ResourceEvaluator` (the compiler's own planner: reordering, in-place rules,
exact Flash of model.c), for STM32F746 (320 KB / 1 MB) and STM32H743 (512 KB / 2 MB) in one pass (each network
planned once for both budgets). The thesis reports "around 2 CPU hours" for these statistics. Writes
bench/results/space_opt.json, the CDF plots bench/results/space_cdf_{f746,h743}.png and prints a markdown table.

    python bench/bench_space_opt.py [--samples 1000] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kilobyte.nas.resources import Budget  # noqa: E402
from kilobyte.nas.space import MBSpace  # noqa: E402
from kilobyte.nas.space_opt import optimize_spaces, write_report  # noqa: E402
from kilobyte.targets.devices import get_device  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    space = MBSpace(num_classes=1000, in_channels=3)
    devices = [get_device("f746"), get_device("h743")]
    budgets = [Budget(d.sram_bytes, d.flash_bytes) for d in devices]
    start = time.perf_counter()
    choices = optimize_spaces(space, budgets, samples=args.samples, workers=args.workers, progress=True)
    seconds = time.perf_counter() - start
    n = len(space.widths) * len(space.resolutions)
    RESULTS.mkdir(exist_ok=True)
    out = {"machine": platform.processor() or platform.machine(), "workers": args.workers, "samples": args.samples,
           "spaces": n, "seconds": seconds, "devices": {}}
    print(f"{n} spaces x {args.samples} samples, {len(budgets)} budgets: {seconds:.0f} s on {args.workers} workers\n")
    print("| device | SRAM / Flash | chosen (w, r) | fitting samples | mean MACs of fitting | runner-up |")
    print("|---|---|---|---|---|---|")
    for device, choice in zip(devices, choices):
        tag = device.name.lower().replace("stm32", "")
        paths = write_report(choice, RESULTS / f"space_{tag}")
        ranked = sorted((c for c in choice.configs if c.fitting), key=lambda c: -c.mean_macs)
        b, second = ranked[0], ranked[1]
        print(f"| {device.name} | {device.sram_bytes // 1024} KB / {device.flash_bytes // 1024} KB | "
              f"w{b.width:g}, r{b.resolution} | {b.fitting}/{b.sampled} | {b.mean_macs / 1e6:.1f} M | "
              f"w{second.width:g}-r{second.resolution} ({second.mean_macs / 1e6:.1f} M) |")
        out["devices"][device.name] = {"best": {"width": b.width, "resolution": b.resolution,
                                                "mean_macs": b.mean_macs, "fitting": b.fitting},
                                       "top5": [{"width": c.width, "resolution": c.resolution,
                                                 "mean_macs": c.mean_macs, "fitting": c.fitting}
                                                for c in ranked[:5]],
                                       "plot": str(paths.get("plot", ""))}
    (RESULTS / "space_opt.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
