"""Benchmark (issue 26's acceptance): `kilobyte search` with its defaults against the best hand-scaled networks that
fit the same budget, at three budgets, on two tasks, over seeds (thesis Table 5.1, with standard errors).

Per budget (`BUDGETS`: the STM32F410's 32 KB SRAM / 128 KB Flash, and the same device tightened to 16 KB / 64 KB and
4 KB / 16 KB), task (`mnist`: the bundled 5,000 images; `letters`: 26 classes of 32x32 grayscale letters rendered
from matplotlib's fonts, `kilobyte/data/letters.py`) and seed:
1. `python -m kilobyte search --device stm32f410 [--max-sram S --max-flash F] --data TASK --seed SEED --out DIR
   --json`, exactly as a user runs it: the strategy, its settings and its time budget are the command's defaults
   (`--minutes` is passed only when given here). Recorded: its int8 test accuracy (of the generated C, on its held-out
   split), measured SRAM / Flash, strategy, seconds.
2. The hand-made baselines under the same budget (`bench_search.py`'s `candidates`: the device budget of
   `nas.resources.device_budget` and the planner that compiles them): width-scaled `mnist-cnn` at the data's
   resolution and compound-scaled MobileNetV2 (width x resolution, the resize compiled into the library; the zoo's,
   whose fixed 1280-channel head fits no budget here, and `mobilenetv2-head`, its head scaled by the width too). Per
   family, the `--top` fitting variants with the most MACs are trained from scratch with the training recipe
   (`kilobyte.train.fit`) for the search's default fine-tuning epochs (`SearchConfig.finetune_epochs`), on the
   search's split (`nas.search.split_data`, same seed; the split seed of the search's held-out record when that
   differs), then deployed as the search deploys its winner. The family's result for a seed is the variant with the
   best validation accuracy (float, the recipe's early-stopping figure) — never chosen by test accuracy.
Every finished run is written at once (atomically) to the results file, so a killed benchmark re-run skips what is
done (a killed search continues with `--resume`; a failed run is tried again). The table — per budget x task, mean
+- standard error over seeds of int8 test accuracy, SRAM and Flash, and whether the search's mean beats every
baseline's (a family with nothing that fits counts as beaten) — is stored in the same file (`summary`) and printed.

    nice -n 10 python bench/bench_vs_hand.py                       # everything: 3 budgets x 2 tasks x 3 seeds
    python bench/bench_vs_hand.py --budgets 16k --tasks mnist --seeds 0 --only baselines
    python bench/bench_vs_hand.py --markdown                       # the table of the stored results
    python bench/bench_vs_hand.py --quick --budgets 32k --tasks mnist --seeds 0   # smoke run, minutes
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from kilobyte.atomic import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "vs_hand.json"
DEVICE = "stm32f410"
KB = 1024
# name -> (SRAM, Flash) in bytes; None: the device's own (STM32F410: 32 KB / 128 KB)
BUDGETS = {"32k": (None, None), "16k": (16 * KB, 64 * KB), "4k": (4 * KB, 16 * KB)}
TASKS = ("mnist", "letters")
FAMILIES = ("mnist-cnn", "mobilenetv2", "mobilenetv2-head")  # bench_search.MBV2_HEAD: the head scaled too
NETWORKS = ("search", *FAMILIES)
# --quick: the search's smallest settings (flags of either strategy; the other one ignores them) and 1 epoch
QUICK_SEARCH = ("--minutes", "0.3", "--train-images", "300", "--space-samples", "20", "--population", "4",
                "--generations", "1", "--evaluations", "2", "--finalists", "0", "--final-epochs", "1",
                "--workers", "1")
QUICK_TRAIN_IMAGES = 300


# -- the results file ------------------------------------------------------------------------------------------------
def load_results(path: Path, settings: dict) -> dict:
    """The stored results (empty for a new file). Runs made with other settings would not be comparable: a file made
    with other epochs, `--top`, `--minutes` or `--quick` is refused in one line."""
    if not path.exists():
        return {"settings": settings, "runs": {}, "candidates": {}, "summary": []}
    results = json.loads(path.read_text())
    if results["settings"] != settings:
        sys.exit(f"{path}: made with {results['settings']}, not {settings}; give another --results file")
    return results


def save_results(path: Path, results: dict) -> None:
    """Write `results` with its summary table atomically (a killed run leaves the last finished state), keeping the
    runs another invocation stored meanwhile (`--only search` and `--only baselines` may run side by side)."""
    if path.exists():
        stored = json.loads(path.read_text())
        for part in ("runs", "candidates"):
            results[part] = {**stored[part], **results[part]}
    results["summary"] = summarize(results)
    write_json(path, results)


def run_key(budget: str, task: str, seed: int, network: str, variant: str | None = None) -> str:
    return "/".join([budget, task, str(seed), network] + ([variant] if variant else []))


# -- aggregation -----------------------------------------------------------------------------------------------------
def mean_se(values) -> tuple[float | None, float | None]:
    """Mean and standard error of the mean (sample standard deviation / sqrt(n)); SE None for fewer than 2."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if len(v) == 0:
        return None, None
    return float(v.mean()), (float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None)


