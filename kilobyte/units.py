"""Sizes for people: the one way a byte count is written in messages, hints and reports.

kB of 1024 bytes with one decimal (the papers' unit: MCUNetV2's "539 kB" is 551,936 B / 1024). A leaf module: the
CLI's reports and the targets' fit hints both write sizes, and targets must not import the CLI.
"""

from __future__ import annotations

KB = 1024


def kb(n: int) -> str:
    """`n` bytes as kB with one decimal, e.g. 1536 -> '1.5 kB'."""
    return f"{n / KB:.1f} kB"
