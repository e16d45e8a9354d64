"""DPF, pruning during training (kilobyte/nas/dpf.py, dpf_channels.py): the cubic schedule and its 16-step mask
updates, the straight-through gradient reaching pruned weights, unstructured sparsity on target with the classifier
and biases untouched, structured pruning removing channels exactly (the shrunk module computes what the masked one
does, on random architectures with parallel blocks, depthwise layers and pools) and never growing a resource, and
a network still learning digits while half its channels go."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from bn_helpers import randomise_bn

from kilobyte.nas.dpf import DPF, PruneError, StructuredMasks, UnstructuredMasks, cubic_sparsity, train_pruned
from kilobyte.nas.dpf_channels import channel_groups, fixed_producers
from kilobyte.nas.resources import ResourceEvaluator
from kilobyte.nas.unas_build import build_graph, build_module, network
from kilobyte.nas.unas_space import UArch, UBlock, ULayer, UnasSpace
from kilobyte.train import TrainConfig, float_accuracy

DIGITS = UnasSpace(input_shape=(8, 8, 1), num_classes=10)
SMALL = UArch((UBlock((ULayer("full", 3, 16, 1),)), UBlock((ULayer("depthwise", 3, 1, 1), ULayer("1x1", 1, 24)))),
              "avg", 2, (32,))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits():
    from kilobyte.data import load_dataset

    ds = load_dataset("digits", seed=0)
    return (ds.x[:1200], ds.y[:1200]), (ds.x[1200:], ds.y[1200:])


def test_cubic_schedule():
    """0 up to the window's start, s_f (1 - (1/2)^3) = 7/8 s_f in its middle, s_f from its end on."""
    assert cubic_sparsity(0, 30, 180, 0.8) == 0.0 and cubic_sparsity(30, 30, 180, 0.8) == 0.0
    assert cubic_sparsity(105, 30, 180, 0.8) == pytest.approx(0.7)
    assert cubic_sparsity(180, 30, 180, 0.8) == pytest.approx(0.8) and cubic_sparsity(250, 30, 180, 0.8) == 0.8
    assert cubic_sparsity(60, 30, 180, 0.8) == pytest.approx(0.8 * (1 - 0.8 ** 3))


def test_masks_change_every_16_steps_inside_the_window_only():
    """200 steps, window 0.1–0.6 = steps 20–120; the weights move randomly before every step, yet the masks change
    only at steps 32, 48, ..., 112 and at 120, where they reach the target and stay."""
    torch.manual_seed(0)
    module = build_module(DIGITS, SMALL)
    masks = UnstructuredMasks(module, network(DIGITS, SMALL))
    dpf = DPF(masks, 0.6)
    changed = []
    for step in range(1, 201):
        with torch.no_grad():
            for layer in masks.layers:
                layer.parametrizations.weight.original.add_(torch.randn_like(layer.weight) * 0.1)
        before = [m.clone() for m in masks.masks()]
        dpf(step, 200)
        if any(not torch.equal(a, b) for a, b in zip(before, masks.masks())):
            changed.append(step)
    assert changed == [32, 48, 64, 80, 96, 112, 120]
    assert [s for s, _ in dpf.updates] == changed
    assert [round(s, 4) for _, s in dpf.updates] == [round(cubic_sparsity(t, 20, 120, 0.6), 4) for t in changed]
    assert abs(masks.sparsity() - 0.6) < 1e-3


def test_pruned_weights_and_channels_still_learn():
    """Straight-through: a masked weight does not change the output, yet receives the gradient and moves under an
    optimiser step; in structured mode a masked channel's producer weights do too."""
    x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))
    torch.manual_seed(0)
    module = build_module(DIGITS, SMALL)
    masks = UnstructuredMasks(module, network(DIGITS, SMALL))
    masks.update(0.5)
    conv = masks.layers[0]
    dense, mask = conv.parametrizations.weight.original, masks.masks()[0]
    pruned = mask == 0
    assert pruned.any()
    out = module(x)
    with torch.no_grad():
        dense[pruned] += 1.0  # a pruned weight's value is invisible to the forward pass
        assert torch.equal(module(x), out)
        dense[pruned] -= 1.0
    torch.nn.functional.cross_entropy(out, y).backward()
    assert (dense.grad[pruned] != 0).float().mean() > 0.9
    before = dense.detach().clone()
    torch.optim.SGD(module.parameters(), lr=0.1).step()
    assert (dense.detach() != before)[pruned].all()

    torch.manual_seed(0)
    module = build_module(DIGITS, SMALL)
    smasks = StructuredMasks(module, DIGITS, SMALL, network(DIGITS, SMALL))
    smasks.update(0.5)
    group = smasks.groups[0]
    off = smasks.masks[group.producer] == 0
    assert off.any()
    torch.nn.functional.cross_entropy(module(x), y).backward()
    grad = module.layers[group.producer][0].weight.grad  # (C, Cin, k, k)
    assert (grad[off].flatten(1).abs().sum(1) > 0).all()


