"""Channel pruning (kilobyte/prune/channels.py): which convolutions can lose channels in the zoo's small CNNs, and the
smaller module really having fewer channels while computing what the masked full module computes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from bn_helpers import randomise_bn
from torch import nn

from kilobyte.prune.channels import channel_chains, shrink_channels
from kilobyte.prune.masks import ParameterMasks
from kilobyte.zoo.small_cnns import build_resnet, build_vgg


def test_vgg_every_conv_resnet_only_the_first_of_each_block():
    vgg = channel_chains(build_vgg(0.25, 10, 1))
    assert [c.conv for c in vgg] == ["features.0", "features.4", "features.8", "features.11", "features.15",
                                     "features.18", "features.22", "features.25"]
    assert vgg[-1].consumer == "classifier" and vgg[0].norm == "features.1"
    resnet = channel_chains(build_resnet(0.25, 10, 1))
    assert [(c.conv, c.norm, c.consumer) for c in resnet] == [
        (f"features.{b}.body.0", f"features.{b}.body.1", f"features.{b}.body.3") for b in range(3, 8)]


def test_a_conv_feeding_two_layers_or_an_add_is_not_prunable():
    class TwoUsers(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Conv2d(1, 4, 3), nn.Conv2d(4, 4, 3), nn.Conv2d(4, 4, 3)

        def forward(self, x):
            y = torch.relu(self.a(x))
            return self.b(y) + self.c(y)

    assert channel_chains(TwoUsers()) == []


@pytest.mark.parametrize("build", [build_vgg, build_resnet])
def test_smaller_module_equals_masked_full_module(build):
    torch.manual_seed(0)
    net = build(0.5, 10, 1).eval()
    randomise_bn(net, 0)
    chains = channel_chains(net)
    rng = np.random.default_rng(0)
    keep = {}
    for c in chains:
        k = rng.random(net.get_submodule(c.conv).out_channels) < 0.6
        k[0] = True
        keep[c.conv] = k
    small = shrink_channels(net, chains, keep)
    ParameterMasks.for_units(net, keep, "channel", {c.conv: c.norm for c in chains}).apply()
    x = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        np.testing.assert_allclose(small(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-5)
    for c in chains:  # the channels are really gone: fewer filters, BN entries and consumer inputs
        kept = int(keep[c.conv].sum())
        assert small.get_submodule(c.conv).out_channels == kept
        assert small.get_submodule(c.norm).num_features == kept
        consumer = small.get_submodule(c.consumer)
        assert (consumer.in_channels if isinstance(consumer, nn.Conv2d) else consumer.in_features) == kept
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in net.parameters())
