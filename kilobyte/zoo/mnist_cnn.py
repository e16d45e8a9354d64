"""Model zoo stage: `mnist-cnn`, the demo network — small enough to train on 2 CPU cores in seconds.

Layers (28×28×1 input, width 1.0; every conv is followed by BatchNorm):
    conv3x3 1→16, ReLU                       28×28×16
    conv3x3 16→32 stride 2, ReLU             14×14×32
    residual: dw3x3 32, ReLU → conv1x1 32→32, then + input, ReLU
    conv3x3 32→64 stride 2, ReLU             7×7×64
    global average pool → Linear 64→10
It exercises every kind of node the memory planner cares about (in-place depthwise, in-place residual add,
aliasing reshape) at ~2.2 M MACs.
"""

from __future__ import annotations

from torch import nn

from .blocks import make_divisible


def _cbr(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1, relu: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU()) if relu else nn.Sequential(*layers)


class MnistCnn(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 10, in_channels: int = 1):
        super().__init__()
        c1, c2, c3 = (max(4, make_divisible(c * width, 4)) for c in (16, 32, 64))
        self.stem = nn.Sequential(_cbr(in_channels, c1), _cbr(c1, c2, stride=2))
        self.dw = _cbr(c2, c2, groups=c2)
        self.pw = _cbr(c2, c2, k=1, relu=False)
        self.act = nn.ReLU()
        self.head = _cbr(c2, c3, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c3, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.act(x + self.pw(self.dw(x)))  # (1, c2, 14, 14)
        x = self.pool(self.head(x))  # (1, c3, 1, 1)
        return self.fc(x.flatten(1))


def build(width: float = 1.0, num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return MnistCnn(width, num_classes, in_channels)
