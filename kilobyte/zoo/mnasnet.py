"""Model zoo stage: MnasNet-B1 (Tan et al., 2019), the variant torchvision ships as `mnasnet1_0`.

B1 is the MnasNet without squeeze-and-excitation (A1's SE blocks need sigmoid and a broadcast multiply, which the
frontend does not support). Structure, with ReLU (not ReLU6) everywhere:

    conv3x3 s2 (32) -> depthwise 3x3 (32) -> conv1x1 linear (16)      [= an MB1 k3 block without residual]
    t  c    n  s  k
    3  24   3  2  3
    3  40   3  2  5
    6  80   3  2  5
    6  96   2  1  3
    6  192  4  2  5
    6  320  1  1  3
    conv1x1 (1280) -> avg pool -> Dropout(0.2) -> Linear

Width `w` scales every channel count except the 1280 head (torchvision keeps it fixed) with the same
round-to-8 rule as MobileNetV2. At 224x224, w = 1.0: 314.4 M MACs, 4.38 M params (torchvision: 4,383,312).
"""

from __future__ import annotations

from torch import nn

from kilobyte.zoo.blocks import BlockSpec, MobileNet, expand_stages, make_divisible, scale_blocks

# torchvision's stem separable conv: an MB1 k3 block that never adds its input, whatever the width.
SEPARABLE = BlockSpec(expand=1, out_channels=16, kernel=3, stride=1, residual=False)

# (expand t, channels c, repeats n, first stride s, depthwise kernel k)
# the stages' output maps at 224x224 input: 56, 28, 14, 14, 7 and 7 pixels square
STAGES = [(3, 24, 3, 2, 3), (3, 40, 3, 2, 5), (6, 80, 3, 2, 5),
          (6, 96, 2, 1, 3), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]


def build(width: float = 1.0, num_classes: int = 1000, in_channels: int = 3) -> nn.Module:
    """MnasNet-B1 at depth multiplier `width` (torchvision's `alpha`)."""
    specs = [SEPARABLE, *expand_stages(STAGES)]
    return MobileNet(
        stem_channels=make_divisible(32 * width),
        blocks=scale_blocks(specs, width),
        head_channels=1280,
        num_classes=num_classes,
        in_channels=in_channels,
        act=nn.ReLU,
    )
