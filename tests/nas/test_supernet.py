"""The weight-sharing supernet: a subnet extracted with inherited weights computes exactly what the supernet computes
with that subnet active, in eval mode and after BN recalibration; slicing follows the thesis (central kernel
window, first channels, first blocks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from bn_helpers import randomise_bn

from kilobyte.nas.build import build_module
from kilobyte.nas.space import MBSpace
from kilobyte.nas.supernet import SuperNet

SPACE = MBSpace(num_classes=10, in_channels=1)


@pytest.mark.parametrize("seed", range(5))
def test_extracted_subnet_equals_supernet(seed):
    torch.manual_seed(seed)
    net = SuperNet(SPACE, 0.3, 28).eval()
    randomise_bn(net, seed)
    arch = net.space.sample(np.random.default_rng(seed))
    x = torch.randn(3, 1, 28, 28)
    net.set_active(arch)
    with torch.no_grad():
        want = net(x)
        sub = net.extract(arch)
        got = sub(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    standalone = build_module(net.space, arch)
    assert [p.shape for p in sub.parameters()] == [p.shape for p in standalone.parameters()]


def test_slices_are_central_kernels_and_first_channels():
    net = SuperNet(SPACE, 0.3, 28)
    arch = net.space.smallest()
    sub = net.extract(arch)
    big = net.blocks[0].layers[1].conv.weight  # first stage block: depthwise of the largest net (k7)
    small = [m for m in sub.modules() if isinstance(m, torch.nn.Conv2d) and m.groups > 1][1].weight
    c = small.shape[0]
    torch.testing.assert_close(small, big[:c, :, 2:5, 2:5])


def test_training_a_subnet_updates_only_its_slice():
    torch.manual_seed(0)
    net = SuperNet(SPACE, 0.3, 28)
    arch = net.space.smallest()
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    net.set_active(arch)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loss = net(torch.randn(4, 1, 28, 28)).square().mean()
    loss.backward()
    opt.step()
    dw = net.blocks[0].layers[1].conv.weight
    hidden = net.blocks[0].cin * 3
    changed = (dw.detach() != before["blocks.0.layers.1.conv.weight"])
    assert changed[:hidden, :, 2:5, 2:5].any()
    assert not changed[hidden:].any() and not changed[:, :, :2].any()
    depth = arch.depths[0]
    untouched = net.blocks[depth]  # the first skipped block of stage 0
    assert all(torch.equal(p, before[f"blocks.{depth}.{n}"]) for n, p in untouched.named_parameters())
