"""Search stage: TinyNAS search-space optimisation — which (width, resolution) configuration to search in.

MCUNet thesis §3.1.1 (papers/search-specs.md A.2): for each (w, r) of a grid, sample m random networks of that
configuration, keep those that fit the device (peak SRAM with the best schedule, Flash), and score the
configuration by the mean MACs of the fitting ones — more computation that still fits means a more capable space.
The configuration with the largest mean wins; its MACs CDF (and the others') is the evidence. The MACs are the
networks' own: under a patch schedule (`--patch`) the halo recomputation it adds is a cost, not capacity — counting
it pushed the joint detection search to its narrowest width at the resolution where patches start (issue 28's
first benchmark, docs/benchmarks.md).

Candidates are measured by the `ResourceEvaluator` (the compiler's own planner); configurations are spread over a
process pool, one evaluator per worker. Results are deterministic for a seed whatever the number of workers: each
configuration draws from its own generator, seeded by (seed, w, r).
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..atomic import write_json
from ..errors import KilobyteError
from ..schedule.estimate import Resources
from ..schedule.plan_types import PlanOptions
from .build import network
from .report import pyplot, save_png
from .resources import Budget, ResourceEvaluator, layer_counts, sram_lower_bound
from .space import DEFAULT_STRIDES, MBSpace, final_map, grid

PATCH_MIN_SRAM_SAMPLES = 10


class NoSpaceFitsError(KilobyteError):
    """No sampled network of any configuration fits the budget."""


@dataclass(frozen=True)
class ConfigStats:
    width: float
    resolution: int
    sampled: int
    fitting: int
    mean_macs: float  # over fitting networks (their own MACs, without a patch stage's recomputation); 0 if none fits
    macs: tuple[int, ...]  # MACs of every fitting network, sorted (the CDF)
    min_sram: int  # smallest SRAM (as the budget counts it) any sampled network needs (patch mode: an upper bound,
    # the least of the PATCH_MIN_SRAM_SAMPLES samples with the smallest per-layer bound, each with its smallest-peak
    # schedule)
    min_flash: int  # smallest Flash any sampled network needs
    strides: tuple[int, ...] = (2, 2, 2, 2, 1, 2, 1)  # the downsampling schedule (stem, stages); space.py
    final_map: int = 0  # side of the last stage's map at this resolution and schedule
    largest_macs: int = 0  # MACs of the configuration's largest network (what the supernet trains)

    @property
    def macs_error(self) -> float:
        """The standard error of `mean_macs` (it is estimated from the sampled networks that fit)."""
        return float(np.std(self.macs) / np.sqrt(len(self.macs))) if len(self.macs) > 1 else 0.0

    def label(self) -> str:
        """`w0.3-r28` (+ `-s1d3`: stem stride, number of stride-2 layers, when the schedule is not ImageNet's)."""
        extra = "" if self.strides == DEFAULT_STRIDES else \
            f"-s{self.strides[0]}d{sum(s == 2 for s in self.strides)}"
        return f"w{self.width:g}-r{self.resolution}{extra}"


@dataclass(frozen=True)
class SpaceChoice:
    budget: Budget
    configs: tuple[ConfigStats, ...]
    best: ConfigStats | None
    edge: tuple[str, ...] = ()  # "width" / "resolution": the best sits on the grid's largest value and the grid
    # could not grow further (`optimize_space`'s grow_to)
    max_largest_macs: float | None = None  # the time budget's cap on a configuration's largest network
    too_slow: int = 0  # configurations with more fitting MACs than the choice, left out by that cap
    tie_break: ConfigStats | None = None  # the configuration with the most fitting MACs, below the data's own
    # resolution, when a tied one at or above it was chosen instead (`choose`)

    def to_json(self) -> dict:
        def row(c: ConfigStats) -> dict:
            d = asdict(c)
            d["macs_cdf"] = _cdf_points(c.macs)
            del d["macs"]
            return d

        return {"budget": asdict(self.budget),
                "best": None if self.best is None else {"width": self.best.width, "resolution": self.best.resolution,
                                                        "strides": list(self.best.strides),
                                                        "final_map": self.best.final_map,
                                                        "mean_macs": self.best.mean_macs},
                "edge": list(self.edge), "max_largest_macs": self.max_largest_macs, "too_slow": self.too_slow,
                "tie_break": None if self.tie_break is None else self.tie_break.label(),
                "configs": [row(c) for c in self.configs]}


def _cdf_points(macs: tuple[int, ...], points: int = 21) -> list[int]:
    """MACs at the 0, 5, ..., 100th percentiles (the CDF, compactly)."""
    if not macs:
        return []
    return [int(v) for v in np.percentile(np.asarray(macs), np.linspace(0, 100, points), method="lower")]


def config_seed(seed: int, width: float, resolution: int) -> int:
    return int(seed) * 1_000_003 + int(round(width * 1000)) * 1009 + int(resolution)


def _config_stats(ev: ResourceEvaluator, budgets: tuple[Budget, ...], width: float, resolution: int,
                  strides: tuple[int, ...], samples: int, seed: int) -> tuple[ConfigStats, ...]:
    """One configuration's statistics under each budget; every sampled network is planned at most once. The
    schedules of one (w, r) draw the same networks (the seed is (seed, w, r)): a paired comparison."""
    sub = ev.space.with_config(width, resolution, strides)
    if sub.strides != ev.space.strides:  # the schedule is the evaluator's space's: one evaluator per schedule
        ev = ResourceEvaluator(sub, ev.options, core=ev.core, latency_core=ev.latency_core)
    rng = np.random.default_rng(config_seed(seed, width, resolution))
    archs = [sub.sample(rng) for _ in range(samples)]
    largest = layer_counts(network(sub, sub.largest(width, resolution)))[1]
    sram_bound = lambda a: sram_lower_bound(network(ev.space, a))  # noqa: E731
    if ev.patch:  # no cheap bound holds under a patch stage, and a smallest-peak plan costs ~60 ms: plan a few
        few = sorted(archs, key=sram_bound)[:PATCH_MIN_SRAM_SAMPLES]
        min_sram = min((ev.evaluate(a) for a in few), key=lambda r: r.arena_bytes)
    else:
        min_sram = _smallest(ev, archs, sram_bound, lambda r: r.arena_bytes)
    min_flash = _smallest(ev, archs, ev.flash_lower_bound, lambda r: r.flash_bytes, ev.per_layer)
    out = []
    for budget in budgets:
        macs = sorted(layer_counts(network(ev.space, a))[1] for a in archs if ev.fits(a, budget))
        out.append(ConfigStats(width, resolution, samples, len(macs), float(np.mean(macs)) if macs else 0.0,
                               tuple(macs), budget.sram_of(min_sram), min_flash.flash_bytes, tuple(strides),
                               final_map(strides, resolution), largest))
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
                   options: PlanOptions | None = None, workers: int | None = None, progress: bool = False,
                   core: str | None = None, grow_to: tuple[float, int] | None = None,
                   max_largest_macs: float | None = None) -> SpaceChoice:
    """Score every configuration of `space` (its widths x resolutions x downsampling schedules) and choose the
    largest mean MACs that fits (Flash for `core`, as `ResourceEvaluator` counts it). With `grow_to` (the largest
    width and resolution allowed), a choice on the grid's largest width or resolution grows the grid in that
    direction (`grown`) until the budget binds — the choice is inside the grid — or the limit is reached, which the
    choice's `edge` then records. `max_largest_macs` (the time budget, `budget.largest_macs_cap`) leaves out the
    configurations whose largest network would train too slowly. A space with the data's `input_size` prefers
    its resolution or above on a tie (`choose`)."""
    scored: dict[tuple, ConfigStats] = {}
    while True:
        new = [c for c in grid(space) if c not in scored]
        for config, stats in zip(new, score_configs(space, (budget,), new, samples=samples, seed=seed,
                                                    options=options, workers=workers, progress=progress, core=core)):
            scored[config] = stats[0]
        choice = choose(budget, tuple(scored.values()), max_largest_macs,
                        native=min(space.input_size) if space.input_size is not None else None)
        if choice.best is None:
            return choice
        bigger = grown(space, choice.best, grow_to) if grow_to is not None else None
        if bigger is None:
            edge = tuple(dim for dim, value, values in (("width", choice.best.width, space.widths),
                                                        ("resolution", choice.best.resolution, space.resolutions))
                         if len(values) > 1 and value == max(values))
            return replace(choice, edge=edge)
        space = bigger


