"""Frontend test fixtures: seeded random networks built from the supported PyTorch ops, and small oracles.

`random_net(seed)` returns `(module, input_shape)`: a stem, 2-5 random blocks (conv with kernel 1/3/5/7, stride 1/2
and every padding form; depthwise with multiplier 1 or 2; residual add; concat; max/avg pooling with and without
padding; explicit zero pads; dropout/identity) and a random head (global pool + flatten, mean with or without
keepdim, or a flatten of a CxHxW map with H,W > 1 into Linear). Odd channel counts on purpose; BatchNorm statistics
are randomised so folding them is a real test.
"""

from __future__ import annotations

import io
import random
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn


class Residual(nn.Module):
    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class Concat(nn.Module):
    def __init__(self, a: nn.Module, b: nn.Module):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x):
        return torch.cat([self.a(x), self.b(x)], dim=1)


class Functional(nn.Module):
    """An activation or pad written as a function call instead of a module."""

    def __init__(self, kind: str, arg=None):
        super().__init__()
        self.kind, self.arg = kind, arg

    def forward(self, x):
        if self.kind == "relu":
            return F.relu(x)
        if self.kind == "torch.relu":
            return torch.relu(x)
        if self.kind == "relu6":
            return F.relu6(x)
        if self.kind == "hardtanh":
            return F.hardtanh(x, 0.0, 6.0)
        if self.kind == "clamp":
            return x.clamp(0, 6)
        return F.pad(x, self.arg)


class Head(nn.Module):
    def __init__(self, kind: str, features: int, classes: int):
        super().__init__()
        self.kind = kind
        self.fc = nn.Linear(features, classes)

    def forward(self, x):
        if self.kind == "mean":
            x = x.mean((2, 3))
        elif self.kind == "mean_keepdim":
            x = x.mean([-1, -2], keepdim=True).flatten(1)
        else:  # "view": NCHW flatten with H, W > 1 (the frontend permutes the Linear's columns)
            x = x.view(x.size(0), -1)
        return self.fc(x)


