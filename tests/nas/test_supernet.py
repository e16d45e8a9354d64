"""The weight-sharing supernet: a subnet extracted with inherited weights computes exactly what the supernet computes
with that subnet active, in eval mode and after BN recalibration; slicing follows the thesis (central kernel
window, first channels, first blocks)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from bn_helpers import randomise_bn

from kilobyte.nas.build import build_module, network
from kilobyte.nas.space import MBSpace
from kilobyte.nas.supernet import SuperNet
from kilobyte.nas.supernet_train import SupernetTraining, train_phase

SPACE = MBSpace(num_classes=10, in_channels=1)


@pytest.mark.parametrize("seed", range(7))
def test_extracted_subnet_equals_supernet(seed):
    """Seeds 5 and 6: the adaptive schedules of small images (stem stride 1, two or three stride-2 stages)."""
    torch.manual_seed(seed)
    space = SPACE if seed < 5 else SPACE.with_config(0.3, 28, ((1, 2, 2, 1, 1, 1, 1), (2, 2, 2, 1, 1, 1, 1))[seed - 5])
    net = SuperNet(space, 0.3, 28).eval()
    randomise_bn(net, seed)
    arch = net.space.sample(np.random.default_rng(seed))
    _assert_extract_equals_supernet(net, arch, seed)


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


JOINT = MBSpace(num_classes=10, in_channels=1, stage_width_choices=(0.5, 0.75, 1.0), rd_stages=2)


def _rd_genes_on(space, arch):
    """`arch` with kernel-1 MB1 and a kernel-1 second block in both RD stages (depth 2 there)."""
    blocks = [list(stage) for stage in arch.blocks]
    for s in (0, 1):
        blocks[s][1] = (1, blocks[s][1][1])
    return space.check(dataclasses.replace(arch, first_kernel=1, blocks=tuple(map(tuple, blocks)),
                                           depths=(2, 2) + arch.depths[2:]))


def _assert_extract_equals_supernet(net, arch, seed):
    x = torch.randn(2, 1, net.space.resolutions[0], net.space.resolutions[0])
    net.set_active(arch)
    with torch.no_grad():
        want = net(x)
        sub = net.extract(arch)
        got = sub(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    standalone = build_module(net.space, arch)
    assert [p.shape for p in sub.parameters()] == [p.shape for p in standalone.parameters()]
    return sub


@pytest.mark.parametrize("seed", range(4))
def test_joint_space_subnet_equals_supernet(seed, one_torch_thread):
    """Elastic stage widths, kernel-1 slots (depthwise skipped), the MB1 kernel gene and the deeper stage 2."""
    torch.manual_seed(seed)
    net = SuperNet(JOINT, 0.3, 16).eval()
    randomise_bn(net, seed)
    arch = net.space.sample(np.random.default_rng(seed))
    arch = _rd_genes_on(net.space, arch) if seed % 2 else arch
    sub = _assert_extract_equals_supernet(net, arch, seed)
    n_dw = sum(isinstance(m, torch.nn.Conv2d) and m.groups > 1 for m in sub.modules())
    assert n_dw == (arch.first_kernel == 3) + sum(k != 1 for _, k, _ in arch.active_blocks())
    if seed % 2:
        assert n_dw < 1 + len(arch.active_blocks())


def test_joint_space_residual_only_where_channels_match(one_torch_thread):
    """Stage 3 (stride 1) at w0.5: 80·1.0 -> 40 channels into 96·0.75 -> 40 adds the input; the supernet's widest
    network (40 -> 48) has no such residual, and the subnet's output still equals its extracted module's."""
    torch.manual_seed(0)
    space = JOINT.with_config(0.5, 16)
    net = SuperNet(space, 0.5, 16).eval()
    randomise_bn(net, 1)
    assert not net.blocks[sum(space.max_depths[:3])].block.residual  # the widest stage-3 first block
    arch = dataclasses.replace(space.smallest(), stage_widths=(1.0, 1.0, 1.0, 0.75, 1.0, 1.0))
    first_of_stage3 = network(space, arch).blocks[1 + sum(arch.depths[:3])]
    assert first_of_stage3.stage == 3 and first_of_stage3.residual
    _assert_extract_equals_supernet(net, arch, 0)
    other = dataclasses.replace(arch, stage_widths=(1.0,) * 6)  # 40 -> 48: no residual
    assert not network(space, other).blocks[1 + sum(other.depths[:3])].residual
    _assert_extract_equals_supernet(net, other, 0)


def test_sandwich_training_step_on_the_joint_space(one_torch_thread):
    """The trainer's sandwich rule on the joint space: its smallest subnet runs the MB1 block without depthwise and
    the narrowest stages, its largest with them; one supernet epoch over both (and sampled subnets) trains."""
    torch.manual_seed(0)
    net = SuperNet(JOINT, 0.3, 16)
    smallest = net.space.smallest()
    assert (smallest.first_kernel, net.largest_arch.first_kernel) == (1, 3)
    net.set_active(smallest)
    assert [layer.layer.depthwise for layer in net.first.run] == [False]
    head_in = net.head.active[0]
    net.set_active(net.largest_arch)
    assert len(net.first.run) == 2 and net.head.active[0] > head_in  # 0.5 x vs 1.0 x the last stage's width
    dw = net.first.roles["depthwise"].conv.weight.detach().clone()
    x, y = torch.randn(8, 1, 16, 16), torch.randint(0, 10, (8,))
    cfg = SupernetTraining(supernet_epochs=1, subnets_per_batch=2, batch_size=8, shift=0)
    history = train_phase(net, "supernet", x, y, cfg, seed=0)
    assert len(history) == 1 and np.isfinite(history[0]["loss"])
    assert not torch.equal(dw, net.first.roles["depthwise"].conv.weight)  # the largest subnet trained it
