"""Search stage: training the TinyNAS supernet, resumably, and scoring its subnets.

Two phases (thesis Appendix, papers/search-specs.md A.3): first the largest subnet alone, then the supernet, every
batch sampling `subnets_per_batch` random subnets (plus the largest and the smallest with `sandwich`), summing their
gradients into one SGD step (momentum 0.9, cosine learning rate, light weight decay).

Resume: a checkpoint (weights, optimiser, epoch) is written atomically after every epoch; each epoch draws its batch
order, augmentation and subnets from a generator seeded by (seed, phase, epoch), so a run restarted from the
checkpoint of epoch e computes exactly what the uninterrupted run computed for epochs e+1, ...

`SubnetScorer` gives a subnet's fitness: BatchNorm recalibrated on fixed training batches (20 x 64 in the thesis),
then top-1 accuracy on the validation split, on one thread so that every worker (process pool or Ray) computes the
same number.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .space import Arch
from .supernet import SuperNet

PHASE_SEED = {  # separates the phases' random streams
    "largest": 1, "supernet": 2, "finetune": 3}


@dataclass(frozen=True)
class SupernetTraining:
    largest_epochs: int = 4
    supernet_epochs: int = 6
    subnets_per_batch: int = 4
    sandwich: bool = True
    batch_size: int = 64
    lr: float = 0.05  # per 64 images (the thesis: 0.05 per 256)
    weight_decay: float = 5e-5
    momentum: float = 0.9
    shift: int = 2  # random shift augmentation, pixels at the data's native resolution (0: none)


def shift_batch(x: torch.Tensor, pixels: int, g: torch.Generator) -> torch.Tensor:
    """Each image moved by a random integer offset in [-pixels, pixels] per axis, zero-filled."""
    if pixels <= 0:
        return x
    n, _, h, w = x.shape
    padded = F.pad(x, (pixels, pixels, pixels, pixels))
    dy = torch.randint(0, 2 * pixels + 1, (n,), generator=g)
    dx = torch.randint(0, 2 * pixels + 1, (n,), generator=g)
    rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None].expand(n, x.shape[1], h, w + 2 * pixels)
    out = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :].expand(n, x.shape[1], h, w)
    return out.gather(3, cols)


def atomic_save(obj, path: Path) -> None:
    """torch.save to a temporary name, then rename: a kill leaves the old checkpoint or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train_phase(net, phase: str, x: torch.Tensor, y: torch.Tensor, cfg: SupernetTraining, seed: int,
                checkpoint: Path | None = None, progress: bool = False, epochs: int | None = None) -> list[dict]:
    """Train for one phase, resuming from `checkpoint` when it holds this phase: "largest" (the supernet's largest
    subnet only), "supernet" (sampled subnets per batch) or "finetune" (`net` is a standalone module). A checkpoint
    of an earlier phase only initialises the weights (the supernet starts from the trained largest network).
    Returns the per-epoch history."""
    from tqdm import tqdm

    epochs = epochs if epochs is not None else cfg.largest_epochs if phase == "largest" else cfg.supernet_epochs
    steps_per_epoch = math.ceil(len(x) / cfg.batch_size)
    opt = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                          nesterov=True)
    start, history = 0, []
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        if state["phase"] == phase:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start, history = state["epoch"] + 1, state["history"]
    total = max(1, epochs * steps_per_epoch)
    bar = tqdm(total=total, initial=start * steps_per_epoch, desc=f"training ({phase})", unit="step",
               disable=not progress, leave=False)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(start, epochs):
        g = torch.Generator().manual_seed(seed * 1000 + PHASE_SEED[phase] * 100 + epoch)
        torch.manual_seed(seed * 1000 + PHASE_SEED[phase] * 100 + epoch)  # dropout draws from the global stream
        rng = np.random.default_rng([seed, PHASE_SEED[phase], epoch])
        order = torch.randperm(len(x), generator=g)
        net.train()
        losses = []
        for step in range(steps_per_epoch):
            t = (epoch * steps_per_epoch + step) / total
            for group in opt.param_groups:
                group["lr"] = 0.5 * cfg.lr * (1 + math.cos(math.pi * t))
            idx = order[step * cfg.batch_size:(step + 1) * cfg.batch_size]
            xb, yb = shift_batch(x[idx], cfg.shift, g), y[idx]
            opt.zero_grad(set_to_none=True)
            for arch in _batch_archs(net, phase, cfg, rng):
                if arch is not None:
                    net.set_active(arch)
                loss = loss_fn(net(xb), yb)
                loss.backward()
                losses.append(loss.item())
            opt.step()
            bar.update(1)
        if isinstance(net, SuperNet):
            net.set_active(net.largest_arch)
        history.append({"phase": phase, "epoch": epoch, "loss": float(np.mean(losses))})
        if checkpoint is not None:
            atomic_save({"phase": phase, "epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict(),
                          "history": history}, checkpoint)
    bar.close()
    return history


def _batch_archs(net, phase: str, cfg: SupernetTraining, rng: np.random.Generator) -> list:
    """The subnets one batch trains: None = the module as it is (finetune), the largest, or a sample (+ sandwich)."""
    if phase == "finetune":
        return [None]
    if phase == "largest":
        return [net.largest_arch]
    archs = [net.space.sample(rng) for _ in range(cfg.subnets_per_batch)]
    return archs + ([net.largest_arch, net.space.smallest()] if cfg.sandwich else [])


def load_weights(net, checkpoint: Path) -> None:
    """The model weights of `checkpoint` (any phase) into `net`."""
    net.load_state_dict(torch.load(checkpoint, weights_only=False)["model"])


class SubnetScorer:
    """Fitness of subnets of one trained supernet: recalibrated BN, validation accuracy (single-threaded)."""

    def __init__(self, net: SuperNet, calib_x: torch.Tensor, val_x: torch.Tensor, val_y: torch.Tensor,
                 calib_batches: int = 20, batch_size: int = 64):
        self.net = net
        self.calib = [calib_x[i * batch_size:(i + 1) * batch_size] for i in range(calib_batches)
                      if i * batch_size < len(calib_x)]
        self.val_x, self.val_y = val_x, val_y

    @torch.no_grad()
    def __call__(self, arch: Arch) -> float:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            net = self.net
            net.set_active(arch)
            recalibrate(net, self.calib)
            net.eval()
            correct = 0
            for i in range(0, len(self.val_x), 250):
                correct += int((net(self.val_x[i:i + 250]).argmax(1) == self.val_y[i:i + 250]).sum())
            return correct / len(self.val_x)
        finally:
            torch.set_num_threads(threads)


@torch.no_grad()
def recalibrate(module: torch.nn.Module, batches) -> None:
    """BatchNorm running statistics re-estimated as the cumulative average over `batches` (train-mode forward)."""
    bns = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    module.train()
    for xb in batches:
        module(xb)
    for m, momentum in zip(bns, saved):
        m.momentum = momentum
    module.eval()
