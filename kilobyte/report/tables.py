"""Report stage: aligned human-readable tables of analysis results (`kilobyte profile` without `--json`).

Memory is shown in kB of 1024 bytes, the papers' unit (MCUNetV2's "539 kB" first conv is 551,936 B / 1024).
"""

from __future__ import annotations

from ..units import KB

COLUMNS = ("idx", "name", "op", "out shape", "MACs", "params", "live kB", "RF")
RIGHT_ALIGNED = frozenset({"idx", "MACs", "params", "live kB", "RF"})


def format_profile_table(profile) -> str:
    """One row per layer of a `kilobyte.analysis.Profile`, then a totals row.

    >>> import numpy as np
    >>> from kilobyte.analysis import profile
    >>> from kilobyte.ir import GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 32, 32, 3))], params={"weight": np.zeros((8, 1, 1, 3), np.float32)})
    >>> print(format_profile_table(profile(b.build([b.node(Op.RELU, [y])]))))
    idx  name       op       out shape    MACs  params  live kB  RF
      0  conv_2d_0  CONV_2D  1x32x32x8  24,576      24     11.0   1
      1  relu_0     RELU     1x32x32x8       0       0     16.0   1
         total                          24,576      24     16.0
    """
    rows = [_row(i, layer) for i, layer in enumerate(profile.layers)]
    rows.append(["", "total", "", "", f"{profile.macs:,}", f"{profile.params:,}", f"{profile.peak_bytes / KB:.1f}",
                 ""])
    widths = [max(len(c), *(len(r[j]) for r in rows)) for j, c in enumerate(COLUMNS)]
    lines = [_line(COLUMNS, widths), *(_line(r, widths) for r in rows)]
    return "\n".join(lines)


def _row(i: int, layer) -> list[str]:
    shape = "x".join(str(d) for d in layer.out_shape)
    return [str(i), layer.name, layer.op, shape, f"{layer.macs:,}", f"{layer.params:,}",
            f"{layer.live_bytes / KB:.1f}", str(layer.receptive_field)]


def _line(cells, widths) -> str:
    parts = [c.rjust(w) if name in RIGHT_ALIGNED else c.ljust(w) for c, w, name in zip(cells, widths, COLUMNS)]
    return "  ".join(parts).rstrip()
