"""One architecture description, two builders: the IR graph built directly equals what `from_torch` gives for the
PyTorch module of the same architecture — node for node, shapes, MACs, parameters and float outputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from bn_helpers import randomise_bn

from kilobyte.analysis.macs import node_macs
from kilobyte.driver import from_module
from kilobyte.interp.float_ref import run_float
from kilobyte.ir import Activation, Op
from kilobyte.ir.compare import assert_graphs_equivalent
from kilobyte.nas.build import build_graph, build_module, input_shape
from kilobyte.nas.space import MBSpace, downsampling_schedules

SPACE = MBSpace(num_classes=10, in_channels=1, widths=(0.2, 0.35, 0.5), resolutions=(28, 32, 40))
# small images: the downsampling schedule is searched too (stem stride 1, fewer stride-2 stages)
ADAPTIVE = [SPACE.with_config(0.35, 28, strides) for strides in downsampling_schedules(
    dataclasses.replace(SPACE, schedules="adaptive"), 28)]


def folded_weights(module):
    """(OHWI or (1,k,k,C) weight, bias) per conv+BN pair and the Linear, folded here independently of the
    frontend: w·γ/√(σ²+ε), β − μ·γ/√(σ²+ε)."""
    mods = list(module.modules())
    for i, m in enumerate(mods):
        if isinstance(m, torch.nn.Conv2d) and not isinstance(mods[i + 1] if i + 1 < len(mods) else None,
                                                             torch.nn.BatchNorm2d):  # a detection head: no BN
            yield m.weight.detach().numpy().transpose(0, 2, 3, 1), m.bias.detach().numpy()
        elif isinstance(m, torch.nn.Conv2d):
            bn = mods[i + 1]
            scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().numpy()
            w = m.weight.detach().numpy() * scale[:, None, None, None]
            bias = (bn.bias.detach().numpy() - bn.running_mean.numpy() * scale)
            w = w.transpose(1, 2, 3, 0) if m.groups > 1 else w.transpose(0, 2, 3, 1)
            yield w.astype(np.float32), bias.astype(np.float32)
        elif isinstance(m, torch.nn.Linear):
            yield m.weight.detach().numpy(), m.bias.detach().numpy()


@pytest.mark.parametrize("seed", range(6 + len(ADAPTIVE)))
def test_graph_equals_traced_module(seed):
    space = SPACE if seed < 6 else ADAPTIVE[seed - 6]
    arch = space.sample(np.random.default_rng(seed))
    module = build_module(space, arch).eval()
    randomise_bn(module, seed)
    traced = from_module("arch", module, input_shape(space, arch)).graph
    direct = build_graph(space, arch, weights=folded_weights(module), name=traced.name)
    assert_graphs_equivalent(direct, traced, rtol=1e-4, atol=1e-5)
    assert sum(node_macs(direct, n) for n in direct.nodes) == sum(node_macs(traced, n) for n in traced.nodes)
    x = np.random.default_rng(seed).standard_normal((1, arch.resolution, arch.resolution, 1)).astype(np.float32)
    out = run_float(direct, {direct.inputs[0]: x})[direct.outputs[0]]
    with torch.no_grad():
        ref = module(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)
    weights = sum(m.weight.numel() for m in module.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
    assert weights == sum(direct.tensors[n.inputs[1]].numel for n in direct.nodes
                          if n.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED))


def test_zero_weight_graph_has_the_same_structure():
    arch = SPACE.largest()
    a = build_graph(SPACE, arch)
    b = build_graph(SPACE, arch, weights=folded_weights(build_module(SPACE, arch).eval()))
    assert [(n.op, n.attrs, tuple(a.tensors[t].shape for t in n.inputs)) for n in a.nodes] == \
        [(n.op, n.attrs, tuple(b.tensors[t].shape for t in n.inputs)) for n in b.nodes]


JOINT = MBSpace(num_classes=10, in_channels=1, widths=(0.3, 0.5), resolutions=(24, 32),
                stage_width_choices=(0.5, 0.75, 1.0), rd_stages=2)


@pytest.mark.parametrize("seed", range(6))
def test_joint_space_graph_equals_traced_module(seed):
    """Width per stage and RD's kernel-1 blocks (no depthwise): the direct graph is still the traced module."""
    rng = np.random.default_rng(100 + seed)
    arch = JOINT.sample(rng)
    if seed % 2:  # force the RD genes on: kernel-1 MB1, kernel-1 blocks in both RD stages at depth 2+
        blocks = [list(stage) for stage in arch.blocks]
        for s in (0, 1):
            blocks[s][1] = (1, blocks[s][1][1])
        arch = JOINT.check(dataclasses.replace(arch, first_kernel=1, blocks=tuple(map(tuple, blocks)),
                                               depths=(2, 3) + arch.depths[2:]))
    module = build_module(JOINT, arch).eval()
    randomise_bn(module, seed)
    traced = from_module("arch", module, input_shape(JOINT, arch)).graph
    direct = build_graph(JOINT, arch, weights=folded_weights(module), name=traced.name)
    assert_graphs_equivalent(direct, traced, rtol=1e-4, atol=1e-5)
    x = rng.standard_normal((1, arch.resolution, arch.resolution, 1)).astype(np.float32)
    out = run_float(direct, {direct.inputs[0]: x})[direct.outputs[0]]
    with torch.no_grad():
        ref = module(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)
    n_dw = sum(n.op is Op.DEPTHWISE_CONV_2D for n in direct.nodes)
    assert n_dw == (arch.first_kernel != 1) + sum(k != 1 for _, k, _ in arch.active_blocks())
    if seed % 2:
        assert n_dw < len(arch.active_blocks()) + 1
    _, _, stage_c, _ = JOINT.channels(arch.width, arch.stage_widths)
    projections = [n for n in direct.nodes if n.op is Op.CONV_2D and n.attrs.activation is Activation.NONE]
    assert [direct.tensors[n.outputs[0]].shape[3] for n in projections[1:]] == \
        [stage_c[s] for s, _, _ in arch.active_blocks()]


DETECTOR = MBSpace(num_classes=4, in_channels=1, widths=(0.3,), resolutions=(64, 96), stage_width_choices=(0.5, 1.0),
                   rd_stages=2).detector(((1, 2), (3, 3)))


@pytest.mark.parametrize("seed", range(4))
def test_a_detector_graph_equals_its_traced_module(seed):
    """A detector space's architectures (YOLO heads at the ends of stages 1 and 3, the later stages dropped): both
    builders give the same graph, one output per head, finest first, with the module's float outputs."""
    arch = DETECTOR.sample(np.random.default_rng(seed))
    module = build_module(DETECTOR, arch).eval()
    randomise_bn(module, seed)
    traced = from_module("arch", module, input_shape(DETECTOR, arch)).graph
    direct = build_graph(DETECTOR, arch, weights=folded_weights(module), name=traced.name)
    assert_graphs_equivalent(direct, traced, rtol=1e-4, atol=1e-5)
    r = arch.resolution
    assert [direct.tensors[t].shape for t in direct.outputs] == [(1, r // 8, r // 8, 2 * 9),
                                                                 (1, r // 16, r // 16, 3 * 9)]
    x = np.random.default_rng(seed).standard_normal((1, r, r, 1)).astype(np.float32)
    outs = run_float(direct, {direct.inputs[0]: x})
    with torch.no_grad():
        refs = module(torch.from_numpy(x.transpose(0, 3, 1, 2)))
    for name, ref in zip(direct.outputs, refs, strict=True):
        np.testing.assert_allclose(outs[name], ref.numpy().transpose(0, 2, 3, 1), rtol=1e-3, atol=1e-4)