def best_variant(runs: dict, budget: str, task: str, seed: int, family: str) -> dict | None:
    """The family's trained variant of this seed with the best validation accuracy (ties: the first stored)."""
    prefix = run_key(budget, task, seed, family) + "/"
    rows = [r for k, r in runs.items() if k.startswith(prefix) and "error" not in r]
    return max(rows, key=lambda r: r["val_accuracy"]) if rows else None


def network_rows(results: dict, budget: str, task: str, network: str) -> list[dict]:
    """The per-seed results of one network at one budget and task: the search's runs, or each seed's best variant."""
    runs, rows = results["runs"], []
    seeds = sorted({int(k.split("/")[2]) for k in runs if k.startswith(f"{budget}/{task}/")})
    for seed in seeds:
        row = (runs.get(run_key(budget, task, seed, network)) if network == "search"
               else best_variant(runs, budget, task, seed, network))
        if row is not None and "error" not in row:
            rows.append(row)
    return rows


def summarize(results: dict) -> list[dict]:
    """One record per budget x task x network: seeds, mean and SE of int8 accuracy, SRAM and Flash, what ran (the
    strategy, or the chosen variants), whether any fitting variant exists, and on the search's record whether its
    mean int8 accuracy beats both baselines' (a family with no fitting variant counts as beaten)."""
    out = []
    pairs = {tuple(k.split("/")[:2]) for k in [*results["runs"], *results["candidates"]]}  # a budget none fits: no run
    for budget, task in sorted(pairs, key=_order):
        records = {n: _record(results, budget, task, n) for n in NETWORKS}
        if records["search"]["seeds"]:
            records["search"]["beats_all"] = beats(records["search"], [records[f] for f in FAMILIES])
        out += [r for r in records.values() if r["seeds"] or r["network"] != "search" or r["failed"]]
    return out


def beats(search: dict, baselines: list[dict]) -> bool | None:
    """Whether the search's mean int8 accuracy is above every baseline family's mean; a family with no variant that
    fits the budget is beaten; None while a family has not been run. A search whose network does not fit the budget
    (on any seed) beats nothing."""
    if search.get("fits_all") is False:
        return False
    verdicts = []
    for r in baselines:
        if r["int8_mean"] is not None:
            verdicts.append(search["int8_mean"] > r["int8_mean"])
        elif r["any_fits"] is False:
            verdicts.append(True)
        else:
            return None
    return all(verdicts)


def _order(bt: tuple[str, str]):
    budget, task = bt
    return (list(BUDGETS).index(budget) if budget in BUDGETS else len(BUDGETS), budget,
            TASKS.index(task) if task in TASKS else len(TASKS), task)


def _record(results: dict, budget: str, task: str, network: str) -> dict:
    rows = network_rows(results, budget, task, network)
    sram, flash = BUDGETS.get(budget, (None, None))
    rec = {"budget": budget, "task": task, "network": network, "seeds": len(rows),
           "sram_budget_bytes": sram or 32 * KB, "flash_budget_bytes": flash or 128 * KB}
    for name, key in (("int8", "int8_accuracy"), ("sram", "sram_bytes"), ("flash", "flash_bytes")):
        rec[f"{name}_mean"], rec[f"{name}_se"] = mean_se(r[key] for r in rows)
    # `fits` is the device's verdict; with a Flash budget of its own (16k, 4k) the measured Flash must be within it
    within = [r.get("fits") and (flash is None or r["flash_bytes"] <= flash) for r in rows]
    rec["fits_all"] = all(within) if rows else None
    if network == "search":
        kinds = Counter(r["strategy"] + (" (compact)" if (r.get("space") or {}).get("compact") else "") for r in rows)
        rec["ran"] = ", ".join(f"{k} x{n}" for k, n in kinds.most_common())
        failed = [r["error"] for k, r in results["runs"].items()
                  if k.startswith(f"{budget}/{task}/") and k.endswith("/search") and "error" in r]
        rec["failed"] = failed[0] if failed and not rows else None
        return rec
    rec["ran"] = ", ".join(f"w{w} r{res} x{n}" for (w, res), n in
                           Counter((r["width"], r["resolution"]) for r in rows).most_common())
    cands = results["candidates"].get(f"{budget}/{task}", [])
    rec["any_fits"] = any(c["fits"] and c["model"] == network for c in cands) if cands else None
    rec["same_test_images"] = same_test_images(results["runs"], budget, task, rows)
    return rec


