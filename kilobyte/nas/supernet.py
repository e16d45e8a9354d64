"""Search stage: the TinyNAS weight-sharing supernet of one (width, resolution) configuration (thesis Appendix).

The supernet holds the largest network of the configuration (each slot's largest kernel, expand 6, full depth,
widest stages) and runs any of its subnets by slicing (papers/search-specs.md A.3):
- elastic kernel: the central k x k window of each 7 x 7 depthwise kernel (no transform matrix);
- elastic expand: the first e·C channels of the 6·C hidden channels (1x1 expand rows, depthwise channels, BN
  entries, projection columns);
- elastic depth: the first d blocks of each stage;
- elastic stage width (MCUNetV2's joint search, `MBSpace.stage_width_choices`): the first make_divisible(...)
  output channels of a stage — the projection rows and BN entries of its blocks, the input columns of the next
  block's expand conv and of the head; a stride-1 stage's first block adds its input only when the subnet's
  channels match (the residual follows `build.network`, per subnet);
- receptive-field redistribution (`MBSpace.rd_stages`): a kernel-1 slot (and the MB1 block's kernel-1 gene) runs
  without the depthwise convolution the supernet holds for it; the deeper later stage is more held blocks.
- a detector space (`MBSpace.detect_heads`): each YOLO head's 1x1 convolution reads the first input channels of
  its stage's width (`DynamicHead`); `forward` returns the heads' maps, finest first.
The subnet's layer list comes from `build.network`, so the supernet and the standalone module agree by construction.
`set_active(arch)` selects a subnet; `extract(arch)` returns the standalone `build.build_module` network with the
inherited weights (its outputs equal the supernet's with `arch` active — tests/nas/test_supernet.py).
BatchNorm statistics are shared across subnets, so evaluate a subnet after `train.recalibrate_bn` (20 x 64 images
in the thesis).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..zoo.blocks import init_weights
from ..zoo.detector import init_heads
from .build import ConvLayer, MBBlock, build_module, network
from .space import Arch, ArchError, MBSpace


class DynamicConvBN(nn.Module):
    """Conv (no bias) + BN (+ ReLU6) whose active input/output channels and kernel are set per forward pass."""

    def __init__(self, layer: ConvLayer):
        super().__init__()
        self.layer = layer
        groups = layer.cout if layer.depthwise else 1
        self.conv = nn.Conv2d(layer.cin, layer.cout, layer.kernel, layer.stride, layer.kernel // 2, groups=groups,
                              bias=False)
        self.bn = nn.BatchNorm2d(layer.cout)
        self.active = (layer.cin, layer.cout, layer.kernel)

    def weight(self, cin: int, cout: int, k: int) -> torch.Tensor:
        """The active slice of the weight: first `cout` filters, first `cin` inputs, central k x k."""
        w = self.conv.weight
        w = w[:cout] if self.layer.depthwise else w[:cout, :cin]
        if k != self.layer.kernel:
            start = (self.layer.kernel - k) // 2
            w = w[:, :, start:start + k, start:start + k]
        return w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cin, cout, k = self.active
        w = self.weight(cin, cout, k).contiguous()
        y = F.conv2d(x, w, None, self.layer.stride, k // 2, 1, cout if self.layer.depthwise else 1)
        bn, momentum = self.bn, 0.0
        if self.training:  # as nn.BatchNorm2d: momentum None means a cumulative average (BN recalibration)
            bn.num_batches_tracked += 1
            momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
        y = F.batch_norm(y, bn.running_mean[:cout], bn.running_var[:cout], bn.weight[:cout], bn.bias[:cout],
                         self.training, momentum, bn.eps)
        return F.relu6(y) if self.layer.relu6 else y


def _role(block: MBBlock, i: int) -> str:
    """What convolution i of `block` is: "expand", "depthwise" or "project" (the last)."""
    conv = block.convs[i]
    return "depthwise" if conv.depthwise else "project" if i == len(block.convs) - 1 else "expand"


class DynamicHead(nn.Module):
    """A detection head: a 1x1 convolution with a bias (no BatchNorm) whose active input channels are set per subnet
    (its stage's width)."""

    def __init__(self, layer: ConvLayer):
        super().__init__()
        self.conv = nn.Conv2d(layer.cin, layer.cout, 1)
        self.cin = layer.cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.conv.weight[:, :self.cin].contiguous(), self.conv.bias)


