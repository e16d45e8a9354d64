"""Model zoo stage: small CIFAR-size CNNs in the style of DTMM's evaluation models (VGG-11, ResNet-12).

DTMM (Han et al.) prunes VGG-11 and ResNet-12 for a Cortex-M55; its unpruned int8 models are 1.2-1.9 MB. These are
the same layer patterns scaled down to ~100-300 k parameters so they fit a 256 kB / 1 MB MCU before any pruning:

    vgg-small     8 x [conv3x3 -> BN -> ReLU] in VGG-11's 1-1-2-2-2 grouping, widths 16-32-64-64-64,
                  MaxPool 2x2 after each of the first four groups, global avg pool, Linear.
    resnet-small  conv3x3 (16) stem, then basic blocks [conv3x3-BN-ReLU-conv3x3-BN (+ shortcut) -> ReLU]:
                  1 x 16 ch, 2 x 32 ch (first stride 2), 2 x 64 ch (first stride 2); 1x1 conv + BN projection
                  shortcut where the shape changes; global avg pool, Linear. 12 weight layers (stem, 10 convs, FC).

Both end in global average pooling, so any input from 16 px up works (28-64 px is the intended range), and both
take `in_channels` (1 for MNIST-like data). Width `w` scales every channel count to max(4, round(c * w)). Given its
input `resolution`, vgg-small drops the max-pools that would halve a 1 px map, so it also takes 8 px inputs
(scikit-learn's digits): 8 -> 4 -> 2 -> 1, the fourth pool left out. From 16 px up every pool stays.
"""

from __future__ import annotations

import torch
from torch import nn

from .blocks import PooledClassifier

# VGG-11 groups (channels, convs per group); a 2x2 max-pool follows every group but the last.
VGG_GROUPS = [(16, 1), (32, 1), (64, 2), (64, 2), (64, 2)]

# ResNet stages (channels, blocks, first stride).
RESNET_STAGES = [(16, 1, 1), (32, 2, 2), (64, 2, 2)]


def scale_channels(channels: int, width: float) -> int:
    """Width-scaled channel count for the small CNNs: rounded, never below 4."""
    return max(4, round(channels * width))


def _conv_bn(cin: int, cout: int, kernel: int = 3, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class VggSmall(PooledClassifier):
    """VGG-11-shaped CNN: (N, Cin, H, W) -> 4 pooled groups + 1 unpooled -> (N, C, H/16, W/16) -> (N, classes)."""

    def __init__(self, width: float = 1.0, num_classes: int = 10, in_channels: int = 3,
                 resolution: int | None = None):
        layers: list[nn.Module] = []
        cin, size = in_channels, resolution
        for index, (channels, convs) in enumerate(VGG_GROUPS):
            cout = scale_channels(channels, width)
            for _ in range(convs):
                layers += [*_conv_bn(cin, cout), nn.ReLU(inplace=True)]
                cin = cout
            if index < len(VGG_GROUPS) - 1 and (size is None or size >= 2):  # no pool of a 1 px map
                layers.append(nn.MaxPool2d(2))
                size = None if size is None else size // 2
        super().__init__(nn.Sequential(*layers), cin, num_classes)


class BasicBlock(nn.Module):
    """ResNet basic block; the shortcut is a 1x1 conv + BN when stride or channels change, else identity."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(cin, cout, stride=stride), nn.ReLU(inplace=True), *_conv_bn(cout, cout))
        if stride != 1 or cin != cout:
            self.shortcut: nn.Module = nn.Sequential(*_conv_bn(cin, cout, kernel=1, stride=stride))
        else:
            self.shortcut = nn.Identity()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))  # (N, cout, H/stride, W/stride)


class ResNetSmall(PooledClassifier):
    """ResNet-12-like CNN: stem -> 5 basic blocks in 3 stages -> (N, C, H/4, W/4) -> (N, classes)."""

    def __init__(self, width: float = 1.0, num_classes: int = 10, in_channels: int = 3):
        cin = scale_channels(RESNET_STAGES[0][0], width)
        layers: list[nn.Module] = [*_conv_bn(in_channels, cin), nn.ReLU(inplace=True)]
        for channels, blocks, stride in RESNET_STAGES:
            cout = scale_channels(channels, width)
            for i in range(blocks):
                layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        super().__init__(nn.Sequential(*layers), cin, num_classes)


def build_vgg(width: float = 1.0, num_classes: int = 10, in_channels: int = 3,
              resolution: int | None = None) -> nn.Module:
    """VGG-11-style small CNN (see module docstring; `resolution`: its square input, None: 16 px or more).

    >>> len([m for m in build_vgg(resolution=8).features if isinstance(m, nn.MaxPool2d)])
    3
    """
    return VggSmall(width, num_classes, in_channels, resolution)


def build_resnet(width: float = 1.0, num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """ResNet-12-style small CNN (see module docstring)."""
    return ResNetSmall(width, num_classes, in_channels)
