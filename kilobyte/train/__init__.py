"""Training stage: a deterministic training recipe for small classifiers on NHWC numpy datasets, on the CPU.

`fit(module, x, y, TrainConfig(...))` is the recipe (recipe.py): SGD or AdamW under a one-cycle or cosine schedule,
label smoothing, batch augmentation (augment.py), BatchNorm recalibration (bn.py), a validation split with early
stopping, an optional training resolution. `float_accuracy` and `int8_accuracy` (evaluate.py) measure the float
module and the quantised graph (`quantise_module`). Used by the demo, the accuracy tests and architecture search.
"""

from __future__ import annotations

import numpy as np

from .augment import augment_batch
from .bn import recalibrate_batches, recalibrate_bn
from .config import TrainConfig, TrainConfigError
from .evaluate import float_accuracy, int8_accuracy, quantise_module, to_nchw_tensor
from .recipe import EpochStats, TrainResult, fit

__all__ = ["EpochStats", "TrainConfig", "TrainConfigError", "TrainResult", "augment_batch", "fit", "float_accuracy",
           "int8_accuracy", "quantise_module", "recalibrate_batches", "recalibrate_bn", "to_nchw_tensor",
           "train_classifier"]


def train_classifier(module, x: np.ndarray, y: np.ndarray, *, epochs: int = 3, seed: int = 0, progress: bool = False,
                     **config):
    """Train `module` in place with the recipe; returns it in eval mode. Other keyword arguments are `TrainConfig`
    fields (batch_size, lr, optimizer, ...)."""
    return fit(module, x, y, TrainConfig(epochs=epochs, seed=seed, **config), progress=progress).module
