"""Model zoo stage: MobileNetV2 (Sandler et al., 2018), layer for layer as torchvision defines it.

Stem conv3x3/s2 (32) -> 17 inverted-residual blocks -> conv1x1 (1280) -> avg pool -> Dropout(0.2) -> Linear.
Block table (t = expand, c = channels, n = repeats, s = first stride, all kernels 3x3):

    t  c    n  s        t  c    n  s
    1  16   1  1        6  96   3  1
    6  24   2  2        6  160  3  2
    6  32   3  2        6  320  1  1
    6  64   4  2

Width `w` scales every channel count with `make_divisible(c * w, 8)`; the 1280-channel head only grows (w > 1),
it never shrinks. At 224x224, w = 1.0: 300.8 M MACs and 3.50 M parameters, the numbers the paper reports.
"""

from __future__ import annotations

from torch import nn

from kilobyte.zoo.blocks import MobileNet, expand_stages, make_divisible, scale_blocks

# (expand t, channels c, repeats n, first stride s, depthwise kernel k)
STAGES = [  # the map each stage sees at 224x224 input (the paper's Table 2)
    (1, 16, 1, 1, 3),   # 112x112
    (6, 24, 2, 2, 3),   # 112x112 -> 56x56
    (6, 32, 3, 2, 3),   # 56x56 -> 28x28
    (6, 64, 4, 2, 3),   # 28x28 -> 14x14
    (6, 96, 3, 1, 3),   # 14x14
    (6, 160, 3, 2, 3),  # 14x14 -> 7x7
    (6, 320, 1, 1, 3),  # 7x7
]

# Children of `features` up to the first 28x28 map at 224 input (stem, MB1, 2 x MB6-24, first MB6-32): MCUNetV2's
# patch-based stage, "n = 5" in its Fig. 8.
PATCH_STAGE_DEPTH = 5


def build(width: float = 1.0, num_classes: int = 1000, in_channels: int = 3, scale_head: bool = False) -> nn.Module:
    """MobileNetV2 at width multiplier `width` (channel counts rounded to multiples of 8). `scale_head`: the head
    shrinks with the width too (1280 w channels), as a person fitting it into kilobytes of Flash would scale it:
    torchvision's fixed head (1280 x 320 w weights, 1280 more per class, 12 B per channel) keeps every width of it
    above 128 KB of Flash (w0.1, 28 px, 10 classes: 158 KB planned, 96 KB with `scale_head`; bench/bench_vs_hand.py's
    baselines)."""
    return MobileNet(
        stem_channels=make_divisible(32 * width),
        blocks=scale_blocks(expand_stages(STAGES), width),
        head_channels=make_divisible(1280 * (width if scale_head else max(1.0, width))),
        num_classes=num_classes,
        in_channels=in_channels,
    )
