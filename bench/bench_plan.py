"""Benchmark: planner speed on MobileNetV2 224 (w1.0) — `make_plan` and `estimate_resources`, per layer and with
`patch="auto"`, one core, best of N. Targets (issue #12): per-layer <= 3 ms, patch auto <= 50 ms for the estimate
that search calls. With `--baseline DIR` (a checkout of an older Kilobyte) its `make_plan` is timed in the same run,
in a subprocess, on the same graph. Results: bench/results/plan.json and the table in docs/benchmarks.md.

    python bench/bench_plan.py [--baseline /path/to/old/checkout] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TIMER = """
import pickle, sys, time
sys.path.insert(0, {root!r})
import kilobyte
assert kilobyte.__file__.startswith({root!r}), kilobyte.__file__
from kilobyte.schedule.plan import make_plan
from kilobyte.schedule.plan_types import PlanOptions
graph = pickle.load(open({graph!r}, "rb"))
out = {{}}
for label, options in (("per-layer", PlanOptions()), ("patch auto", PlanOptions(patch="auto"))):
    make_plan(graph, options)
    times = []
    for _ in range({repeats}):
        t = time.perf_counter(); plan = make_plan(graph, options); times.append(time.perf_counter() - t)
    out[label] = dict(ms=round(min(times) * 1e3, 2), peak_bytes=plan.peak_bytes, arena_bytes=plan.arena_bytes)
print(__import__("json").dumps(out))
"""


def _best(fn, repeats: int) -> tuple[float, object]:
    fn()
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return round(min(times) * 1e3, 2), result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="an older checkout to time side by side")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    from kilobyte.api import load
    from kilobyte.schedule import PlanOptions, estimate_resources, make_plan

    graph = load("mobilenetv2").graph
    rows = {}
    for label, options in (("per-layer", PlanOptions()), ("patch auto", PlanOptions(patch="auto"))):
        t_plan, plan = _best(lambda o=options: make_plan(graph, o), args.repeats)
        t_est, est = _best(lambda o=options: estimate_resources(graph, o), args.repeats)
        assert (est.peak_bytes, est.arena_bytes) == (plan.peak_bytes, plan.arena_bytes)
        rows[label] = dict(make_plan_ms=t_plan, estimate_ms=t_est, peak_bytes=plan.peak_bytes,
                           arena_bytes=plan.arena_bytes)
    if args.baseline:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "graph.pkl"
            path.write_bytes(pickle.dumps(graph))
            code = TIMER.format(root=str(args.baseline.resolve()), graph=str(path), repeats=args.repeats)
            old = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                            check=True).stdout)
        for label, r in old.items():
            rows[label]["baseline_make_plan_ms"] = r["ms"]
            rows[label]["baseline_peak_bytes"] = r["peak_bytes"]
    out = ROOT / "bench" / "results" / "plan.json"
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print("| MobileNetV2 224 | make_plan (ms) | estimate_resources (ms) | baseline make_plan (ms) | peak |")
    print("|---|---|---|---|---|")
    for label, r in rows.items():
        print(f"| {label} | {r['make_plan_ms']} | {r['estimate_ms']} | {r.get('baseline_make_plan_ms', '–')} | "
              f"{r['peak_bytes']:,} B |")


if __name__ == "__main__":
    main()
