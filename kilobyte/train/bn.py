"""Training stage: BatchNorm recalibration — running statistics recomputed from data for the weights as they are.

During training each BatchNorm layer keeps an exponential average of batch statistics, which lags behind weights
that move quickly (a high learning rate, the last epochs of a schedule) and describes augmented rather than clean
images. `recalibrate_bn` resets the statistics and recomputes them as a plain average over a few batches of clean
images, forward only. TinyNAS runs it before evaluating every subnet of a supernet (whose inherited statistics
belong to no subnet; `recalibrate_batches` on the same fixed batches for every subnet); the training recipe runs it
before every validation and once at the end.
"""

from __future__ import annotations

import numpy as np

from ..data.resize import resize_images
from .evaluate import to_nchw_tensor


def recalibrate_bn(module, x, batches: int = 20, batch_size: int = 64, *, resolution: int | None = None,
                   seed: int = 0):
    """Recompute the running mean and variance of every BatchNorm layer of `module` in place; returns `module`.

    `x`: NHWC numpy images or an NCHW torch tensor; `batches` batches of `batch_size` images drawn without
    replacement (seeded by `seed`; if `x` is smaller, as many whole batches as it holds, or one batch of all of it).
    Each layer ends with the average of its batch means and of its batch (unbiased) variances — momentum None,
    PyTorch's cumulative average.
    `resolution`: resize the images bilinearly first, as a network trained at that resolution sees them. Weights and
    the module's train/eval mode are unchanged.
    """
    import torch

    xt = x if isinstance(x, torch.Tensor) else to_nchw_tensor(np.asarray(x, dtype=np.float32))
    order = torch.randperm(len(xt), generator=torch.Generator().manual_seed(seed))[:batches * batch_size]
    if len(order) > batch_size:  # whole batches only: a last batch of one image has no variance
        order = order[:len(order) // batch_size * batch_size]
    return recalibrate_batches(module, (resize_images(xt[order[i:i + batch_size]], resolution)
                                        for i in range(0, len(order), batch_size)))


def recalibrate_batches(module, batches):
    """Recompute the running statistics of every BatchNorm layer of `module` in place from `batches` (NCHW
    tensors, used as they are and in order); returns `module`. The layers end with the cumulative average of the
    batches' statistics (momentum None while it runs); weights, momenta and the train/eval mode are unchanged."""
    import torch
    from torch import nn

    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms:
        return module
    momenta = [m.momentum for m in norms]
    was_training = module.training
    try:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        module.train()
        with torch.no_grad():
            for xb in batches:
                module(xb)
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        module.train(was_training)
    return module
