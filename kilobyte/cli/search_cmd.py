"""CLI stage: `kilobyte search` — find the most accurate network that fits a device, and compile it (TinyNAS), or
the Pareto front of tiny networks over error, SRAM, model size and MACs (`--strategy unas`, μNAS).

Arguments become a `nas.search.SearchConfig` or a `nas.unas_search.UnasConfig` (what decides the result, stored with
the search) plus how to run it (workers, Ray, progress); `nas.search.run_search` / `nas.unas_search.run_unas` do the
work, and `--export N` writes a member of a finished μNAS front as a `.tflite`. `--minutes` is a budget: TinyNAS
measures its step costs and sizes the settings not given on the command line to it when it runs (`nas/budget.py`),
storing the plan so that `--resume` replays it; μNAS evolves until its share of the time and sizes the finalists' and
the final training's epochs to what is left (`nas/unas_budget.py`).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

from ..atomic import write_json
from ..driver import verification_line
from ..errors import KilobyteError
from ..report.detections import plot_detections
from ..targets.cortexm.firmware import DEFAULT_STACK_BYTES
from ..train.detect_library import SAMPLES, evaluate_detector
from ..units import kb
from .common import KERNEL_SETS, add_command, add_device_arg, add_json_arg, get_device, print_json

PRESET_MINUTES = 15
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|kib|k|mb|mib|m)?\s*$", re.I)


def parse_size(text: str) -> int:
    """'32KB', '128 kB', '1MB', '4096' -> bytes (KB = 1024 B)."""
    m = SIZE.match(text)
    if not m:
        raise KilobyteError(f"size '{text}': expected a number of bytes or e.g. 32KB, 1MB")
    unit = (m.group(2) or "b").lower()[0]
    return int(float(m.group(1)) * {"b": 1, "k": 1024, "m": 1024 * 1024}[unit])


def register(sub) -> None:
    """find the most accurate network that fits a device (TinyNAS; or μNAS: --strategy unas)

    The best network for your data that fits your device, as a verified C library. By default (--strategy auto) a quick
    fit check picks the strategy: TinyNAS where MCUNet's MBConv space fits the budget, else TinyNAS on the compact
    MBConv space (stage depths 1-3, expand ratios 2-4) where that fits, else μNAS. TinyNAS: choose the (width,
    resolution, downsampling schedule) search space whose fitting networks have the most MACs and can train in
    --minutes, train a weight-sharing supernet, evolve subnets under the device's SRAM and Flash (measured by the same
    planner that compiles the winner), fine-tune the winner, quantise it to int8, generate and verify the C library
    against TensorFlow Lite Micro, and report accuracy on a held-out test split; --minutes is a budget it keeps (epochs,
    population and generations sized to it from measured step costs). --patch searches the network and its patch-based
    schedule together (MCUNetV2): larger inputs fit the same SRAM. --strategy unas runs μNAS instead: aging evolution
    with random scalarisation over a granular space of small CNNs, every candidate trained (pruned during training by
    default), quantised and planned, and reports the Pareto front over int8 error, peak SRAM, model size and MACs; the
    most accurate member inside the --bounds is compiled and verified, and any member can be exported (--export N).
    Every evaluation is committed to DIR/search.sqlite: a killed search continues with --resume. Exit status: 0 when
    the library is bit-exact and fits the budget (the device's Flash, or --max-flash when lower, measured on the
    linked firmware when the Arm toolchain is present), 2 when it does not fit, 1 when it is not bit-exact.
    """
    p = add_command(sub, "search", register)
    p.add_argument("--strategy", choices=("auto", "tinynas", "unas"), default="auto",
                   help="auto (default): TinyNAS when MCUNet's MBConv space fits the budget, else TinyNAS on the "
                   "compact space (--compact) when that fits, else μNAS with bounds from the device (a quick fit "
                   "check; the report says which ran and why); tinynas: a supernet searched for the device; unas: "
                   "μNAS's Pareto search")
    add_device_arg(p, default="stm32f410", why="the search's SRAM and Flash bounds are the device's")
    p.add_argument("--task", choices=("classify", "detect"), default="classify",
                   help="classify (default): a classifier, top-1 accuracy its fitness; detect: an object detector — "
                   "the MBConv backbone with YOLO heads at strides 8 and 16, validation mAP@0.5 its fitness, its box "
                   "decoding, score threshold and NMS in the C library (kb_detect); TinyNAS only, with or without "
                   "--patch; writes DIR/detections.png (held-out scenes with their boxes)")
    p.add_argument("--data", default=None,
                   help="labelled images: mnist, digits, letters (26 classes, 32x32), a .npz (x, y) or a folder of "
                   "class sub-folders (default mnist); with --task detect: digit-scenes (default; 128 px), "
                   "small-digit-scenes (224 px, beyond a per-layer plan on 256 KB) or a folder of images with "
                   "boxes.csv (docs/integration.md)")
    p.add_argument("--out", "-o", default="kilobyte-search", metavar="DIR", help="output directory")
    p.add_argument("--max-sram", type=parse_size, default=None, metavar="SIZE",
                   help="an SRAM budget for the model itself: its planned arena plus its input buffer, e.g. 16KB "
                   "(without it: the device's SRAM less the firmware's 4 KB stack)")
    p.add_argument("--max-flash", type=parse_size, default=None, metavar="SIZE",
                   help="tighten the device's Flash budget (weights + kernel code), e.g. 64KB")
    p.add_argument("--max-macs", type=float, default=None, metavar="M", help="at most M million MACs per inference")
    p.add_argument("--max-latency", type=float, default=None, metavar="M",
                   help="at most M million Cortex-M7 instructions per inference, by the latency model fitted on "
                   "emulated counts (docs/benchmarks.md; a proxy for time); with --patch the schedule is then "
                   "chosen by instructions instead of MACs")
    p.add_argument("--minutes", type=float, default=PRESET_MINUTES,
                   help="the time the search may take on this machine (default %(default)s): it measures what a "
                   "training step and a subnet evaluation cost for the chosen space and data, then sizes epochs, "
                   "population and generations to it (μNAS: evolves until its share of the time, then sizes the "
                   "finalists' and final training's epochs to what is left); the report shows planned vs spent "
                   "per phase")
    p.add_argument("--resume", nargs="?", const=True, default=False, metavar="DIR",
                   help="continue the search stored in DIR (default: --out; same arguments)")
    p.add_argument("--workers", type=int, default=None,
                   help="local processes evaluating subnets (default: the CPU count)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="evaluate subnets on a Ray cluster (e.g. auto, or HOST:6379) instead of local processes")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--kernels", choices=KERNEL_SETS, default="portable",
                   help="kernel set the plans are for (default portable)")
    p.add_argument("--patch", action="store_true",
                   help="MCUNetV2's joint search: every candidate runs with the patch schedule (first n layers "
                   "patch by patch on a p x p grid) with the fewest MACs that fits the SRAM, or per layer; the space "
                   "gains per-stage width multipliers 0.5/0.75/1, receptive-field redistribution in the first two "
                   "stages and inputs up to 4x the data's size")
    p.add_argument("--compact", action="store_true",
                   help="TinyNAS on the compact MBConv space: stage depths 1-3 and expand ratios 2-4 instead of "
                   "MCUNet's 2-4 and 3-6, for small budgets (--strategy auto picks it where MCUNet's choices do not "
                   "fit, e.g. 16 KB SRAM / 64 KB Flash)")
    adv = p.add_argument_group("search budget (defaults: sized to --minutes; a value given here is kept)")
    adv.add_argument("--population", type=int, default=None, help="evolution population")
    adv.add_argument("--generations", type=int, default=None, help="evolution generations")
    adv.add_argument("--epochs", default=None, metavar="L,S,F",
                     help="epochs for the largest network, the supernet and the fine-tuning, e.g. 8,8,10")
    adv.add_argument("--space-samples", type=int, default=None,
                     help="networks sampled per (width, resolution, downsampling schedule) in space optimisation "
                     "(default 300; 200 with --patch, whose candidates each try every patch schedule)")
    adv.add_argument("--train-images", type=int, default=None, help="use at most this many training images")
    adv.add_argument("--random-baseline", action="store_true",
                     help="also run random search with as many evaluations, and report it")
    un = p.add_argument_group("μNAS (--strategy unas)")
    un.add_argument("--evaluations", type=int, default=None,
                    help="candidates to train and measure (default: as many as fit the evolution's share of "
                    "--minutes); with --resume, more than the stored search's extends it")
    un.add_argument("--sample", type=int, default=None, help="aging evolution's sample size (default population/4)")
    un.add_argument("--bounds", default=None, metavar="K=V,...",
                    help="soft bounds of the objectives: error, peak (SRAM), size (int8 model bytes), macs; e.g. "
                    "error=0.035,peak=2.5KB,size=4.5K,macs=30M (default: μNAS's for mnist, ours for digits)")
    un.add_argument("--prune", choices=("structured", "unstructured", "none"), default="structured",
                    help="pruning during training, the sparsity a gene of each candidate (default structured)")
    un.add_argument("--sparsity", default=None, metavar="LO,HI",
                    help="range of the sparsity gene (default 0.05,0.8: μNAS's MNIST range)")
    un.add_argument("--finalists", type=int, default=5, metavar="K",
                    help="before choosing, train the K most accurate members inside the bounds again for "
                    "--finalist-epochs and choose by that validation score (default 5; 0: choose by the search's)")
    un.add_argument("--finalist-epochs", type=int, default=None, metavar="E",
                    help="epochs of that second evaluation (default: sized to its share of --minutes)")
    un.add_argument("--final-epochs", type=int, default=None, metavar="E",
                    help="train the member chosen for deployment once more, on the training and validation images, "
                    "for E epochs (default: sized to the time left of --minutes; 0: keep its search weights)")
    un.add_argument("--random", action="store_true", help="random search instead of evolution (the baseline)")
    un.add_argument("--export", type=int, default=None, metavar="N",
                    help="write member N of the finished search's Pareto front (--resume DIR) as the .tflite --out")
    add_json_arg(p)
    p.set_defaults(func=run)


PATCH_SPACE_SAMPLES = 200


def budget_bytes(args, device) -> tuple[int, int]:
    """(SRAM, Flash) bytes of the search's budget: the device's, tightened by --max-sram / --max-flash."""
    sram = min(device.sram_bytes, args.max_sram) if args.max_sram else device.sram_bytes
    flash = min(device.flash_bytes, args.max_flash) if args.max_flash else device.flash_bytes
    return sram, flash


def config_from_args(args, device):
    """The `SearchConfig` of the arguments: what is given is fixed; the rest of the budget settings (epochs,
    population, generations, space samples) is sized to --minutes when the search runs (`nas/budget.py`)."""
    from ..nas.search import DETECT_BATCH_SIZE, PLANNED, SearchConfig  # defers torch

    sram, flash = budget_bytes(args, device)
    if args.minutes <= 0:
        raise KilobyteError("--minutes must be positive")
    base = SearchConfig(device.name, sram, flash)
    given = set()
    training, evo, finetune = base.training, replace(base.evolution, seed=args.seed), base.finetune_epochs
    if args.epochs:
        try:
            epochs = tuple(int(v) for v in args.epochs.split(","))
            assert len(epochs) == 3 and min(epochs) >= 0 and epochs[0] >= 1 and epochs[2] >= 1
        except (ValueError, AssertionError):
            raise KilobyteError(f"--epochs '{args.epochs}': expected three numbers L,S,F (L, F at least 1), "
                                f"e.g. 8,8,10") from None
        training = replace(training, largest_epochs=epochs[0], supernet_epochs=epochs[1])
        finetune = epochs[2]
        given |= {"largest_epochs", "supernet_epochs", "finetune_epochs"}
    if args.generations is not None:
        evo, given = replace(evo, generations=args.generations), given | {"generations"}
    if args.population is not None:
        if args.population < 4:
            raise KilobyteError("--population must be at least 4")
        evo = replace(evo, population=args.population, parents=max(2, args.population // 4))
        given.add("population")
    if args.task == "detect":
        training = replace(training, batch_size=DETECT_BATCH_SIZE)
    if args.space_samples is not None:
        given.add("space_samples")
    if args.max_latency is not None and args.max_latency <= 0:
        raise KilobyteError("--max-latency must be positive (million instructions)")
    return replace(base, max_macs=None if args.max_macs is None else int(args.max_macs * 1e6), data=args.data,
                   task=args.task,
                   max_instructions=None if args.max_latency is None else int(args.max_latency * 1e6),
                   seed=args.seed, train_images=args.train_images,
                   space_samples=args.space_samples or (PATCH_SPACE_SAMPLES if args.patch else base.space_samples),
                   training=training, finetune_epochs=finetune, evolution=evo, random_baseline=args.random_baseline,
                   kernels=args.kernels, patch=args.patch, compact=args.compact, minutes=args.minutes,
                   model_sram=bool(args.max_sram),
                   planned=tuple(p for p in PLANNED if p not in given and not (args.patch and p == "space_samples")))


def run(args) -> int:
    from ..nas.search import run_search  # defers torch

    if args.export is not None:
        return _export(args)
    if isinstance(args.resume, str):
        args.out, args.resume = args.resume, True
    device = get_device(args)
    if device is None:
        raise KilobyteError("search needs a --device (see `kilobyte devices`)")
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    args.data = args.data or ("digit-scenes" if args.task == "detect" else "mnist")
    if args.task == "detect" and args.strategy == "unas":
        raise KilobyteError("--task detect is TinyNAS's (μNAS searches classifiers): leave out --strategy unas")
    if args.strategy == "unas":
        if args.patch or args.compact:
            raise KilobyteError(f"--{'patch' if args.patch else 'compact'} is for the TinyNAS strategy (μNAS searches "
                                f"its own space of small CNNs)")
        return _run_unas(args, device, workers)
    quiet = args.json
    log = (lambda *a: None) if quiet else print
    choice = _auto_strategy(args, device, workers, log)
    if choice is not None and choice.name == "unas":
        return _run_unas(args, device, workers, choice)
    config = config_from_args(args, device)
    if choice is not None and choice.compact:
        config = replace(config, compact=True)
    report = run_search(config, args.out, resume=args.resume, workers=workers, ray_address=args.ray,
                        progress=not quiet, log=log, device=device)
    if args.task == "detect":
        report["detections_png"] = _detections_png(report, args.out)
    _record_strategy(report, choice.to_json() if choice is not None else
                     {"name": "tinynas", "reason": "--strategy tinynas" + (" --patch" if args.patch else "")
                                                  + (" --compact" if args.compact else "")},
                     args.out)
    if args.json:
        print_json(report)
    else:
        _print_report(report)
    if not report["bit_exact"]:
        return 1
    return 0 if report["fits"] else 2


def _patch_rows(r: dict) -> list[tuple[str, str]]:
    """The joint search's rows: the patch schedule, the per-layer vs patch peak, the MAC overhead."""
    if "per_layer_peak_bytes" not in r.get("planned", {}):
        return []
    p = r.get("patch")
    per_layer = f"per-layer peak {kb(r['planned']['per_layer_peak_bytes'])}"
    if p is None:
        return [("patch schedule", f"none: runs per layer ({per_layer})")]
    return [("patch schedule", f"first {p['n_nodes']} layers on {p['grid']}x{p['grid']} patches, input patch "
             f"{p['input_patch']}x{p['input_patch']}, +{p['mac_overhead'] * 100:.1f} % MACs  ({per_layer} -> "
             f"{kb(r['planned']['peak_bytes'])})")]