def same_test_images(runs: dict, budget: str, task: str, rows: list[dict]) -> bool | None:
    """Whether every baseline row was tested on the images its seed's search reported on (by the held-out digest);
    None when no search of those seeds is stored."""
    searched = [runs.get(run_key(budget, task, r["seed"], "search"), {}).get("test_digest") for r in rows]
    pairs = [(r.get("test_digest"), d) for r, d in zip(rows, searched) if d is not None]
    return all(a == b for a, b in pairs) if pairs else None


def markdown(summary: list[dict]) -> str:
    """The table: one row per budget x task x network, mean +- SE over seeds."""
    def pm(mean, se, scale, digits, unit):
        if mean is None:
            return "—"
        return f"{mean * scale:.{digits}f}{'' if se is None else f' ± {se * scale:.{digits}f}'} {unit}"

    out = ["| budget (SRAM / Flash) | task | network | ran | seeds | int8 test accuracy | SRAM | Flash | "
           "search beats every baseline |", "|---|---|---|---|---|---|---|---|---|"]
    for r in summary:
        budget = f"{r['sram_budget_bytes'] / KB:g} KB / {r['flash_budget_bytes'] / KB:g} KB"
        ran = r["ran"] or ("none fits" if r.get("any_fits") is False else
                           f"failed: {r['failed']}" if r.get("failed") else "not run")
        ran += " (other test images!)" if r.get("same_test_images") is False else ""
        ran += " (NOT all fit the budget!)" if r["fits_all"] is False else ""
        beats = {True: "**yes**", False: "no"}.get(r.get("beats_all"), "")
        figures = (pm(r["int8_mean"], r["int8_se"], 100, 1, "%"), pm(r["sram_mean"], r["sram_se"], 1 / KB, 1, "kB"),
                   pm(r["flash_mean"], r["flash_se"], 1 / KB, 1, "kB"))
        out.append(f"| {budget} | {r['task']} | {r['network']} | {ran} | {r['seeds']} | {' | '.join(figures)} | "
                   f"{beats} |")
    return "\n".join(out)


# -- the runs --------------------------------------------------------------------------------------------------------
FIGURES = ("int8_accuracy", "float_accuracy", "sram_bytes", "flash_bytes", "memory", "macs", "fits", "bit_exact",
           "verdict", "model_dir")


def search_command(budget: str, task: str, seed: int, out_dir: Path, minutes: float | None,
                   quick: bool) -> list[str]:
    """The `kilobyte search` command line of one run: only device, budget, data, seed and output (and `--minutes`
    when given; `--quick`'s smallest settings); `--resume` when an earlier, killed run left its directory."""
    sram, flash = BUDGETS[budget]
    cmd = [sys.executable, "-m", "kilobyte", "search", "--device", DEVICE, "--data", task, "--seed", str(seed),
           "--out", str(out_dir), "--json"]
    if sram is not None:
        cmd += ["--max-sram", f"{sram // KB}KB", "--max-flash", f"{flash // KB}KB"]
    cmd += list(QUICK_SEARCH) if quick else []
    cmd += ["--minutes", str(minutes)] if minutes is not None else []
    if out_dir.is_dir() and any(out_dir.iterdir()):
        cmd.append("--resume")
    return cmd


