"""Benchmark (issue 28's acceptance): MCUNetV2's detection effect on the bundled task — the joint (patch) search
against the per-layer search of the same space and budget, over seeds.

Per mode (`patch`: `kilobyte search --task detect --patch`; `per-layer`: the same without `--patch`) and seed, on
STM32F412's 256 KB SRAM / 1 MB Flash, exactly as a user runs it:

    python -m kilobyte search --task detect --data D --device stm32f412 --minutes M --seed S [--patch] --out DIR --json

`D` is `small-digit-scenes` by default (224 px: no per-layer plan of the space runs it on a 256 KB part,
bench/bench_detect_fit.py) or `digit-scenes` (128 px). Both searches search one space — the MBConv backbone with YOLO
heads at strides 8 and 16 on `detect_resolutions` (112-448 px for 224 px scenes), with MCUNetV2's per-stage widths
and receptive-field redistribution — under the same time budget on this machine; the patch schedule is the only
difference. Recorded per run: the input resolution of the winner, its float
and int8 mAP@0.5 on the held-out scenes (int8: by the generated C library, as the search reports it), the measured
SRAM / Flash of the linked Cortex-M firmware, the planned peak (and with `--patch` the same network's per-layer peak),
MACs, bit-exactness on the host (numpy reference, TFLite Micro, post-processed boxes), and then:
- `kilobyte evaluate --task detect DIR --split test`'s mAP on the host (`evaluate_detector`), which must equal the
  search's reported int8 mAP;
- verification on QEMU Cortex-M7 (`verify_on_target`: network outputs and boxes, bit for bit), and the boxes of the
  first `--qemu-scenes` held-out scenes under QEMU against the host build's (`evaluate_detector(target=...)`).
Each finished run is written at once (atomically) to the results file; a re-run skips what is stored. The summary —
mean +- standard error over seeds per mode — is stored (`summary`) and printed.

    python bench/bench_detect.py --out /tmp/bench-detect                  # 2 modes x 3 seeds, small-digit-scenes
    python bench/bench_detect.py --out /tmp/bench-detect --data digit-scenes --minutes 25   # the 128 px scenes
    python bench/bench_detect.py --out /tmp/bench-detect --seeds 0 --modes patch
    python bench/bench_detect.py --markdown [--data D]                    # the table of the stored runs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from kilobyte.atomic import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEVICE = "stm32f412"
MODES = {"patch": ("--patch",), "per-layer": ()}


def mean_se(values) -> tuple[float | None, float | None]:
    """Mean and standard error of the mean (sample standard deviation / sqrt(n)); SE None for fewer than 2."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return None, None
    return float(np.mean(v)), (float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None)


def run_one(mode: str, seed: int, out: Path, minutes: float, qemu_scenes: int, data: str, extra: list[str]) -> dict:
    from kilobyte.driver import verify_on_target
    from kilobyte.train.detect_library import evaluate_detector

    out_dir = out / f"{mode}-s{seed}"
    cmd = [sys.executable, "-m", "kilobyte", "search", "--task", "detect", "--data", data, "--device", DEVICE,
           "--minutes", str(minutes), "--seed", str(seed), "--out", str(out_dir), "--json", *MODES[mode], *extra]
    if (out_dir / "search.sqlite").exists():
        cmd.append("--resume")
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    r = json.loads(proc.stdout)
    model = r["model_dir"]
    host = evaluate_detector(model, data, split="test")
    target = verify_on_target(model, "cortex-m7", n_random=4)
    on_qemu = evaluate_detector(model, data, split="test", limit=qemu_scenes, target="cortex-m7")
    planned = r["planned"]
    return {"mode": mode, "seed": seed, "command": " ".join(cmd[1:]), "seconds": time.time() - started,
            "resolution": r["input_shape"][1], "architecture": r["architecture"], "description": r["description"],
            "space": r["space"], "float_map50": r["float_map50"], "int8_map50": r["int8_map50"],
            "search_map50": r["search_map50"], "evaluate_map50": host.map50,
            "evaluate_equals_search": host.map50 == r["int8_map50"] and host.images == r["held_out"]["images"],
            "test_scenes": host.images, "sram_bytes": r["sram_bytes"], "flash_bytes": r["flash_bytes"],
            "memory": r["memory"], "planned_peak_bytes": planned["peak_bytes"],
            "per_layer_peak_bytes": planned.get("per_layer_peak_bytes"), "patch": r["patch"], "macs": r["macs"],
            "fits": r["fits"], "bit_exact_host": r["bit_exact"], "verified_host": r["verified"],
            "bit_exact_qemu_m7": target.ok, "qemu_detections": target.detections,
            "qemu_scenes": on_qemu.images, "qemu_scenes_differing": len(on_qemu.differing),
            "supernet": r["supernet"], "phase_times": r["phase_times"], "search_seconds": r["seconds"]}