def _supernet_rows(r: dict) -> list[tuple[str, str]]:
    """Each training phase's validation accuracy, and the one-line warning when the supernet did not learn."""
    c = r.get("supernet")
    if not c:
        return []
    pct = lambda a: "n/a" if a is None else f"{a * 100:.1f} %"  # noqa: E731
    rows = [("largest network (validation)", f"{pct(c['largest_warmup'])} after its warm-up"),
            ("supernet (validation)", f"largest {pct(c['largest'])}, smallest {pct(c['smallest'])}, "
                                      f"{len(c['random'])} random {', '.join(pct(a) for a in c['random'])} "
                                      f"(mean {pct(c['random_mean'])}; chance {pct(c['chance'])})")]
    if not c["searched"]:
        rows.append(("WARNING", c["reason"]))
    return rows


def _space_line(space: dict) -> str:
    """`w0.3, r28, stem stride 1, 3 downsamplings -> last stage 4x4 (best of 147 configurations)`."""
    line = f"w{space['width']:g}, r{space['resolution']}" + (" (compact space)" if space.get("compact") else "")
    if space.get("strides"):
        strides = space["strides"]
        n = sum(s == 2 for s in strides)
        line += (f", stem stride {strides[0]}, {n} downsampling{'s' if n != 1 else ''} -> last stage "
                 f"{space['final_map']}x{space['final_map']} (best of {space['configs']} configurations)")
    if space.get("edge"):
        line += f"; on the grid's edge ({', '.join(space['edge'])})"
    if space.get("tie_break"):
        line += f"; preferred to {space['tie_break']} (tied, below the data's resolution)"
    return line


