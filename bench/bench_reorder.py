"""Benchmark of the schedule stage's reorder search (reorder.py) and of whole plans (plan.py).

Cases: a 300-node chain (target: planned exactly in < 1 s — Liberis's recursive DP overflows Python's stack here)
and 6 parallel branches x 3 nodes (target: < 0.1 s), plus wider branch graphs to show where the exact search
stops. Prints a table and writes bench/results/reorder.json. Not a timed test: numbers depend on the machine.

    python bench/bench_reorder.py
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kilobyte.atomic import write_json  # noqa: E402
from kilobyte.ir import ConcatAttrs, ConvAttrs, GraphBuilder, Op  # noqa: E402
from kilobyte.schedule.liveness import analyze  # noqa: E402
from kilobyte.schedule.plan import make_plan  # noqa: E402
from kilobyte.schedule.plan_types import PlanOptions  # noqa: E402
from kilobyte.schedule.reorder import best_order  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "reorder.json"
REPEAT = 5  # best of 5 runs


def _conv(b: GraphBuilder, x: str, cout: int, k: int = 1) -> str:
    w = np.ones((cout, k, k, b.shape(x)[3]), np.float32)
    return b.node(Op.CONV_2D, [x], ConvAttrs(padding=(k // 2,) * 4), params={"weight": w})


def chain(n: int):
    """n convs in a row on a 16x16 map, channels cycling 8..40 (3x3 every third: im2col scratch)."""
    b = GraphBuilder(f"chain{n}")
    y = b.input((1, 16, 16, 8))
    for k in range(n):
        y = _conv(b, y, 8 + 8 * (k % 5), 3 if k % 3 == 0 else 1)
    return b.build([y])


def branches(n_branches: int, depth: int):
    """Input -> n parallel chains of `depth` 1x1 convs (channel counts differ per branch) -> concat -> 1x1 conv."""
    b = GraphBuilder(f"branches{n_branches}x{depth}")
    x = b.input((1, 16, 16, 8))
    ends = []
    for k in range(n_branches):
        y = x
        for d in range(depth):
            y = _conv(b, y, 4 + 4 * ((k * 5 + d * 3) % 9))
        ends.append(y)
    cat = b.node(Op.CONCAT, ends, ConcatAttrs(axis=3))
    return b.build([_conv(b, cat, 16)])


def _best_time(fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(REPEAT):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def measure(name: str, graph, target: float | None) -> dict:
    t_order, r = _best_time(lambda: best_order(graph))
    t_plan, plan = _best_time(lambda: make_plan(graph))
    given = analyze(graph, [n.name for n in graph.nodes]).peak
    return {"case": name, "nodes": len(graph.nodes), "states": r.states, "optimal": r.optimal,
            "peak_bytes": r.peak, "given_order_peak": given, "lower_bound": r.lower_bound,
            "arena_bytes": plan.arena_bytes, "reorder_s": round(t_order, 5), "make_plan_s": round(t_plan, 5),
            "target_s": target, "meets_target": None if target is None else t_plan < target}


def main() -> None:
    cases = [("chain-300", chain(300), 1.0), ("branches-6x3", branches(6, 3), 0.1),
             ("branches-8x3", branches(8, 3), None), ("branches-10x4", branches(10, 4), None)]
    rows = [measure(name, g, target) for name, g, target in cases]
    cols = ["case", "nodes", "states", "optimal", "given_order_peak", "peak_bytes", "lower_bound", "arena_bytes",
            "reorder_s", "make_plan_s", "target_s"]
    print("  ".join(f"{c:>16}" for c in cols))
    for row in rows:
        print("  ".join(f"{str(row[c]):>16}" for c in cols))
    budget = PlanOptions().exact_budget
    report = {"python": platform.python_version(), "machine": platform.machine(), "exact_budget": budget,
              "repeat": REPEAT, "results": rows}
    write_json(RESULTS, report, indent=2)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
