"""Search stage: `kilobyte search` — TinyNAS from a task and a device to a verified C library.

The phases, each a function below, in order; each commits its result to the store (`search.sqlite` in the output
directory) so that `--resume` skips what is done:

1. `choose_space`: search-space optimisation over (width, resolution) for the device's SRAM and Flash.
2. `train_supernet`: the largest network, then the weight-sharing supernet (checkpoint every epoch); each phase's
   validation accuracy (the largest after its warm-up; then the largest, the smallest and random subnets) goes to
   the report, with `searched` False when the random subnets are near chance (`supernet_train.supernet_check`).
3. `run_evolution`: evolution over the chosen space; fitness = held-out accuracy with inherited weights after BN
   recalibration; constraints checked by the `ResourceEvaluator` (the compiler's planner); every evaluation
   committed as it finishes. Optionally random search with as many evaluations (`random_baseline`).
4. `finetune`: the winner extracted with its inherited weights and trained further with the training recipe
   (`kilobyte.train.fit`: augmentation, one-cycle rate, BN recalibration, early stopping on the validation split).
5. `deploy`: int8 PTQ, plan, C library, verification against the numpy reference and TensorFlow Lite Micro,
   float/int8 accuracy on the held-out test split (never seen by any phase before), measured Flash/SRAM from the
   firmware ELF when the Arm toolchain is present, and the report (`report.json`, `pareto.png`, `space_cdf.png`).

Data: the dataset's labelled images are split into train (the first `train_fraction`) and a held-out test split;
the last `val_images` training images are the search's validation split (evolution fitness); the supernet and the
fine-tuning train on the rest.

`task="detect"` (`kilobyte search --task detect`, issue 28): the same phases for a detector — a space ending in YOLO
heads (`MBSpace.detector`), images with boxes split in file order (`core.split_detection`), the supernet phases'
loss and the fitness from `task.Detect` (YOLOv3's loss, validation mAP@0.5), fine-tuning by `train.fit_detector`,
deployment with the C post-processing (`deploy.deploy_detector`); docs/search.md.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from .. import train as training  # training.fit looked up when called: tests/nas/test_core.py spies on it
from ..atomic import save_torch
from ..errors import KilobyteError
from ..ops.detect_post import DetectConfig
from ..schedule.estimate import estimate_resources
from ..schedule.plan_types import PlanOptions
from ..targets.devices import get_device
from ..train import TrainConfig
from ..train.detect import fit_detector
from . import supernet_train as st
from .budget import finetune_epochs, phase_times, plan_budget, space_samples, time_cap
from .core import arch_json, load_split, split_data  # noqa: F401  (split_data: reached through this module)
from .deploy import deploy_detector, deploy_module, patch_report
from .evolution import EvolutionConfig, NothingFitsError, evolve, random_search
from .report import Panel, pareto_png
from .report import write_report as write_report_json
from .resources import Budget, ResourceEvaluator, device_budget
from .space import Arch, MBSpace
from .space_opt import GROW_WIDTHS, optimize_space, require_fit, write_report
from .store import SearchStore
from .supernet import SuperNet
from .supernet_train import ScorerSpec, SupernetTraining, load_weights, open_fitness
from .task import CLASSIFY, task_for

PATCH_STAGE_WIDTHS = (0.5, 0.75, 1.0)  # MCUNetV2's width choices (per stage here: space.py says why)
DETECT_FINETUNE_LR = 1e-3  # AdamW's peak rate fine-tuning a detector from inherited weights (fit_detector: 3e-3 from
# scratch)
LATENCY_CORE = "cortex-m7"  # the core the shipped latency model is fitted on
PATCH_RD_STAGES = 2  # the stages a patch stage can cover (at 1/4 and 1/8 of the input) may redistribute


class SearchError(KilobyteError):
    """A search that cannot run as asked (bad data, settings)."""


@dataclass(frozen=True)
class SearchConfig:
    """Everything that determines a search's result (stored, and compared on `--resume`)."""

    device: str
    sram_bytes: int
    flash_bytes: int
    max_macs: int | None = None
    data: str = "mnist"
    seed: int = 0
    widths: tuple[float, ...] = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
    resolutions: tuple[int, ...] | None = None  # None: around the data's own resolution (see `data_resolutions`)
    space_samples: int = 300  # per configuration: with the schedules, a small-image grid has ~170 of them
    train_fraction: float = 0.8  # of the labelled images; the rest is the held-out test split
    val_images: int = 500
    train_images: int | None = None  # cap on supernet/fine-tune training images (None: all)
    training: SupernetTraining = field(default_factory=SupernetTraining)
    evolution: EvolutionConfig = field(default_factory=lambda: EvolutionConfig(population=40, parents=10,
                                                                               generations=6))
    finetune_epochs: int = 40  # the training recipe's epochs (early stopping may end it sooner)
    finetune_lr: float = 0.1  # the recipe's peak rate, from inherited weights
    random_baseline: bool = False
    kernels: str = "portable"
    patch: bool = False  # MCUNetV2's joint search: patch schedules, per-stage widths, RD, wider resolutions
    compact: bool = False  # the compact MBConv space (`MBSpace.compact`: depths {1,2,3}, expands {2,3,4})
    max_instructions: int | None = None  # emulated Cortex-M7 instructions per inference (the fitted latency model)
    model_sram: bool = False  # sram_bytes bounds the model's arena + input only (--max-sram), not the firmware's stack
    minutes: float | None = None  # a time budget: the settings named in `planned` are sized to it (nas/budget.py)
    planned: tuple[str, ...] = ()  # of PLANNED: left to the budget; the others are as given
    task: str = "classify"  # or "detect": a YOLO detector of images with boxes, mAP@0.5 its fitness (issue 28)

    def __post_init__(self):
        if self.task not in TASKS:
            raise SearchError(f"search: task {self.task!r} must be one of {', '.join(TASKS)}")

    def settings(self) -> dict:
        """The stored settings; `task` only for a detector, so that stores of earlier searches still resume."""
        data = json.loads(json.dumps(asdict(self)))
        if data["task"] == "classify":
            del data["task"]
        return data


