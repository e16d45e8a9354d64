"""Search stage: which search `kilobyte search --strategy auto` runs, and μNAS bounds from a device (issue 26, item 2).

The rule, on the budget and the input size:

- **TinyNAS** when its MBConv space (resolution-aware for small images, `space.downsampling_schedules`) has a
  configuration where at least `space_opt.MIN_FIT_SHARE` of sampled networks fit the device's SRAM and Flash —
  checked by a quick space optimisation (`CHECK_SAMPLES` per configuration, the compiler's own planner).
- **TinyNAS on the compact space** (`MBSpace.compact`: stage depths {1, 2, 3}, expand ratios {2, 3, 4}) when the
  MCUNet choices have no such configuration but the compact ones do — e.g. MNIST at 16 KB SRAM / 64 KB Flash, where
  the smallest MCUNet-space network needs 55 KB of Flash at w0.1 and random ones 76 KB or more, while 50-80 % of
  compact networks fit.
- **μNAS** otherwise, with bounds derived from the device (`device_bounds`): its small plain CNNs start at a few
  hundred bytes, where every MBConv network (a stem, an MB1 block, six stages, a head, and the depthwise kernels'
  code) is out of reach — e.g. 4 KB SRAM / 16 KB Flash.

Why not the joint (patch) search by default: a patch stage lowers SRAM, never Flash, and costs ~10x more to plan per
candidate; it stays `--patch`, for the budgets where SRAM binds and Flash does not (docs/search.md).
`bench/bench_vs_hand.py` measures each choice against the hand-made baselines at three budgets (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..data import load_dataset
from ..schedule.flash import code_lower_bound
from .search import plan_options, search_budget, search_space
from .space_opt import MIN_FIT_SHARE, optimize_space

CHECK_SAMPLES = 40  # networks per configuration in the quick fit check


@dataclass(frozen=True)
class StrategyChoice:
    name: str  # "tinynas" or "unas"
    reason: str  # one line, for the report
    input_bytes: int = 0  # the data's int8 image (μNAS's peak excludes it: `device_bounds`)
    compact: bool = False  # TinyNAS on the compact MBConv space (`SearchConfig.compact`)

    def to_json(self) -> dict:
        return {"name": self.name, "reason": self.reason, **({"space": "compact"} if self.compact else {})}


def choose_strategy(config, workers: int = 1, core: str | None = None) -> StrategyChoice:
    """The strategy for a TinyNAS `SearchConfig` (data, budget): see the module doc."""
    ds = load_dataset(config.data, seed=config.seed)
    side, channels = ds.x.shape[1], ds.x.shape[-1]
    image = int(np.prod(ds.x.shape[1:]))
    n_classes = int(ds.y.max()) + 1 if ds.y is not None else 10
    budget = f"{config.sram_bytes / 1024:g} KB SRAM / {config.flash_bytes / 1024:g} KB Flash"
    needs = ""
    for compact in (False, True):
        space = search_space(replace(config, compact=compact), channels, n_classes, side, ds.x.shape[1:3])
        choice = optimize_space(space, search_budget(config), samples=CHECK_SAMPLES, seed=config.seed,
                                options=plan_options(config), workers=workers, core=core)
        roomy = [c for c in choice.configs if c.fitting >= MIN_FIT_SHARE * c.sampled]
        sram = min(c.min_sram for c in choice.configs)
        flash = min(c.min_flash for c in choice.configs)
        what = "compact MBConv space" if compact else "MBConv space"
        if roomy:
            best = max(roomy, key=lambda c: c.mean_macs)
            return StrategyChoice("tinynas", f"{needs}the {what} fits {budget} ({len(roomy)} of "
                                             f"{len(choice.configs)} configurations, e.g. {best.label()}): TinyNAS",
                                  image, compact)
        needs = (f"the MBConv space does not fit {budget} (its sampled networks need at least {sram / 1024:.1f} KB "
                 f"SRAM and {flash / 1024:.1f} KB Flash); ")
    return StrategyChoice("unas", f"no MBConv configuration fits {budget}, not even of the compact space (its "
                                  f"sampled networks need at least {sram / 1024:.1f} KB SRAM and {flash / 1024:.1f} KB "
                                  f"Flash): μNAS's small CNNs, bounded by the device", image)


def device_bounds(sram_bytes: int, flash_bytes: int, kernels: str = "portable", core: str | None = None,
                  error: float | None = None, max_macs: float | None = None, input_bytes: int = 0) -> dict:
    """μNAS bounds from a device: peak SRAM = its SRAM less the input buffer (μNAS's peak excludes the input; the
    budget counts arena + input); model size = its Flash less the least code a plain CNN's
    library links (conv, pool, fully connected: `schedule.flash.code_lower_bound`); MACs only when limited; error
    when given (else none: the device sets the resources, the search the accuracy)."""
    code = code_lower_bound(("conv", "fc"), kernels, core)
    bounds = {"peak_bytes": float(max(256, sram_bytes - input_bytes)),
              "weight_bytes": float(max(1024, flash_bytes - code))}
    if max_macs is not None:
        bounds["macs"] = float(max_macs)
    if error is not None:
        bounds["error"] = float(error)
    return bounds
