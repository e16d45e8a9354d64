"""Training stage: `fit`, the training recipe — a classifier, NHWC numpy images and a `TrainConfig` in, a trained
module and its per-epoch history out.

One epoch: shuffle, then per batch augment (augment.py), resize to the configured resolution, a cross-entropy step
with label smoothing, and the scheduled learning rate (schedule.py); then BatchNorm recalibration on clean images
(bn.py) and validation. Validation images come from `val` or are carved from the training images; the weights of
the best epoch are restored at the end, and training stops after `patience` epochs without a best one.

"Best" allows for the noise of a small validation set: an epoch is best if its accuracy is within
`best_tolerance_se` standard errors of the top accuracy so far, so of two epochs the validation set cannot tell
apart, the later one wins — it trained longer, at a lower rate. (With 400 images at 98.5 %, one standard error is
0.6 %, 2.4 images; a strict maximum let such noise pick a mid-schedule epoch.)

All randomness — the split, the order, the augmentation, and anything the module draws from torch's global generator
(dropout) — follows from `config.seed`, without changing the caller's global generator: two runs with the same config
on the same machine give identical weights.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
from tqdm import tqdm

from ..data.resize import resize_images
from .augment import augment_batch
from .bn import recalibrate_bn
from .config import TrainConfig
from .evaluate import float_accuracy, to_nchw_tensor
from .schedule import lr_factor


@dataclass(frozen=True)
class EpochStats:
    epoch: int  # 1-based
    loss: float  # mean training loss (augmented images, smoothed labels)
    val_accuracy: float | None  # None without validation
    lr: float  # the rate at the epoch's last step
    seconds: float  # training and validation


@dataclass
class TrainResult:
    module: object  # the trained torch module, in eval mode
    config: TrainConfig
    history: list[EpochStats] = field(default_factory=list)
    best_epoch: int | None = None  # whose weights `module` holds (0: the starting ones, `keep_initial`); None
    # without validation (the last epoch's)
    stopped_early: bool = False
    initial_val_accuracy: float | None = None  # the starting weights' (`keep_initial`)

    @property
    def seconds(self) -> float:
        return sum(e.seconds for e in self.history)

    @property
    def best_val_accuracy(self) -> float | None:
        if self.best_epoch == 0:
            return self.initial_val_accuracy
        return None if self.best_epoch is None else self.history[self.best_epoch - 1].val_accuracy

    def to_dict(self) -> dict:
        return {"config": asdict(self.config), "history": [asdict(e) for e in self.history],
                "best_epoch": self.best_epoch, "stopped_early": self.stopped_early, "seconds": self.seconds,
                "initial_val_accuracy": self.initial_val_accuracy}


@dataclass(frozen=True)
class _Data:
    x: object  # (N, C, H, W) float32 torch tensor: training images
    y: object  # (N,) int64 torch tensor
    val_x: np.ndarray | None  # (M, H, W, C) validation images
    val_y: np.ndarray | None


def fit(module, train_x: np.ndarray, train_y: np.ndarray, config: TrainConfig | None = None,
        val: tuple[np.ndarray, np.ndarray] | None = None, progress: bool = False,
        on_step: Callable[[int, int], None] | None = None) -> TrainResult:
    """Train `module` in place on NHWC float32 images `train_x` with integer labels `train_y`.

    `val`: validation images and labels; if None, `config.validation_fraction` of the training images are held out
    (none if 0, and then there is no early stopping). `progress`: a tqdm bar per epoch.
    `on_step(step, total_steps)`: called after every optimiser step, with the number of steps taken so far (1 after
    the first) and the number the schedule plans for (steps per epoch x epochs; fewer are taken if training stops
    early). Not called by BatchNorm recalibration or validation, which take no step. Pruning during training
    (nas/dpf.py) updates its masks here.
    """
    import torch

    config = config or TrainConfig()
    data = _split(train_x, train_y, config, val)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return _Loop(module, data, config, progress, on_step).run()


def _split(x: np.ndarray, y: np.ndarray, config: TrainConfig, val) -> _Data:
    import torch

    if len(x) != len(y):
        raise ValueError(f"fit: {len(x)} images but {len(y)} labels")
    if val is None and config.validation_fraction > 0:
        order = np.random.default_rng(config.seed).permutation(len(x))
        n_val = max(1, round(len(x) * config.validation_fraction))
        val = (x[order[:n_val]], y[order[:n_val]])
        x, y = x[order[n_val:]], y[order[n_val:]]
    val_x, val_y = (None, None) if val is None else (np.asarray(val[0], np.float32), np.asarray(val[1]))
    return _Data(to_nchw_tensor(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(y, np.int64)), val_x, val_y)


class _Loop:
    """The state of one run: optimiser, step counter, generator, best weights so far."""

    def __init__(self, module, data: _Data, config: TrainConfig, progress: bool, on_step=None):
        import torch

        self.module, self.data, self.config, self.progress = module, data, config, progress
        self.on_step = on_step
        n = len(data.x)
        self.steps_per_epoch = n // config.batch_size if n >= config.batch_size else 1
        self.total_steps = self.steps_per_epoch * config.epochs
        self.warmup_steps = round(config.warmup_fraction * self.total_steps)
        self.optimizer = make_optimizer(module, config)
        self.loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=config.label_smoothing)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.step = 0

    def run(self) -> TrainResult:
        result = TrainResult(self.module, self.config)
        best_state, top = None, 0.0
        if self.config.keep_initial and self.data.val_x is not None:  # epoch 0: the weights it starts from
            result.initial_val_accuracy = top = self.validate()
            result.best_epoch = 0
            best_state = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        for epoch in range(1, self.config.epochs + 1):
            t0 = time.perf_counter()
            loss = self.train_epoch(epoch)
            acc = self.validate()
            result.history.append(EpochStats(epoch, loss, acc, self.current_lr(), time.perf_counter() - t0))
            self.report(result.history[-1])
            if acc is None:
                continue
            top = max(top, acc)
            if counts_as_best(acc, top, len(self.data.val_y), self.config.best_tolerance_se):
                result.best_epoch = epoch
                best_state = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
            elif self.config.patience is not None and epoch - result.best_epoch >= self.config.patience:
                result.stopped_early = True
                break
        if best_state is not None:
            self.module.load_state_dict(best_state)  # its BatchNorm statistics are the ones it was validated with
        elif self.config.recalibrate_bn:
            self.recalibrate()
        self.module.eval()
        return result

    def train_epoch(self, epoch: int) -> float:
        import torch

        c, bs = self.config, self.config.batch_size
        order = torch.randperm(len(self.data.x), generator=self.generator)
        bar = tqdm(range(self.steps_per_epoch), desc=f"epoch {epoch}/{c.epochs}", unit="step", leave=False,
                   disable=not self.progress)
        self.module.train()
        total = 0.0
        for i in bar:
            idx = order[i * bs:(i + 1) * bs]
            x = self.data.x[idx]  # (B, C, H, W)
            if c.augment:
                x = augment_batch(x, self.generator, c.augment_strength, c.random_scale)
            loss = self.train_step(resize_images(x, c.resolution), self.data.y[idx])
            total += loss
            bar.set_postfix(loss=f"{loss:.3f}")
        bar.close()
        return total / self.steps_per_epoch

    def train_step(self, x, y) -> float:
        import torch

        factor = lr_factor(self.step, self.total_steps, self.warmup_steps, self.config.schedule)
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.lr * factor
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.module(x), y)
        loss.backward()
        if self.config.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.config.clip_grad_norm)
        self.optimizer.step()
        self.step += 1
        if self.on_step is not None:
            self.on_step(self.step, self.total_steps)
        return float(loss.item())

    def validate(self) -> float | None:
        if self.data.val_x is None:
            return None
        if self.config.recalibrate_bn:
            self.recalibrate()
        return float_accuracy(self.module, self.data.val_x, self.data.val_y, resolution=self.config.resolution)

    def recalibrate(self) -> None:
        recalibrate_bn(self.module, self.data.x, resolution=self.config.resolution, seed=self.config.seed)

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def report(self, e: EpochStats) -> None:
        if not self.progress:
            return
        val = "" if e.val_accuracy is None else f"  val accuracy {e.val_accuracy * 100:.1f} %"
        tqdm.write(f"epoch {e.epoch}/{self.config.epochs}  loss {e.loss:.3f}{val}  ({e.seconds:.1f} s)")


def counts_as_best(acc: float, top: float, n_val: int, tolerance_se: float) -> bool:
    """Whether validation accuracy `acc` is within `tolerance_se` standard errors of the top accuracy `top` on
    `n_val` images (binomial standard error at `top`).

    >>> counts_as_best(0.985, 0.9875, 400, 1.0), counts_as_best(0.97, 0.9875, 400, 1.0)
    (True, False)
    >>> counts_as_best(0.985, 0.9875, 400, 0.0)
    False
    """
    se = math.sqrt(top * (1 - top) / n_val)
    return acc >= top - tolerance_se * se - 1e-12


def make_optimizer(module, config: TrainConfig):
    """SGD with Nesterov momentum or AdamW; weight decay on conv and linear weights only (not biases or norms)."""
    import torch

    params = [p for p in module.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim > 1], "weight_decay": config.weight_decay},
              {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum, nesterov=config.momentum > 0)
    return torch.optim.AdamW(groups, lr=config.lr)
