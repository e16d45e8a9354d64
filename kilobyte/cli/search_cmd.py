"""CLI stage: `kilobyte search` — find the most accurate network that fits a device, and compile it (TinyNAS).

Arguments become a `nas.search.SearchConfig` (what decides the result, stored with the search) plus how to run it
(workers, Ray, progress); `nas.search.run_search` does the work. `--minutes` scales the training epochs and the
evolution's generations from the 15-minute preset, before the run starts: the same arguments always give the same
search, so `--resume` can replay it.
"""

from __future__ import annotations

import os
import re

from ..errors import KilobyteError
from .common import add_device_arg, kb, print_json

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
    p = sub.add_parser(
        "search", help="find the most accurate network that fits a device (TinyNAS), train, int8, compile, verify",
        description="TinyNAS on your data and device: choose the (width, resolution) search space whose fitting "
        "networks have the most MACs, train a weight-sharing supernet, evolve subnets under the device's SRAM and "
        "Flash (measured by the same planner that compiles the winner), fine-tune the winner, quantise it to int8, "
        "generate and verify the C library against TensorFlow Lite Micro, and report accuracy on a held-out test "
        "split. Every evaluation is committed to DIR/search.sqlite: a killed search continues with --resume.")
    add_device_arg(p, default="stm32f410")
    p.add_argument("--data", default="mnist",
                   help="labelled images: mnist, digits, a .npz (x, y) or a folder of class sub-folders "
                   "(default mnist)")
    p.add_argument("--out", "-o", default="kilobyte-search", metavar="DIR", help="output directory")
    p.add_argument("--max-sram", type=parse_size, default=None, metavar="SIZE",
                   help="tighten the device's SRAM budget (peak of the planned arena), e.g. 16KB")
    p.add_argument("--max-flash", type=parse_size, default=None, metavar="SIZE",
                   help="tighten the device's Flash budget (weights + kernel code), e.g. 64KB")
    p.add_argument("--max-macs", type=float, default=None, metavar="M", help="at most M million MACs per inference")
    p.add_argument("--minutes", type=float, default=PRESET_MINUTES,
                   help=f"time to plan for on 2 cores: scales epochs and generations (default {PRESET_MINUTES})")
    p.add_argument("--resume", action="store_true", help="continue the search stored in DIR (same arguments)")
    p.add_argument("--workers", type=int, default=None,
                   help="local processes evaluating subnets (default: the CPU count)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="evaluate subnets on a Ray cluster (e.g. auto, or HOST:6379) instead of local processes")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--kernels", choices=("portable", "dsp"), default="portable",
                   help="kernel set the plans are for (default portable)")
    adv = p.add_argument_group("search budget (defaults: the --minutes preset)")
    adv.add_argument("--population", type=int, default=None, help="evolution population")
    adv.add_argument("--generations", type=int, default=None, help="evolution generations")
    adv.add_argument("--epochs", default=None, metavar="L,S,F",
                     help="epochs for the largest network, the supernet and the fine-tuning, e.g. 8,8,10")
    adv.add_argument("--space-samples", type=int, default=1000,
                     help="networks sampled per (width, resolution) in space optimisation (default 1000)")
    adv.add_argument("--train-images", type=int, default=None, help="use at most this many training images")
    adv.add_argument("--random-baseline", action="store_true",
                     help="also run random search with as many evaluations, and report it")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def config_from_args(args, device):
    """The `SearchConfig` of the arguments (the preset scaled by --minutes, then explicit overrides)."""
    from dataclasses import replace

    from ..nas.search import SearchConfig

    sram = min(device.sram_bytes, args.max_sram) if args.max_sram else device.sram_bytes
    flash = min(device.flash_bytes, args.max_flash) if args.max_flash else device.flash_bytes
    if args.minutes <= 0:
        raise KilobyteError("--minutes must be positive")
    base = SearchConfig(device.name, sram, flash)
    scale = args.minutes / PRESET_MINUTES
    t = base.training
    epochs = (max(1, round(t.largest_epochs * scale)), max(0, round(t.supernet_epochs * scale)),
              max(1, round(base.finetune_epochs * scale)))
    if args.epochs:
        try:
            epochs = tuple(int(v) for v in args.epochs.split(","))
            assert len(epochs) == 3 and min(epochs) >= 0
        except (ValueError, AssertionError):
            raise KilobyteError(f"--epochs '{args.epochs}': expected three numbers L,S,F, e.g. 8,8,10") from None
    evo = replace(base.evolution, generations=max(1, round(base.evolution.generations * scale)), seed=args.seed)
    if args.generations is not None:
        evo = replace(evo, generations=args.generations)
    if args.population is not None:
        if args.population < 4:
            raise KilobyteError("--population must be at least 4")
        evo = replace(evo, population=args.population, parents=max(2, args.population // 4))
    return replace(base, max_macs=None if args.max_macs is None else int(args.max_macs * 1e6), data=args.data,
                   seed=args.seed, space_samples=args.space_samples, train_images=args.train_images,
                   training=replace(t, largest_epochs=epochs[0], supernet_epochs=epochs[1]),
                   finetune_epochs=epochs[2], evolution=evo, random_baseline=args.random_baseline,
                   kernels=args.kernels)


def run(args) -> int:
    from ..nas.search import run_search
    from .common import get_device

    device = get_device(args)
    if device is None:
        raise KilobyteError("search needs a --device (see `kilobyte devices`)")
    config = config_from_args(args, device)
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    quiet = args.json
    report = run_search(config, args.out, resume=args.resume, workers=workers, ray_address=args.ray,
                        progress=not quiet, log=(lambda *a: None) if quiet else print, device=device)
    if args.json:
        print_json(report)
    else:
        _print_report(report)
    if not report["bit_exact"]:
        return 1
    return 0 if report["fits"] else 2


def _print_report(r: dict) -> None:
    rows = [
        ("space (width, resolution)", f"w{r['space']['width']:g}, r{r['space']['resolution']}"),
        ("architecture", r["description"]),
        ("accuracy (held-out test)",
         f"float {r['float_accuracy'] * 100:.1f} %  |  int8 {r['int8_accuracy'] * 100:.1f} %"),
        ("bit-exact C == reference == TFLM", "yes" if r["bit_exact"] else "NO"),
        (f"SRAM ({r['memory']})", f"{kb(r['sram_bytes'])}  (planned peak {kb(r['planned']['peak_bytes'])})"),
        (f"Flash ({r['memory']})", kb(r["flash_bytes"])),
        ("MACs", f"{r['macs'] / 1e6:.2f} M"),
        ("evaluations", f"{r['evaluations']} subnets (search accuracy {r['search_accuracy'] * 100:.1f} %)"),
    ]
    if r.get("random_search"):
        rows.append(("random search, same evaluations", f"{r['random_search']['accuracy'] * 100:.1f} %"))
    rows += [("fit", r["verdict"]), ("time", f"{r['seconds'] / 60:.1f} min"), ("C library", r["model_dir"]),
             ("report", os.path.join(r["out_dir"], "report.json"))]
    width = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