class DynamicBlock(nn.Module):
    """An MB block of the largest network (widest, expand 6, the slot's largest kernel) that runs any block of the
    same slot: its convolutions sliced to the subnet's channels and kernel, a kernel-1 block's depthwise skipped."""

    def __init__(self, block: MBBlock):
        super().__init__()
        self.block = block
        self.layers = nn.ModuleList(DynamicConvBN(layer) for layer in block.convs)
        self.roles = {_role(block, i): layer for i, layer in enumerate(self.layers)}
        self.cin = block.convs[0].cin
        self.residual = block.residual
        self.run = list(self.layers)  # the layers the active subnet runs, in order

    def set_active(self, block: MBBlock) -> None:
        """Run as `block` (the subnet's block at this slot, from `build.network`): each of its convolutions is the
        held one of the same role, sliced; the residual is the subnet's (only where its channels match)."""
        run = []
        for i, conv in enumerate(block.convs):
            layer = self.roles.get(_role(block, i))
            held = layer.layer if layer is not None else None
            if held is None or conv.cin > held.cin or conv.cout > held.cout or conv.kernel > held.kernel:
                raise ArchError(f"supernet: block layer {conv} does not fit the supernet's {held}")
            layer.active = (conv.cin, conv.cout, conv.kernel)
            run.append(layer)
        self.run, self.residual = run, block.residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for layer in self.run:
            y = layer(y)
        return x + y if self.residual else y


class SuperNet(nn.Module):
    """All subnets of `space` at one (width, resolution) configuration, sharing weights."""

    def __init__(self, space: MBSpace, width: float, resolution: int, dropout: float | None = None):
        super().__init__()
        self.space = space.with_config(width, resolution)
        self.largest_arch = self.space.largest()
        net = network(self.space, self.largest_arch)
        self.stem = DynamicConvBN(net.stem)
        self.first = DynamicBlock(net.blocks[0])
        self.stage_index = [b.stage for b in net.blocks[1:]]
        self.blocks = nn.ModuleList(DynamicBlock(b) for b in net.blocks[1:])
        if net.detect:  # a detector: YOLO heads, no feature mix, pooling or classifier
            self.heads = nn.ModuleList(DynamicHead(layer) for _, layer in net.detect)
        else:
            self.head = DynamicConvBN(net.head)
            self.dropout = nn.Dropout(self.space.dropout if dropout is None else dropout)
            self.classifier = nn.Linear(net.head.cout, net.num_classes)
        init_weights(self)  # the zoo's MobileNet initialisation: untrained subnets stay numerically sane
        if net.detect:
            init_heads([h.conv for h in self.heads], net.num_classes)
        self.set_active(self.largest_arch)

    def _slots(self, arch: Arch):
        """(module, (kernel, expand) or None when skipped) for every block slot, in order."""
        position = {}
        for block, stage in zip(self.blocks, self.stage_index):
            i = position.get(stage, 0)
            position[stage] = i + 1
            yield block, arch.blocks[stage][i] if i < arch.depths[stage] else None

    def set_active(self, arch: Arch) -> None:
        self.space.check(arch)
        self.active = arch
        net = network(self.space, arch)  # the subnet's layers: channels, kernels, residuals
        active = [block for block, genes in self._slots(arch) if genes is not None]
        self.run = [self.first, *active]
        for module, block in zip(self.run, net.blocks, strict=True):
            module.set_active(block)
        if net.detect:
            self.taps = tuple(tap for tap, _ in net.detect)
            for head, (_, layer) in zip(self.heads, net.detect):
                head.cin = layer.cin
        else:
            self.head.active = (net.head.cin, net.head.cout, 1)

    def forward(self, x: torch.Tensor):
        x = self.stem(x)
        if self.space.detect_heads:  # the heads' maps, finest first
            taps = []
            for i, block in enumerate(self.run):
                x = block(x)
                if i in self.taps:
                    taps.append(x)
            return tuple(head(t) for head, t in zip(self.heads, taps))
        for block in self.run:
            x = block(x)
        x = self.head(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.classifier(self.dropout(x))

    @torch.no_grad()
    def extract(self, arch: Arch) -> nn.Module:
        """The standalone network of `arch` (`build.build_module`) carrying the supernet's weights and BN state."""
        self.set_active(arch)
        module = build_module(self.space, arch)
        detect = bool(self.space.detect_heads)
        dynamic = [self.stem, *(layer for block in self.run for layer in block.run), *([] if detect else [self.head])]
        convs = [m for m in module.modules() if isinstance(m, nn.Conv2d)]
        bns = [m for m in module.modules() if isinstance(m, nn.BatchNorm2d)]
        if detect:  # the heads' plain convolutions come last (MBDetector.heads)
            heads, convs = convs[len(dynamic):], convs[:len(dynamic)]
            for src, conv in zip(self.heads, heads, strict=True):
                conv.weight.copy_(src.conv.weight[:, :src.cin])
                conv.bias.copy_(src.conv.bias)
        assert len(convs) == len(dynamic) == len(bns)
        for src, conv, bn in zip(dynamic, convs, bns):
            cin, cout, k = src.active
            conv.weight.copy_(src.weight(cin, cout, k))
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(bn, name).copy_(getattr(src.bn, name)[:cout])
            bn.num_batches_tracked.copy_(src.bn.num_batches_tracked)
        if detect:
            return module.eval()
        linear = [m for m in module.modules() if isinstance(m, nn.Linear)][0]
        linear.weight.copy_(self.classifier.weight)
        linear.bias.copy_(self.classifier.bias)
        return module.eval()