def _time_line(r: dict) -> str:
    """`9.8 min of 15 planned: space 1.2/1.1, largest 1.5/1.6, ... (spent/planned minutes)`."""
    line = f"{r['seconds'] / 60:.1f} min"
    times = r.get("phase_times")
    if not r.get("minutes") or not times:
        return line
    parts = [f"{p} {t['spent'] / 60:.1f}/{t['planned'] / 60:.1f}" for p, t in times.items()
             if t["spent"] is not None and t["planned"] is not None]
    if not parts:  # every setting given: nothing was planned
        return line
    return f"{line} of {r['minutes']:g} planned  ({', '.join(parts)}: spent/planned min)"


def _score_row(r: dict) -> tuple[str, str]:
    """The held-out scores: a classifier's top-1 accuracy, a detector's mAP@0.5 (float, and int8 by the library)."""
    if r.get("task") == "detect":
        return ("mAP@0.5 (held-out test)",
                f"float {r['float_map50'] * 100:.1f} %  |  int8 {r['int8_map50'] * 100:.1f} % (by the C library)")
    return ("accuracy (held-out test)",
            f"float {r['float_accuracy'] * 100:.1f} %  |  int8 {r['int8_accuracy'] * 100:.1f} %")


def _detections_png(report: dict, out: str) -> str:
    """DIR/detections.png: the first held-out scenes with the library's boxes (host C build) and the true ones."""
    ev = evaluate_detector(report["model_dir"], split="test", limit=SAMPLES)
    return plot_detections(ev, os.path.join(out, "detections.png"))


