"""Benchmark (issue 28): up to which input resolution a detector of the search's space fits a device, per layer and
with a patch schedule — the question whether a detection task leaves patch-based inference anything to win.

For the detector space `kilobyte search --task detect` searches (one space for both modes: `nas.search.search_space`)
and each (width, resolution) of the grid, the space optimiser (`nas.space_opt.optimize_space`, the search's phase 1)
samples `--samples` networks and plans them under the device's budget, once per layer and once with `--patch`'s
options. Printed and stored per resolution: the smallest planned SRAM of any sampled network (the budget's measure)
and how many of the sampled networks fit, over all widths, and the MACs of the widest configuration's largest network
(what the time budget caps: `nas/budget.py::time_cap`).

    python bench/bench_detect_fit.py [--device stm32f412] [--resolutions 112 128 ... 224] [--samples 40]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kilobyte.atomic import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "detect_fit.json"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="stm32f412")
    p.add_argument("--resolutions", type=int, nargs="+", default=[112, 128, 144, 160, 176, 192, 224])
    p.add_argument("--samples", type=int, default=40, help="sampled networks per (width, resolution) (default 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", type=Path, default=RESULTS)
    a = p.parse_args(argv)

    from kilobyte.nas.search import SearchConfig, plan_options, search_budget, search_space
    from kilobyte.nas.space_opt import optimize_space
    from kilobyte.targets.devices import get_device

    device = get_device(a.device)
    joint = SearchConfig(a.device, device.sram_bytes, device.flash_bytes, task="detect", patch=True,
                         resolutions=tuple(a.resolutions))
    rows = {}
    for mode, config in (("per-layer", dataclasses.replace(joint, patch=False)), ("patch", joint)):
        space = search_space(config, 1, 10, max(a.resolutions))
        choice = optimize_space(space, search_budget(config), samples=a.samples, seed=a.seed,
                                options=plan_options(config), workers=2, progress=True, core=device.core)
        for r in a.resolutions:
            at = [c for c in choice.configs if c.resolution == r]
            rows.setdefault(r, {})[mode] = {"min_sram_bytes": min(c.min_sram for c in at),
                                            "fitting": sum(c.fitting for c in at),
                                            "sampled": sum(c.sampled for c in at),
                                            "largest_macs": max(c.largest_macs for c in at)}
    print(f"{a.device}: {device.sram_bytes // 1024} KB SRAM, {a.samples} networks per (width, resolution)")
    print("| input (px) | per layer: least SRAM (KB) | per layer: fit | patch: least SRAM (KB) | patch: fit | "
          f"largest network, w{max(joint.widths):g} (M MACs) |")
    print("|---|---|---|---|---|---|")
    for r, m in rows.items():
        pl, pa = m["per-layer"], m["patch"]
        print(f"| {r} | {pl['min_sram_bytes'] / 1024:.0f} | {pl['fitting']}/{pl['sampled']} | "
              f"{pa['min_sram_bytes'] / 1024:.0f} | {pa['fitting']}/{pa['sampled']} | {pa['largest_macs'] / 1e6:.1f} |")
    write_json(a.results, {"settings": {"device": a.device, "samples": a.samples, "seed": a.seed},
                           "rows": [{"resolution": r, **m} for r, m in rows.items()]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
