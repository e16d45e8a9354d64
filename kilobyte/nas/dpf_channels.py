"""Search stage: the channels structured pruning (dpf.py) may remove from a μNAS network, and the smaller network
that removing them gives.

A *group* is one layer whose output channels (or units) can go, together with the depthwise layers that carry those
channels on: a full or 1x1 convolution (the producer), the depthwise convolutions reading it through pools, pads and
other depthwise layers (the followers, whose channel c is the producer's channel c), or a hidden dense layer. Every
member's output is masked by the group's channel mask; removing the masked channels is then exact.

Producers that must keep all their channels, so that the pruned architecture resolves (`network`) to the same ops:
- the first convolution (μNAS's code never prunes the first layer);
- every producer of an ADD's input (a serial block's output that parallel blocks add to, a parallel block's last
  layer or its 1x1 fix): the operands must keep equal channel counts;
- the producer of the input of a parallel block's depthwise last layer: its channel count decides whether
  `network` adds a 1x1 fix;
- the producer of a parallel block's input (issue #15 asks for it; the previous rule already covers the one case
  where it matters, a block of depthwise layers only, so this rule only gives up some prunable channels).
A convolution keeps at least 1 channel and a hidden dense layer `space.units[0]` units, so the pruned architecture
stays inside the space. The classifier is never pruned.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..prune.channels import copy_kept
from .unas_build import UNet, build_module, network
from .unas_space import UArch, UnasSpace


@dataclass(frozen=True)
class ChannelGroup:
    producer: int  # step index (into net.steps) of the full / 1x1 conv or hidden dense layer
    followers: tuple[int, ...]  # step indices of the depthwise convs carrying its channels on
    channels: int
    minimum: int  # channels that must stay

    @property
    def members(self) -> tuple[int, ...]:
        return (self.producer,) + self.followers


def is_depthwise(arch: UArch, step) -> bool:
    """A depthwise gene (also on one channel, where the step is a plain conv with the same weight shape)."""
    if step.kind != "conv" or step.origin is None:
        return False
    b, j = step.origin
    return arch.blocks[b].layers[j].type == "depthwise"


def producer_of(arch: UArch, net: UNet, value: int) -> int | None:
    """The step index of the full / 1x1 conv or dense layer whose channels `value` carries, tracing back through
    depthwise convs, pools and pads; None for the input, an ADD or a flatten."""
    while value > 0:
        step = net.steps[value - 1]
        if step.kind in ("pool", "pad") or is_depthwise(arch, step):
            value = step.src[0]
        elif step.kind in ("conv", "dense"):
            return value - 1
        else:
            return None
    return None


def fixed_producers(arch: UArch, net: UNet) -> set[int]:
    """Step indices of the convolutions that must keep all channels (the module doc's list)."""
    convs = [i for i, s in enumerate(net.steps) if s.kind == "conv"]
    fixed = {convs[0]}
    for s in net.steps:
        if s.kind == "add":
            fixed.update(producer_of(arch, net, v) for v in s.src)
        elif s.kind == "conv" and s.origin is not None and arch.blocks[s.origin[0]].parallel:
            b, j = s.origin
            if j == 0 or (j == len(arch.blocks[b].layers) - 1 and is_depthwise(arch, s)):
                fixed.add(producer_of(arch, net, s.src[0]))
    fixed.discard(None)
    return fixed


def channel_groups(space: UnasSpace, arch: UArch, net: UNet | None = None) -> list[ChannelGroup]:
    """The prunable groups of `arch`, in step order."""
    net = net or network(space, arch)
    fixed = fixed_producers(arch, net)
    followers: dict[int, list[int]] = {}
    for i, s in enumerate(net.steps):
        if is_depthwise(arch, s):
            p = producer_of(arch, net, s.src[0])
            if p is not None:
                followers.setdefault(p, []).append(i)
    classifier = len(net.steps) - 1
    groups = []
    for i, s in enumerate(net.steps):
        if s.kind == "conv" and not is_depthwise(arch, s) and i not in fixed:
            groups.append(ChannelGroup(i, tuple(followers.get(i, ())), s.cout, 1))
        elif s.kind == "dense" and i != classifier:
            groups.append(ChannelGroup(i, (), s.cout, space.units[0]))
    return groups


def kept_indices(net: UNet, arch: UArch, keep: dict[int, np.ndarray]) -> list[np.ndarray]:
    """Per value (0 = the input), the indices of its channels (features after a flatten) that stay, given `keep`:
    per group producer, a boolean mask of its channels."""
    kept = [np.arange(net.shapes[0][2])]
    for i, s in enumerate(net.steps):
        src = kept[s.src[0]] if s.src else None
        if s.kind in ("pool", "pad", "add") or is_depthwise(arch, s):
            kept.append(src)  # an ADD's operands keep all channels (fixed_producers)
        elif s.kind == "flatten":
            h, w, _ = net.shapes[s.src[0]]
            kept.append((src[:, None] * (h * w) + np.arange(h * w)).ravel())  # NCHW order: feature c*H*W + p
        elif i in keep:
            kept.append(np.flatnonzero(keep[i]))
        else:
            kept.append(np.arange(s.cout))
    return kept


def pruned_arch(arch: UArch, net: UNet, kept: list[np.ndarray], groups: list[ChannelGroup]) -> UArch:
    """`arch` with each pruned producer's `channels` and each hidden dense layer's `units` set to the kept counts."""
    blocks = [list(b.layers) for b in arch.blocks]
    dense = list(arch.dense)
    dense_steps = [i for i, s in enumerate(net.steps) if s.kind == "dense"]
    for g in groups:
        step, count = net.steps[g.producer], len(kept[g.producer + 1])
        if step.kind == "dense":
            dense[dense_steps.index(g.producer)] = count
        else:
            b, j = step.origin
            blocks[b][j] = replace(blocks[b][j], channels=count)
    return replace(arch, blocks=tuple(replace(b, layers=tuple(layers)) for b, layers in zip(arch.blocks, blocks)),
                   dense=tuple(dense))


def shrink_module(space: UnasSpace, arch: UArch, module, keep: dict[int, np.ndarray]):
    """(the module of the pruned architecture with the kept weights and BatchNorm state of `module`, that
    architecture). `module`'s outputs, with its group members' outputs masked by `keep`, equal the new module's."""
    import torch

    net = network(space, arch)
    groups = channel_groups(space, arch, net)
    kept = kept_indices(net, arch, keep)
    small_arch = pruned_arch(arch, net, kept, groups)
    small = build_module(space, small_arch)
    small_net = network(space, small_arch)
    if [s.kind for s in small_net.steps] != [s.kind for s in net.steps]:  # fixed_producers exists to prevent this
        raise AssertionError(f"pruning changed the ops of {arch.describe()} into {small_arch.describe()}")
    with torch.no_grad():
        for i, s in enumerate(net.steps):
            if s.kind in ("conv", "dense"):
                out, cin = torch.from_numpy(kept[i + 1]), torch.from_numpy(kept[s.src[0]])
                _copy_layer(module.layers[i], small.layers[i], out, None if is_depthwise(arch, s) else cin)
    return small.eval(), small_arch


def _copy_layer(big, small, out, cin) -> None:
    """Copy the kept rows `out` (and input columns `cin`; None for a depthwise conv) of every parameter and buffer of
    one layer's Sequential (`prune.channels.copy_kept`, the channel removal of `kilobyte prune`)."""
    for src, dst in zip(big, small):
        copy_kept(src, dst, out, cin)
