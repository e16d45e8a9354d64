"""Benchmark: `fit_patch` (issue #17 item 2) — the cheapest patch schedule under an arena limit, per search candidate.

Random MobileNet-sized networks of the MCUNet space (`MBSpace` with 3 input channels, 1000 classes, width 0.35-0.5,
resolution 96-176), each int8-structured as the search builds them. Per network and arena limit: `fit_patch` (wall
and CPU time), side by side with the brute force it must equal (`estimate_resources` for per layer and every (n, p) of
`patch_candidates`; the same rule applied to the figures) and with `estimate_resources(patch="auto")`. Target: median
`fit_patch` <= 20 ms. Prints a table; writes bench/results/patch_fit.json. Assert-free: disagreements are counted.

    python bench/bench_patch_fit.py [--networks 200] [--limits 65536 131072 262144] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPACE_ARGS = dict(widths=(0.35, 0.4, 0.45, 0.5), resolutions=(96, 112, 128, 144, 160, 176), in_channels=3,
                  num_classes=1000)


def _timed(fn, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    return result, (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def _brute_force(graph, options):
    """Every schedule's (MACs, n, p, patch, Resources)."""
    from kilobyte.schedule import estimate_resources
    from kilobyte.schedule.patch_fit import patch_candidates

    rows = []
    for c in patch_candidates(graph, options):
        r = estimate_resources(graph, dataclasses.replace(options, patch=c.patch))
        rows.append((c.macs, c.n_nodes, c.grid or 0, c.patch, r))
    return rows


def _rule(rows, limit):
    fits = [(macs, r.arena_bytes, n, p, patch, r) for macs, n, p, patch, r in rows if r.arena_bytes <= limit]
    return min(fits, key=lambda f: f[:4])[4:] if fits else None


def _stats(values) -> dict:
    return dict(median=round(float(np.median(values)), 2), p90=round(float(np.percentile(values, 90)), 2),
                max=round(float(np.max(values)), 2))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", type=int, default=200)
    ap.add_argument("--limits", type=int, nargs="+", default=[65536, 131072, 262144])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "patch_fit.json")
    args = ap.parse_args(argv)
    from kilobyte.nas.build import build_graph
    from kilobyte.nas.space import MBSpace
    from kilobyte.quant.quantize import int8_structure
    from kilobyte.schedule import PlanOptions, estimate_resources
    from kilobyte.schedule.patch_fit import fit_patch

    space, options = MBSpace(**SPACE_ARGS), PlanOptions()
    rng = np.random.default_rng(args.seed)
    load = os.getloadavg()[0]
    fit_ms = {limit: [] for limit in args.limits}
    fit_cpu = {limit: [] for limit in args.limits}
    outcome = {limit: {"per-layer": 0, "patch": 0, "none": 0} for limit in args.limits}
    wrong = {limit: 0 for limit in args.limits}
    brute_ms, auto_ms, schedules, nodes = [], [], [], []
    for i in range(args.networks):
        graph = int8_structure(build_graph(space, space.sample(rng), verify=False), verify=False)
        nodes.append(len(graph.nodes))
        for limit in args.limits:
            got, wall, cpu = _timed(fit_patch, graph, limit, options)
            fit_ms[limit].append(wall)
            fit_cpu[limit].append(cpu)
            outcome[limit]["none" if got is None else "per-layer" if got.patch is None else "patch"] += 1
        rows, wall, _ = _timed(_brute_force, graph, options)
        brute_ms.append(wall)
        schedules.append(len(rows))
        for limit in args.limits:
            got, want = fit_patch(graph, limit, options), _rule(rows, limit)
            wrong[limit] += (None if got is None else (got.patch, got.resources)) != want
        _, wall, _ = _timed(estimate_resources, graph, dataclasses.replace(options, patch="auto"))
        auto_ms.append(wall)
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{args.networks} networks", file=sys.stderr)
    result = dict(
        space=SPACE_ARGS, networks=args.networks, seed=args.seed, nodes=_stats(nodes), schedules=_stats(schedules),
        load_average_start=round(load, 2), load_average_end=round(os.getloadavg()[0], 2),
        brute_force_ms=_stats(brute_ms), auto_ms=_stats(auto_ms),
        limits={str(limit): dict(fit_ms=_stats(fit_ms[limit]), fit_cpu_ms=_stats(fit_cpu[limit]),
                                 outcomes=outcome[limit], disagreements=wrong[limit]) for limit in args.limits})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.networks} networks, {result['nodes']['median']:.0f} nodes and {result['schedules']['median']:.0f} "
          f"schedules (median); load average {result['load_average_start']} -> {result['load_average_end']}")
    print("| arena limit | fit_patch median / p90 / max (ms) | CPU median | per layer / patch / none | "
          "≠ brute force |")
    print("|---|---|---|---|---|")
    for limit in args.limits:
        r = result["limits"][str(limit)]
        f, o = r["fit_ms"], r["outcomes"]
        print(f"| {limit // 1024} KB | {f['median']} / {f['p90']} / {f['max']} | {r['fit_cpu_ms']['median']} | "
              f"{o['per-layer']} / {o['patch']} / {o['none']} | {r['disagreements']} |")
    for label, key in (("brute force (every schedule)", "brute_force_ms"), ('estimate_resources(patch="auto")',
                                                                            "auto_ms")):
        s = result[key]
        print(f"{label}: median {s['median']} ms, p90 {s['p90']} ms, max {s['max']} ms")


if __name__ == "__main__":
    main()
