"""Search stage: training the TinyNAS supernet, resumably, and scoring its subnets.

Two phases (thesis Appendix, papers/search-specs.md A.3): first the largest subnet alone, then the supernet, every
batch sampling `subnets_per_batch` random subnets (plus the largest and the smallest with `sandwich`), averaging
their gradients into one SGD step (momentum 0.9, cosine learning rate, light weight decay; the supernet phase's peak
rate twice the warm-up's), from residual blocks that start as identities.

Averaged, not summed (issue 26): the supernet phase restarts the cosine rate at its peak from the trained largest
network, and a sum of 6 subnets' gradients made its first steps 6x the largest network's — on 26 letters the
first step took the largest network's loss from 2.67 to 3.02, and within an epoch every subnet sat at ln 26 (chance)
for good. The mean keeps one step the size of one network's, whatever `subnets_per_batch` is (docs/search.md,
"Why the supernet collapsed").

Residual blocks start as identities (`zero_residual`, BigNAS's initialisation; issue 26): with the MobileNet
initialisation's unit BN scale at the end of every residual block, each of a stage's blocks adds a unit-variance
output from the start; the preset's 4 + 6 epochs then left the largest network at 24 % on digits and 19 % (warm-up)
on letters, and the random subnets, which drop or shrink those blocks, near chance on digits (ratio to the largest
0.52). Zeroing those scales makes every block a learned correction to its input: warm-up 44 % / 66 %, random
subnets 46 % / 78 %, ratio 0.83 / 0.94, at no cost per step; the supernet phase's peak rate at twice the warm-up's
(`supernet_lr`) then adds 12 / 7 points to the random subnets (ratio 0.95 / 0.95). In-place distillation,
progressive shrinking, no smallest subnet or fewer subnets were each measured and did no better (docs/search.md,
"Why random subnets lagged the largest"); they stay settings, off by default.

Resume: a checkpoint (weights, optimiser, epoch) is written atomically after every epoch; each epoch draws its batch
order, augmentation and subnets from a generator seeded by (seed, phase, epoch), so a run restarted from the
checkpoint of epoch e computes exactly what the uninterrupted run computed for epochs e+1, ...

`SubnetScorer` gives a subnet's fitness: BatchNorm recalibrated on fixed training batches (20 x 64 in the thesis),
then top-1 accuracy on the validation split, on one thread so that every worker (process pool or Ray) computes the
same number. `open_fitness` runs it on `parallel.open_pool`'s workers, each building the same scorer from one
`ScorerSpec` (the space, the trained weights as bytes, the calibration and validation images).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..atomic import save_torch
from ..train.bn import recalibrate_batches
from . import parallel  # parallel.open_pool looked up on the module: tests/nas/test_core.py spies on it there
from .space import Arch, MBSpace
from .supernet import SuperNet
from .task import CLASSIFY

PHASE_SEED = {  # separates the phases' random streams
    "largest": 1, "supernet": 2, "finetune": 3}


@dataclass(frozen=True)
class SupernetTraining:
    """The supernet's training settings; the defaults are the measured ones (docs/search.md's table)."""

    largest_epochs: int = 4
    supernet_epochs: int = 6
    subnets_per_batch: int = 4
    sandwich: bool = True  # + the largest and the smallest subnet every batch
    batch_size: int = 64
    lr: float = 0.05  # per 64 images (the thesis: 0.05 per 256)
    weight_decay: float = 5e-5
    momentum: float = 0.9
    shift: int = 2  # random shift augmentation, pixels at the data's native resolution (0: none)
    zero_residual: bool = True  # a fresh supernet's residual blocks start as identities (`zero_residual_scales`)
    distill: float = 0.0  # in-place distillation (OFA, BigNAS): weight of the largest's detached soft predictions
    # in the other subnets' loss (1 - distill: the labels'); measured no better on 4 + 6 epochs
    supernet_lr: float | None = 0.1  # the supernet phase's peak rate (None: `lr`): twice `lr` trained every
    # subnet better in the preset's 6 epochs on digits and letters (docs/search.md; 4x was worse)
    progressive: bool = False  # progressive shrinking (OFA): over the supernet phase's thirds, only the kernel, then
    # kernel and depth, then every dimension elastic; measured worse on 6 epochs
    smallest: bool = True  # with `sandwich`, the smallest subnet too (False: the largest only)


def train_phase(net, phase: str, x: torch.Tensor, y, cfg: SupernetTraining, seed: int,
                checkpoint: Path | None = None, progress: bool = False, epochs: int | None = None,
                task=CLASSIFY) -> list[dict]:
    """Train for one phase, resuming from `checkpoint` when it holds this phase: "largest" (the supernet's largest
    subnet only), "supernet" (sampled subnets per batch) or "finetune" (`net` is a standalone module). A checkpoint
    of an earlier phase only initialises the weights (the supernet starts from the trained largest network).
    `y`: the `task`'s targets of `x` (`task.Classify`: labels; `task.Detect`: boxes and labels). Returns the
    per-epoch history."""
    epochs = epochs if epochs is not None else cfg.largest_epochs if phase == "largest" else cfg.supernet_epochs
    steps_per_epoch = math.ceil(len(x) / cfg.batch_size)
    opt, peak = task.optimizer(net.parameters(), cfg, phase)
    start, history = 0, []
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        if state["phase"] == phase:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start, history = state["epoch"] + 1, state["history"]
    if phase == "largest" and start == 0 and cfg.zero_residual:
        zero_residual_scales(net)
    total = max(1, epochs * steps_per_epoch)
    bar = tqdm(total=total, initial=start * steps_per_epoch, desc=f"training ({phase})", unit="step",
               disable=not progress, leave=False)
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
                group["lr"] = 0.5 * peak * (1 + math.cos(math.pi * t))
            idx = order[step * cfg.batch_size:(step + 1) * cfg.batch_size]
            xb, yb = task.augment(x[idx], task.take(y, idx), g, cfg.shift)
            opt.zero_grad(set_to_none=True)
            archs = batch_archs(net, phase, cfg, rng, epoch * 3 // max(1, epochs))
            losses += _backward(net, archs, xb, yb, cfg.distill if phase == "supernet" else 0.0, task)
            if task.clip is not None:
                torch.nn.utils.clip_grad_norm_(net.parameters(), task.clip)
            opt.step()
            bar.update(1)
        if isinstance(net, SuperNet):
            net.set_active(net.largest_arch)
        history.append({"phase": phase, "epoch": epoch, "loss": float(np.mean(losses))})
        if checkpoint is not None:
            save_torch({"phase": phase, "epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict(),
                        "history": history}, checkpoint)
    bar.close()
    return history


def _backward(net, archs: list, xb: torch.Tensor, yb, distill: float, task=CLASSIFY) -> list[float]:
    """Accumulates the mean over `archs` of their losses' gradients (one step is one network's, not 6: module doc);
    with `distill` (a classifier's), every arch after the first (the largest) learns from a mix of the labels and
    the first's soft predictions (detached). Returns each arch's loss."""
    if distill and task.kind != "classify":
        raise ValueError("in-place distillation is a classifier's (soft class predictions)")
    teacher, losses = None, []
    for arch in archs:
        if arch is not None:
            net.set_active(arch)
        logits = net(xb)  # (N, classes), or a detector's head maps
        loss = task.loss(logits, yb)
        if teacher is not None:
            soft = -(teacher * F.log_softmax(logits, 1)).sum(1).mean()
            loss = (1 - distill) * loss + distill * soft
        elif distill:
            teacher = F.softmax(logits.detach(), 1)
        (loss / len(archs)).backward()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def zero_residual_scales(net: SuperNet) -> None:
    """The scale of the last BN of every residual block set to 0, so that each block starts as the identity
    (BigNAS's initialisation). Elastic depth drops a stage's later blocks and elastic kernel / expand shrink them:
    blocks that add a learned correction to their input leave a subnet's features close to the largest network's,
    where blocks each adding a unit-variance output from the start make the largest network depend on all of them
    (our reading of the measurements in docs/search.md, "Why random subnets lagged the largest")."""
    for block in net.blocks:
        if block.block.residual:  # the held block's (the largest network's), whichever subnet is active
            block.layers[-1].bn.weight.zero_()


ELASTIC = ({"kernel"}, {"kernel", "depth"}, {"kernel", "depth", "expand"})  # progressive shrinking's thirds


def _restrict(arch: Arch, largest: Arch, elastic: set) -> Arch:
    """`arch` with the dimensions not in `elastic` set to the largest network's."""
    blocks = tuple(tuple((k if "kernel" in elastic else kl, e if "expand" in elastic else el)
                         for (k, e), (kl, el) in zip(stage, big)) for stage, big in zip(arch.blocks, largest.blocks))
    return replace(arch, blocks=blocks, depths=arch.depths if "depth" in elastic else largest.depths,
                   first_kernel=arch.first_kernel if "kernel" in elastic else largest.first_kernel,
                   stage_widths=arch.stage_widths if "expand" in elastic else largest.stage_widths)


def batch_archs(net, phase: str, cfg: SupernetTraining, rng: np.random.Generator, third: int = 2) -> list:
    """The subnets one batch trains: None = the module as it is (finetune), the largest, or a sample (+ sandwich)."""
    if phase == "finetune":
        return [None]
    if phase == "largest":
        return [net.largest_arch]
    archs = [net.space.sample(rng) for _ in range(cfg.subnets_per_batch)]
    smallest = net.space.smallest()
    if cfg.progressive:
        archs = [_restrict(a, net.largest_arch, ELASTIC[third]) for a in archs]
        smallest = _restrict(smallest, net.largest_arch, ELASTIC[third])
    ends = ([net.largest_arch] + ([smallest] if cfg.smallest else [])) if cfg.sandwich else []
    if cfg.distill:  # the largest first: its predictions teach the others
        return ends[:1] + archs + ends[1:] if cfg.sandwich else [net.largest_arch, *archs]
    return archs + ends


def load_weights(net, checkpoint: Path) -> None:
    """The model weights of `checkpoint` (any phase) into `net`."""
    net.load_state_dict(torch.load(checkpoint, weights_only=False)["model"])


class SubnetScorer:
    """Fitness of subnets of one trained supernet: recalibrated BN, then the task's score on the validation split
    (accuracy, or a detector's mAP@0.5), single-threaded."""

    def __init__(self, net: SuperNet, calib_x: torch.Tensor, val_x: torch.Tensor, val_y,
                 calib_batches: int = 20, batch_size: int = 64, task=CLASSIFY):
        self.net = net
        self.calib = [calib_x[i * batch_size:(i + 1) * batch_size] for i in range(calib_batches)
                      if i * batch_size < len(calib_x)]
        self.val_x, self.val_y, self.task = val_x, val_y, task

    @torch.no_grad()
    def __call__(self, arch: Arch) -> float:
        with parallel.one_thread():
            net = self.net
            net.set_active(arch)
            recalibrate_batches(net, self.calib)
            net.eval()
            return self.task.score(net, self.val_x, self.val_y)


NEAR_CHANCE_SHARE = 0.25  # random subnets recovering less than this share of the largest's gain over chance ...
NEAR_CHANCE_MARGIN = 0.05  # ... or less than 5 points over chance: the supernet did not learn (`supernet_check`)
CHECK_SUBNETS = 4  # random subnets scored after the supernet phase
CHECK_SEED = 4  # their generator: (seed, CHECK_SEED), apart from the phases' streams (PHASE_SEED)


def _pct(accuracy: float | None) -> str:
    return "n/a" if accuracy is None else f"{accuracy * 100:.1f} %"


@torch.no_grad()
def score_without_side_effects(net: SuperNet, scorer: SubnetScorer, archs: list[Arch]) -> list[float]:
    """`scorer`'s accuracy of each arch, the supernet's state (BN statistics, active subnet) left as it was: a
    resumed search, which reloads a checkpoint instead, then trains exactly what an uninterrupted one trains."""
    state = {k: v.clone() for k, v in net.state_dict().items()}
    active = net.active
    try:
        return [scorer(arch) for arch in archs]
    finally:
        net.load_state_dict(state)
        net.set_active(active)


def supernet_check(net: SuperNet, scorer: SubnetScorer, seed: int, largest_warmup: float | None,
                   chance_acc: float) -> dict:
    """Validation accuracy after the supernet phase of the largest, the smallest and `CHECK_SUBNETS` random subnets
    (each after BN recalibration), and whether the supernet learned: `searched` is False, with the `reason` in one
    line, when the random subnets' mean is within max(NEAR_CHANCE_MARGIN, NEAR_CHANCE_SHARE x (largest after
    warm-up - chance)) of chance — evolution's scores are then noise and its pick is not a searched result.
    `largest_warmup` None (unknown) counts as chance."""
    rng = np.random.default_rng([seed, CHECK_SEED])
    randoms = [net.space.sample(rng) for _ in range(CHECK_SUBNETS)]
    largest, smallest, *random = score_without_side_effects(
        net, scorer, [net.largest_arch, net.space.smallest(), *randoms])
    mean = float(np.mean(random))
    gain = 0.0 if largest_warmup is None else largest_warmup - chance_acc
    floor = chance_acc + max(NEAR_CHANCE_MARGIN, NEAR_CHANCE_SHARE * gain)
    searched = mean >= floor
    reason = None if searched else (
        f"the supernet did not learn: its random subnets score {mean * 100:.1f} % (chance {chance_acc * 100:.1f} %, "
        f"needed {floor * 100:.1f} %; the largest network had {_pct(largest_warmup)} after its warm-up), so the "
        f"winner is not a searched result")
    return {"chance": chance_acc, "largest_warmup": largest_warmup, "largest": largest, "smallest": smallest,
            "random": random, "random_mean": mean, "threshold": floor, "searched": searched, "reason": reason}


# -- scoring subnets on the pool's workers (TinyNAS's fitness) ------------------------------------------------------
@dataclass(frozen=True)
class ScorerSpec:
    """What every worker builds the same `SubnetScorer` from (pickled to process-pool and Ray workers)."""

    space: dict  # MBSpace JSON
    width: float
    resolution: int
    weights: bytes  # torch.save(state_dict) of the trained supernet
    calib_x: np.ndarray  # NCHW float32 at the resolution
    val_x: np.ndarray
    val_y: object  # the task's targets: labels (numpy), or a detector's (boxes, labels)
    task: object = CLASSIFY

    @staticmethod
    def of(net, calib_x, val_x, val_y, task=CLASSIFY) -> ScorerSpec:
        buf = io.BytesIO()
        torch.save(net.state_dict(), buf)
        targets = np.ascontiguousarray(val_y) if task.kind == "classify" else val_y
        return ScorerSpec(net.space.to_json(), net.space.widths[0], net.space.resolutions[0], buf.getvalue(),
                          np.ascontiguousarray(calib_x), np.ascontiguousarray(val_x), targets, task)


def build_scorer(spec: ScorerSpec):
    """The trained supernet and its `SubnetScorer`, rebuilt from a spec on a worker."""
    net = SuperNet(MBSpace.from_json(spec.space), spec.width, spec.resolution)
    net.load_state_dict(torch.load(io.BytesIO(spec.weights), weights_only=False))
    targets = torch.from_numpy(spec.val_y) if spec.task.kind == "classify" else spec.val_y
    return SubnetScorer(net, torch.from_numpy(spec.calib_x), torch.from_numpy(spec.val_x), targets, task=spec.task)


def scorer_worker(spec: ScorerSpec):
    """The task a TinyNAS worker runs (`open_pool`'s `make_worker`): an architecture's JSON -> its validation
    accuracy with inherited weights."""
    scorer = build_scorer(spec)

    def run(arch_json: str) -> float:
        return scorer(Arch.from_json(arch_json))
    return run


@contextmanager
def open_fitness(spec: ScorerSpec, workers: int = 1, ray_address: str | None = None):
    """A `Fitness` over the spec's subnets on `open_pool`'s workers (this process, a local process pool, or Ray):
    a generation's subnets are submitted at once and yielded as each finishes; `fitness.nodes` counts them per Ray
    node."""
    with parallel.open_pool(scorer_worker, spec, workers, ray_address) as pool:
        def fitness(archs: list[Arch]) -> Iterator[tuple[int, float]]:
            for i, arch in enumerate(archs):
                pool.submit(i, arch.dumps())
            for _ in archs:
                yield pool.collect()
        fitness.nodes = pool.nodes  # Ray node id -> evaluations it ran (tests check the work was spread)
        yield fitness