TASKS = ("classify", "detect")
PHASES = ("space", "largest", "supernet", "evolution", "finetune")  # the stored phases, in order
PLANNED = ("space_samples", "largest_epochs", "supernet_epochs", "population", "generations", "finetune_epochs")


def data_resolutions(native: int, wide: bool = False) -> tuple[int, ...]:
    """Input resolutions searched for images of side `native`: from about half to 1.5x, in steps of 4 pixels; `wide`
    (the joint search, whose patch stage lets larger inputs fit): up to 4x, in steps of 8 pixels (MCUNetV2 widens
    ImageNet's range to 96-256)."""
    lo = max(8, int(math.ceil(native * 0.5 / 4) * 4))
    if wide:
        hi = max(lo, int(native * 4 // 8 * 8))
        return tuple(range(lo, hi + 1, 8))
    hi = max(lo, int(native * 1.5 // 4 * 4))
    return tuple(range(lo, hi + 1, 4))


@dataclass
class SearchContext:
    config: SearchConfig
    out_dir: Path
    store: SearchStore
    workers: int = 1
    ray_address: str | None = None
    progress: bool = False
    log: object = print
    device: object = None  # targets.devices.Device: the firmware fit is measured for it
    started: float = field(default_factory=time.perf_counter)
    spent_before: float = 0.0  # seconds the stored phases took in earlier runs of a resumed search
    task: object = CLASSIFY  # task.Classify, or task.Detect once the resolution (and so the anchors) is chosen

    def elapsed(self) -> float:
        """Seconds of the search so far, earlier runs of a resumed search included (their finished phases)."""
        return self.spent_before + time.perf_counter() - self.started

    def finish(self, phase: str, result: dict, since: float) -> None:
        """Commit `phase`'s result with the seconds it took since `since` (a `time.perf_counter()`)."""
        self.store.finish_phase(phase, {**result, "seconds": time.perf_counter() - since})


def search_space(config: SearchConfig, in_channels: int, num_classes: int, native: int,
                 input_size: tuple[int, int] | None = None) -> MBSpace:
    """The search's MBConv space for data of side `native`. Per layer, a candidate's graph starts with the resize
    from the data's `input_size` (H, W) that its library will run (`deploy_module`), so the evaluator counts its
    input and resized tensor; a patch stage cannot contain a resize, so the joint search's inputs stay resized
    outside the library. A detector (`task="detect"`): the same spaces ending in YOLO heads (`DETECT_HEADS`), its
    input resized outside the library in both (its boxes are in the input's pixels), on `detect_resolutions`, and
    with the joint search's genome (per-stage widths, RD) in both: one space, the patch schedule the only difference
    (issue 28 compares the two searches "of the same space"; the per-stage width genes lower a configuration's mean
    MACs, which with two genomes tilted the space choice between the modes)."""
    if config.task == "detect":
        resolutions = tuple(config.resolutions or detect_resolutions(native))
        space = MBSpace(num_classes=num_classes, in_channels=in_channels, widths=tuple(config.widths),
                        resolutions=resolutions, stage_width_choices=PATCH_STAGE_WIDTHS,
                        rd_stages=PATCH_RD_STAGES).detector(DETECT_HEADS)
        return space.compact() if config.compact else space
    resolutions = tuple(config.resolutions or data_resolutions(native, wide=config.patch))
    if config.patch:  # MCUNetV2's genome: per-stage widths and receptive-field redistribution (space.py)
        space = MBSpace(num_classes=num_classes, in_channels=in_channels, widths=tuple(config.widths),
                        resolutions=resolutions, stage_width_choices=PATCH_STAGE_WIDTHS, rd_stages=PATCH_RD_STAGES)
    else:
        space = MBSpace(num_classes=num_classes, in_channels=in_channels, widths=tuple(config.widths),
                        resolutions=resolutions, input_size=input_size,
                        schedules="adaptive" if native <= ADAPTIVE_MAX_SIDE else "fixed")
    return space.compact() if config.compact else space


DETECT_HEADS = ((1, 3), (3, 3))  # YOLO heads at strides 8 and 16 (the ends of stages 1 and 3), 3 anchors each
DETECT_BATCH_SIZE = 32  # a detector's supernet batch (`kilobyte search --task detect`): twice the steps of 64 per
# epoch; 64 left the largest network at 4.8 % validation mAP after 6 epochs on the 1,200 training scenes (AdamW)


def detect_resolutions(native: int) -> tuple[int, ...]:
    """A detector's input resolutions for images of side `native`: half to twice it, in steps of 16 pixels — the
    same grid with and without `--patch`, so that the joint search and the per-layer one search one space."""
    lo = max(32, int(math.ceil(native * 0.5 / 16) * 16))
    return tuple(range(lo, max(lo, 2 * native) + 1, 16))


ADAPTIVE_MAX_SIDE = 96  # images up to this side search the downsampling schedule too; larger keep ImageNet's
GROW_RESOLUTION = 2  # the grid may grow up to this multiple of the data's side (and to the largest GROW_WIDTHS)


def grow_limit(config: SearchConfig, native: int) -> tuple[float, int] | None:
    """How far space optimisation may grow the grid (`space_opt.optimize_space`): None for the joint search, whose
    grid already reaches 4x the data's side and whose candidates cost 10x more to plan, and for a detector, whose
    per-layer and joint searches search one grid (the first per-layer benchmark run grew to w0.6 where the joint
    search stops at w0.5)."""
    return None if config.patch or config.task == "detect" else (max(GROW_WIDTHS), GROW_RESOLUTION * native)


def search_budget(config: SearchConfig) -> Budget:
    """The device's budget (arena + input and outputs + the firmware's stack within its SRAM), or with `model_sram`
    the model's own (arena + input and outputs within `sram_bytes`: a `--max-sram` budget); a detector's
    post-processing arrays count in both (`DetectConfig.buffer_bytes`, at the limits `deploy_detector` compiles
    with)."""
    budget = replace(device_budget(config.sram_bytes, config.flash_bytes, config.max_macs),
                     max_instructions=config.max_instructions)
    reserve = (0 if config.model_sram else budget.sram_reserve) + \
        (DetectConfig((), 1).buffer_bytes if config.task == "detect" else 0)
    return replace(budget, sram_reserve=reserve)


def evaluator(config: SearchConfig, space: MBSpace, core: str | None) -> ResourceEvaluator:
    """The search's resource evaluator: the plan options of `plan_options`, Flash for `core`, instructions by the
    Cortex-M7 latency model (`schedule.latency`; fitted on Cortex-M7 counts, the unit `--max-latency` is in)."""
    return ResourceEvaluator(space, plan_options(config), core=core, latency_core=LATENCY_CORE)


# -- 1. space ----------------------------------------------------------------------------------------------------------
def choose_space(ctx: SearchContext, space: MBSpace, native: int, fit) -> MBSpace:
    """The sub-space of the chosen (width, resolution, downsampling schedule); stored, so `--resume` skips it."""
    done = ctx.store.phase_result("space")
    if done is None:
        since = time.perf_counter()
        cap = time_cap(ctx.config, space, fit)
        schedules = "" if space.schedules == "fixed" else " x their downsampling schedules"
        ctx.log(f"[1/5] search-space optimisation: {len(space.widths)} widths x {len(space.resolutions)} "
                f"resolutions{schedules}, {ctx.config.space_samples} samples each ...")
        choice = optimize_space(space, search_budget(ctx.config), samples=ctx.config.space_samples,
                                seed=ctx.config.seed, options=plan_options(ctx.config), workers=ctx.workers,
                                progress=ctx.progress, core=_core(ctx), grow_to=grow_limit(ctx.config, native),
                                max_largest_macs=cap)
        best = require_fit(choice)
        write_report(choice, ctx.out_dir)
        done = {"width": best.width, "resolution": best.resolution, "strides": list(best.strides),
                "final_map": best.final_map, "label": best.label(), "mean_macs": best.mean_macs,
                "fitting": best.fitting, "sampled": best.sampled, "configs": len(choice.configs),
                "edge": list(choice.edge), "largest_macs": best.largest_macs, "max_largest_macs": cap,
                "too_slow": choice.too_slow, "compact": space.is_compact,
                "tie_break": None if choice.tie_break is None else choice.tie_break.label()}
        ctx.finish("space", done, since)
        edge = f"; on the grid's edge ({', '.join(choice.edge)}): the budget did not bind" if choice.edge else ""
        if choice.too_slow:
            edge += (f"; {choice.too_slow} configurations with more MACs would not train in {ctx.config.minutes:g} "
                     f"min (largest network above {cap / 1e6:.1f} M MACs)")
        if choice.tie_break is not None:
            t = choice.tie_break
            edge += (f"; {t.label()} ({t.mean_macs / 1e6:.2f} M MACs) is tied with it within sampling error and "
                     f"runs below the data's {native} px")
        compact = " of the compact space" if space.is_compact else ""
        ctx.log(f"      chose {best.label()}{compact} (last stage {best.final_map}x{best.final_map}) of "
                f"{len(choice.configs)} configurations{edge}")
    return space.with_config(done["width"], done["resolution"], done.get("strides"))  # stores before 26: no strides


def _core(ctx: SearchContext) -> str | None:
    """The device's core, which the Flash estimate is for (None when the device is unknown: the largest core)."""
    try:
        return (ctx.device or get_device(ctx.config.device)).core
    except KilobyteError:
        return None


def plan_options(config: SearchConfig):
    """The options candidates are evaluated with: per layer, or with `--patch` "auto" without a MAC limit (the
    evaluator picks each candidate's fewest-MAC patch schedule that fits; `ResourceEvaluator`)."""
    if config.patch:
        return PlanOptions(kernels=config.kernels, patch="auto", max_mac_overhead=None)
    return PlanOptions(kernels=config.kernels)


def compile_options(config: SearchConfig, resources: ResourceEvaluator, arch: Arch):
    """The plan options the winner is compiled with: its patch schedule for the budget (or per layer)."""
    return replace(plan_options(config), patch=resources.schedule(arch, search_budget(config)))


# -- 2. supernet -------------------------------------------------------------------------------------------------------
def train_supernet(ctx: SearchContext, net, x, y, calib_x, val_x, val_y) -> dict:
    """The two training phases, each scored on the validation split: the largest network after its warm-up, then
    the supernet's largest, smallest and random subnets (`supernet_train.supernet_check`, which says whether the
    supernet learned). Returns the check, stored with the phase so that a resumed search reports it too."""
    ckpt = ctx.out_dir / "supernet.pt"
    done = ctx.store.phase_result("supernet")
    if done is not None:
        st.load_weights(net, ckpt)
        return done.get("check")
    cfg = ctx.config.training
    scorer = st.SubnetScorer(net, calib_x, val_x, val_y, task=ctx.task)
    if ctx.store.phase_result("largest") is None:
        ctx.log(f"[2/5] training the largest network ({cfg.largest_epochs} epochs) ...")
        since = time.perf_counter()
        history = st.train_phase(net, "largest", x, y, cfg, ctx.config.seed, ckpt, ctx.progress, task=ctx.task)
        warmup = st.score_without_side_effects(net, scorer, [net.largest_arch])[0]
        ctx.finish("largest", {"history": history, "accuracy": warmup}, since)
        ctx.log(f"      the largest network: validation {metric(ctx.config)} {warmup * 100:.1f} %")
    warmup = ctx.store.phase_result("largest").get("accuracy")  # None: a store of a search before issue 26
    if cfg.supernet_epochs and ckpt.exists():
        st.load_weights(net, ckpt)  # resumed runs start from the stored weights, not from initialisation
    ctx.log(f"      training the supernet ({cfg.supernet_epochs} epochs, {cfg.subnets_per_batch} subnets per batch"
            f"{' + largest + smallest' if cfg.sandwich else ''}) ...")
    since = time.perf_counter()
    history = st.train_phase(net, "supernet", x, y, cfg, ctx.config.seed, ckpt, ctx.progress, task=ctx.task)
    check = st.supernet_check(net, scorer, ctx.config.seed, warmup, ctx.task.chance(val_y))
    ctx.finish("supernet", {"history": history, "check": check}, since)
    return check


# -- 3. evolution ------------------------------------------------------------------------------------------------------
def run_evolution(ctx: SearchContext, net, space: MBSpace, calib_x, val_x, val_y):
    cfg = ctx.config
    resources = evaluator(cfg, space, _core(ctx))
    budget = search_budget(cfg)
    spec = ScorerSpec.of(net, calib_x, val_x, val_y, ctx.task)
    total = cfg.evolution.population * (cfg.evolution.generations + 1)
    ctx.log(f"[3/5] evolution: population {cfg.evolution.population}, {cfg.evolution.generations} generations "
            f"({'Ray ' + ctx.ray_address if ctx.ray_address else f'{ctx.workers} worker(s)'}) ...")
    bar = tqdm(total=total, desc="evolution", unit="subnet", disable=not ctx.progress, leave=False)
    since = time.perf_counter()
    try:
        with open_fitness(spec, ctx.workers, ctx.ray_address) as fitness:
            evo = evolve(space, resources, budget, fitness, cfg.evolution, store=ctx.store,
                         on_result=lambda s: bar.update(1))
            rnd = None
            if cfg.random_baseline:
                rnd = random_search(space, resources, budget, fitness, evo.evaluations, seed=cfg.seed,
                                    store=ctx.store)
    except NothingFitsError:
        raise SearchError(f"no subnet of the chosen space w{space.widths[0]:g} r{space.resolutions[0]} fits "
                          f"{budget.sram_bytes:,} B SRAM / {budget.flash_bytes:,} B Flash") from None
    finally:
        bar.close()
    ctx.finish("evolution", {"best": arch_json(evo.best.arch), "accuracy": evo.best.accuracy,
                             "evaluations": evo.evaluations, "curve": evo.best_so_far(),
                             "random": None if rnd is None else {"best": arch_json(rnd.best.arch),
                                                                 "accuracy": rnd.best.accuracy,
                                                                 "curve": rnd.best_so_far()}}, since)
    return evo, rnd


# -- 4. fine-tune ------------------------------------------------------------------------------------------------------
def finetune_config(config: SearchConfig, resolution: int):
    """The training recipe (`kilobyte.train`) the winner is fine-tuned with, from its inherited weights, without early
    stopping: its epochs are sized to what is left of the budget, and a one-cycle run gains in its last, low-rate
    epochs — stopping at the peak rate (5 epochs below the inherited weights) cost two seeds of `bench_vs_hand` 1.5
    to 2 points (MNIST seed 1: stopped after 75 of 398 planned seconds at 97.0 %). The best epoch is still kept."""
    return TrainConfig(epochs=config.finetune_epochs, lr=config.finetune_lr, seed=config.seed, resolution=resolution,
                       keep_initial=True, patience=None)


def finetune(ctx: SearchContext, net, arch: Arch, fit, val):
    """The winner extracted with its inherited weights, trained by the recipe (augmentation, one-cycle rate, label
    smoothing, BN recalibration, the best epoch on the validation split kept; a detector: `train.fit_detector`,
    AdamW, boxes moved with the augmentation, the epoch of best validation mAP kept). The inherited weights are
    validated first and kept unless an epoch matches them (`keep_initial`): fine-tuning never ends below what
    evolution scored. Deterministic, so a search killed during fine-tuning re-runs it to the same weights; the result
    is saved atomically to DIR/finetune.pt."""
    module = net.extract(arch)
    ckpt = ctx.out_dir / "finetune.pt"
    if ctx.store.phase_result("finetune") is not None:
        load_weights(module, ckpt)
        return module.eval()
    cfg = finetune_config(ctx.config, arch.resolution)
    if ctx.task.kind == "detect":  # fit_detector's steps are the supernet's (DETECT_BATCH_SIZE from the CLI)
        cfg = replace(cfg, batch_size=ctx.config.training.batch_size)
    if "finetune_epochs" in ctx.config.planned:
        cfg = replace(cfg, epochs=finetune_epochs(ctx, module, fit, arch.resolution, cfg.batch_size))
    recipe = "fit_detector" if ctx.task.kind == "detect" else "the training recipe"
    ctx.log(f"[4/5] fine-tuning the winner ({cfg.epochs} epochs, {recipe}) ...")
    since = time.perf_counter()
    if ctx.task.kind == "detect":
        module.anchors = ctx.task.anchors
        result = fit_detector(module, ctx.task.resized(fit, arch.resolution), ctx.task.resized(val, arch.resolution),
                              epochs=cfg.epochs, lr=DETECT_FINETUNE_LR, batch_size=cfg.batch_size, seed=cfg.seed,
                              keep_initial=True, progress=ctx.progress)
    else:
        result = training.fit(module, fit.x, fit.y, cfg, val=(val.x, val.y), progress=ctx.progress).to_dict()
    save_torch({"phase": "finetune", "model": module.state_dict()}, ckpt)
    ctx.finish("finetune", result, since)
    return module.eval()


# -- 5. deploy ---------------------------------------------------------------------------------------------------------
def deploy(ctx: SearchContext, module, space: MBSpace, arch: Arch, fit, test) -> dict:
    ctx.log("[5/5] int8, plan, C library, verification against TFLite Micro ...")
    device = ctx.device or get_device(ctx.config.device)
    resources = evaluator(ctx.config, space, device.core)
    options = compile_options(ctx.config, resources, arch)
    if ctx.task.kind == "detect":
        result = deploy_detector(module, ctx.task, arch.resolution, fit, test, ctx.out_dir / "model", options,
                                 device, data=ctx.config.data, progress=ctx.progress, max_flash=ctx.config.flash_bytes)
    else:
        result = deploy_module(module, arch.resolution, fit, test, ctx.out_dir / "model", options, device,
                               progress=ctx.progress, resize_inside=space.input_size is not None,
                               max_flash=ctx.config.flash_bytes)
    budget = search_budget(ctx.config)
    planned = resources.fitting(arch, budget) or resources.evaluate(arch)
    result["planned"] = {"peak_bytes": planned.peak_bytes, "arena_bytes": planned.arena_bytes,
                         "flash_bytes": planned.flash_bytes, "input_bytes": planned.input_bytes}
    if ctx.config.max_instructions is not None:
        result["planned"]["instructions"] = resources.instructions(arch, budget)
    result["patch"] = None
    if ctx.config.patch:
        per_layer = estimate_resources(resources.graph(arch), replace(options, patch=None), core=device.core)
        result["planned"]["per_layer_peak_bytes"] = per_layer.peak_bytes
        result["planned"]["per_layer_macs"] = per_layer.macs
        result["patch"] = patch_report(ctx.out_dir / "model", per_layer.macs)
    return result


# -- the whole search --------------------------------------------------------------------------------------------------
def run_search(config: SearchConfig, out_dir, *, resume: bool = False, workers: int = 1,
               ray_address: str | None = None, progress: bool = False, log=print, device=None) -> dict:
    """Run (or resume) a search into `out_dir`; returns the report (also written to `report.json`)."""
    import torch

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    store = SearchStore(out_dir / "search.sqlite", config.settings(), resume=resume)
    try:
        spent_before = sum((store.phase_result(p) or {}).get("seconds", 0.0) for p in PHASES)
        if "space_samples" in config.planned:
            config = replace(config, space_samples=space_samples(config.minutes))
        ctx = SearchContext(config, out_dir, store, workers, ray_address, progress, log, device,
                            spent_before=spent_before)
        fit, val, test = load_split(config)
        images = fit.images if config.task == "detect" else fit.x
        n_classes = len(fit.classes) if config.task == "detect" else \
            int(max(fit.y.max(), val.y.max(), test.y.max())) + 1
        space = choose_space(ctx, search_space(config, images.shape[-1], n_classes, images.shape[1],
                                               images.shape[1:3]), images.shape[1], fit)
        width, resolution = space.widths[0], space.resolutions[0]
        torch.manual_seed(config.seed)
        net = SuperNet(space, width, resolution)
        ctx.task = task_for(net.space, fit, resolution, config.seed)
        x, y = ctx.task.tensors(fit, resolution)
        calib_x = x[:20 * 64] if len(x) >= 20 * 64 else x
        val_x, val_y = ctx.task.tensors(val, resolution)
        if config.minutes is not None and config.planned:
            ctx.config = plan_budget(ctx, net, x, y, calib_x, val_x, val_y)
        check = train_supernet(ctx, net, x, y, calib_x, val_x, val_y)
        evo, rnd = run_evolution(ctx, net, net.space, calib_x, val_x, val_y)
        module = finetune(ctx, net, evo.best.arch, fit, val)
        since = time.perf_counter()
        deployed = deploy(ctx, module, net.space, evo.best.arch, fit, test)
        deploy_seconds = time.perf_counter() - since
        score = "search_map50" if config.task == "detect" else "search_accuracy"
        report = {"task": config.task, "metric": metric(config), **deployed, "evaluations": evo.evaluations,
                  "space": _space_summary(store.phase_result("space")),
                  "architecture": arch_json(evo.best.arch), "description": evo.best.arch.describe(),
                  score: evo.best.accuracy, "supernet": check,
                  "searched": None if check is None else check["searched"],
                  "not_searched_reason": None if check is None else check["reason"],
                  "random_search": None if rnd is None else {"accuracy": rnd.best.accuracy,
                                                             "evaluations": rnd.evaluations},
                  "detect": ctx.task.to_json() if config.task == "detect" else None,
                  "device": config.device, "budget": {"sram_bytes": config.sram_bytes,
                                                      "flash_bytes": config.flash_bytes},
                  "minutes": config.minutes, "phase_times": phase_times(store, deploy_seconds),
                  "seconds": ctx.elapsed(), "out_dir": str(out_dir)}
        _write_pareto(store, config, out_dir)
        write_report_json(out_dir, report)
        return report
    finally:
        store.close()


def metric(config: SearchConfig) -> str:
    """The name of the fitness and of the reported scores."""
    return "mAP@0.5" if config.task == "detect" else "accuracy"


def _space_summary(chosen: dict) -> dict:
    """The report's `space`: the chosen configuration, its downsampling, whether it sat on the grid's edge, whether
    the space was the compact one and the tied configuration below the data's resolution it was preferred to."""
    keys = ("width", "resolution", "strides", "final_map", "label", "mean_macs", "configs", "edge", "compact",
            "tie_break")
    return {k: chosen.get(k) for k in keys}


def _write_pareto(store: SearchStore, config: SearchConfig, out_dir: Path) -> None:
    """`pareto.png`: validation accuracy vs peak SRAM and vs Flash of every evaluated candidate."""
    evals = store.evaluations()
    panels = [Panel(label, {phase: [(e.resources[key] / 1024, e.accuracy * 100) for e in evals if e.phase == phase]
                            for phase in ("evolution", "random")}, limit / 1024)
              for key, limit, label in (("peak_bytes", config.sram_bytes, "peak SRAM (KB)"),
                                        ("flash_bytes", config.flash_bytes, "Flash (KB)"))]
    pareto_png(out_dir / "pareto.png", panels, f"validation {metric(config)} (%)")
