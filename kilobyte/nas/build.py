"""Search stage: one architecture description -> the IR graph (for resources) and the PyTorch module (for training).

`network(space, arch)` is the one description: the ordered list of convolutions, adds and the head that both
builders walk (stage widths set the channels; a kernel-1 block of receptive-field redistribution has no depthwise
layer). `build_graph` emits it through the IR's `GraphBuilder` directly — no PyTorch, no tracing — as the inference
graph `from_torch` + `prepare_for_inference` give for `build_module`'s module (BatchNorm folded, ReLU6 fused, the same
node names); tests/nas/test_nas_build.py holds the two equal. Weights are zeros unless a `weights` iterator gives
(OHWI weight, bias) per convolution / linear layer in order; resources need only the shapes. A detector space's
network ends in its YOLO heads instead of the classifier: one graph output per head, finest first (zoo
`MBDetector`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..ir import Activation, ConvAttrs, DepthwiseAttrs, Graph, GraphBuilder, MeanAttrs, Op, ReshapeAttrs
from ..ops.detect_post import FIELDS
from ..ops.resize import add_resize_bilinear
from ..zoo.blocks import BlockSpec, MobileNet
from ..zoo.detector import MBDetector
from .space import Arch, ArchError, MBSpace


@dataclass(frozen=True)
class ConvLayer:
    """One convolution with BatchNorm after it, and ReLU6 unless it is a block's linear projection."""

    cin: int
    cout: int
    kernel: int  # square; 1 for a pointwise convolution
    stride: int = 1
    depthwise: bool = False  # one filter per channel (cin == cout)
    relu6: bool = True
    bn: bool = True  # False: a detection head's plain convolution with a bias


@dataclass(frozen=True)
class MBBlock:
    """An inverted-residual block: the convolutions in order and whether its input is added to its output."""

    convs: tuple[ConvLayer, ...]
    residual: bool
    stage: int  # -1: the fixed MB1 block


