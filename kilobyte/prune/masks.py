"""Prune stage: which units go (the lowest scores of each layer) and the 0/1 masks that keep them at zero.

A layer's ratio α is the fraction of its units removed; it removes round(α x units) units, those with the lowest
scores (ties: the lower index first). The masks are multiplied into the parameters in place; `ParameterMasks` is
`fit`'s `on_step` callback, so retraining re-applies them after every optimiser step and the pruned weights stay
exactly 0.0 whatever momentum and weight decay do to them.

Channel masks cover more than the filter: the convolution's bias and the channel's BatchNorm scale and shift are
zeroed too, so the channel's output is exactly 0 after BN — in training mode as well (a channel of zeros has batch
mean 0, and 0 x anything + 0 = 0) — which is what removing it (channels.py) computes.
"""

from __future__ import annotations

import numpy as np

from .layers import ConvLayer


def removal_counts(layers: list[ConvLayer], ratios: dict[str, float], unit: str) -> dict[str, int]:
    """Per layer, the units that ratio α removes: round(α x units).

    >>> removal_counts([ConvLayer("a", 8, 4, 3, 3, 6, 6)], {"a": 0.5}, "filterlet")
    {'a': 36}
    """
    return {c.name: int(round(ratios.get(c.name, 0.0) * c.units(unit))) for c in layers}


def keep_lowest_removed(scores: np.ndarray, count: int) -> np.ndarray:
    """A boolean array shaped like `scores`: False for the `count` lowest scores (stable order), True elsewhere.

    >>> keep_lowest_removed(np.array([[0.3, 0.1], [0.1, 0.9]]), 2).tolist()
    [[True, False], [False, True]]
    """
    keep = np.ones(scores.size, bool)
    keep[np.argsort(scores.ravel(), kind="stable")[:count]] = False
    return keep.reshape(scores.shape)


def unit_keep(scores: dict[str, np.ndarray], counts: dict[str, int]) -> dict[str, np.ndarray]:
    """Per layer, the kept units (boolean, shaped like the layer's scores) after removing `counts[name]` lowest."""
    return {name: keep_lowest_removed(s, counts.get(name, 0)) for name, s in scores.items()}


def weight_mask(keep: np.ndarray, unit: str, weight_shape: tuple[int, ...]):
    """The (O, I, KH, KW) 0/1 float mask of a conv weight from its kept units."""
    import torch

    k = torch.from_numpy(keep.astype(np.float32))
    if unit == "filterlet":
        k = k[:, None, :, :]  # (O, 1, KH, KW): a filterlet is all Cin weights at one position
    elif unit == "channel":
        k = k[:, None, None, None]
    return k.expand(weight_shape).contiguous()


class ParameterMasks:
    """0/1 masks multiplied into parameters in place; call it as `fit(..., on_step=masks)`."""

    def __init__(self, pairs: list[tuple[object, object]]):
        self.pairs = pairs  # (parameter, mask of its shape)

    @classmethod
    def for_units(cls, module, keep: dict[str, np.ndarray], unit: str, norms: dict[str, str | None] | None = None):
        """Masks of each layer's weight from its kept units; for channels also its bias and the BatchNorm named in
        `norms[name]` (channels.py finds them)."""
        pairs = []
        for name, k in keep.items():
            conv = module.get_submodule(name)
            pairs.append((conv.weight, weight_mask(k, unit, tuple(conv.weight.shape))))
            if unit != "channel":
                continue
            channel = weight_mask(k, "channel", (len(k), 1, 1, 1)).flatten()
            per_channel = [conv.bias]
            if norms and norms.get(name):
                bn = module.get_submodule(norms[name])
                per_channel += [bn.weight, bn.bias]
            pairs += [(p, channel) for p in per_channel if p is not None]
        return cls(pairs)

    def apply(self) -> None:
        import torch

        with torch.no_grad():
            for p, m in self.pairs:
                p.mul_(m)

    def __call__(self, step: int, total_steps: int) -> None:
        self.apply()


def achieved_ratios(module, layers: list[ConvLayer], unit: str) -> dict[str, float]:
    """Per layer, the fraction of units whose weights are all exactly 0 (what the masks left)."""
    out = {}
    for c in layers:
        w = module.get_submodule(c.name).weight.detach()
        dims = {"filterlet": (1,), "channel": (1, 2, 3), "weight": ()}[unit]
        zero = (w == 0).all(dim=dims) if dims else (w == 0)
        out[c.name] = float(zero.sum().item() / c.units(unit))
    return out


def ratios_for_sparsity(layers: list[ConvLayer], scores: dict[str, np.ndarray], unit: str, goal: float,
                        max_ratio: float = 0.95, unit_weights: dict[str, int] | None = None) -> dict[str, float]:
    """Per-layer ratios that remove at least `goal` weights with the least Taylor score per weight: units are taken
    across layers in order of score / weights-per-unit (a filterlet of a wide layer holds more weights), and no layer
    gives up more than `max_ratio` of its units (nor, for channels, its last one). `unit_weights[name]`: the weights
    one unit of that layer takes with it (default: the unit's own; a channel also takes its consumer's input column).
    Stops short of `goal` only when every layer is at its limit.

    >>> a, b = ConvLayer("a", 2, 1, 1, 1, 4, 4), ConvLayer("b", 2, 1, 1, 1, 4, 4)
    >>> ratios_for_sparsity([a, b], {"a": np.array([1.0, 3.0]), "b": np.array([2.0, 4.0])}, "channel", 2)
    {'a': 0.5, 'b': 0.5}
    """
    sizes = np.array([(unit_weights or {}).get(c.name, c.unit_size(unit)) for c in layers])
    room = np.array([min(int(max_ratio * c.units(unit)), c.units(unit) - (unit == "channel")) for c in layers])
    per_weight = np.concatenate([scores[c.name].ravel() / size for c, size in zip(layers, sizes)])
    owner = np.concatenate([np.full(c.units(unit), i) for i, c in enumerate(layers)])
    order = np.argsort(per_weight, kind="stable")
    # a layer's units come in its own score order, so its cap drops exactly its units past the room-th in `order`
    rank = np.empty(len(order), np.int64)
    for i in range(len(layers)):
        mine = order[owner[order] == i]
        rank[mine] = np.arange(len(mine))
    candidates = order[rank[order] < room[owner[order]]]
    taken = np.cumsum(sizes[owner[candidates]])
    count = min(int(np.searchsorted(taken, goal - 1e-9)) + 1, len(candidates)) if goal > 0 else 0
    removed = np.bincount(owner[candidates[:count]], minlength=len(layers))
    return {c.name: int(removed[i]) / c.units(unit) for i, c in enumerate(layers)}