def summarize(results: dict) -> list[dict]:
    rows = []
    for mode in MODES:
        runs = [r for r in results["runs"].values() if r["mode"] == mode]
        if not runs:
            continue
        row = {"mode": mode, "seeds": sorted(r["seed"] for r in runs), "n_seeds": len(runs)}
        for key in ("resolution", "int8_map50", "float_map50", "sram_bytes", "planned_peak_bytes",
                    "per_layer_peak_bytes", "flash_bytes", "macs"):
            row[key], row[key + "_se"] = mean_se(r[key] for r in runs)
        row["per_seed"] = {str(r["seed"]): {"resolution": r["resolution"], "int8_map50": r["int8_map50"]}
                           for r in runs}
        row["all_bit_exact"] = all(r["bit_exact_host"] and r["bit_exact_qemu_m7"] and not r["qemu_scenes_differing"]
                                   for r in runs)
        row["all_evaluate_equal"] = all(r["evaluate_equals_search"] for r in runs)
        row["all_fit"] = all(r["fits"] for r in runs)
        rows.append(row)
    return rows


def markdown(summary: list[dict]) -> str:
    def pm(m, se, scale=1.0, fmt="{:.1f}"):
        if m is None:
            return "–"
        return fmt.format(m * scale) + ("" if se is None else " ± " + fmt.format(se * scale))

    lines = ["| search | seeds | input (px) | int8 mAP@0.5 (%) | float mAP@0.5 (%) | SRAM, measured (KB) "
             "| planned peak (KB) | per-layer peak (KB) | Flash (KB) | MACs (M) | bit-exact host + QEMU M7 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary:
        lines.append(f"| {r['mode']} | {len(r['seeds'])} | {pm(r['resolution'], r['resolution_se'], fmt='{:.0f}')} "
                     f"| {pm(r['int8_map50'], r['int8_map50_se'], 100)} "
                     f"| {pm(r['float_map50'], r['float_map50_se'], 100)} "
                     f"| {pm(r['sram_bytes'], r['sram_bytes_se'], 1 / 1024)} "
                     f"| {pm(r['planned_peak_bytes'], r['planned_peak_bytes_se'], 1 / 1024)} "
                     f"| {pm(r['per_layer_peak_bytes'], r['per_layer_peak_bytes_se'], 1 / 1024)} "
                     f"| {pm(r['flash_bytes'], r['flash_bytes_se'], 1 / 1024)} | {pm(r['macs'], r['macs_se'], 1e-6)} "
                     f"| {'yes' if r['all_bit_exact'] else 'NO'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("bench-detect"), help="where the searches write")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--modes", nargs="+", choices=tuple(MODES), default=list(MODES))
    p.add_argument("--minutes", type=float, default=12.0, help="each search's --minutes (default 12)")
    p.add_argument("--qemu-scenes", type=int, default=20, help="held-out scenes also run under QEMU (default 20)")
    p.add_argument("--data", default="small-digit-scenes",
                   help="the detection set (default small-digit-scenes: 224 px, beyond a per-layer plan on 256 KB)")
    p.add_argument("--results", type=Path, default=None,
                   help="results file (default bench/results/detect_small.json, or detect.json for digit-scenes)")
    p.add_argument("--markdown", action="store_true",
                   help="print the table of the stored runs and stop (with --summarize: store it too)")
    p.add_argument("--summarize", action="store_true", help="recompute the stored summary from the stored runs")
    p.add_argument("search_args", nargs="*", help="after --: more `kilobyte search` arguments (smoke runs)")
    a = p.parse_args(argv)
    a.results = a.results or RESULTS / ("detect.json" if a.data == "digit-scenes" else "detect_small.json")
    settings = {"device": DEVICE, "data": a.data, "minutes": a.minutes, "extra": a.search_args}
    results = json.loads(a.results.read_text()) if a.results.exists() else {"settings": settings, "runs": {}}
    if a.markdown or a.summarize:
        results["summary"] = summarize(results)
        if a.summarize:
            write_json(a.results, results)
        print(markdown(results["summary"]))
        return 0
    if results["settings"] != settings:
        sys.exit(f"{a.results}: made with {results['settings']}, not {settings}; give another --results file")
    for seed in a.seeds:
        for mode in a.modes:
            key = f"{mode}/{seed}"
            if key in results["runs"]:
                continue
            print(f"{key}: searching ...", flush=True)
            results["runs"][key] = run_one(mode, seed, a.out, a.minutes, a.qemu_scenes, a.data, a.search_args)
            results["summary"] = summarize(results)
            write_json(a.results, results)
            r = results["runs"][key]
            print(f"{key}: r{r['resolution']}, int8 mAP@0.5 {r['int8_map50'] * 100:.1f} % (evaluate "
                  f"{r['evaluate_map50'] * 100:.1f} %), SRAM {r['sram_bytes'] / 1024:.1f} KB, bit-exact host "
                  f"{r['bit_exact_host']}, QEMU M7 {r['bit_exact_qemu_m7']}, {r['seconds'] / 60:.1f} min", flush=True)
    print(markdown(summarize(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