def _print_report(r: dict) -> None:
    choice = r.get("strategy_choice")
    rows = [
        *([("strategy", f"{choice['name']}: {choice['reason']}")] if choice else []),
        ("space", _space_line(r["space"])),
        ("architecture", r["description"]),
        _score_row(r),
        ("verification", verification_line(r)),
        (f"SRAM ({r['memory']})", f"{kb(r['sram_bytes'])}  (planned peak {kb(r['planned']['peak_bytes'])})"),
        *_patch_rows(r),
        (f"Flash ({r['memory']})", kb(r["flash_bytes"])),
        ("MACs", f"{r['macs'] / 1e6:.2f} M"),
        *([("Cortex-M7 instructions (model)", f"{r['planned']['instructions'] / 1e6:.2f} M")]
          if "instructions" in r.get("planned", {}) else []),
        *_supernet_rows(r),
        ("evaluations", f"{r['evaluations']} subnets (search {r.get('metric', 'accuracy')} "
                        f"{r.get('search_map50', r.get('search_accuracy', 0.0)) * 100:.1f} %)"
                        f"{'' if r.get('searched', True) else ': the winner is NOT a searched result'}"),
    ]
    if r.get("random_search"):
        rows.append(("random search, same evaluations", f"{r['random_search']['accuracy'] * 100:.1f} %"))
    if r.get("detections_png"):
        rows.append(("held-out scenes with boxes", r["detections_png"]))
    rows += [("fit", r["verdict"]), ("time", _time_line(r)), ("C library", r["model_dir"]),
             ("report", os.path.join(r["out_dir"], "report.json"))]
    width = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


