"""Report stage: the memory plot of a `Plan` — analytic per-layer memory against the planned live bytes per step.

Bars: for each step of `plan.order`, the analytic per-layer bytes (inputs + outputs + tensors held for later, the
graph input included, no in-place rules — DESIGN.md's figure 1, taken in the plan's order). Line: the plan's live
bytes at that step (arena tensors + scratch; the patch stage is one shaded super-step). Dotted line: the arena size;
dashed red line: the device SRAM when given. matplotlib's object API with the Agg canvas, written atomically.
"""

from __future__ import annotations

import os

from ..analysis.shapes import activation_bytes
from ..ir import Graph
from ..schedule.plan_types import Plan
from ..units import KB
from .memory_plot import save_png


def analytic_bytes(graph: Graph, order) -> list[int]:
    """Per step of `order`: bytes of the activations live while it runs (inputs, outputs, held), no in-place."""
    pos = {name: i for i, name in enumerate(order)}
    life = {t: [0, 0] for t in graph.inputs}
    for n in graph.nodes:
        life[n.outputs[0]] = [pos[n.name], pos[n.name]]
    for n in graph.nodes:
        for t in n.inputs:
            if t in life:
                life[t][1] = max(life[t][1], pos[n.name])
    for t in graph.outputs:
        life[t][1] = len(order) - 1
    live = [0] * len(order)
    for t, (first, last) in life.items():
        for i in range(first, last + 1):
            live[i] += activation_bytes(graph, t)
    return live


def plot_plan(graph: Graph, plan: Plan, path, sram_bytes: int | None = None, title: str | None = None) -> str:
    """Draw the plan's memory per step to PNG file `path`; return the path written."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = len(plan.order)
    fig = Figure(figsize=(max(8.0, 0.12 * n + 3), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    analytic = [b / KB for b in analytic_bytes(graph, plan.order)]
    planned = [b / KB for b in plan.live_bytes]
    ax.bar(range(n), analytic, color="tab:blue", alpha=0.45, width=0.85, label="per layer (in + out + held)")
    ax.step(range(n), planned, where="mid", color="tab:green", linewidth=1.6,
            label=f"planned (peak {plan.peak_bytes / KB:.1f} kB)")
    ax.axhline(plan.arena_bytes / KB, color="tab:gray", linestyle=":", linewidth=1.2,
               label=f"arena {plan.arena_bytes / KB:.1f} kB")
    if plan.patch is not None:
        ax.axvspan(-0.5, plan.patch.n_nodes - 0.5, color="tab:orange", alpha=0.15,
                   label=f"patch stage ({plan.patch.grid}x{plan.patch.grid})")
    if sram_bytes is not None:
        ax.axhline(sram_bytes / KB, color="tab:red", linestyle="--", linewidth=1.2,
                   label=f"device SRAM {sram_bytes / KB:.0f} kB")
    if n:
        peak = max(range(n), key=planned.__getitem__)
        ax.annotate(f"{plan.order[peak]}", (peak, planned[peak]), xytext=(6, 4), textcoords="offset points",
                    fontsize="small")
    ax.set_xlabel("step (plan order)")
    ax.set_ylabel("activation memory (kB)")
    ax.set_title(title or f"Memory plan of {graph.name} (int8)")
    ax.set_xlim(-0.6, max(n, 1) - 0.4)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize="small")
    save_png(fig, os.fspath(path))
    return os.fspath(path)
