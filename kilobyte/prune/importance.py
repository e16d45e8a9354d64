"""Prune stage: importance of pruning units by the first-order Taylor criterion (DTMM Eq. 2, after Molchanov et al.).

Removing a set of weights w changes the loss by ΔL ≈ |∂L/∂w · w| to first order. For one batch b with gradient g_b of
the batch's mean loss, a unit's score is |Σ_{w in unit} g_b(w)·w| — the dot product over the unit's weights (for a
filterlet its Cin weights; for a channel its whole filter; for a single weight |g·w|) — and the scores are averaged
over the batches. Averaging absolute values per batch (not the absolute value of the averaged gradient) follows
Molchanov et al.'s accumulation; it also makes the sum of the removed units' scores an upper bound of every batch's
first-order |ΔL| for removing them together, which is how the scheduler's accuracy budget uses it.

The module is scored in eval mode (BatchNorm uses its running statistics: the network that will be deployed); the
loss is cross-entropy without label smoothing. Weights already zero score 0.
"""

from __future__ import annotations

import numpy as np

from ..train import to_nchw_tensor
from .layers import UNITS, ConvLayer


def unit_products(grad_times_weight, unit: str):
    """Reduce an (O, I, KH, KW) tensor of g·w to one signed sum per unit: (O, KH, KW) per filterlet, unchanged per
    weight, (O,) per channel."""
    if unit == "filterlet":
        return grad_times_weight.sum(dim=1)
    if unit == "channel":
        return grad_times_weight.sum(dim=(1, 2, 3))
    if unit == "weight":
        return grad_times_weight
    raise ValueError(f"unit {unit!r}: use one of {', '.join(UNITS)}")


def taylor_scores(module, layers: list[ConvLayer], x: np.ndarray, y: np.ndarray, unit: str = "filterlet",
                  batch_size: int = 64, max_batches: int | None = None) -> dict[str, np.ndarray]:
    """Per layer name, the Taylor score of each unit (`ConvLayer.score_shape(unit)`), averaged over batches of the
    NHWC images `x` with labels `y` (the first `max_batches` batches if given). Leaves `module` in eval mode with its
    gradients cleared."""
    import torch

    convs = {name: module.get_submodule(name) for name in (c.name for c in layers)}
    totals = {name: torch.zeros(c.score_shape(unit), dtype=torch.float64) for name, c in zip(convs, layers)}
    loss_fn = torch.nn.CrossEntropyLoss()
    starts = list(range(0, len(x), batch_size))[:max_batches]
    module.eval()
    for start in starts:
        module.zero_grad(set_to_none=True)
        xb = to_nchw_tensor(np.asarray(x[start:start + batch_size], np.float32))
        loss = loss_fn(module(xb), torch.from_numpy(np.asarray(y[start:start + batch_size], np.int64)))
        loss.backward()
        with torch.no_grad():
            for name, conv in convs.items():
                product = (conv.weight.grad * conv.weight).double()  # (O, I, KH, KW)
                totals[name] += unit_products(product, unit).abs()
    module.zero_grad(set_to_none=True)
    return {name: (t / max(len(starts), 1)).numpy() for name, t in totals.items()}