def randomize_bn(module: nn.Module, seed: int) -> nn.Module:
    """Non-trivial BatchNorm statistics and affine parameters, so folding BN changes the weights."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(0.3 * torch.randn(c, generator=g))
                m.running_var.copy_(0.5 + torch.rand(c, generator=g))
                m.weight.copy_(0.5 + 0.8 * torch.rand(c, generator=g))
                m.bias.copy_(0.2 * torch.randn(c, generator=g))
    return module


class _NetBuilder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        c, h, w = self.rng.choice([1, 3, 4]), self.rng.randint(15, 27), self.rng.randint(15, 27)
        self.input_shape = (1, c, h, w)
        self.x = torch.zeros(self.input_shape)
        self.layers: list[nn.Module] = []

    def add(self, layer: nn.Module) -> None:
        self.layers.append(layer)
        self.x = layer.eval()(self.x)

    @property
    def c(self) -> int:
        return self.x.shape[1]

    def min_hw(self) -> int:
        return min(self.x.shape[2], self.x.shape[3])

    def act(self) -> nn.Module:
        kind = self.rng.choice(["ReLU", "ReLU_inplace", "ReLU6", "relu", "torch.relu", "relu6", "hardtanh", "clamp",
                                "none"])
        if kind in ("ReLU", "ReLU6"):
            return getattr(nn, kind)()
        return nn.ReLU(inplace=True) if kind == "ReLU_inplace" else nn.Identity() if kind == "none" \
            else Functional(kind)

    def conv(self, cin: int, cout: int, stride: int | None = None) -> nn.Sequential:
        k = self.rng.choice([k for k in (1, 3, 5, 7) if k <= self.min_hw()])
        stride = stride or (self.rng.choice([1, 2]) if self.min_hw() >= 6 else 1)
        padding = self.rng.choice([k // 2, (k // 2, 0), "valid"] + (["same"] if stride == 1 else []))
        if padding == "valid" and self.min_hw() - k < 2:
            padding = k // 2
        layers = [nn.Conv2d(cin, cout, k, stride, padding, bias=self.rng.random() < 0.5)]
        if self.rng.random() < 0.75:
            layers.append(nn.BatchNorm2d(cout))
        return nn.Sequential(*layers, self.act())

    def depthwise(self) -> nn.Sequential:
        k, m = self.rng.choice([3, 5]), self.rng.choice([1, 1, 2])
        stride = self.rng.choice([1, 2]) if self.min_hw() >= 6 else 1
        c, cout = self.c, self.rng.choice([5, 7, 8, 11])
        return nn.Sequential(nn.Conv2d(c, c * m, k, stride, k // 2, groups=c, bias=False), nn.BatchNorm2d(c * m),
                             nn.ReLU6(), nn.Conv2d(c * m, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def block(self) -> None:
        kind = self.rng.choice(["conv", "depthwise", "residual", "concat", "pool", "pad", "misc"])
        c = self.c
        if kind == "conv":
            self.add(self.conv(c, self.rng.choice([3, 5, 7, 8, 11, 13, 16])))
        elif kind == "depthwise":
            self.add(self.depthwise())
        elif kind == "residual":
            body = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                 nn.Conv2d(c, c, 1), nn.BatchNorm2d(c))
            self.add(nn.Sequential(Residual(body), nn.ReLU()))
        elif kind == "concat":
            ca, cb = self.rng.choice([3, 5]), self.rng.choice([4, 7])
            a = nn.Sequential(nn.Conv2d(c, ca, 1), nn.ReLU())
            b = nn.Sequential(nn.Conv2d(c, cb, 3, 1, 1, bias=False), nn.BatchNorm2d(cb), nn.ReLU6())
            self.add(Concat(a, b))
        elif kind == "pool":
            self.add(self.pool())
        elif kind == "pad":
            pads = tuple(self.rng.randint(0, 2) for _ in range(4))
            pad = nn.ZeroPad2d(pads) if self.rng.random() < 0.5 else Functional("pad", pads)
            self.add(nn.Sequential(pad, nn.Conv2d(c, self.rng.choice([6, 9]), 3), self.act()))
        else:
            self.add(nn.Sequential(nn.Dropout(0.3), nn.Identity()))

    def pool(self) -> nn.Module:
        if self.min_hw() < 4:
            return nn.Identity()
        return self.rng.choice([
            nn.MaxPool2d(2), nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(2), nn.AvgPool2d(3, 1, 1),
            nn.AvgPool2d(3, 2, 1, count_include_pad=False), nn.AvgPool2d((3, 2), (2, 1)),
        ])

    def head(self) -> None:
        kind = self.rng.choice(["pool_flatten", "mean", "mean_keepdim", "view", "view_mlp"])
        classes = self.rng.choice([2, 5, 10])
        if kind == "pool_flatten":
            self.add(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(self.c, classes)))
        elif kind in ("mean", "mean_keepdim"):
            self.add(Head(kind, self.c, classes))
        else:
            if self.x[0].numel() > 1200:
                self.add(nn.MaxPool2d(2))
            self.add(Head("view", self.x[0].numel(), 16 if kind == "view_mlp" else classes))
            if kind == "view_mlp":
                self.add(nn.Sequential(nn.ReLU(), nn.Dropout(), nn.Linear(16, classes), nn.Softmax(dim=1)))


def make_random_net(seed: int) -> tuple[nn.Module, tuple[int, ...]]:
    """A random small CNN and its NCHW input shape; same seed, same network and weights."""
    torch.manual_seed(seed)
    nb = _NetBuilder(seed)
    nb.add(nb.conv(nb.c, nb.rng.choice([5, 8, 9, 12])))
    for _ in range(nb.rng.randint(2, 5)):
        nb.block()
    nb.head()
    return randomize_bn(nn.Sequential(*nb.layers), seed).eval(), nb.input_shape


@pytest.fixture
def random_net():
    return make_random_net


def export_onnx(module: nn.Module, input_shape, opset: int = 17, dynamo: bool = False) -> bytes:
    """The serialized ONNX model torch exports for `module` in eval mode (legacy TorchScript exporter by default)."""
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(input_shape),), f, opset_version=opset, dynamo=dynamo,
                          verbose=False)
    return f.getvalue()


@pytest.fixture(name="randomize_bn")
def randomize_bn_fixture():
    return randomize_bn


@pytest.fixture(name="export_onnx")
def export_onnx_fixture():
    return export_onnx