def test_unstructured_sparsity_on_target_classifier_and_biases_untouched(digits):
    (x, y), _ = digits
    config = TrainConfig(epochs=2, lr=0.1, warmup_fraction=0.1, seed=0)
    result = train_pruned(DIGITS, SMALL, 0.7, "unstructured", x, y, config, start=0.1, end=0.6)
    net = network(DIGITS, SMALL)
    layers = [result.module.layers[i][0] for i, s in enumerate(net.steps) if s.kind in ("conv", "dense")]
    prunable, classifier = layers[:-1], layers[-1]
    zeros = sum((layer.weight == 0).sum().item() for layer in prunable)
    size = sum(layer.weight.numel() for layer in prunable)
    assert abs(zeros / size - 0.7) < 0.01 and result.sparsity == pytest.approx(zeros / size)
    assert (classifier.weight != 0).all()
    assert all((layer.bias != 0).all() for layer in layers if layer.bias is not None)
    assert result.arch == SMALL and not result.module.training
    assert not any(hasattr(layer, "parametrizations") for layer in layers)  # plain weights: importable as is


def _random_archs(space, count, seed):
    """Random architectures that together hold parallel blocks (also with a depthwise last layer), depthwise layers,
    pre-block pools and several FC layers."""
    rng = np.random.default_rng(seed)
    archs = [space.sample(rng) for _ in range(count)]
    layers = [(b, ly) for a in archs for b in a.blocks for ly in b.layers]
    assert any(b.parallel and b.layers[-1].type == "depthwise" for a in archs for b in a.blocks)
    assert any(ly.type == "depthwise" for _, ly in layers) and any(b.pool for b, _ in layers)
    assert any(len(a.dense) > 1 for a in archs)
    return archs


@pytest.mark.parametrize("seed", range(4))
def test_structured_pruning_removes_channels_exactly(seed):
    """Channels masked at 50 %: the shrunk module (built from the pruned architecture) computes what the masked
    module computes, its IR graph builds, every resource is at most the unpruned one's (weights strictly fewer), and
    the producers that must stay whole keep every channel."""
    space = UnasSpace(input_shape=(16, 16, 3), num_classes=10)
    ev = ResourceEvaluator(space)
    for k, arch in enumerate(_random_archs(space, 6, seed)):
        torch.manual_seed(k)
        module = build_module(space, arch).eval()
        randomise_bn(module, k)
        net = network(space, arch)
        masks = StructuredMasks(module, space, arch, net)
        masks.update(0.5)
        x = torch.randn(3, 3, 16, 16)
        with torch.no_grad():
            want = module(x)
        small, small_arch, achieved = masks.finish(space, arch)
        with torch.no_grad():
            torch.testing.assert_close(small(x), want, rtol=1e-4, atol=1e-5)
        assert not space.problems(small_arch)
        build_graph(space, small_arch)
        small_net = network(space, small_arch)
        assert all(small_net.steps[i].cout == net.steps[i].cout for i in fixed_producers(arch, net))
        big, little = ev.evaluate(arch), ev.evaluate(small_arch)
        assert little.peak_bytes <= big.peak_bytes and little.flash_bytes <= big.flash_bytes
        assert little.macs <= big.macs and little.weight_bytes <= big.weight_bytes
        if masks.channel_sparsity() > 0:
            assert little.weight_bytes < big.weight_bytes and achieved > 0


def test_which_producers_stay_whole():
    """c3x8, c3x10 | c3x12 | parallel c3x6, c3x7, dw3 (+ a 1x1 fix to 12) | pw16, dw3 | fc32: the first conv, the
    parallel block's input (c3x10), the serial block it adds to (c3x12), the conv feeding its depthwise last layer
    (c3x7) and the 1x1 fix stay whole; the branch's first conv, pw16 (with its depthwise follower) and fc32 are
    pruned, fc32 to no fewer than the space's 10 units."""
    arch = UArch((UBlock((ULayer("full", 3, 8), ULayer("full", 3, 10))), UBlock((ULayer("full", 3, 12),)),
                  UBlock((ULayer("full", 3, 6), ULayer("full", 3, 7), ULayer("depthwise", 3, 1)), parallel=True),
                  UBlock((ULayer("1x1", 1, 16), ULayer("depthwise", 3, 1)))), "avg", 2, (32,))
    space = UnasSpace(input_shape=(20, 20, 1), num_classes=10)
    net = network(space, arch)
    kinds = [s.kind for s in net.steps]
    assert kinds == ["conv"] * 7 + ["pad", "add", "conv", "conv", "pool", "flatten", "dense", "dense"]
    assert fixed_producers(arch, net) == {0, 1, 2, 4, 6}
    groups = channel_groups(space, arch, net)
    assert [(g.producer, g.followers, g.minimum) for g in groups] == [(3, (), 1), (9, (10,), 1), (13, (), 10)]


def test_training_under_structured_pruning_still_learns_digits(digits):
    """Six epochs, half the prunable channels and units removed by step 60 % of the way: over 80 % float accuracy
    on 597 held-out digits, with the shrunk module."""
    (x, y), (vx, vy) = digits
    config = TrainConfig(epochs=6, lr=0.1, warmup_fraction=0.1, seed=0)
    result = train_pruned(DIGITS, SMALL, 0.5, "structured", x, y, config)
    assert result.arch.blocks[1].layers[1].channels < 24 and result.arch.dense[0] < 32
    assert result.sparsity > 0.3
    acc = float_accuracy(result.module, vx, vy)
    assert acc > 0.8, acc


def test_bad_requests_say_what_is_allowed(digits):
    (x, y), _ = digits
    with pytest.raises(PruneError, match="unstructured, structured"):
        train_pruned(DIGITS, SMALL, 0.5, "channels", x, y, TrainConfig(epochs=1))
    with pytest.raises(PruneError, match=r"\[0, 1\)"):
        train_pruned(DIGITS, SMALL, 1.5, "structured", x, y, TrainConfig(epochs=1))
