"""Model zoo stage: a YOLO-style detector on an MBConv backbone (issue 28).

A 3x3 stride-2 stem and MobileNetV2 blocks down to stride 8 and on to stride 16; a 1x1 convolution on the stride-8
map and one on the stride-16 map each give a head (`ops.detect_post`'s layout): per cell and anchor, tx, ty, tw,
th, objectness and the class logits, A·(5 + C) channels. `forward` returns the heads finest first as a tuple, so
the frontend sees one output per head. Small objects (≈ 16–32 px) go to the stride-8 head's anchors, large ones to
the stride-16 head's; `one_scale=True` keeps the stride-16 head alone.
"""

from __future__ import annotations

import torch
from torch import nn

from ..ops.detect_post import FIELDS
from .blocks import BlockSpec, InvertedResidual, conv_bn_act, init_weights, make_divisible

# (expand, channels, repeats, stride) of the blocks up to stride 8, then up to stride 16 (the stem is stride 2)
TO_STRIDE_8 = ((1, 16, 1, 1), (4, 24, 2, 2), (4, 32, 2, 2))
TO_STRIDE_16 = ((4, 48, 2, 2), (4, 64, 1, 1))


def _stage(rows, cin: int, width: float) -> tuple[nn.Sequential, int]:
    layers = []
    for expand, channels, repeats, stride in rows:
        cout = make_divisible(channels * width)
        for i in range(repeats):
            layers.append(InvertedResidual(cin, cout, BlockSpec(expand, cout, 3, stride if i == 0 else 1)))
            cin = cout
    return nn.Sequential(*layers), cin


class YoloDetector(nn.Module):
    """Stem + MB blocks to stride 8 (head 0) and 16 (head 1); `anchors[i]` are head i's anchors, (w, h) in input
    pixels. Output: one (N, A_i·(5 + classes), H/stride, W/stride) map per head, finest first."""

    def __init__(self, num_classes: int, anchors: tuple[tuple[tuple[float, float], ...], ...], width: float = 0.5,
                 in_channels: int = 1):
        super().__init__()
        if len(anchors) not in (1, 2):
            raise ValueError(f"{len(anchors)} anchor groups: one (stride 16) or two (strides 8 and 16)")
        self.num_classes, self.anchors = num_classes, tuple(tuple(map(tuple, a)) for a in anchors)
        stem = make_divisible(16 * width)
        self.stem = conv_bn_act(in_channels, stem, 3, stride=2)
        self.to8, c8 = _stage(TO_STRIDE_8, stem, width)
        self.to16, c16 = _stage(TO_STRIDE_16, c8, width)
        self.strides = (8, 16) if len(anchors) == 2 else (16,)
        outs = [len(a) * (FIELDS + num_classes) for a in self.anchors]
        self.head8 = nn.Conv2d(c8, outs[0], 1) if len(anchors) == 2 else None
        self.head16 = nn.Conv2d(c16, outs[-1], 1)
        init_weights(self)
        init_heads([h for h in (self.head8, self.head16) if h is not None], num_classes)

    def forward(self, x: torch.Tensor):
        f8 = self.to8(self.stem(x))
        f16 = self.to16(f8)
        if self.head8 is None:
            return (self.head16(f16),)
        return self.head8(f8), self.head16(f16)


def init_heads(heads, num_classes: int) -> None:
    """Small weights and a low objectness bias (YOLO's prior: most cells hold nothing) for each head convolution."""
    with torch.no_grad():
        for head in heads:
            nn.init.normal_(head.weight, 0, 0.01)
            bias = head.bias.view(-1, FIELDS + num_classes)
            bias.zero_()
            bias[:, 4] = -4.0


class MBDetector(nn.Module):
    """An MBConv backbone — a 3x3 stem (stride `stem_stride`) and `blocks` ((channels, BlockSpec) each, as zoo
    `MobileNet` takes them) in `features` — with a YOLO head on the output of each block of `taps`: a 1x1
    convolution (bias, no BatchNorm) to anchors · (5 + classes) channels. The search's detector (`nas.build`).
    `forward` returns the heads finest first; `anchors` ((w, h) per head, input pixels) are the caller's to set."""

    def __init__(self, stem_channels: int, blocks, taps: tuple[int, ...], anchors_per_head: tuple[int, ...],
                 strides: tuple[int, ...], num_classes: int, in_channels: int = 1, stem_stride: int = 2):
        super().__init__()
        layers: list[nn.Module] = [conv_bn_act(in_channels, stem_channels, 3, stride=stem_stride)]
        cin, channels = stem_channels, []
        for cout, spec in blocks:
            layers.append(InvertedResidual(cin, cout, spec))
            cin = cout
            channels.append(cout)
        self.features = nn.Sequential(*layers)
        self.taps, self.strides, self.num_classes = tuple(taps), tuple(strides), num_classes
        self.anchors = None
        self.heads = nn.ModuleList(nn.Conv2d(channels[t], a * (FIELDS + num_classes), 1)
                                   for t, a in zip(taps, anchors_per_head))
        init_weights(self)
        init_heads(self.heads, num_classes)

    def forward(self, x: torch.Tensor):
        taps = []
        x = self.features[0](x)
        for i, block in enumerate(self.features[1:]):
            x = block(x)
            if i in self.taps:
                taps.append(x)
        return tuple(head(t) for head, t in zip(self.heads, taps))


def build(num_classes: int, anchors, width: float = 0.5, in_channels: int = 1) -> YoloDetector:
    return YoloDetector(num_classes, anchors, width, in_channels)
