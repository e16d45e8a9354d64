"""Search stage: TinyNAS search-space optimisation — which (width, resolution) configuration to search in.

MCUNet thesis §3.1.1 (papers/search-specs.md A.2): for each (w, r) of a grid, sample m random networks of that
configuration, keep those that fit the device (peak SRAM with the best schedule, Flash), and score the
configuration by the mean MACs of the fitting ones — more computation that still fits means a more capable space.
The configuration with the largest mean wins; its MACs CDF (and the others') is the evidence.

Candidates are measured by the `ResourceEvaluator` (the compiler's own planner); configurations are spread over a
process pool, one evaluator per worker. Results are deterministic for a seed whatever the number of workers: each
configuration draws from its own generator, seeded by (seed, w, r).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import KilobyteError
from ..schedule.estimate import Resources
from ..schedule.plan_types import PlanOptions
from .build import network
from .report import atomic_bytes, pyplot, save_png
from .resources import Budget, ResourceEvaluator, sram_lower_bound
from .space import MBSpace, grid

PATCH_MIN_SRAM_SAMPLES = 10


class NoSpaceFitsError(KilobyteError):
    """No sampled network of any configuration fits the budget."""


@dataclass(frozen=True)
class ConfigStats:
    width: float
    resolution: int
    sampled: int
    fitting: int
    mean_macs: float  # over fitting networks; 0 when none fits
    macs: tuple[int, ...]  # MACs of every fitting network, sorted (the CDF)
    min_sram: int  # smallest SRAM (as the budget counts it) any sampled network needs (patch mode: an upper bound,
    # the least of the PATCH_MIN_SRAM_SAMPLES samples with the smallest per-layer bound, each with its smallest-peak
    # schedule)
    min_flash: int  # smallest Flash any sampled network needs


@dataclass(frozen=True)
class SpaceChoice:
    budget: Budget
    configs: tuple[ConfigStats, ...]
    best: ConfigStats | None

    def to_json(self) -> dict:
        def row(c: ConfigStats) -> dict:
            d = asdict(c)
            d["macs_cdf"] = _cdf_points(c.macs)
            del d["macs"]
            return d

        return {"budget": asdict(self.budget),
                "best": None if self.best is None else {"width": self.best.width, "resolution": self.best.resolution,
                                                        "mean_macs": self.best.mean_macs},
                "configs": [row(c) for c in self.configs]}


def _cdf_points(macs: tuple[int, ...], points: int = 21) -> list[int]:
    """MACs at the 0, 5, ..., 100th percentiles (the CDF, compactly)."""
    if not macs:
        return []
    return [int(v) for v in np.percentile(np.asarray(macs), np.linspace(0, 100, points), method="lower")]


def config_seed(seed: int, width: float, resolution: int) -> int:
    return int(seed) * 1_000_003 + int(round(width * 1000)) * 1009 + int(resolution)


def _config_stats(ev: ResourceEvaluator, budgets: tuple[Budget, ...], width: float, resolution: int, samples: int,
                  seed: int) -> tuple[ConfigStats, ...]:
    """One configuration's statistics under each budget; every sampled network is planned at most once."""
    sub = ev.space.with_config(width, resolution)
    rng = np.random.default_rng(config_seed(seed, width, resolution))
    archs = [sub.sample(rng) for _ in range(samples)]
    sram_bound = lambda a: sram_lower_bound(network(ev.space, a))  # noqa: E731
    if ev.patch:  # no cheap bound holds under a patch stage, and a smallest-peak plan costs ~60 ms: plan a few
        few = sorted(archs, key=sram_bound)[:PATCH_MIN_SRAM_SAMPLES]
        min_sram = min((ev.evaluate(a) for a in few), key=lambda r: r.arena_bytes)
    else:
        min_sram = _smallest(ev, archs, sram_bound, lambda r: r.arena_bytes)
    min_flash = _smallest(ev, archs, ev.flash_lower_bound, lambda r: r.flash_bytes, ev.per_layer)
    out = []
    for budget in budgets:
        macs = sorted(ev.fitting(a, budget).macs for a in archs if ev.fits(a, budget))
        out.append(ConfigStats(width, resolution, samples, len(macs), float(np.mean(macs)) if macs else 0.0,
                               tuple(macs), budget.sram_of(min_sram), min_flash.flash_bytes))
    return tuple(out)


def _smallest(ev: ResourceEvaluator, archs, bound, measure, plan=None) -> Resources:
    """The planned figures of the sampled network with the least `measure` (peak SRAM or Flash), exactly: candidates
    are planned (by `plan`, default `ev.evaluate`) in the order of their lower `bound`, stopping once the bound
    reaches the best found."""
    best = None
    for arch in sorted(archs, key=bound):
        if best is not None and bound(arch) >= measure(best):
            break
        r = (plan or ev.evaluate)(arch)
        best = r if best is None or measure(r) < measure(best) else best
    return best


