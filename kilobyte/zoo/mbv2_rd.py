"""Model zoo stage: MbV2-RD, MobileNetV2 with its receptive field redistributed (MCUNetV2, Lin et al. 2021, Fig. 4).

Patch-based inference runs the memory-hungry first stage (everything up to the first 28x28 feature map at 224
input; `features[:3]` here, `features[:5]` in MobileNetV2) one spatial patch at a time. Overlap between input
patches costs recomputation that grows with that stage's receptive field, so RD follows the thesis guideline
(sec. 4.2): keep the down-sampling plan, keep 3x3 kernels on stride-2 layers, remove every other spatial layer
from the patch stage, and add blocks / larger kernels to the later, per-layer stage to restore capacity.

The paper's figure is not reproduced in our text copy, so this block list is our reconstruction from those rules,
not the authors' exact checkpoint. Layers (MB{e} k{k}: inverted residual with expand e, depthwise k x k):

    stage        layer                 out ch  out px   repeats
    patch        conv3x3 s2            32      112      1
    patch        MB1 k3 s2             24      56       1
    patch        MB6 k3 s2             32      28       1
    per-layer    MB6 k5 s1             32      28       4
    per-layer    MB6 k5 s2 (then s1)   64      14       5
    per-layer    MB6 k5 s1             96      14       3
    per-layer    MB6 k7 s2 (then s1)   160     7        3
    per-layer    MB6 k3 s1             320     7        1
    per-layer    conv1x1 s1            1280    7        1
    head         avgpool, Dropout 0.2, Linear

Receptive field of a 7x7 output patch of the 28x28 map (R_prev = (R - 1) * s + k): 7 -> 15 -> 31 -> 63, vs 75 for
MobileNetV2. Measured by `docs/zoo.md`'s script at 224x224, w = 1.0: 296.2 M MACs, 3.74 M params; with 4x4 patches
the patch stage costs 34.2 M instead of 29.6 M MACs (+15 %, +1.5 % overall; MobileNetV2: +42 % and +12.7 %).
"""

from __future__ import annotations

from torch import nn

from kilobyte.zoo.blocks import MobileNet, expand_stages, make_divisible, scale_blocks

# (expand t, channels c, repeats n, first stride s, depthwise kernel k)
STAGES = [
    (1, 24, 1, 2, 3),  # patch stage: the only spatial layers are stride-2 3x3s
    (6, 32, 1, 2, 3),  # patch stage ends here, at 28x28 for 224 input
    (6, 32, 4, 1, 5),  # per-layer stage: one more block and 5x5 kernels vs MobileNetV2's 2 x k3
    (6, 64, 5, 2, 5),
    (6, 96, 3, 1, 5),
    (6, 160, 3, 2, 7),
    (6, 320, 1, 1, 3),
]

# Children of `features` executed patch by patch: the stem and the two stride-2 blocks.
PATCH_STAGE_DEPTH = 3


def build(width: float = 1.0, num_classes: int = 1000, in_channels: int = 3) -> nn.Module:
    """MbV2-RD at width multiplier `width` (same rounding and head rule as MobileNetV2)."""
    return MobileNet(
        stem_channels=make_divisible(32 * width),
        blocks=scale_blocks(expand_stages(STAGES), width),
        head_channels=make_divisible(1280 * max(1.0, width)),
        num_classes=num_classes,
        in_channels=in_channels,
    )
