"""Search stage: pruning during training — dynamic pruning with feedback (DPF, Lin et al. 2020), as μNAS prunes its
candidates (papers/003 §3.6; papers/search-specs.md C.3–C.4; issue #15 item 5).

Training keeps the dense weights and a 0/1 mask. The forward pass uses the masked network; the gradient with respect
to the masked tensor is applied to the dense one unchanged (straight-through), so a pruned weight keeps learning and
comes back when its magnitude overtakes a kept one at the next mask update. Masks are recomputed from the dense
weights every 16 optimiser steps between the start and end of the pruning window (fractions of all steps; μNAS on
MNIST prunes in epochs 3–18 of 30, the defaults 0.1 and 0.6), towards the cubic schedule's sparsity
s_t = s_f + (s_i - s_f) (1 - (t - t0) / n)^3 with s_i = 0 and s_f the target; from the end of the window on the mask
stays at the target. One global quantile decides over all prunable elements; biases, BatchNorm and the classifier
are never pruned.

- `unstructured`: each conv / dense weight by magnitude; the result is the dense module with the pruned weights 0.
- `structured`: each output channel or dense unit by the L2 norm of its weights (dpf_channels.py says which, and
  which must stay). The mask multiplies the layer's output after BN and ReLU — masking the weights alone would leave
  BatchNorm emitting its shift for the dead channel, and its batch variance of 0 would scale the channel's gradient
  by 1/sqrt(eps). The result is a smaller architecture of the space with the kept weights copied.

`train_pruned` trains one candidate that way with the training recipe (`fit`, its `on_step` callback).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.utils import parametrize

from .. import train as training  # training.fit looked up when called: tests/nas/test_core.py spies on it
from ..errors import PruneError
from ..prune.masks import keep_lowest_removed
from .dpf_channels import channel_groups, shrink_module
from .unas_build import build_module, network
from .unas_space import UArch, UnasSpace

MODES = ("none", "unstructured", "structured")


def cubic_sparsity(step: int, start: int, end: int, target: float, initial: float = 0.0) -> float:
    """The cubic schedule's sparsity at optimiser step `step` of a window [start, end] (steps).

    >>> [round(cubic_sparsity(t, 100, 200, 0.8), 4) for t in (50, 100, 150, 200, 300)]
    [0.0, 0.0, 0.7, 0.8, 0.8]
    """
    t = min(max(step, start), end)
    return target + (initial - target) * (1 - (t - start) / max(end - start, 1)) ** 3


class _StraightThrough(torch.autograd.Function):
    """x * mask forward; the gradient passes to x unmasked (DPF's feedback to the dense tensor)."""

    @staticmethod
    def forward(ctx, x, mask):
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _WeightMask(torch.nn.Module):
    """A parametrization: the layer's `weight` is its dense original times `mask`."""

    def __init__(self, shape):
        super().__init__()
        self.register_buffer("mask", torch.ones(shape))

    def forward(self, weight):
        return _StraightThrough.apply(weight, self.mask)


def _keep_highest(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """A 0/1 float mask over the flat `scores`: 0 for the round(sparsity x n) lowest (ties: the lower index first,
    `prune.masks.keep_lowest_removed`, the rule `kilobyte prune` removes units by), 1 elsewhere."""
    keep = keep_lowest_removed(scores.detach().numpy(), round(sparsity * len(scores)))
    return torch.from_numpy(keep.astype(np.float32))


def _prunable_steps(net) -> list[int]:
    """Conv and dense steps except the classifier (the last step)."""
    return [i for i, s in enumerate(net.steps[:-1]) if s.kind in ("conv", "dense")]


class UnstructuredMasks:
    """A mask on every conv and hidden dense weight of a `build_module` network, by global magnitude."""

    def __init__(self, module, net):
        self.module = module
        self.layers = [module.layers[i][0] for i in _prunable_steps(net)]
        for layer in self.layers:
            parametrize.register_parametrization(layer, "weight", _WeightMask(layer.weight.shape))
        self.size = sum(layer.weight.numel() for layer in self.layers)

    def masks(self) -> list[torch.Tensor]:
        return [layer.parametrizations.weight[0].mask for layer in self.layers]

    def update(self, sparsity: float) -> None:
        """Zero the round(sparsity x size) dense weights of smallest magnitude, keep the rest."""
        with torch.no_grad():
            dense = [layer.parametrizations.weight.original for layer in self.layers]
            flat = torch.cat([w.abs().flatten() for w in dense])
            keep = _keep_highest(flat, sparsity)
            for mask, part in zip(self.masks(), torch.split(keep, [w.numel() for w in dense])):
                mask.copy_(part.view_as(mask))

    def sparsity(self) -> float:
        return float(sum((m == 0).sum().item() for m in self.masks()) / self.size)

    def finish(self, space: UnasSpace, arch: UArch):
        """(the module with the masked weights baked in — pruned ones exactly 0.0 — arch unchanged)."""
        achieved = self.sparsity()
        for layer in self.layers:
            parametrize.remove_parametrizations(layer, "weight", leave_parametrized=True)
        return self.module.eval(), arch, achieved


class StructuredMasks:
    """A channel mask per group (dpf_channels.py) on the outputs of the group's layers, by global L2 norm."""

    def __init__(self, module, space: UnasSpace, arch: UArch, net):
        self.module = module
        self.groups = channel_groups(space, arch, net)
        self.masks = {g.producer: torch.ones(g.channels) for g in self.groups}
        self.hooks = [module.layers[i].register_forward_hook(self._hook(self.masks[g.producer]))
                      for g in self.groups for i in g.members]
        # weights removed with one channel of a group: the channel's row in every member
        self.row_sizes = {g.producer: sum(module.layers[i][0].weight[0].numel() for i in g.members)
                          for g in self.groups}

    @staticmethod
    def _hook(mask):
        def hook(layer, inputs, output):  # output (N, C, H, W) or (N, units)
            shape = (1, -1) + (1,) * (output.ndim - 2)
            return _StraightThrough.apply(output, mask.view(shape))
        return hook

    def scores(self) -> dict[int, torch.Tensor]:
        """Per group, the L2 norm of each output channel's (unit's) dense producer weights."""
        weights = {g.producer: self.module.layers[g.producer][0].weight.detach() for g in self.groups}
        return {p: w.flatten(1).norm(dim=1) for p, w in weights.items()}

    def update(self, sparsity: float) -> None:
        """Remove the round(sparsity x channels) channels of smallest norm over all groups, then give each group back
        its best channels up to its minimum."""
        if not self.groups:
            return
        scores = self.scores()
        flat = torch.cat([scores[g.producer] for g in self.groups])
        keep = _keep_highest(flat, sparsity)
        for g, part in zip(self.groups, torch.split(keep, [g.channels for g in self.groups])):
            if part.sum() < g.minimum:
                part[torch.argsort(scores[g.producer], descending=True, stable=True)[:g.minimum]] = 1.0
            self.masks[g.producer].copy_(part)

    def channel_sparsity(self) -> float:
        total = sum(g.channels for g in self.groups)
        return float(sum((m == 0).sum().item() for m in self.masks.values()) / total) if total else 0.0

    def sparsity(self) -> float:
        """The fraction of the groups' weights (every member's rows) that the masked channels remove."""
        total = sum(self.row_sizes[g.producer] * g.channels for g in self.groups)
        removed = sum(self.row_sizes[p] * (m == 0).sum().item() for p, m in self.masks.items())
        return float(removed / total) if total else 0.0

    def finish(self, space: UnasSpace, arch: UArch):
        """(the pruned architecture's module with the kept weights, that architecture, the achieved sparsity)."""
        achieved = self.sparsity()
        for h in self.hooks:
            h.remove()
        keep = {p: m.numpy() > 0 for p, m in self.masks.items()}
        small, small_arch = shrink_module(space, arch, self.module, keep)
        return small, small_arch, achieved


class DPF:
    """The `on_step` callback of `fit`: recomputes `masks` every `every` optimiser steps inside the pruning window
    ([start, end] as fractions of all steps) on the cubic schedule, sets the target at the window's end and keeps it.
    `updates` records (step, sparsity) of every mask update."""

    def __init__(self, masks, target: float, start: float = 0.1, end: float = 0.6, every: int = 16):
        if not 0 <= start < end <= 1:
            raise PruneError(f"DPF: the pruning window [{start}, {end}] must satisfy 0 <= start < end <= 1")
        self.masks, self.target, self.start, self.end, self.every = masks, target, start, end, every
        self.frozen = False
        self.updates: list[tuple[int, float]] = []

    def window(self, total_steps: int) -> tuple[int, int]:
        return round(self.start * total_steps), round(self.end * total_steps)

    def __call__(self, step: int, total_steps: int) -> None:
        t0, t1 = self.window(total_steps)
        if self.frozen or step < t0:
            return
        if step >= t1:
            self.frozen = True
        elif step % self.every:
            return
        sparsity = cubic_sparsity(step, t0, t1, self.target)
        self.masks.update(sparsity)
        self.updates.append((step, sparsity))


@dataclass
class PruneResult:
    module: object  # trained, eval mode: see train_pruned
    arch: UArch  # the pruned architecture (structured), or the given one
    sparsity: float  # achieved: the fraction of prunable weights that are zero (unstructured) or removed


def train_pruned(space: UnasSpace, arch: UArch, sparsity: float, mode: str, train_x: np.ndarray,
                 train_y: np.ndarray, config, *, start: float = 0.1, end: float = 0.6,
                 every: int = 16) -> PruneResult:
    """Train `arch` with `fit` under `config`, pruning to `sparsity` by DPF in `mode` (see the module doc).

    The module starts from torch's generator seeded with `config.seed`. With mode "none" or sparsity 0 this is
    `fit` as configured. When pruning, no validation split is carved and nothing stops early: `fit` would restore
    the best validation epoch's weights, which may be one from before the masks reached the target.
    Structured: the result's module is `build_module(space, result.arch)` with the kept weights and BatchNorm
    statistics; unstructured: the trained module itself, its pruned weights exactly 0.0.
    """
    if mode not in MODES:
        raise PruneError(f"pruning mode {mode!r}: use one of {', '.join(MODES)}")
    if not 0 <= sparsity < 1:
        raise PruneError(f"target sparsity {sparsity}: must be in [0, 1)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        module = build_module(space, arch)
    if mode == "none" or sparsity == 0:
        training.fit(module, train_x, train_y, config)
        return PruneResult(module.eval(), arch, 0.0)
    net = network(space, arch)
    masks = UnstructuredMasks(module, net) if mode == "unstructured" else StructuredMasks(module, space, arch, net)
    dpf = DPF(masks, sparsity, start, end, every)
    training.fit(module, train_x, train_y, config.replace(validation_fraction=0.0, patience=None), on_step=dpf)
    return PruneResult(*masks.finish(space, arch))
