"""Search stage: which search `kilobyte search --strategy auto` runs, and μNAS bounds from a device (issue 26, item 2).

The rule, on the budget and the input size:

- **TinyNAS** when its MBConv space (resolution-aware for small images, `space.downsampling_schedules`) has a
  configuration where at least `space_opt.MIN_FIT_SHARE` of sampled networks fit the device's SRAM and Flash —
  checked by a quick space optimisation (`CHECK_SAMPLES` per configuration, the compiler's own planner).
- **μNAS** otherwise, with bounds derived from the device (`device_bounds`): its small plain CNNs start at a few
  hundred bytes, where every MBConv network (a stem, an MB1 block, six stages, a head, and the depthwise kernels'
  code) is out of reach — e.g. MNIST at 16 KB SRAM / 64 KB Flash, where the smallest sampled MBConv network needs
  69 KB of Flash.

Why not the joint (patch) search by default: a patch stage lowers SRAM, never Flash, and costs ~10x more to plan per
candidate; it stays `--patch`, for the budgets where SRAM binds and Flash does not (docs/search.md).
`bench/bench_vs_hand.py` measures each choice against the hand-made baselines at three budgets (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def to_json(self) -> dict:
        return {"name": self.name, "reason": self.reason}


def choose_strategy(config, workers: int = 1, core: str | None = None) -> StrategyChoice:
    """The strategy for a TinyNAS `SearchConfig` (data, budget): see the module doc."""
    ds = load_dataset(config.data, seed=config.seed)
    side, channels = ds.x.shape[1], ds.x.shape[-1]
    image = int(np.prod(ds.x.shape[1:]))
    n_classes = int(ds.y.max()) + 1 if ds.y is not None else 10
    space = search_space(config, channels, n_classes, side, ds.x.shape[1:3])
    choice = optimize_space(space, search_budget(config), samples=CHECK_SAMPLES, seed=config.seed,
                            options=plan_options(config), workers=workers, core=core)
    roomy = [c for c in choice.configs if c.fitting >= MIN_FIT_SHARE * c.sampled]
    budget = f"{config.sram_bytes / 1024:g} KB SRAM / {config.flash_bytes / 1024:g} KB Flash"
    if roomy:
        best = max(roomy, key=lambda c: c.mean_macs)
        return StrategyChoice("tinynas", f"the MBConv space fits {budget} ({len(roomy)} of {len(choice.configs)} "
                                         f"configurations, e.g. {best.label()}): TinyNAS", image)
    sram = min(c.min_sram for c in choice.configs)
    flash = min(c.min_flash for c in choice.configs)
    return StrategyChoice("unas", f"no MBConv configuration fits {budget} (the sampled networks need at least "
                                  f"{sram / 1024:.1f} KB SRAM and {flash / 1024:.1f} KB Flash): μNAS's small CNNs, "
                                  f"bounded by the device", image)


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
