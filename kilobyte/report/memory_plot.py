"""Report stage: the per-layer activation-memory plot (MCUNetV2 Fig. 1) of a `kilobyte.analysis.Profile`.

Bars give each layer's analytic live bytes (inputs + outputs + held tensors, int8), coloured by block; a step line
gives each block's peak; a dashed horizontal line marks the device SRAM when given. matplotlib is imported only
here, through its object API with the Agg canvas (no global backend switch, no GUI). The PNG is written
atomically (`kilobyte.atomic`), so a reader never sees half a file; `save_png` does it for every plot here.
"""

from __future__ import annotations

import os

from ..atomic import replacing
from ..units import KB


def plot_memory_profile(profile, path, sram_bytes: int | None = None,
                        title: str = "Activation memory per layer (int8)") -> str:
    """Draw `profile` to PNG file `path`; return the path written."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(8.0, 0.12 * len(profile.layers) + 3), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    _draw_layers(ax, profile)
    _draw_blocks(ax, profile)
    if sram_bytes is not None:
        ax.axhline(sram_bytes / KB, color="tab:red", linestyle="--", linewidth=1.2,
                   label=f"device SRAM {sram_bytes / KB:.0f} kB")
    ax.set_xlabel("layer (execution order)")
    ax.set_ylabel("activation memory (kB)")
    ax.set_title(title)
    ax.set_xlim(-0.6, len(profile.layers) - 0.4)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize="small")
    save_png(fig, os.fspath(path))
    return os.fspath(path)


def _draw_layers(ax, profile) -> None:
    block_of = {name: k for k, block in enumerate(profile.blocks) for name in block.layers}
    colors = ["tab:blue" if block_of.get(layer.name, 0) % 2 == 0 else "tab:cyan" for layer in profile.layers]
    heights = [layer.live_bytes / KB for layer in profile.layers]
    ax.bar(range(len(heights)), heights, color=colors, width=0.85, label="per layer (in + out + held)")
    peak = max(range(len(heights)), key=heights.__getitem__, default=None)
    if peak is not None:
        ax.annotate(f"peak {heights[peak]:.0f} kB\n{profile.layers[peak].name}", (peak, heights[peak]),
                    xytext=(6, -4), textcoords="offset points", fontsize="small", va="top")


def _draw_blocks(ax, profile) -> None:
    """One horizontal segment per block at the block's peak, joined into a step line."""
    index = {layer.name: i for i, layer in enumerate(profile.layers)}
    xs, ys = [], []
    for block in profile.blocks:
        first, last = index[block.layers[0]], index[block.layers[-1]]
        xs += [first - 0.45, last + 0.45]
        ys += [block.peak_bytes / KB] * 2
    if xs:
        ax.plot(xs, ys, color="tab:orange", linewidth=1.5, label="per block (peak)")


def save_png(fig, path: str) -> None:
    """`fig` as a PNG (120 dpi) at `path`, written whole or not at all (`kilobyte.atomic.replacing`)."""
    with replacing(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
