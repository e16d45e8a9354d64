"""Training stage: learning-rate schedules as a factor of the peak rate, per optimiser step.

- "onecycle" (Smith & Topin 2019, as torch's `OneCycleLR` with its cosine annealing): rises from 1/25 of the peak
  along a half cosine during warm-up, then falls along a half cosine to ~0. (torch's version also cycles SGD
  momentum; this one keeps momentum fixed.)
- "cosine" (Loshchilov & Hutter 2017, one period, no restarts): a linear warm-up from ~0, then a half cosine to 0.
- "constant": a linear warm-up if one is asked for, then the peak rate throughout.
"""

from __future__ import annotations

import math

ONECYCLE_START = 1 / 25  # OneCycleLR's div_factor
ONECYCLE_END = ONECYCLE_START / 1e4  # and its final_div_factor


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """The fraction of the peak rate for optimiser step `step` (0-based) of `total_steps`.

    >>> [round(lr_factor(s, 10, 4, "cosine"), 3) for s in (0, 3, 4, 9)]
    [0.25, 1.0, 1.0, 0.067]
    >>> [round(lr_factor(s, 10, 4, "onecycle"), 3) for s in (0, 4, 9)]
    [0.04, 1.0, 0.0]
    """
    if schedule == "onecycle":
        if step < warmup_steps:
            return _cos_between(ONECYCLE_START, 1.0, step / warmup_steps)
        return _cos_between(1.0, ONECYCLE_END, (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps))
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "cosine":
        return _cos_between(1.0, 0.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "constant":
        return 1.0
    raise ValueError(f"unknown schedule '{schedule}'")


def _cos_between(start: float, end: float, t: float) -> float:
    """From `start` at t=0 to `end` at t=1 along a half cosine."""
    return end + (start - end) * (1 + math.cos(math.pi * min(1.0, t))) / 2
