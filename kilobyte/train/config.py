"""Training stage: `TrainConfig`, everything a training run depends on besides the model and the data.

A run is reproducible from (config, seed): the config is a frozen dataclass with a JSON form, and the seed is one of
its fields. The defaults are a recipe for small images on a CPU: SGD with Nesterov momentum, a one-cycle learning
rate, label smoothing, shift/rotate/scale augmentation, a 10 % validation split with early stopping, and BatchNorm
statistics recalibrated on clean data before every validation and at the end. `TrainConfig.plain()` is the loop
Kilobyte had before the recipe (Adam at a constant rate, nothing else), kept as the baseline the benchmarks compare
against.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

from ..errors import KilobyteError

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("onecycle", "cosine", "constant")


class TrainConfigError(KilobyteError):
    """A training configuration with a value outside its range (a negative rate, an unknown optimiser, ...)."""


@dataclass(frozen=True)
class TrainConfig:
    """One training run's settings. Rates are per batch of `batch_size` images.

    >>> c = TrainConfig(epochs=2, seed=3)
    >>> TrainConfig.from_json(c.to_json()) == c
    True
    >>> TrainConfig.plain(epochs=3).optimizer, TrainConfig.plain().augment
    ('adamw', False)
    """

    epochs: int = 20
    batch_size: int = 64
    optimizer: str = "sgd"  # "sgd" (Nesterov momentum) or "adamw"
    lr: float = 0.3  # the peak rate of the schedule (SGD; ~3e-3 suits AdamW)
    momentum: float = 0.9  # SGD only
    weight_decay: float = 5e-4
    schedule: str = "onecycle"  # "onecycle", "cosine" or "constant"
    warmup_fraction: float = 0.05  # of all steps: the rising part of the schedule (1 epoch of 20)
    label_smoothing: float = 0.1
    clip_grad_norm: float | None = 2.0  # largest gradient norm of a step (all parameters); keeps lr 0.3 from killing
    # networks with no norm before the classifier in their first steps; None: no clipping
    augment: bool = True
    augment_strength: float = 1.0  # scales shift, rotation and scale together (augment.py has the 1.0 values)
    random_scale: bool = True
    validation_fraction: float = 0.1  # carved from the training data when fit() is given no validation set
    patience: int | None = 5  # epochs without a best validation accuracy before stopping; None: never stop
    best_tolerance_se: float = 1.0  # an epoch counts as best within this many standard errors of the top accuracy
    recalibrate_bn: bool = True  # BatchNorm statistics from clean training images before validating and at the end
    keep_initial: bool = False  # validate the starting weights first (epoch 0): an epoch must match them to replace
    # them, so fine-tuning pretrained (e.g. inherited) weights never ends below where it started on validation
    resolution: int | None = None  # train (and validate) at this input size, resized bilinearly inside the loop
    seed: int = 0

    def __post_init__(self) -> None:
        _check(self.epochs >= 1, "epochs", self.epochs, "at least 1")
        _check(self.batch_size >= 1, "batch_size", self.batch_size, "at least 1")
        _check(self.optimizer in OPTIMIZERS, "optimizer", self.optimizer, " or ".join(OPTIMIZERS))
        _check(self.lr > 0, "lr", self.lr, "positive")
        _check(0 <= self.momentum < 1, "momentum", self.momentum, "in [0, 1)")
        _check(self.weight_decay >= 0, "weight_decay", self.weight_decay, "zero or positive")
        _check(self.schedule in SCHEDULES, "schedule", self.schedule, ", ".join(SCHEDULES))
        _check(0 <= self.warmup_fraction < 1, "warmup_fraction", self.warmup_fraction, "in [0, 1)")
        _check(self.clip_grad_norm is None or self.clip_grad_norm > 0, "clip_grad_norm", self.clip_grad_norm,
               "None or positive")
        _check(0 <= self.label_smoothing < 1, "label_smoothing", self.label_smoothing, "in [0, 1)")
        _check(self.augment_strength >= 0, "augment_strength", self.augment_strength, "zero or positive")
        _check(0 <= self.validation_fraction < 1, "validation_fraction", self.validation_fraction, "in [0, 1)")
        _check(self.patience is None or self.patience >= 1, "patience", self.patience, "None or at least 1")
        _check(self.best_tolerance_se >= 0, "best_tolerance_se", self.best_tolerance_se, "zero or positive")
        _check(self.resolution is None or self.resolution >= 1, "resolution", self.resolution, "None or positive")

    @classmethod
    def plain(cls, **overrides) -> TrainConfig:
        """The loop before the recipe: Adam at a constant 2e-3, cross-entropy, no augmentation, no validation split,
        BatchNorm statistics left as training's running averages."""
        base = dict(optimizer="adamw", lr=2e-3, weight_decay=0.0, schedule="constant", warmup_fraction=0.0,
                    label_smoothing=0.0, clip_grad_norm=None, augment=False, validation_fraction=0.0, patience=None,
                    recalibrate_bn=False)
        return cls(**{**base, **overrides})

    def replace(self, **changes) -> TrainConfig:
        return replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise TrainConfigError(f"training config: unknown field(s) {', '.join(unknown)}; "
                                   f"known: {', '.join(sorted(known))}")
        return cls(**data)


def _check(ok: bool, name: str, value, expected: str) -> None:
    if not ok:
        raise TrainConfigError(f"training config: {name}={value!r} must be {expected}")
