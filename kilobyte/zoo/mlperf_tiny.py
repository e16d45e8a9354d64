"""Model zoo stage: the network shapes of the four MLPerf Tiny reference models (v1.x), as PyTorch modules.

The benchmark's models are what every MCU inference engine reports; these are their layer lists, built from code
(no weights are downloaded: the zoo's models start from PyTorch's initialisation):

    kws-dscnn     keyword spotting, DS-CNN (small): 49x10x1 MFCC -> conv 10x4/2 (64, TF "same" padding) ->
                  4 x [depthwise 3x3 -> pointwise 64], each with BN + ReLU -> global average pool -> FC 12.
    vww-mbv1      visual wake words, MobileNetV1 alpha 0.25: 96x96x3 -> conv 3x3/2 (8) -> 13 depthwise-separable
                  blocks (16 ... 256 channels, five stride-2) -> global average pool -> FC 2.
    ic-resnet8    image classification, ResNet-8 on CIFAR-10: 32x32x3 -> conv 3x3 (16) -> 3 residual stacks of
                  one basic block each (16, 32/2, 64/2; 1x1 projection shortcuts where the shape changes) ->
                  global average pool -> FC 10.
    ad-autoencoder  anomaly detection, the FC autoencoder: 640 -> 4 x FC 128 -> FC 8 -> 4 x FC 128 -> FC 640,
                  each hidden layer with BN + ReLU. Its input is one 640-value vector (1x1 pixel, 640 channels).

The reference models end in softmax (KWS, VWW, IC); like the rest of the zoo these end at the logits. Width `w`
scales every channel count (the reference sizes are w = 1).
"""

from __future__ import annotations

import torch
from torch import nn

from .blocks import PooledClassifier

KWS_INPUT = (49, 10)  # MFCC frames x coefficients
MBV1_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]


def _ch(channels: int, width: float) -> int:
    return max(1, round(channels * width))


def _conv_bn_relu(cin: int, cout: int, kernel=3, stride=1, padding=None, groups=1) -> list[nn.Module]:
    padding = (kernel // 2 if isinstance(kernel, int) else tuple(k // 2 for k in kernel)) if padding is None \
        else padding
    return [nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True)]


class DsCnn(PooledClassifier):
    """(N, 1, 49, 10) -> (N, classes)."""

    def __init__(self, width: float = 1.0, num_classes: int = 12, in_channels: int = 1):
        c = _ch(64, width)
        # TF "same" for a 10x4 kernel, stride 2 on 49x10: 4 rows above, 5 below, 1 column each side
        layers = [nn.ZeroPad2d((1, 1, 4, 5)), *_conv_bn_relu(in_channels, c, (10, 4), 2, 0)]
        for _ in range(4):
            layers += [*_conv_bn_relu(c, c, 3, groups=c), *_conv_bn_relu(c, c, 1)]
        super().__init__(nn.Sequential(*layers), c, num_classes)


class MobileNetV1(PooledClassifier):
    """(N, 3, H, W) -> (N, classes); `width` is MobileNetV1's alpha (0.25 for VWW)."""

    def __init__(self, width: float = 0.25, num_classes: int = 2, in_channels: int = 3):
        cin = _ch(32, width)
        layers = _conv_bn_relu(in_channels, cin, 3, 2)
        for channels, stride in MBV1_BLOCKS:
            cout = _ch(channels, width)
            layers += [*_conv_bn_relu(cin, cin, 3, stride, groups=cin), *_conv_bn_relu(cin, cout, 1)]
            cin = cout
        super().__init__(nn.Sequential(*layers), cin, num_classes)


class ResidualStack(nn.Module):
    """One ResNet-8 stack: conv-BN-ReLU-conv-BN plus the shortcut (1x1 conv when the shape changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn_relu(cin, cout, 3, stride),
                                  nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet8(PooledClassifier):
    """(N, 3, 32, 32) -> (N, classes)."""

    def __init__(self, width: float = 1.0, num_classes: int = 10, in_channels: int = 3):
        c16, c32, c64 = (_ch(c, width) for c in (16, 32, 64))
        super().__init__(nn.Sequential(*_conv_bn_relu(in_channels, c16), ResidualStack(c16, c16, 1),
                         ResidualStack(c16, c32, 2), ResidualStack(c32, c64, 2)), c64, num_classes)


class AutoEncoder(nn.Module):
    """(N, 640, 1, 1) -> (N, 640): the MLPerf Tiny anomaly-detection autoencoder."""

    def __init__(self, width: float = 1.0, num_classes: int = 640, in_channels: int = 640):
        super().__init__()
        hidden, code = _ch(128, width), _ch(8, width)
        sizes = [in_channels] + [hidden] * 4 + [code] + [hidden] * 4
        layers: list[nn.Module] = []
        for a, b in zip(sizes, sizes[1:]):
            layers += [nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(inplace=True)]
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(torch.flatten(x, 1)))


def build_kws(width: float = 1.0, num_classes: int = 12, in_channels: int = 1) -> nn.Module:
    return DsCnn(width, num_classes, in_channels)


def build_vww(width: float = 1.0, num_classes: int = 2, in_channels: int = 3) -> nn.Module:
    """MobileNetV1 0.25 at `width` 1 (the zoo's width multiplies VWW's alpha 0.25)."""
    return MobileNetV1(0.25 * width, num_classes, in_channels)


def build_resnet8(width: float = 1.0, num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    return ResNet8(width, num_classes, in_channels)


def build_autoencoder(width: float = 1.0, num_classes: int = 640, in_channels: int = 640) -> nn.Module:
    return AutoEncoder(width, num_classes, in_channels)
