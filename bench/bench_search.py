"""Benchmark: `kilobyte search` against the hand-scaled baselines that fit the same device (thesis Table 5.1).

One run, one machine, one data split, one training recipe:
1. `kilobyte search --device DEVICE --data mnist` (the default preset unless --minutes / --epochs say otherwise);
2. the baselines: every compound-scaled MobileNetV2 (width x resolution; torchvision's, and with its head scaled
   by the width too, `MBV2_HEAD`) and every width-scaled mnist-cnn whose int8 plan (with the resize from the data's
   size compiled in front, as `deploy_module` builds the library) fits the same budget (the search's own
   `device_budget`: arena + input + stack reserve; Flash of the linked firmware), judged by the same `schedule`
   code; the `--top` largest of each by MACs are trained from scratch with the training recipe for as many epochs
   as the search fine-tunes its winner, then quantised, compiled, verified against TFLite Micro and measured on the
   linked firmware exactly like the search's winner;
3. the searched architecture trained from scratch the same way (what the supernet's inherited weights are worth).
Accuracy is top-1 on the held-out test split the search never sees. Writes bench/results/search_<device>.json and
prints a markdown table.

    python bench/bench_search.py [--device stm32f410] [--out /tmp/bench-search] [--minutes 15] [--top 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"
MBV2_WIDTHS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.75)
CNN_WIDTHS = (0.125, 0.25, 0.35, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0)


def mbv2_resolutions(native: int) -> tuple[int, ...]:
    """MobileNetV2's compound-scaling resolutions for images of side `native`: from its 32 px minimum (five stride-2
    stages) to 1.5x the data, in steps of 4 pixels (the search's own range, from 32 px up; none for 8x8 digits)."""
    return tuple(range(32, int(native * 1.5) // 4 * 4 + 1, 4))


MBV2_HEAD = "mobilenetv2-head"  # MobileNetV2 whose 1280-channel head scales with the width too


def build_baseline(name: str, width: float, resolution: int, classes: int, channels: int, seed: int = 0):
    """A baseline network, its initial weights from `seed`: zoo model `name`, or `MBV2_HEAD` (`mobilenetv2.build`
    with `scale_head`: with its fixed 1280-channel head, the zoo's MobileNetV2 fits no Flash up to 128 KB)."""
    import torch

    from kilobyte.zoo import create, mobilenetv2

    if name != MBV2_HEAD:
        return create(name, width=width, resolution=resolution, num_classes=classes, in_channels=channels,
                      seed=seed)[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return mobilenetv2.build(width, classes, channels, scale_head=True).eval()


def candidates(budget, options, core: str, native: int, channels: int, classes: int) -> list[dict]:
    """Every baseline variant with its planned resources and whether it fits `budget` (a `nas.resources.Budget`),
    planned with `options` by the planner that compiles it. A variant at another resolution than the data's is
    planned with the resize in front of it (`with_input_resize`), as `deploy_module` compiles it: the library takes
    the data's images, so its input and the resized tensor both count."""
    from tqdm import tqdm

    from kilobyte.driver import from_module
    from kilobyte.errors import KilobyteError
    from kilobyte.nas.deploy import with_input_resize
    from kilobyte.quant.quantize import int8_structure
    from kilobyte.schedule.estimate import estimate_resources

    variants = [(m, w, r) for m in ("mobilenetv2", MBV2_HEAD) for w in MBV2_WIDTHS for r in mbv2_resolutions(native)]
    variants += [("mnist-cnn", w, native) for w in CNN_WIDTHS]
    rows = []
    for name, w, r in tqdm(variants, desc="baselines: planning", unit="model"):
        try:
            module = build_baseline(name, w, r, classes, channels)
        except KilobyteError:
            continue
        module = with_input_resize(module, (r, r), (native, native))
        graph = int8_structure(from_module(name, module, (1, channels, native, native)).graph)
        res = estimate_resources(graph, options, core=core)
        rows.append({"model": name, "width": w, "resolution": r, "macs": res.macs, "fits": budget.admits(res),
                     "sram_bytes": budget.sram_of(res), "flash_bytes": res.flash_bytes})
    return rows


def largest_fitting(rows: list[dict], family: str, top: int) -> list[dict]:
    """The `top` variants of `family` that fit, most MACs first (a hand-scaler's pick: as big as the budget allows)."""
    return sorted((r for r in rows if r["model"] == family and r["fits"]), key=lambda r: -r["macs"])[:top]


def train_and_deploy(module, resolution, fit, val, test, out_dir, options, device, epochs, seed) -> dict:
    """`module` trained from scratch by the training recipe (`kilobyte.train.fit`, `epochs`, early stopping on `val`)
    and deployed as the search deploys its winner (`deploy_module`: int8, C, verification, held-out accuracy by the
    generated C, measured fit); with the best epoch's validation accuracy."""
    from kilobyte.nas.deploy import deploy_module
    from kilobyte.train import TrainConfig
    from kilobyte.train import fit as train

    t0 = time.perf_counter()
    result = train(module, fit.x, fit.y, TrainConfig(epochs=epochs, seed=seed, resolution=resolution),
                   val=(val.x, val.y))
    seconds = time.perf_counter() - t0
    deployed = deploy_module(result.module, resolution, fit, test, out_dir, options, device, name="baseline")
    return {**deployed, "train_seconds": round(seconds, 1), "best_epoch": result.best_epoch,
            "val_accuracy": result.best_val_accuracy}


def main() -> None:
    import torch

    from kilobyte.nas.search import SearchConfig, load_split, plan_options, search_budget, search_space
    from kilobyte.nas.space import Arch
    from kilobyte.nas.supernet import SuperNet
    from kilobyte.targets.devices import get_device
    from kilobyte.zoo.blocks import init_weights

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="stm32f410")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-search"))
    ap.add_argument("--minutes", type=float, default=None, help="the search's --minutes (default: its preset)")
    ap.add_argument("--epochs", default=None, help="the search's --epochs L,S,F")
    ap.add_argument("--top", type=int, default=2, help="fitting variants of each baseline family to train")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reuse", action="store_true", help="reuse a finished search in --out/search")
    args = ap.parse_args()
    torch.set_num_threads(1)
    device = get_device(args.device)
    search_dir = args.out / "search"
    started = time.perf_counter()
    if not (args.reuse and (search_dir / "report.json").exists()):
        cmd = [sys.executable, "-m", "kilobyte", "search", "--device", args.device, "--data", "mnist", "--out",
               str(search_dir), "--seed", str(args.seed), "--json"]
        cmd += ["--minutes", str(args.minutes)] if args.minutes else []
        cmd += ["--epochs", args.epochs] if args.epochs else []
        if search_dir.exists():
            cmd.append("--resume")
        t0 = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode not in (0, 2):
            sys.exit(f"search failed: {run.stderr[-2000:]}")
        search_seconds = time.perf_counter() - t0
    else:
        search_seconds = None
    searched = json.loads((search_dir / "report.json").read_text())
    settings = json.loads(__import__("sqlite3").connect(search_dir / "search.sqlite").execute(
        "SELECT value FROM meta WHERE key='settings'").fetchone()[0])
    epochs = settings["finetune_epochs"]
    config = SearchConfig(device.name, settings["sram_bytes"], settings["flash_bytes"], data="mnist", seed=args.seed)
    fit, val, test = load_split(config)
    classes = int(max(fit.y.max(), val.y.max(), test.y.max())) + 1
    native, channels = fit.x.shape[1], fit.x.shape[-1]

    options = plan_options(config)
    rows = candidates(search_budget(config), options, device.core, native, channels, classes)
    trained = []
    for family in ("mobilenetv2", MBV2_HEAD, "mnist-cnn"):
        for row in largest_fitting(rows, family, args.top):
            print(f"training {family} w{row['width']} r{row['resolution']} ({row['macs'] / 1e6:.2f} M MACs) ...",
                  flush=True)
            module = build_baseline(family, row["width"], row["resolution"], classes, channels, args.seed)
            out = args.out / f"{family}-w{row['width']}-r{row['resolution']}"
            trained.append({**row, **train_and_deploy(module, row["resolution"], fit, val, test, out, options,
                                                      device, epochs, args.seed)})
    arch = Arch.from_json(searched["architecture"])
    print("training the searched architecture from scratch ...", flush=True)
    torch.manual_seed(args.seed)
    module = SuperNet(search_space(config, channels, classes, native), arch.width, arch.resolution).extract(arch)
    init_weights(module)
    scratch = train_and_deploy(module, arch.resolution, fit, val, test, args.out / "searched-scratch", options,
                               device, epochs, args.seed)
    result = {"device": device.name, "search": searched, "search_seconds": search_seconds,
              "finetune_epochs": epochs, "candidates": rows, "baselines": trained, "searched_from_scratch": scratch,
              "seconds": round(time.perf_counter() - started, 1)}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"search_{device.name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    print(f"wrote {path}")


def markdown(result: dict) -> str:
    def line(name, r):
        return (f"| {name} | {r['macs'] / 1e6:.2f} M | {r['float_accuracy'] * 100:.1f} % | "
                f"{r['int8_accuracy'] * 100:.1f} % | {'yes' if r['bit_exact'] else 'NO'} | "
                f"{r['sram_bytes'] / 1024:.1f} KB | {r['flash_bytes'] / 1024:.1f} KB | "
                f"{'yes' if r['fits'] else 'no'} |")

    s = result["search"]
    out = ["| network | MACs | float | int8 | bit-exact | SRAM | Flash | fits |", "|---|---|---|---|---|---|---|---|",
           line(f"searched: {s['description']}", s)]
    out.append(line("searched architecture, trained from scratch", result["searched_from_scratch"]))
    for b in result["baselines"]:
        out.append(line(f"{b['model']} w{b['width']} r{b['resolution']}", b))
    return "\n".join(out)


if __name__ == "__main__":
    main()