def search_row(report: dict) -> dict:
    """The figures of a search's JSON report, of either strategy (μNAS's compiled member is under `deployed`)."""
    strategy, reason = report.get("strategy_choice") or report.get("strategy"), report.get("strategy_reason")
    if isinstance(strategy, dict):  # `kilobyte search`'s strategy_choice: {name, reason}
        strategy, reason = strategy.get("name") or strategy.get("chosen"), strategy.get("reason", reason)
    strategy = strategy or ("unas" if "pareto" in report else "tinynas")
    d = report if "int8_accuracy" in report else report.get("deployed")
    if d is None:
        return {"error": f"{strategy}: nothing compiled (no member inside its bounds)", "strategy": strategy}
    held = d.get("held_out") or {}
    return {**{k: d.get(k) for k in FIGURES}, "strategy": strategy, "strategy_reason": reason,
            "description": d.get("description") or report.get("description"), "searched": report.get("searched"),
            "split_seed": held.get("seed"), "test_images": held.get("images"), "test_digest": held.get("digest"),
            "search_seconds": report.get("seconds"), "minutes": report.get("minutes"),
            "phase_times": report.get("phase_times"), "space": report.get("space"),
            "supernet": report.get("supernet")}


def run_search(cmd: list[str]) -> dict:
    """Run the command; its JSON report's figures, or an `error` row with the last line it printed on stderr."""
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    seconds = round(time.perf_counter() - t0, 1)
    command = " ".join(["python", *cmd[1:]])
    try:
        report = json.loads(run.stdout[run.stdout.index("{"):])
    except ValueError:
        lines = run.stderr.strip().splitlines() or ["(nothing on stderr)"]
        return {"error": lines[-1], "returncode": run.returncode, "seconds": seconds, "command": command}
    return {**search_row(report), "returncode": run.returncode, "seconds": seconds, "command": command}


def split(task: str, seed: int, train_images: int | None):
    """(fit, val, test) as the search splits `task` for `seed` (`nas.search.split_data`, `SearchConfig`'s shares)."""
    from kilobyte.nas.search import SearchConfig, split_data

    c = SearchConfig(DEVICE, 1, 1, data=task, seed=seed)
    return split_data(task, seed, c.train_fraction, c.val_images, train_images or c.train_images)


KEEP = FIGURES + ("train_seconds", "best_epoch", "val_accuracy", "input_shape", "input_resize")


class Bench:
    """One invocation: the settings, the results file, the data splits and budgets it has loaded, and a run count."""

    def __init__(self, args, results: dict, path: Path):
        from kilobyte.schedule.plan_types import PlanOptions
        from kilobyte.targets.devices import get_device

        self.args, self.results, self.path = args, results, path
        self.device = get_device(DEVICE)
        self.options = PlanOptions(kernels="portable")  # the search's per-layer plan options
        self.splits: dict = {}
        self.done = 0
        self.started = time.perf_counter()

    def finish(self, key: str, row: dict) -> None:
        self.results["runs"][key] = row
        save_results(self.path, self.results)
        self.done += 1
        print(f"[{self.done}, {(time.perf_counter() - self.started) / 60:.1f} min] {key}: {describe(row)}", flush=True)

    def pending(self, key: str) -> bool:
        row = self.results["runs"].get(key)
        return row is None or "error" in row  # a failed run is tried again

    def search(self, budget: str, task: str, seed: int) -> None:
        key = run_key(budget, task, seed, "search")
        if self.pending(key):
            out = self.args.out / budget / task / str(seed) / "search"
            cmd = search_command(budget, task, seed, out, self.args.minutes, self.args.quick)
            self.finish(key, {"seed": seed, **run_search(cmd)})

    def budget(self, budget: str):
        """The search's own budget rule (`nas.search.search_budget`): the device's SRAM less the firmware's stack,
        or with --max-sram (16k, 4k) the model's arena + input within it."""
        from kilobyte.nas.search import SearchConfig, search_budget

        sram, flash = BUDGETS[budget]
        return search_budget(SearchConfig(self.device.name, min(sram or self.device.sram_bytes, self.device.sram_bytes),
                                          min(flash or self.device.flash_bytes, self.device.flash_bytes),
                                          model_sram=sram is not None))

    def data(self, task: str, seed: int):
        k = (task, seed)
        if k not in self.splits:
            self.splits[k] = split(task, seed, QUICK_TRAIN_IMAGES if self.args.quick else None)
        return self.splits[k]

    def candidates(self, budget: str, task: str, fit, classes: int) -> list[dict]:
        """The baselines' planned variants at this budget and task (stored: they depend on neither seed nor run)."""
        from bench_search import candidates

        key = f"{budget}/{task}"
        if key not in self.results["candidates"]:
            self.results["candidates"][key] = candidates(self.budget(budget), self.options, self.device.core,
                                                         fit.x.shape[1], fit.x.shape[-1], classes)
            save_results(self.path, self.results)
        return self.results["candidates"][key]

    def baselines(self, budget: str, task: str, seed: int) -> None:
        """Train and deploy the `--top` largest fitting variants of each family on the search's split."""
        from bench_search import largest_fitting

        searched = self.results["runs"].get(run_key(budget, task, seed, "search")) or {}
        split_seed = searched.get("split_seed")
        split_seed = seed if split_seed is None else split_seed  # the images the search reported on
        fit, val, test = self.data(task, split_seed)
        classes = int(max(fit.y.max(), val.y.max(), test.y.max())) + 1
        for family in FAMILIES:
            for cand in largest_fitting(self.candidates(budget, task, fit, classes), family, self.args.top):
                variant = f"w{cand['width']}-r{cand['resolution']}"
                key = run_key(budget, task, seed, family, variant)
                if self.pending(key):
                    out = self.args.out / budget / task / str(seed) / f"{family}-{variant}"
                    row = self.train(cand, (fit, val, test), classes, out, seed)
                    self.finish(key, {**cand, "seed": seed, "split_seed": split_seed, **row})

    def train(self, cand: dict, data, classes: int, out: Path, seed: int) -> dict:
        from bench_search import build_baseline, train_and_deploy

        from kilobyte.errors import KilobyteError

        fit, val, test = data
        module = build_baseline(cand["model"], cand["width"], cand["resolution"], classes, fit.x.shape[-1], seed)
        try:
            row = train_and_deploy(module, cand["resolution"], fit, val, test, out, self.options, self.device,
                                   self.args.epochs, seed)
        except KilobyteError as e:
            return {"error": str(e)}
        held = row.get("held_out") or {}
        return {**{k: row.get(k) for k in KEEP}, "test_images": held.get("images"), "test_digest": held.get("digest")}


