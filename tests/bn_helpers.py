"""BatchNorm state for tests: trained-looking statistics and affine parameters, so that BN folding and BN slicing
are exercised (fresh BatchNorm layers are the identity: mean 0, var 1, weight 1, bias 0)."""

from __future__ import annotations

import torch


def randomise_bn(module: torch.nn.Module, seed: int) -> None:
    """Every BatchNorm2d of `module` gets random running mean/var and affine weight/bias, seeded."""
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