@dataclass(frozen=True)
class Network:
    """A whole MBConv network as the builders read it: stem, blocks, then the 1x1 head, pooling and the classifier —
    or, for a detector, `detect`: (index of the block whose output it reads, its 1x1 convolution) per YOLO head,
    finest first, and no `head`."""

    in_channels: int
    resolution: int  # the input is resolution x resolution pixels
    stem: ConvLayer
    blocks: tuple[MBBlock, ...]
    head: ConvLayer | None
    num_classes: int
    detect: tuple[tuple[int, ConvLayer], ...] = ()

    def convs(self):
        """(layer, side of its input map) of every convolution in execution order, the detection heads last."""
        h = self.resolution
        yield self.stem, h
        h = -(-h // self.stem.stride)
        after = []  # the map side after each block
        for block in self.blocks:
            for layer in block.convs:
                yield layer, h
                h = -(-h // layer.stride)
            after.append(h)
        if self.head is not None:
            yield self.head, h
        for tap, layer in self.detect:
            yield layer, after[tap]


def mb_block(cin: int, cout: int, kernel: int, expand: int, stride: int, stage: int) -> MBBlock:
    """1x1 expand (none when expand == 1) -> kxk depthwise (none when kernel == 1: receptive-field redistribution's
    "MB without depthwise") -> 1x1 linear projection; residual when shapes match."""
    if kernel == 1 and stride != 1:
        raise ArchError(f"architecture: a stride-{stride} block needs its depthwise convolution (kernel 1 given)")
    hidden = cin * expand
    convs = ([ConvLayer(cin, hidden, 1)] if expand != 1 else []) + \
        ([ConvLayer(hidden, hidden, kernel, stride, depthwise=True)] if kernel != 1 else []) + \
        [ConvLayer(hidden, cout, 1, relu6=False)]
    return MBBlock(tuple(convs), stride == 1 and cin == cout, stage)


def network(space: MBSpace, arch: Arch) -> Network:
    """The layers of `arch` in `space`: stem (stride `space.stem_stride`), MB1 block (kernel `arch.first_kernel`),
    each stage's first `depth` blocks at the stage's width (`make_divisible(base · w · stage width)`), head."""
    stem_c, first_c, stage_c, head_c = space.channels(arch.width, arch.stage_widths)
    blocks = [mb_block(stem_c, first_c, arch.first_kernel, 1, 1, -1)]
    blocks[0] = MBBlock(blocks[0].convs, False, -1)  # the fixed first block never adds its input (MCUNet)
    cin = first_c
    for s, (d, genes) in enumerate(zip(arch.depths, arch.blocks)):
        for i, (k, e) in enumerate(genes[:d]):
            blocks.append(mb_block(cin, stage_c[s], k, e, space.stage_strides[s] if i == 0 else 1, s))
            cin = stage_c[s]
    stem = ConvLayer(space.in_channels, stem_c, 3, space.stem_stride)
    if not space.detect_heads:
        return Network(space.in_channels, arch.resolution, stem, tuple(blocks), ConvLayer(cin, head_c, 1),
                       space.num_classes)
    last = {b.stage: i for i, b in enumerate(blocks)}  # each stage's last block
    detect = tuple((last[s], ConvLayer(stage_c[s], a * (FIELDS + space.num_classes), 1, relu6=False, bn=False))
                   for s, a in space.detect_heads)
    return Network(space.in_channels, arch.resolution, stem, tuple(blocks), None, space.num_classes, detect)


def _zeros(shape_w, n_out) -> tuple[np.ndarray, np.ndarray]:
    """Placeholder weights: a broadcast zero (no memory per weight) and a zero bias."""
    return np.broadcast_to(np.float32(0), shape_w), np.zeros(n_out, np.float32)


def build_graph(space: MBSpace, arch: Arch, weights: Iterator[tuple[np.ndarray, np.ndarray]] | None = None,
                name: str = "tinynas", verify: bool = True) -> Graph:
    """The float inference graph of `arch` (NHWC, batch 1), through the IR builder (`verify=False`: skip the
    graph check, for the resource evaluator's thousands of candidates; tests build with it on)."""
    net = network(space, arch)
    b = GraphBuilder(name)
    r = net.resolution
    x = b.input((1, *space.input_hw(r), net.in_channels))
    if space.input_hw(r) != (r, r):  # the data's image resized as training resizes it (`search.with_input_resize`)
        x = add_resize_bilinear(b, x, (r, r))

    def conv(x: str, layer: ConvLayer) -> str:
        pad = layer.kernel // 2
        act = Activation.RELU6 if layer.relu6 else Activation.NONE
        stride = (layer.stride, layer.stride)
        if layer.depthwise:
            shape = (1, layer.kernel, layer.kernel, layer.cout)
            w, bias = next(weights) if weights is not None else _zeros(shape, layer.cout)
            return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs(stride, (pad,) * 4, activation=act),
                          params={"weight": w, "bias": bias})
        shape = (layer.cout, layer.kernel, layer.kernel, layer.cin)
        w, bias = next(weights) if weights is not None else _zeros(shape, layer.cout)
        return b.node(Op.CONV_2D, [x], ConvAttrs(stride, (pad,) * 4, activation=act),
                      params={"weight": w, "bias": bias})

    x = conv(x, net.stem)
    taps = {}
    for i, block in enumerate(net.blocks):
        y = x
        for layer in block.convs:
            y = conv(y, layer)
        x = b.node(Op.ADD, [x, y]) if block.residual else y
        taps[i] = x
    if net.detect:  # one output per head, finest first, as the detector module returns them
        return b.build([conv(taps[tap], layer) for tap, layer in net.detect], verify=verify)
    x = conv(x, net.head)
    x = b.node(Op.MEAN, [x], MeanAttrs((1, 2), keepdims=True))
    x = b.node(Op.RESHAPE, [x], ReshapeAttrs((1, net.head.cout)))
    w, bias = next(weights) if weights is not None else _zeros((net.num_classes, net.head.cout), net.num_classes)
    x = b.node(Op.FULLY_CONNECTED, [x], params={"weight": w, "bias": bias})
    return b.build([x], verify=verify)


def build_module(space: MBSpace, arch: Arch):
    """The standalone PyTorch module of `arch` (zoo `MobileNet` skeleton, NCHW, ReLU6, BatchNorm; a detector space's:
    zoo `MBDetector`, whose `anchors` the caller sets)."""
    net = network(space, arch)
    specs = []
    for block in net.blocks:
        dw = next((c for c in block.convs if c.depthwise), None)
        expand = block.convs[-1].cin // block.convs[0].cin
        cout = block.convs[-1].cout
        specs.append((cout, BlockSpec(expand, cout, dw.kernel if dw else 1, dw.stride if dw else 1,
                                      residual=block.residual, depthwise=dw is not None)))
    if net.detect:
        return MBDetector(net.stem.cout, specs, tuple(tap for tap, _ in net.detect),
                          tuple(a for _, a in space.detect_heads), space.head_strides, net.num_classes,
                          in_channels=net.in_channels, stem_stride=net.stem.stride)
    return MobileNet(net.stem.cout, specs, net.head.cout, net.num_classes, in_channels=net.in_channels,
                     dropout=space.dropout, stem_stride=net.stem.stride)


def input_shape(space: MBSpace, arch: Arch) -> tuple[int, int, int, int]:
    """NCHW input shape of the PyTorch module (batch 1)."""
    return (1, space.in_channels, arch.resolution, arch.resolution)