def describe(row: dict) -> str:
    """One log line's figures of a finished run."""
    if "error" in row:
        return f"FAILED: {row['error']}"
    what = row.get("strategy") or f"{row['model']} w{row['width']} r{row['resolution']}"
    val = f", val {row['val_accuracy'] * 100:.1f} %" if "val_accuracy" in row else ""
    return (f"{what}: int8 {row['int8_accuracy'] * 100:.1f} %{val}, SRAM {row['sram_bytes'] / KB:.1f} kB, "
            f"Flash {row['flash_bytes'] / KB:.1f} kB ({'fits' if row['fits'] else 'does NOT fit'}, "
            f"{row.get('seconds', row.get('train_seconds'))} s)")


def parse_args(argv=None):
    from kilobyte.nas.search import SearchConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", nargs="+", choices=tuple(BUDGETS), default=list(BUDGETS))
    ap.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--minutes", type=float, default=None, help="the search's --minutes (default: its own)")
    ap.add_argument("--only", choices=("search", "baselines"), default=None)
    ap.add_argument("--top", type=int, default=2, help="fitting variants of each family trained (most MACs first)")
    ap.add_argument("--epochs", type=int, default=None,
                    help=f"baselines' training epochs (default: the search's fine-tuning, "
                    f"{SearchConfig.finetune_epochs}; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="smoke run: the smallest search, 1 epoch, 300 images")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-vs-hand"), help="searches and libraries")
    ap.add_argument("--results", type=Path, default=None,
                    help=f"results file (default {RESULTS.relative_to(RESULTS.parents[2])}; --quick: OUT/vs_hand.json)")
    ap.add_argument("--markdown", action="store_true", help="print the table of the stored results and stop")
    args = ap.parse_args(argv)
    if args.epochs is None:
        args.epochs = 1 if args.quick else SearchConfig.finetune_epochs
    if args.results is None:
        args.results = args.out / "vs_hand.json" if args.quick else RESULTS
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.markdown:
        print(markdown(summarize(json.loads(args.results.read_text()))))  # from the stored runs
        return
    import torch

    torch.set_num_threads(1)  # the machine is shared; the search's own workers use the cores
    settings = {"epochs": args.epochs, "top": args.top, "minutes": args.minutes, "quick": args.quick}
    bench = Bench(args, load_results(args.results, settings), args.results)
    for budget in args.budgets:
        for task in args.tasks:
            for seed in args.seeds:
                if args.only != "baselines":
                    bench.search(budget, task, seed)
                if args.only != "search":
                    bench.baselines(budget, task, seed)
    save_results(args.results, bench.results)
    print(markdown(bench.results["summary"]))
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
