"""Search stage: one μNAS architecture, two builders — the IR graph (for resources) and the PyTorch module (for
training), from one resolved op list (`network`), so they cannot disagree.

`network(space, arch)` walks the architecture with shapes and writes what the genes leave implicit (unas_space.py's
module doc): clipped kernels and pools, the parallel blocks' channel rule and 1x1 follow-up, the max-pool + zero-pad +
add that ties pending outputs together, flatten, FC layers and the classifier. `build_graph` emits it through the IR
builder directly (no tracing; BatchNorm folded, ReLU fused, as `quantize()`'s input looks after
`prepare_for_inference`); `build_module` gives the equivalent `nn.Module` (Conv2d + BatchNorm2d + ReLU, F.pad, +,
flatten, Linear), which `from_torch` + `prepare_for_inference` turn into the same graph (tests/nas/test_unas.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import (
    Activation,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    Graph,
    GraphBuilder,
    Op,
    PadAttrs,
    PoolAttrs,
    ReshapeAttrs,
)
from .unas_space import UArch, ULayer, UnasSpace


@dataclass(frozen=True)
class Step:
    """One resolved op: `kind` in conv / pool / pad / add / flatten / dense, reading value(s) `src`, writing value
    `len(previous steps) + 1` (value 0 is the input)."""

    kind: str
    src: tuple[int, ...]
    kernel: tuple[int, int] = (1, 1)  # conv, pool (stride = kernel for a pool)
    stride: int = 1
    cin: int = 0
    cout: int = 0
    depthwise: bool = False
    bn: bool = False
    relu: bool = False
    pool: str = "max"
    pad: tuple[int, int] = (0, 0)  # (bottom, right)
    origin: tuple[int, int] | None = None  # conv: (block, layer) of the gene it comes from; None for a 1x1 fix


@dataclass(frozen=True)
class UNet:
    steps: tuple[Step, ...]
    shapes: tuple[tuple[int, int, int], ...]  # (H, W, C) of value 0 (input) and of every step's output
    num_classes: int


def network(space: UnasSpace, arch: UArch) -> UNet:
    """The resolved op list of `arch` on `space.input_shape` (see the module doc)."""
    space.check(arch)
    steps: list[Step] = []
    shapes: list[tuple[int, int, int]] = [tuple(space.input_shape)]

    def emit(step: Step, shape) -> int:
        steps.append(step)
        shapes.append(tuple(int(d) for d in shape))
        return len(shapes) - 1

    def pool(v: int, kind: str, size: tuple[int, int]) -> int:
        h, w, c = shapes[v]
        size = (min(size[0], h), min(size[1], w))
        if size == (1, 1):
            return v
        return emit(Step("pool", (v,), size, pool=kind), (h // size[0], w // size[1], c))

    def conv(v: int, layer, cout: int | None = None, origin: tuple[int, int] | None = None) -> int:
        h, w, c = shapes[v]
        depthwise = layer.type == "depthwise" and c > 1  # on one channel it is a plain conv (as PyTorch sees it)
        k = 1 if layer.type == "1x1" else min(layer.kernel, h, w)
        s = 1 if layer.type == "1x1" else layer.stride
        out_c = c if layer.type == "depthwise" else (cout if cout is not None else layer.channels)
        return emit(Step("conv", (v,), (k, k), s, c, out_c, depthwise, layer.bn, layer.relu, origin=origin),
                    ((h - k) // s + 1, (w - k) // s + 1, out_c))

    def tie(pending: list[int]) -> int:
        if len(pending) == 1:
            return pending[0]
        hs, ws = min(shapes[v][0] for v in pending), min(shapes[v][1] for v in pending)
        pooled = [pool(v, "max", (round(shapes[v][0] / hs), round(shapes[v][1] / ws))) for v in pending]
        top_h, top_w = max(shapes[v][0] for v in pooled), max(shapes[v][1] for v in pooled)
        padded = []
        for v in pooled:
            h, w, c = shapes[v]
            if (h, w) != (top_h, top_w):
                v = emit(Step("pad", (v,), pad=(top_h - h, top_w - w)), (top_h, top_w, c))
            padded.append(v)
        x = padded[0]
        for v in padded[1:]:
            x = emit(Step("add", (x, v)), shapes[x])
        return x

    pending, last_in = [0], 0
    for b, block in enumerate(arch.blocks):
        if block.parallel:
            x = pool(last_in, "max", (2, 2)) if block.pool else last_in
            target = shapes[pending[0]][2]
            for j, layer in enumerate(block.layers):
                last = j == len(block.layers) - 1
                x = conv(x, layer, target if last else None, (b, j))
            if shapes[x][2] != target:  # a depthwise last layer: a 1x1 conv brings the channels
                x = conv(x, _ONE_BY_ONE, target)
            pending.append(x)
        else:
            x = tie(pending)
            last_in = x
            x = pool(x, "max", (2, 2)) if block.pool else x
            for j, layer in enumerate(block.layers):
                x = conv(x, layer, origin=(b, j))
            pending = [x]
    x = tie(pending)
    x = pool(x, arch.pooling, (arch.pool_size, arch.pool_size))
    h, w, c = shapes[x]
    x = emit(Step("flatten", (x,)), (1, 1, h * w * c))
    for units in arch.dense:
        x = emit(Step("dense", (x,), cin=shapes[x][2], cout=units, relu=True), (1, 1, units))
    emit(Step("dense", (x,), cin=shapes[x][2], cout=space.num_classes), (1, 1, space.num_classes))
    return UNet(tuple(steps), tuple(shapes), space.num_classes)


_ONE_BY_ONE = ULayer("1x1", 1, 1, 1, bn=False, relu=False)  # a parallel block's channel fix (channels: the target's)


def _zeros(shape, n):
    return np.zeros(shape, np.float32), np.zeros(n, np.float32)


def build_graph(space: UnasSpace, arch: UArch, weights=None, name: str = "unas", verify: bool = True) -> Graph:
    """The float inference graph of `arch` (NHWC, batch 1): BatchNorm folded into its conv, ReLU fused. `weights`:
    an iterator of (weight, bias) per conv and dense step in order (IR layouts), zeros when None."""
    net = network(space, arch)
    b = GraphBuilder(name)
    h, w, c = net.shapes[0]
    values = [b.input((1, h, w, c))]
    for step in net.steps:
        x = values[step.src[0]]
        act = Activation.RELU if step.relu else Activation.NONE
        if step.kind == "conv":
            kh, kw = step.kernel
            shape = (1, kh, kw, step.cout) if step.depthwise else (step.cout, kh, kw, step.cin)
            wt, bias = next(weights) if weights is not None else _zeros(shape, step.cout)
            op, attrs = (Op.DEPTHWISE_CONV_2D, DepthwiseAttrs((step.stride,) * 2, activation=act)) if step.depthwise \
                else (Op.CONV_2D, ConvAttrs((step.stride,) * 2, activation=act))
            y = b.node(op, [x], attrs, params={"weight": wt, "bias": bias})
        elif step.kind == "pool":
            op = Op.MAX_POOL_2D if step.pool == "max" else Op.AVG_POOL_2D
            y = b.node(op, [x], PoolAttrs(step.kernel, step.kernel))
        elif step.kind == "pad":
            y = b.node(Op.PAD, [x], PadAttrs(((0, 0), (0, step.pad[0]), (0, step.pad[1]), (0, 0))))
        elif step.kind == "add":
            y = b.node(Op.ADD, [x, values[step.src[1]]])
        elif step.kind == "flatten":
            y = b.node(Op.RESHAPE, [x], ReshapeAttrs((1, int(np.prod(b.shape(x))))))
        else:
            wt, bias = next(weights) if weights is not None else _zeros((step.cout, step.cin), step.cout)
            y = b.node(Op.FULLY_CONNECTED, [x], FullyConnectedAttrs(act), params={"weight": wt, "bias": bias})
        values.append(y)
    return b.build([values[-1]], verify=verify)


def build_module(space: UnasSpace, arch: UArch):
    """The PyTorch module of `arch` (NCHW): Conv2d (bias only without BatchNorm) + BatchNorm2d + ReLU per layer."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    net = network(space, arch)

    class UnasNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.steps = net.steps
            self.layers = nn.ModuleList()
            for step in net.steps:
                if step.kind == "conv":
                    mods = [nn.Conv2d(step.cin, step.cout, step.kernel, step.stride, bias=not step.bn,
                                      groups=step.cin if step.depthwise else 1)]
                    mods += [nn.BatchNorm2d(step.cout)] if step.bn else []
                    mods += [nn.ReLU()] if step.relu else []
                    self.layers.append(nn.Sequential(*mods))
                elif step.kind == "pool":
                    cls = nn.MaxPool2d if step.pool == "max" else nn.AvgPool2d
                    self.layers.append(cls(step.kernel, step.kernel))
                elif step.kind == "dense":
                    self.layers.append(nn.Sequential(nn.Linear(step.cin, step.cout),
                                                     *([nn.ReLU()] if step.relu else [])))
                else:
                    self.layers.append(nn.Identity())

        def forward(self, x):
            values = [x]
            for step, layer in zip(self.steps, self.layers):
                v = values[step.src[0]]
                if step.kind == "pad":
                    v = F.pad(v, (0, step.pad[1], 0, step.pad[0]))
                elif step.kind == "add":
                    v = v + values[step.src[1]]
                elif step.kind == "flatten":
                    v = torch.flatten(v, 1)
                else:
                    v = layer(v)
                values.append(v)
            return values[-1]

    return UnasNet()


def input_shape(space: UnasSpace) -> tuple[int, int, int, int]:
    """NCHW input shape of the PyTorch module (batch 1)."""
    h, w, c = space.input_shape
    return (1, c, h, w)