GROW_WIDTHS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0)  # the ladder a grid grows on
GROW_STEPS = 2  # values added per direction per round


def grown(space: MBSpace, best: ConfigStats, limit: tuple[float, int]) -> MBSpace | None:
    """`space` with up to GROW_STEPS more widths (GROW_WIDTHS) and/or resolutions (the grid's own step) beyond its
    largest, in each direction where `best` sits on the largest value; None when neither can grow within `limit`
    (largest width, largest resolution)."""
    widths, resolutions = space.widths, space.resolutions
    if best.width == max(widths):
        widths += tuple(w for w in GROW_WIDTHS if max(widths) < w <= limit[0])[:GROW_STEPS]
    if best.resolution == max(resolutions):
        step = resolutions[-1] - resolutions[-2] if len(resolutions) > 1 else 4
        top = max(resolutions)
        resolutions += tuple(r for r in range(top + step, top + GROW_STEPS * step + 1, step) if r <= limit[1])
    if (widths, resolutions) == (space.widths, space.resolutions):
        return None
    return replace(space, widths=widths, resolutions=resolutions)


MIN_FIT_SHARE = 0.05  # a configuration where fewer sampled networks fit leaves evolution little to choose from


def choose(budget: Budget, configs: tuple[ConfigStats, ...], max_largest_macs: float | None = None,
           native: int | None = None) -> SpaceChoice:
    """The configuration with the largest mean MACs of fitting networks among those where at least MIN_FIT_SHARE of
    the samples fit (any that fits when none does) and whose largest network has at most `max_largest_macs` (the
    smallest such when none has); ties go to the narrower, lower-resolution one.

    With `native` (the data's own side), a choice below it yields to the best configuration at or above it whose
    mean is tied with it — within two standard errors of their difference (each mean is estimated from the ~100
    sampled networks that fit): the mean MACs cannot tell them apart, and a resolution below the data's throws away
    pixels before any network sees them (letters, 32 px: r24/r28 won by 1-4 % over r48, inside that error)."""
    fitting = [c for c in configs if c.fitting]
    roomy = [c for c in fitting if c.fitting >= MIN_FIT_SHARE * c.sampled] or fitting
    rank = lambda c: (c.mean_macs, -c.width, -c.resolution, -c.final_map)  # noqa: E731
    fast = roomy if max_largest_macs is None else \
        [c for c in roomy if c.largest_macs <= max_largest_macs] or \
        [min(roomy, key=lambda c: c.largest_macs)] if roomy else []
    best = max(fast, key=rank) if fast else None
    too_slow = 0 if best is None else sum(1 for c in roomy if c not in fast and rank(c) > rank(best))
    tie_break = None
    if best is not None and native is not None and best.resolution < native:
        tied = [c for c in fast if c.resolution >= native
                and best.mean_macs - c.mean_macs <= 2 * np.hypot(best.macs_error, c.macs_error)]
        if tied:
            best, tie_break = max(tied, key=rank), best
    return SpaceChoice(budget, configs, best, max_largest_macs=max_largest_macs, too_slow=too_slow,
                       tie_break=tie_break)


