"""Search stage: the figures the searches write (PNG), with matplotlib optional — without it the reports are the
same, only the figures are missing."""

from __future__ import annotations

import os
from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_png(fig, path: Path, dpi: int = 110) -> None:
    """Lay out `fig`, write it to a temporary name and rename it to `path` (never half a PNG); close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = Path(path).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    os.replace(tmp, path)
