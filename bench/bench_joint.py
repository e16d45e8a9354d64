"""Benchmark: MCUNetV2's joint search (`kilobyte search --patch`) against the per-layer TinyNAS search, side by side.

Issue #17's acceptance, in one run on one machine: under a tight SRAM budget where the per-layer search can only
afford low-resolution networks, the joint search (patch schedules, per-stage widths, receptive-field redistribution,
inputs up to 4x the data's size) finds a network with higher held-out int8 accuracy at the same SRAM and Flash.
Both searches run through the CLI exactly as a user runs them (`--json`), with the same device, budget, data, seed
and preset, for every seed; each winner is compiled, verified against TFLite Micro and measured on the linked
firmware by the search itself.

Then, for every joint winner with a patch stage: the MAC overhead of its searched patch stage vs the same network
with the default, unredistributed first stages (every kernel-1 slot back to a 3x3 depthwise, the MB1 block's
depthwise back), each with its fewest-MAC patch schedule at the same SRAM limit.

    python bench/bench_joint.py [--seeds 3] [--device stm32f410] [--max-sram 16KB] [--minutes 3]
                                [--space-samples 50] [--out /tmp/bench-joint]

Writes bench/results/joint_search.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"


def run_search(args, seed: int, patch: bool) -> dict:
    out = Path(args.out) / f"{'joint' if patch else 'per-layer'}-seed{seed}"
    cmd = [sys.executable, "-m", "kilobyte", "search", "--device", args.device, "--max-sram", args.max_sram,
           "--data", args.data, "--minutes", str(args.minutes), "--space-samples", str(args.space_samples),
           "--seed", str(seed), "--out", str(out), "--json"]
    if args.max_flash:
        cmd += ["--max-flash", args.max_flash]
    if patch:
        cmd.append("--patch")
    if (out / "report.json").exists():  # a finished search (an interrupted benchmark run): its own report
        report = json.loads((out / "report.json").read_text())
        report["wall_seconds"] = report["seconds"]
        return report
    if (out / "search.sqlite").exists():
        cmd.append("--resume")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 2):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout)
    report["wall_seconds"] = time.perf_counter() - t0
    return report


def unredistributed(space, arch):
    """`arch` with receptive-field redistribution undone — the default MbV2-like first stages: every kernel-1 slot
    (no depthwise) and the MB1 block back to a 3x3 depthwise, and the blocks RD moved out of the first `rd_stages`
    stages (below the default space's least depth, 2) moved back from the stage after them (3x3, the stage's first
    block's expand ratio)."""
    from dataclasses import replace

    from kilobyte.nas.space import MBSpace

    default_least = min(MBSpace().stage_depths[0])
    depths, blocks = list(arch.depths), [list(stage) for stage in arch.blocks]
    blocks = [[(3 if k == 1 else k, e) for k, e in stage] for stage in blocks]
    later = space.rd_stages
    for s in range(space.rd_stages):
        moved = max(0, default_least - depths[s])
        moved = min(moved, depths[later] - default_least)
        for i in range(depths[s], depths[s] + moved):
            blocks[s][i] = (3, blocks[s][0][1])
        depths[s] += moved
        depths[later] -= moved
    return replace(arch, depths=tuple(depths), blocks=tuple(tuple(stage) for stage in blocks), first_kernel=3)


def overhead_pair(report: dict, args) -> dict | None:
    """The joint winner's MAC overhead vs the same network unredistributed, at the same peak: each network with its
    fewest-MAC schedule whose arena is at most the compiled winner's (`fit_patch`; None when it has none); and each
    network's smallest-peak schedule (patch "auto", no MAC limit) with its overhead. None for a winner without a
    patch stage."""
    from dataclasses import replace

    from kilobyte.nas.search import SearchConfig, evaluator, load_split, plan_options, search_space
    from kilobyte.nas.space import Arch
    from kilobyte.schedule import estimate_resources, fit_patch
    from kilobyte.targets.devices import get_device

    if report.get("patch") is None:
        return None
    device = get_device(args.device)
    config = SearchConfig(device.name, report["budget"]["sram_bytes"], report["budget"]["flash_bytes"],
                          data=args.data, patch=True)
    fit, _, _ = load_split(config)
    arch = Arch.from_json(report["architecture"])
    space = search_space(config, fit.x.shape[-1], int(fit.y.max()) + 1, fit.x.shape[1]).with_config(arch.width,
                                                                                              arch.resolution)
    ev = evaluator(config, space, device.core)
    arena = report["planned"]["arena_bytes"]  # the compiled winner's (its budget's meaning changed in issue 26)
    options = replace(plan_options(config), patch=None)
    rows = {}
    for name, a in (("searched", arch), ("unredistributed", unredistributed(space, arch))):
        graph = ev.graph(a)
        base = estimate_resources(graph, options, core=device.core)
        chosen = fit_patch(graph, arena, options, core=device.core)
        smallest = estimate_resources(graph, replace(options, patch="auto", max_mac_overhead=None), core=device.core)
        rows[name] = {"description": a.describe(), "per_layer_macs": base.macs, "per_layer_peak": base.peak_bytes,
                      "schedule": None if chosen is None else chosen.patch,
                      "arena_bytes": None if chosen is None else chosen.resources.arena_bytes,
                      "mac_overhead": None if chosen is None else (chosen.resources.macs - base.macs) / base.macs,
                      "smallest_arena_bytes": smallest.arena_bytes,
                      "smallest_mac_overhead": (smallest.macs - base.macs) / base.macs}
    rows["same_network"] = arch.key() == unredistributed(space, arch).key()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--device", default="stm32f410")
    ap.add_argument("--max-sram", default="16KB")
    ap.add_argument("--max-flash", default=None)
    ap.add_argument("--data", default="mnist")
    ap.add_argument("--minutes", type=float, default=3)
    ap.add_argument("--space-samples", type=int, default=50)
    ap.add_argument("--out", default="/tmp/bench-joint")
    ap.add_argument("--results", default="joint_search.json", help="file name under bench/results/")
    ap.add_argument("--overhead-only", action="store_true",
                    help="recompute the MAC-overhead comparison of the joint winners in results/joint_search.json")
    args = ap.parse_args()
    if args.overhead_only:
        stored = json.loads((RESULTS / args.results).read_text())
        for row in stored["runs"]:
            if row["search"] == "joint":
                row["overhead"] = overhead_pair({"patch": row["patch"], "budget": row["budget"],
                                                 "architecture": row["architecture"], "planned": row["planned"]},
                                                args)
        (RESULTS / args.results).write_text(json.dumps(stored, indent=1))
        _print(stored["runs"], stored["summary"])
        return
    runs = []
    for seed in range(args.seeds):
        for patch in (False, True):
            r = run_search(args, seed, patch)
            row = {"seed": seed, "search": "joint" if patch else "per-layer", "int8_accuracy": r["int8_accuracy"],
                   "float_accuracy": r["float_accuracy"], "bit_exact": r["bit_exact"], "fits": r["fits"],
                   "sram_bytes": r["sram_bytes"], "flash_bytes": r["flash_bytes"], "macs": r["macs"],
                   "width": r["space"]["width"], "resolution": r["space"]["resolution"],
                   "description": r["description"], "architecture": r["architecture"], "patch": r.get("patch"),
                   "planned": r["planned"], "budget": r["budget"], "minutes": r["wall_seconds"] / 60}
            if patch:
                row["overhead"] = overhead_pair(r, args)
            runs.append(row)
            print(json.dumps({k: row[k] for k in ("seed", "search", "int8_accuracy", "resolution", "patch")}),
                  flush=True)
    summary = {}
    for name in ("per-layer", "joint"):
        acc = [r["int8_accuracy"] for r in runs if r["search"] == name]
        summary[name] = {"mean": statistics.mean(acc), "stdev": statistics.stdev(acc) if len(acc) > 1 else 0.0}
    RESULTS.mkdir(exist_ok=True)
    out = {"settings": vars(args), "runs": runs, "summary": summary}
    (RESULTS / args.results).write_text(json.dumps(out, indent=1))
    _print(runs, summary)


def _print(runs, summary) -> None:
    print("\n| seed | search | r | w | patch (n, p, input patch, +MACs) | int8 acc | SRAM | Flash | MACs | bit-exact |"
          " fits | min |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        p = r["patch"]
        patch = "per layer" if p is None else \
            f"n={p['n_nodes']}, {p['grid']}x{p['grid']}, {p['input_patch']}², +{p['mac_overhead'] * 100:.1f} %"
        print(f"| {r['seed']} | {r['search']} | {r['resolution']} | {r['width']:g} | {patch} | "
              f"{r['int8_accuracy'] * 100:.1f} % | {r['sram_bytes']:,} | {r['flash_bytes']:,} | "
              f"{r['macs'] / 1e6:.2f} M | {'yes' if r['bit_exact'] else 'NO'} | {'yes' if r['fits'] else 'NO'} | "
              f"{r['minutes']:.1f} |")
    for name, s in summary.items():
        print(f"{name}: int8 {s['mean'] * 100:.2f} ± {s['stdev'] * 100:.2f} %")
    for r in runs:
        if r.get("overhead"):
            o = r["overhead"]
            s, u = o["searched"], o["unredistributed"]
            print(f"seed {r['seed']}: at arena <= {s['arena_bytes']:,} B: searched {s['schedule']} "
                  f"+{s['mac_overhead'] * 100:.1f} % MACs, unredistributed "
                  + ("no schedule" if u["schedule"] is None and u["mac_overhead"] is None else
                     f"{u['schedule']} +{u['mac_overhead'] * 100:.1f} %")
                  + f"; smallest peaks {s['smallest_arena_bytes']:,} B (+{s['smallest_mac_overhead'] * 100:.1f} %) vs "
                  f"{u['smallest_arena_bytes']:,} B (+{u['smallest_mac_overhead'] * 100:.1f} %); same network: "
                  f"{o['same_network']}")


if __name__ == "__main__":
    main()
