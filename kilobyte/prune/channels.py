"""Prune stage: structured channel pruning of a PyTorch module — which convolutions may lose output channels, and the
smaller dense module that really removing them gives.

A convolution's channels can go when its output reaches exactly one consumer — a standard convolution, or a Linear
layer after a flatten — through nothing but an optional BatchNorm right after it and channel-wise ops (ReLU, pools,
dropout, identity, flatten), each with no other user. Removing channel c then removes the filter, its bias, its
BatchNorm entry and the consumer's input channel c (for a Linear after a flatten of an H x W map: features
c·H·W ... c·H·W + H·W - 1, NCHW order). This is `nas/dpf_channels.py`'s rule for μNAS networks written for any
traced module.

A convolution whose output meets an ADD, a CONCAT or a second user is not pruned. In resnet-small that keeps the stem
and every block's second convolution and projection shortcut (their channels meet at the residual adds) and prunes
the first convolution of each basic block, whose channels stay inside the block; in vgg-small every convolution is
prunable. A depthwise convolution on the path also stops the chain (its channels would have to shrink with the
producer's; nothing in the zoo's small CNNs needs it).
"""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass

import numpy as np

from .layers import is_prunable_conv

CHANNELWISE_MODULES = ("ReLU", "ReLU6", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Identity", "Dropout",
                       "Flatten")
CHANNELWISE_FUNCTIONS = ("relu", "flatten", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "dropout")


@dataclass(frozen=True)
class ChannelChain:
    """A conv whose output channels can go, the BatchNorm right after it (or None), and the layer reading them."""

    conv: str
    norm: str | None
    consumer: str


def channel_chains(module) -> list[ChannelChain]:
    """The prunable convolutions of `module` (module doc), traced with torch.fx, in graph order."""
    import torch.fx

    graph = torch.fx.symbolic_trace(module).graph
    modules = dict(module.named_modules())
    chains = []
    for node in graph.nodes:
        m = modules.get(node.target) if node.op == "call_module" else None
        if m is not None and _is_standard_conv(m):
            chain = _follow(node, modules)
            if chain is not None:
                chains.append(ChannelChain(node.target, *chain))
    return chains


def _is_standard_conv(m) -> bool:
    return is_prunable_conv(m)


def _follow(node, modules) -> tuple[str | None, str] | None:
    """(BatchNorm name or None, consumer name) reached from conv `node`, or None if the chain breaks."""
    norm, first = None, True
    while len(node.users) == 1:
        node = next(iter(node.users))
        kind = type(modules[node.target]).__name__ if node.op == "call_module" else None
        if kind == "BatchNorm2d" and first:
            norm = node.target
        elif node.op == "call_module" and _is_standard_conv(modules[node.target]) or kind == "Linear":
            return norm, node.target
        elif not _channelwise(node, kind):
            return None
        first = False
    return None


def _channelwise(node, kind: str | None) -> bool:
    if node.op == "call_module":
        return kind in CHANNELWISE_MODULES
    if node.op in ("call_function", "call_method"):
        name = getattr(node.target, "__name__", node.target)
        return name in CHANNELWISE_FUNCTIONS and node.target is not operator.add
    return False


def shrink_channels(module, chains: list[ChannelChain], keep: dict[str, np.ndarray]):
    """A copy of `module` with the channels `keep[conv]` marks False removed from each chain's conv, BatchNorm and
    consumer (a chain missing from `keep` keeps all). The copy's outputs equal `module`'s with those channels masked
    (masks.py zeroes filter, bias and BatchNorm entry)."""
    small = copy.deepcopy(module)
    out_idx = {c.conv: np.flatnonzero(keep[c.conv]) for c in chains if c.conv in keep}
    in_idx = {c.consumer: (c.conv, out_idx[c.conv]) for c in chains if c.conv in out_idx}
    for c in chains:
        if c.conv in out_idx and c.norm:
            _replace(small, c.norm, _select_norm(small.get_submodule(c.norm), out_idx[c.conv]))
    for name in set(out_idx) | set(in_idx):
        layer = small.get_submodule(name)
        rows = out_idx.get(name)
        cols = None
        if name in in_idx:
            producer, kept = in_idx[name]
            cols = _input_columns(layer, module.get_submodule(producer).out_channels, kept)
        _replace(small, name, _select_layer(layer, rows, cols))
    return small.eval()


def _input_columns(layer, channels: int, kept: np.ndarray) -> np.ndarray:
    """Input indices of `layer` that the kept channels feed: the channels themselves for a conv, their flattened
    features (NCHW order) for a Linear."""
    width = layer.in_channels if hasattr(layer, "in_channels") else layer.in_features
    per_channel = width // channels
    return (kept[:, None] * per_channel + np.arange(per_channel)).ravel()


def _select_layer(layer, rows: np.ndarray | None, cols: np.ndarray | None):
    """A new Conv2d / Linear with output rows `rows` and input columns `cols` of `layer` (None: all)."""
    from torch import nn

    out = layer.weight.shape[0] if rows is None else len(rows)
    width = layer.weight.shape[1] if cols is None else len(cols)
    if isinstance(layer, nn.Linear):
        new = nn.Linear(width, out, bias=layer.bias is not None)
    else:
        new = nn.Conv2d(width, out, layer.kernel_size, layer.stride, layer.padding, layer.dilation,
                        bias=layer.bias is not None, padding_mode=layer.padding_mode)
    copy_kept(layer, new, rows, cols)
    return new


def _select_norm(bn, rows: np.ndarray):
    from torch import nn

    new = nn.BatchNorm2d(len(rows), bn.eps, bn.momentum, bn.affine, bn.track_running_stats)
    copy_kept(bn, new, rows, None)
    return new


def copy_kept(src, dst, rows, cols) -> None:
    """Copy into `dst` the kept output rows `rows` (and input columns `cols`) of every parameter and buffer of layer
    `src` (Conv2d, Linear, BatchNorm, ...; None: all of them); a 0-d buffer (BatchNorm's num_batches_tracked) as it
    is. Channel removal here and in μNAS's structured pruning (`nas/dpf_channels.py`) both copy with it."""
    import torch

    rows = None if rows is None else torch.as_tensor(rows)
    cols = None if cols is None else torch.as_tensor(cols)
    with torch.no_grad():
        for name, t in list(src.named_parameters(recurse=False)) + list(src.named_buffers(recurse=False)):
            target = getattr(dst, name)
            if t.ndim == 0:
                target.copy_(t)
                continue
            kept = t if rows is None else t[rows]
            if cols is not None and t.ndim > 1:
                kept = kept[:, cols]
            if kept.shape != target.shape:
                raise AssertionError(f"{type(src).__name__}.{name}: kept {tuple(kept.shape)}, the smaller layer has "
                                     f"{tuple(target.shape)}")
            target.copy_(kept)


def _replace(module, name: str, new) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(module.get_submodule(parent) if parent else module, leaf, new)
