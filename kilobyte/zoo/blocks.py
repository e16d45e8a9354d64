"""Model zoo stage: shared building blocks for the mobile (inverted-residual) networks.

MobileNetV2, MbV2-RD, MnasNet-B1 and ProxylessNAS-Mobile are all the same skeleton: a 3x3 stride-2 stem, a list of
inverted-residual ("MB") blocks, a 1x1 head convolution, global average pooling, dropout and a linear classifier.
Each family module only supplies its block list (`BlockSpec`s) and channel rounding; `MobileNet` builds the layers.
Only ops the frontend understands are used (Conv2d, BatchNorm2d, ReLU/ReLU6, `+`, AdaptiveAvgPool2d(1), flatten,
Dropout, Linear), and `forward` has no data-dependent control flow so torch.fx can trace it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of `divisor`, never dropping more than 10 % (torchvision's rule).

    >>> make_divisible(32 * 0.35), make_divisible(1280 * 1.4), make_divisible(16 * 0.5)
    (16, 1792, 8)
    """
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:  # rounding down lost more than 10 %: go one step up instead
        rounded += divisor
    return rounded


def conv_bn_act(
    cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: type[nn.Module] | None = nn.ReLU6
) -> nn.Sequential:
    """Conv2d (no bias, 'same'-style padding k//2) -> BatchNorm2d -> optional activation."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class BlockSpec:
    """One inverted-residual block: expand ratio, output channels (before width scaling), depthwise kernel, stride.

    `residual=False` forbids the identity add even when shapes match (MnasNet's first separable conv, ProxylessNAS
    blocks whose published config has no shortcut); otherwise the add follows the shape, as in torchvision.
    `depthwise=False` drops the depthwise convolution (stride 1 only): 1x1 expand -> 1x1 project, the
    receptive-field-redistributed block of MCUNetV2's search space (`kilobyte.nas.space`).
    """

    expand: int
    out_channels: int
    kernel: int = 3
    stride: int = 1
    residual: bool = True
    depthwise: bool = True


class InvertedResidual(nn.Module):
    """MB block: 1x1 expand (skipped when expand == 1) -> kxk depthwise (skipped with `spec.depthwise=False`) -> 1x1
    linear project, plus identity add.

    Shapes: (N, Cin, H, W) -> (N, Cin*e, H, W) -> (N, Cin*e, H/s, W/s) -> (N, Cout, H/s, W/s). The residual add is
    used only when the block keeps the shape (stride 1 and Cin == Cout), as in MobileNetV2.
    """

    def __init__(self, cin: int, cout: int, spec: BlockSpec, act: type[nn.Module] = nn.ReLU6):
        super().__init__()
        hidden = cin * spec.expand
        layers: list[nn.Module] = []
        if spec.expand != 1:
            layers.append(conv_bn_act(cin, hidden, 1, act=act))
        if spec.depthwise:
            layers.append(conv_bn_act(hidden, hidden, spec.kernel, stride=spec.stride, groups=hidden, act=act))
        elif spec.stride != 1:
            raise ValueError(f"a block without depthwise convolution cannot have stride {spec.stride}")
        layers.append(conv_bn_act(hidden, cout, 1, act=None))  # linear bottleneck: no activation
        self.conv = nn.Sequential(*layers)
        self.use_residual = spec.residual and spec.stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:  # fixed at construction, so fx traces a single path
            return x + self.conv(x)
        return self.conv(x)


def init_weights(model: nn.Module) -> None:
    """torchvision's MobileNetV2 initialisation (Kaiming-normal fan-out convs, unit BN, small Linear).

    PyTorch's default init shrinks activations layer after layer; after ~50 layers an untrained net's features are
    ~1e-10, which no int8 calibration can represent (TFLM then refuses the model). This keeps untrained zoo models
    numerically sane for profiling, quantisation and bit-exactness tests.
    """
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


class PooledClassifier(nn.Module):
    """`features` -> global average pool -> one linear layer: the head of the zoo's small CNNs and MLPerf Tiny models.
    Subclasses build `features` (its last layer has `channels` outputs) and then call this `__init__`."""

    def __init__(self, features: nn.Module, channels: int, num_classes: int):
        super().__init__()
        self.features = features
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))  # (N, C, 1, 1)
        return self.classifier(torch.flatten(x, 1))  # (N, classes)


class MobileNet(nn.Module):
    """Stem conv3x3 (stride `stem_stride`, 2 by default) -> MB blocks -> 1x1 head conv -> global avg pool -> dropout
    -> linear.

    `features` is an nn.Sequential whose children are the stem, each MB block and the head, in order, so analyses
    (receptive field, per-block memory) can walk it block by block.
    """

    def __init__(
        self,
        stem_channels: int,
        blocks: Sequence[tuple[int, BlockSpec]],
        head_channels: int,
        num_classes: int,
        in_channels: int = 3,
        dropout: float = 0.2,
        act: type[nn.Module] = nn.ReLU6,
        stem_stride: int = 2,
    ):
        super().__init__()
        layers: list[nn.Module] = [conv_bn_act(in_channels, stem_channels, 3, stride=stem_stride, act=act)]
        cin = stem_channels
        for cout, spec in blocks:  # cout is the width-scaled spec.out_channels
            layers.append(InvertedResidual(cin, cout, spec, act=act))
            cin = cout
        layers.append(conv_bn_act(cin, head_channels, 1, act=act))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(head_channels, num_classes))
        init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)  # (N, head, H/32, W/32)
        x = torch.flatten(self.pool(x), 1)  # (N, head)
        return self.classifier(x)  # (N, num_classes)


def expand_stages(stages: Sequence[tuple[int, int, int, int, int]]) -> list[BlockSpec]:
    """Turn MobileNetV2-style stage rows (t, c, n, s, k) into one BlockSpec per block; only the first is strided."""
    specs = []
    for expand, channels, repeats, stride, kernel in stages:
        for i in range(repeats):
            specs.append(BlockSpec(expand, channels, kernel, stride if i == 0 else 1))
    return specs


def scale_blocks(specs: Sequence[BlockSpec], width: float) -> list[tuple[int, BlockSpec]]:
    """Pair each spec with its width-scaled, divisible-by-8 output channel count."""
    return [(make_divisible(spec.out_channels * width), spec) for spec in specs]