def optimize_spaces(space: MBSpace, budgets, *, samples: int = 1000, seed: int = 0,
                    options: PlanOptions | None = None, workers: int | None = None,
                    progress: bool = False, core: str | None = None) -> list[SpaceChoice]:
    """`optimize_space` for several budgets at once (on the space's own grid): the same samples, each network
    planned once for all."""
    budgets = tuple(budgets)
    results = score_configs(space, budgets, grid(space), samples=samples, seed=seed, options=options,
                            workers=workers, progress=progress, core=core)
    return [choose(budget, tuple(r[i] for r in results)) for i, budget in enumerate(budgets)]


def score_configs(space: MBSpace, budgets: tuple[Budget, ...], configs, *, samples: int, seed: int,
                  options: PlanOptions | None, workers: int | None, progress: bool, core: str | None
                  ) -> list[tuple[ConfigStats, ...]]:
    """Each (w, r, strides) configuration's statistics under each budget, spread over `workers` processes."""
    options = options or PlanOptions()
    workers = workers if workers is not None else min(len(configs), os.cpu_count() or 1)
    jobs = [(budgets, w, r, strides, samples, seed) for w, r, strides in configs]
    bar = tqdm(total=len(jobs), desc="space optimisation", unit="config", disable=not progress, leave=False)
    results = []
    if workers <= 1 or len(jobs) <= 1:
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
    return results


def require_fit(choice: SpaceChoice) -> ConfigStats:
    """The chosen configuration, or a one-line error with the smallest SRAM and Flash any sampled network needed."""
    if choice.best is not None:
        return choice.best
    sram = min(c.min_sram for c in choice.configs)
    flash = min(c.min_flash for c in choice.configs)
    raise NoSpaceFitsError(f"no architecture in any of the {len(choice.configs)} (width, resolution, schedule) "
                           f"spaces fits {choice.budget.sram_bytes:,} B SRAM / {choice.budget.flash_bytes:,} B Flash: "
                           f"the smallest sampled network needs {sram:,} B SRAM, and the smallest in Flash "
                           f"{flash:,} B Flash")


def write_report(choice: SpaceChoice, out_dir: Path, top: int = 10) -> dict[str, Path]:
    """`space.json` (every configuration: counts, mean MACs, CDF percentiles) and `space_cdf.png` (the CDFs of the
    `top` configurations by mean MACs, legend `w{w}-r{r} | mean MACs` as the thesis's Fig. 3-2), written atomically."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "space.json", "plot": out_dir / "space_cdf.png"}
    write_json(paths["json"], choice.to_json())
    plt = pyplot()
    if plt is None:
        del paths["plot"]
        return paths
    ranked = sorted((c for c in choice.configs if c.fitting), key=lambda c: -c.mean_macs)[:top]
    fig, ax = plt.subplots(figsize=(6, 4))
    for c in ranked:
        m = np.asarray(c.macs) / 1e6
        style = {"linewidth": 2.5, "color": "red"} if c is choice.best else {"linewidth": 1}
        ax.plot(m, np.arange(1, len(m) + 1) / len(m), label=f"{c.label()} | {c.mean_macs / 1e6:.2f}M", **style)
    ax.set_xlabel("MACs (M) of networks that fit")
    ax.set_ylabel("CDF")
    ax.set_title(f"{choice.budget.sram_bytes // 1024} KB SRAM / {choice.budget.flash_bytes // 1024} KB Flash")
    ax.legend(fontsize=7)
    save_png(fig, paths["plot"], dpi=120)
    return paths