_WORKER: dict = {}


def _worker_init(space: MBSpace, options: PlanOptions, core: str | None = None) -> None:
    _WORKER["ev"] = ResourceEvaluator(space, options, core=core)


def _worker_run(args) -> tuple[ConfigStats, ...]:
    return _config_stats(_WORKER["ev"], *args)


def optimize_space(space: MBSpace, budget: Budget, *, samples: int = 1000, seed: int = 0,
                   options: PlanOptions | None = None, workers: int | None = None,
                   progress: bool = False, core: str | None = None) -> SpaceChoice:
    """Score every (w, r) of `space` (its `widths` x `resolutions`) and choose the largest mean MACs that fits
    (Flash for `core`, as `ResourceEvaluator` counts it)."""
    return optimize_spaces(space, [budget], samples=samples, seed=seed, options=options, workers=workers,
                           progress=progress, core=core)[0]


def optimize_spaces(space: MBSpace, budgets, *, samples: int = 1000, seed: int = 0,
                    options: PlanOptions | None = None, workers: int | None = None,
                    progress: bool = False, core: str | None = None) -> list[SpaceChoice]:
    """`optimize_space` for several budgets at once: the same samples, each network planned once for all."""
    from tqdm import tqdm

    budgets = tuple(budgets)
    options = options or PlanOptions()
    configs = grid(space)
    workers = workers if workers is not None else min(len(configs), os.cpu_count() or 1)
    jobs = [(budgets, w, r, samples, seed) for w, r in configs]
    bar = tqdm(total=len(jobs), desc="space optimisation", unit="config", disable=not progress, leave=False)
    results = []
    if workers <= 1:
        _worker_init(space, options, core)
        for job in jobs:
            results.append(_worker_run(job))
            bar.update(1)
    else:
        with ProcessPoolExecutor(workers, initializer=_worker_init, initargs=(space, options, core)) as pool:
            for stats in pool.map(_worker_run, jobs, chunksize=1):
                results.append(stats)
                bar.update(1)
    bar.close()
    choices = []
    for i, budget in enumerate(budgets):
        per_config = tuple(r[i] for r in results)
        fitting = [c for c in per_config if c.fitting]
        best = max(fitting, key=lambda c: (c.mean_macs, -c.width, -c.resolution)) if fitting else None
        choices.append(SpaceChoice(budget, per_config, best))
    return choices


def require_fit(choice: SpaceChoice) -> ConfigStats:
    """The chosen configuration, or a one-line error with the smallest SRAM and Flash any sampled network needed."""
    if choice.best is not None:
        return choice.best
    sram = min(c.min_sram for c in choice.configs)
    flash = min(c.min_flash for c in choice.configs)
    raise NoSpaceFitsError(f"no architecture in any of the {len(choice.configs)} (width, resolution) spaces fits "
                           f"{choice.budget.sram_bytes:,} B SRAM / {choice.budget.flash_bytes:,} B Flash: the smallest "
                           f"sampled network needs {sram:,} B SRAM, and the smallest in Flash {flash:,} B Flash")


def write_report(choice: SpaceChoice, out_dir: Path, top: int = 10) -> dict[str, Path]:
    """`space.json` (every configuration: counts, mean MACs, CDF percentiles) and `space_cdf.png` (the CDFs of the
    `top` configurations by mean MACs, legend `w{w}-r{r} | mean MACs` as the thesis's Fig. 3-2), written atomically."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "space.json", "plot": out_dir / "space_cdf.png"}
    atomic_bytes(paths["json"], json.dumps(choice.to_json(), indent=1).encode())
    plt = pyplot()
    if plt is None:
        del paths["plot"]
        return paths
    ranked = sorted((c for c in choice.configs if c.fitting), key=lambda c: -c.mean_macs)[:top]
    fig, ax = plt.subplots(figsize=(6, 4))
    for c in ranked:
        m = np.asarray(c.macs) / 1e6
        style = {"linewidth": 2.5, "color": "red"} if c is choice.best else {"linewidth": 1}
        ax.plot(m, np.arange(1, len(m) + 1) / len(m), label=f"w{c.width:g}-r{c.resolution} | {c.mean_macs / 1e6:.2f}M",
                **style)
    ax.set_xlabel("MACs (M) of networks that fit")
    ax.set_ylabel("CDF")
    ax.set_title(f"{choice.budget.sram_bytes // 1024} KB SRAM / {choice.budget.flash_bytes // 1024} KB Flash")
    ax.legend(fontsize=7)
    save_png(fig, paths["plot"], dpi=120)
    return paths
