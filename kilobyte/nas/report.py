"""Search stage: the one report path of every strategy — files written whole or not at all, and the Pareto figure.

A search killed at any moment leaves each of its files either as it was or complete: they are written through
`kilobyte.atomic` (checkpoints and trained weights with `atomic.save_torch`; `write_report` writes `report.json`,
`save_png` the figures — matplotlib is optional: `pyplot` is None without it). `pareto_png` draws
a search's candidates — accuracy against one resource per panel, the budget or bound dashed — for TinyNAS
(validation accuracy of every evaluated subnet vs peak SRAM and Flash) and μNAS (held-out accuracy of the front vs
peak SRAM, model size and MACs) alike.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import write_bytes, write_json

SERIES_COLORS = ("tab:blue", "tab:gray", "tab:orange", "tab:green")


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend, or None when matplotlib is not installed (the reports
    are then the same, only the figures are missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_png(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """Lay out `fig`, write it to `path` as a PNG atomically (never half a PNG) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    write_bytes(path, buf.getvalue())


def write_report(out_dir: str | os.PathLike, report: dict) -> Path:
    """`report` as `out_dir/report.json` (indented JSON), atomically; returns the path."""
    return write_json(Path(out_dir) / "report.json", report)


@dataclass(frozen=True)
class Panel:
    """One panel of `pareto_png`: x label, the points of each named series as (x, accuracy %) — already in the
    panel's unit —, the budget or bound to dash (None: none) and whether x is logarithmic."""

    label: str
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    limit: float | None = None
    log: bool = False


def pareto_png(path: str | os.PathLike, panels: list[Panel], ylabel: str, title: str | None = None) -> bool:
    """The panels side by side (shared accuracy axis), a legend when there is more than one series, written
    atomically to `path`. False (nothing written) without matplotlib or without any point."""
    plt = pyplot()
    if plt is None or not any(pts for p in panels for pts in p.series.values()):
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels) + 1, 3.5), sharey=True, squeeze=False)
    names = list(dict.fromkeys(name for p in panels for name in p.series))
    for ax, panel in zip(axes[0], panels):
        for name, pts in panel.series.items():
            if pts:
                color = SERIES_COLORS[names.index(name) % len(SERIES_COLORS)]
                ax.scatter(*zip(*pts), s=10, color=color, label=name, alpha=0.7)
        if panel.limit is not None:
            ax.axvline(panel.limit, color="red", linestyle="--", linewidth=1)
        if panel.log:
            ax.set_xscale("log")
        ax.set_xlabel(panel.label)
    axes[0][0].set_ylabel(ylabel)
    if len(names) > 1:
        axes[0][-1].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    save_png(fig, Path(path))
    return True
