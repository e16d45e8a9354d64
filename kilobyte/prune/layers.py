"""Prune stage: the layers pruning works on — the standard convolutions of a PyTorch module and their geometry.

Only standard convolutions (`groups == 1`) are pruned (DTMM evaluates only those: a depthwise filterlet is a single
weight). Depthwise and fully connected layers stay dense. `conv_layers` runs the module once on a zero input to learn
each convolution's output size, which the latency model needs.

Unit names, used throughout `prune/`:
- filterlet: the Cin weights at one kernel position of one filter, `weight[o, :, kh, kw]` of a PyTorch weight
  `(O, I, KH, KW)` — contiguous in the OHWI layout the generated C stores;
- weight: one weight (the unstructured / CSR baseline);
- channel: one output channel, with its filter and BatchNorm entry (structured pruning).
"""

from __future__ import annotations

from dataclasses import dataclass

UNITS = ("filterlet", "weight", "channel")


@dataclass(frozen=True)
class ConvLayer:
    """One prunable convolution: its module path and geometry (N filters of KH x KW x Cin, output OH x OW)."""

    name: str
    filters: int  # N
    cin: int
    kh: int
    kw: int
    oh: int
    ow: int

    @property
    def filterlets(self) -> int:
        return self.filters * self.kh * self.kw

    @property
    def weights(self) -> int:
        return self.filterlets * self.cin

    def units(self, unit: str) -> int:
        """How many units of kind `unit` the layer has.

        >>> ConvLayer("c", 8, 4, 3, 3, 6, 6).units("filterlet"), ConvLayer("c", 8, 4, 3, 3, 6, 6).units("weight")
        (72, 288)
        """
        return {"filterlet": self.filterlets, "weight": self.weights, "channel": self.filters}[unit]

    def unit_size(self, unit: str) -> int:
        """Weights in one unit of kind `unit`."""
        return {"filterlet": self.cin, "weight": 1, "channel": self.cin * self.kh * self.kw}[unit]

    def score_shape(self, unit: str) -> tuple[int, ...]:
        """Shape of the layer's per-unit score array (weight layout (O, I, KH, KW) reduced over what a unit spans)."""
        return {"filterlet": (self.filters, self.kh, self.kw), "weight": (self.filters, self.cin, self.kh, self.kw),
                "channel": (self.filters,)}[unit]


def is_prunable_conv(m) -> bool:
    from torch import nn

    return isinstance(m, nn.Conv2d) and m.groups == 1


def conv_layers(module, input_shape_nchw: tuple[int, ...]) -> list[ConvLayer]:
    """The standard convolutions of `module`, in the order a forward pass on a (1, C, H, W) input runs them.

    >>> from torch import nn
    >>> net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Conv2d(4, 4, 3, groups=4), nn.Conv2d(4, 8, 1, stride=2))
    >>> [(c.name, c.filters, c.cin, c.kh, c.oh) for c in conv_layers(net, (1, 1, 10, 10))]
    [('0', 4, 1, 3, 8), ('2', 8, 4, 1, 3)]
    """
    import torch

    found: list[ConvLayer] = []
    names = {m: n for n, m in module.named_modules() if is_prunable_conv(m)}

    def hook(m, inputs, output):  # output (1, N, OH, OW)
        if not any(c.name == names[m] for c in found):
            _, n, oh, ow = output.shape
            found.append(ConvLayer(names[m], n, m.in_channels, *m.kernel_size, oh, ow))

    handles = [m.register_forward_hook(hook) for m in names]
    was_training = module.training
    try:
        module.eval()
        with torch.no_grad():
            module(torch.zeros(input_shape_nchw))
    finally:
        for h in handles:
            h.remove()
        module.train(was_training)
    return found
