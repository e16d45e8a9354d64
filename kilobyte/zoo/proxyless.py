"""Model zoo stage: ProxylessNAS-Mobile (Cai et al., 2019), the searched network for mobile-phone latency.

Block list of the published `proxyless_mobile` config (as also transcribed by the imgclsmob/pytorchcv ports,
whose reference parameter count, 4,080,512, this module reproduces). Stem conv3x3 s2 (32), ReLU6 everywhere:

    out ch  out px  blocks (MB{expand} k{kernel}; the first block of each row is the stride-2 / channel-change one)
    16      112     MB1 k3                                   (no shortcut)
    32      56      MB3 k5 s2, MB3 k3                        (the searched 3rd/4th blocks are "zero" = skipped)
    40      28      MB3 k7 s2, MB3 k3, MB3 k5, MB3 k5
    80      14      MB6 k7 s2, MB3 k5, MB3 k5, MB3 k5
    96      14      MB6 k5,    MB3 k5, MB3 k5, MB3 k5
    192     7       MB6 k7 s2, MB6 k7, MB3 k7, MB3 k7
    320     7       MB6 k7                                   (no shortcut)
    then conv1x1 (1280) -> avg pool -> Dropout (0.2, inert at inference) -> Linear

The 56-px stage has 32 channels, not 24: that is what the released config says (a "24" recalled from
MobileNetV2 would give a different network). Width `w` scales channels with the round-to-8 rule; the 1280 head only
grows (w > 1), as in MobileNetV2. Only blocks without a shortcut in the config have
`residual=False` (the first block of every row); every other block adds its input.
"""

from __future__ import annotations

from torch import nn

from kilobyte.zoo.blocks import BlockSpec, MobileNet, make_divisible, scale_blocks

# (out channels, first stride, [(expand, kernel) per block]); the config gives the first block of every row no
# shortcut, so it never adds its input even if width rounding makes the shapes match.
STAGES = [
    (16, 1, [(1, 3)]),
    (32, 2, [(3, 5), (3, 3)]),
    (40, 2, [(3, 7), (3, 3), (3, 5), (3, 5)]),
    (80, 2, [(6, 7), (3, 5), (3, 5), (3, 5)]),
    (96, 1, [(6, 5), (3, 5), (3, 5), (3, 5)]),
    (192, 2, [(6, 7), (6, 7), (3, 7), (3, 7)]),
    (320, 1, [(6, 7)]),
]


def block_specs() -> list[BlockSpec]:
    """One BlockSpec per block of `STAGES`, stride and no-shortcut flag on each row's first block."""
    specs = []
    for channels, stride, blocks in STAGES:
        for i, (expand, kernel) in enumerate(blocks):
            first = i == 0
            specs.append(BlockSpec(expand, channels, kernel, stride if first else 1, residual=not first))
    return specs


def build(width: float = 1.0, num_classes: int = 1000, in_channels: int = 3) -> nn.Module:
    """ProxylessNAS-Mobile at width multiplier `width`."""
    return MobileNet(
        stem_channels=make_divisible(32 * width),
        blocks=scale_blocks(block_specs(), width),
        head_channels=make_divisible(1280 * max(1.0, width)),
        num_classes=num_classes,
        in_channels=in_channels,
    )