# -- μNAS ------------------------------------------------------------------------------------------------------------
BOUND_NAMES = {"error": "error", "peak": "peak_bytes", "size": "weight_bytes", "macs": "macs"}
SUFFIX = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)[bB]?\s*$")


def parse_bounds(text: str) -> dict:
    """'error=0.035,peak=2.5KB,size=4.5K,macs=30M' -> objective bounds (K = 1024 for peak, 1000 otherwise)."""
    out = {}
    for part in filter(None, (t.strip() for t in text.split(","))):
        name, sep, value = part.partition("=")
        key = BOUND_NAMES.get(name.strip().lower())
        m = SUFFIX.match(value)
        if not sep or key is None or not m:
            raise KilobyteError(f"--bounds '{part}': expected NAME=VALUE with NAME one of "
                                f"{', '.join(BOUND_NAMES)}, e.g. peak=2.5KB or macs=30M")
        base = 1024 if key == "peak_bytes" else 1000
        out[key] = float(m.group(1)) * {"": 1, "k": base, "m": base * base}[m.group(2).lower()]
    if not out:
        raise KilobyteError("--bounds: give at least one NAME=VALUE")
    return out


def unas_config_from_args(args, device):
    """The `UnasConfig` of the arguments: what is given is fixed; the evaluations (then the population and sample),
    the finalists' and the final training's epochs are sized to --minutes when the search runs
    (`nas/unas_budget.py`)."""
    from ..nas.unas_budget import PLANNED  # defers torch
    from ..nas.unas_search import DEFAULT_BOUNDS, UnasConfig  # defers torch

    if args.minutes <= 0:
        raise KilobyteError("--minutes must be positive")
    given = {name for name in PLANNED if getattr(args, name) is not None}
    if args.population is not None:
        given |= {"population"}
    if args.evaluations is not None:  # a count: the population follows from it, as before the budget
        given |= {"population", "sample"}
    base = UnasConfig()
    evaluations = args.evaluations or base.evaluations  # by the deadline: at most UnasConfig's count
    population = args.population or min(100, max(4, evaluations // 3))
    bounds = parse_bounds(args.bounds) if args.bounds else dict(DEFAULT_BOUNDS.get(args.data, DEFAULT_BOUNDS["mnist"]))
    sparsity = (0.05, 0.80)
    if args.sparsity:
        try:
            lo, hi = (float(v) for v in args.sparsity.split(","))
            sparsity = (lo, hi)
        except ValueError:
            raise KilobyteError(f"--sparsity '{args.sparsity}': expected LO,HI, e.g. 0.05,0.8") from None
    epochs = 8
    if args.epochs:
        try:
            epochs = int(args.epochs)
        except ValueError:
            raise KilobyteError(f"--epochs '{args.epochs}': μNAS trains each candidate for one number of epochs, "
                                f"e.g. 8") from None
    return UnasConfig(data=args.data, seed=args.seed, evaluations=evaluations, population=population,
                      sample=args.sample or max(2, population // 4), bounds=bounds,
                      strategy="random" if args.random else "aging", prune=args.prune, sparsity=sparsity,
                      epochs=epochs, train_images=args.train_images, in_flight=0, core=device.core,
                      finalists=args.finalists, kernels=args.kernels, minutes=args.minutes,
                      flash_bytes=budget_bytes(args, device)[1],
                      finalist_epochs=base.finalist_epochs if args.finalist_epochs is None else args.finalist_epochs,
                      final_epochs=base.final_epochs if args.final_epochs is None else args.final_epochs,
                      planned=tuple(p for p in PLANNED if p not in given))


def _record_strategy(report: dict, strategy: dict, out: str) -> None:
    """Which strategy ran and why, in the report and its report.json (rewritten atomically, as the search wrote it)."""
    report["strategy_choice"] = strategy
    path = os.path.join(out, "report.json")
    if os.path.exists(path):
        write_json(path, report)


def _auto_strategy(args, device, workers: int, log):
    """`--strategy auto`'s choice (`nas.strategy.choose_strategy`, on the budget and the data only: --epochs and the
    like are read by the strategy chosen), logged; None for an explicit strategy or --patch (the joint search is
    TinyNAS's)."""
    from ..nas.search import SearchConfig  # defers torch
    from ..nas.strategy import choose_strategy  # defers torch

    if args.strategy != "auto" or args.patch or args.compact or args.task == "detect":
        return None
    sram, flash = budget_bytes(args, device)
    macs = None if args.max_macs is None else int(args.max_macs * 1e6)
    config = SearchConfig(device.name, sram, flash, max_macs=macs, data=args.data, seed=args.seed,
                          kernels=args.kernels, model_sram=bool(args.max_sram))
    choice = choose_strategy(config, workers=workers, core=device.core)
    log(f"strategy: {choice.name} — {choice.reason}")
    return choice


def _run_unas(args, device, workers: int, choice=None) -> int:
    from ..nas.strategy import device_bounds  # defers torch
    from ..nas.unas_search import run_unas  # defers torch

    config = unas_config_from_args(args, device)
    if choice is not None and not args.bounds:  # chosen by auto: the device's resources are the bounds
        sram, flash = budget_bytes(args, device)
        if not args.max_sram:  # the device's SRAM holds the firmware's stack too

            sram -= DEFAULT_STACK_BYTES
        config = replace(config, bounds=device_bounds(sram, flash, args.kernels, device.core,
                                                      max_macs=None if args.max_macs is None else args.max_macs * 1e6,
                                                      input_bytes=choice.input_bytes))
    quiet = args.json
    report = run_unas(config, args.out, resume=args.resume, workers=workers, ray_address=args.ray,
                      progress=not quiet, log=(lambda *a: None) if quiet else print, device=device)
    _record_strategy(report, choice.to_json() if choice is not None else {"name": "unas", "reason": "--strategy unas"},
                     args.out)
    if args.json:
        print_json(report)
    else:
        _print_unas(report)
    deployed = report.get("deployed")
    if deployed is not None and not deployed["bit_exact"]:
        return 1
    return 0 if deployed is not None and deployed["fits"] else 2


def _print_unas(r: dict) -> None:
    if r.get("strategy_choice"):
        print(f"\n  strategy: {r['strategy_choice']['name']}: {r['strategy_choice']['reason']}")
    print(f"\n  Pareto front: {len(r['pareto'])} of {r['evaluations']} candidates ({r['trained']} trained), "
          f"held-out test accuracy with the search's weights")
    print(f"  {'#':>3} {'int8':>6} {'float':>6} {'SRAM':>8} {'+input':>8} {'size':>8} {'Flash':>8} {'MACs':>8} "
          f"{'sparse':>6}  architecture")
    for i, m in enumerate(r["pareto"]):
        mark = "*" if i == r["chosen"] else " "
        print(f"{mark} {i:>3} {m['int8_accuracy'] * 100:5.1f}% {m['float_accuracy'] * 100:5.1f}% "
              f"{m['peak_bytes']:>7,}B {m['peak_bytes'] + m['input_bytes']:>7,}B {m['weight_bytes']:>7,}B "
              f"{kb(m['flash_bytes']):>8} {m['macs'] / 1e3:>7,.0f}K {m['sparsity'] * 100:5.0f}%  {m['description']}")
    if r.get("finalists"):
        print("  second evaluation of the most accurate inside the bounds (validation int8, search -> longer "
              "training): " + ", ".join(f"#{i} {(1 - r['pareto'][i]['val_error']) * 100:.1f} -> "
                                         f"{(1 - r['pareto'][i]['finalist_val_error']) * 100:.1f} %"
                                         for i in r["finalists"]))
    print(f"\n  hypervolume (bound units) {r['hypervolume']:.4f}; candidates' training {r['seconds_train'] / 60:.1f} "
          f"min, resource evaluation {r['resource_share'] * 100:.2f} % of it")
    d = r.get("deployed")
    if d is None:
        print("  no member is inside every bound: nothing compiled (export one with --export N)")
    else:
        f = r["final"]
        print(f"  * chosen, trained again {f['epochs']} epochs: float {f['float_accuracy'] * 100:.1f} %, "
              f"int8 {f['int8_accuracy'] * 100:.1f} % (held-out)")
        print(f"  * compiled: int8 {d['int8_accuracy'] * 100:.1f} % (by the generated C); "
              f"{verification_line(d)}; {d['verdict']}; C library {d['model_dir']}")
    print(f"  time: {_time_line(r)}")
    print(f"  export a member: kilobyte search --resume {r['out_dir']} --export N --out model.tflite")


def _export(args) -> int:
    from ..nas.unas_search import export_member  # defers torch

    if not isinstance(args.resume, str):
        raise KilobyteError("--export N needs the finished search: --resume DIR --export N --out model.tflite")
    if not args.out.endswith(".tflite"):
        raise KilobyteError(f"--export: --out {args.out} must name the .tflite file to write")
    member = export_member(args.resume, args.export, args.out)
    if args.json:
        print_json(member)
    else:
        print(f"member {args.export}: int8 {member['int8_accuracy'] * 100:.1f} %, peak {member['peak_bytes']:,} B, "
              f"size {member['weight_bytes']:,} B, {member['macs']:,} MACs -> {member['tflite']}")
    return 0
