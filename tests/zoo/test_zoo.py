"""Tests for the model zoo: every model builds, runs, traces with only frontend ops, and matches published numbers.

Oracles: MAC/parameter counts come from forward hooks on the built modules (never from the zoo's own tables),
compared with published figures (torchvision, the MCUNetV2 paper / thesis, the ProxylessNAS release); the
receptive field is measured with autograd (which input pixels a 7x7 output patch depends on).
"""

from __future__ import annotations

import importlib
import operator

import pytest
import torch
from torch import fx, nn

from kilobyte import zoo

IMAGENET_MODELS = ["mobilenetv2", "mbv2-rd", "mnasnet", "proxyless-mobile"]
SMALL_MODELS = ["vgg-small", "resnet-small"]
FRONTEND_MODULES = (
    nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.ReLU6, nn.Linear, nn.AvgPool2d, nn.MaxPool2d, nn.AdaptiveAvgPool2d,
    nn.Dropout, nn.Identity, nn.ZeroPad2d, nn.Softmax,
)
FRONTEND_FUNCTIONS = {operator.add, torch.add, torch.cat, torch.flatten}
FRONTEND_METHODS = {"mean", "view", "reshape", "flatten"}


def count_macs(model: nn.Module, shape: tuple[int, ...]) -> int:
    """Conv: k*k*Cin/groups*Cout*Ho*Wo; Linear: in*out. Counted from the shapes seen in a real forward pass."""
    total = 0

    def hook(module, _inputs, output):
        nonlocal total
        if isinstance(module, nn.Conv2d):
            kh, kw = module.kernel_size
            total += kh * kw * module.in_channels // module.groups * module.out_channels * output[0, 0].numel()
        else:
            total += module.in_features * module.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model(torch.zeros(shape))
    for handle in handles:
        handle.remove()
    return total


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def patch_stage(model: nn.Module, shape: tuple[int, ...]) -> int:
    """Number of `features` children up to and including the first one whose output is 1/8 of the input size."""
    sizes = []
    handles = [child.register_forward_hook(lambda m, i, o: sizes.append(o.shape[-1])) for child in model.features]
    with torch.no_grad():
        model(torch.zeros(shape))
    for handle in handles:
        handle.remove()
    return sizes.index(shape[-1] // 8) + 1


def measured_receptive_field(model: nn.Module, depth: int, resolution: int = 224, patch: int = 7) -> int:
    """Side of the input region that one interior `patch`x`patch` output patch of features[:depth] depends on.

    Weights are set to 1/fan_in (BN is the identity in eval mode), so with a positive input every activation is
    positive and unsaturated: the input gradient is non-zero exactly on the receptive field.
    """
    stage = model.features[:depth]
    with torch.no_grad():
        for module in stage.modules():
            if isinstance(module, nn.Conv2d):
                module.weight.fill_(1.0 / module.weight[0].numel())
            elif isinstance(module, nn.BatchNorm2d):  # zoo.create settles BN statistics: make BN the identity
                module.reset_parameters()
    x = torch.full((1, 3, resolution, resolution), 0.5, requires_grad=True)
    out = stage(x)  # (1, C, res/8, res/8)
    out[:, :, patch : 2 * patch, patch : 2 * patch].sum().backward()  # an interior patch: no padding involved
    rows = x.grad[0].abs().sum(dim=(0, 2)).nonzero()
    cols = x.grad[0].abs().sum(dim=(0, 1)).nonzero()
    assert rows.max() - rows.min() == cols.max() - cols.min()
    return int(rows.max() - rows.min() + 1)


def per_patch_macs(model: nn.Module, depth: int, resolution: int = 224, patches: int = 4) -> int:
    """MACs of features[:depth] run as patches x patches overlapping patches (MCUNetV2 Table 1's accounting).

    Walks the convolutions recorded by hooks from the output back to the input: each computes an R x R output
    region per patch, and needs an ((R - 1) * s + k)-wide input region.
    """
    convs: list[nn.Conv2d] = []
    stage = model.features[:depth]
    handles = [m.register_forward_hook(lambda m, i, o: convs.append(m)) for m in stage.modules()
               if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        stage(torch.zeros(1, 3, resolution, resolution))
    for handle in handles:
        handle.remove()
    region, total = resolution // 8 // patches, 0
    for conv in reversed(convs):
        (k, _), (s, _) = conv.kernel_size, conv.stride
        total += k * k * conv.in_channels // conv.groups * conv.out_channels * region * region
        region = (region - 1) * s + k
    return total * patches * patches


@pytest.mark.parametrize("name", IMAGENET_MODELS + SMALL_MODELS)
def test_builds_and_runs(name):
    small = name in SMALL_MODELS
    model, shape = zoo.create(name, width=0.5, resolution=32 if small else 64)
    assert not model.training
    with torch.no_grad():
        out = model(torch.randn(shape))
    assert out.shape == (1, 10 if small else 1000)
    assert zoo.describe(name) and "\n" not in zoo.describe(name)


@pytest.mark.parametrize("name", IMAGENET_MODELS + SMALL_MODELS)
def test_traces_to_frontend_ops_only(name):
    model, _ = zoo.create(name, width=0.35, resolution=32)
    modules = dict(model.named_modules())
    for node in fx.symbolic_trace(model).graph.nodes:
        if node.op == "call_module":
            module = modules[node.target]
            assert isinstance(module, FRONTEND_MODULES), f"{name}: {node.target} is {type(module).__name__}"
            if isinstance(module, nn.Conv2d):
                assert module.dilation == (1, 1)
                assert module.groups == 1 or module.groups == module.in_channels == module.out_channels
        elif node.op == "call_function":
            assert node.target in FRONTEND_FUNCTIONS, f"{name}: function {node.target}"
        elif node.op == "call_method":
            assert node.target in FRONTEND_METHODS, f"{name}: method {node.target}"


def test_defaults():
    assert zoo.create("mobilenetv2")[1] == (1, 3, 224, 224)
    assert zoo.create("vgg-small")[1] == (1, 3, 32, 32)
    model, shape = zoo.create("mnasnet", num_classes=7, resolution=96)
    assert shape == (1, 3, 96, 96) and model.classifier[-1].out_features == 7


def test_mobilenetv2_matches_paper():
    model, shape = zoo.create("mobilenetv2")
    assert count_macs(model, shape) == pytest.approx(300.8e6, rel=0.005)
    assert count_params(model) == pytest.approx(3.50e6, rel=0.01)


def test_mobilenetv2_head_scales_only_when_asked():
    """torchvision keeps the 1280-channel head below w = 1; `scale_head` gives 1280 w (0.25: 320, 0.1: 128)."""
    from kilobyte.zoo import mobilenetv2

    for width, scaled in ((0.25, 320), (0.1, 128)):
        assert mobilenetv2.build(width, 10, 1).classifier[-1].in_features == 1280
        model = mobilenetv2.build(width, 10, 1, scale_head=True)
        assert model.classifier[-1].in_features == scaled
        assert model.eval()(torch.zeros(1, 1, 32, 32)).shape == (1, 10)


def test_reference_parameter_counts():
    # torchvision's mnasnet1_0 and the imgclsmob port of ProxylessNAS-Mobile report these exact counts.
    assert count_params(zoo.create("mnasnet")[0]) == 4_383_312
    assert count_params(zoo.create("proxyless-mobile")[0]) == 4_080_512


@pytest.mark.parametrize(("name", "expected"), [("mobilenetv2", 75), ("mbv2-rd", 63)])
def test_patch_stage_receptive_field(name, expected):
    model, shape = zoo.create(name)
    depth = patch_stage(model, shape)
    assert depth == importlib.import_module(zoo._entry(name).builder.split(":")[0]).PATCH_STAGE_DEPTH
    assert measured_receptive_field(model, depth) == expected


def test_mbv2_rd_budget_and_overhead():
    base, shape = zoo.create("mobilenetv2")
    rd, _ = zoo.create("mbv2-rd")
    rd_total = count_macs(rd, shape)
    assert 290e6 <= rd_total <= 305e6
    # MCUNetV2 Table 1: MobileNetV2's patch stage costs 130 M MACs with 4x4 patches.
    assert per_patch_macs(base, patch_stage(base, shape)) == pytest.approx(130e6, rel=0.01)
    rd_depth = patch_stage(rd, shape)
    rd_layerwise = count_macs(rd.features[:rd_depth], shape)
    rd_patched = per_patch_macs(rd, rd_depth)
    assert rd_patched / rd_layerwise - 1 < 0.20  # paper: +18 % for the patch stage
    assert (rd_patched - rd_layerwise) / rd_total < 0.03  # paper: +3 % overall


@pytest.mark.parametrize("name", IMAGENET_MODELS + SMALL_MODELS)
def test_width_scales_params(name):
    params = [count_params(zoo.create(name, width=w, resolution=32)[0]) for w in (0.25, 0.5, 1.0, 1.5)]
    assert params == sorted(set(params))  # strictly increasing with width


@pytest.mark.parametrize("name", SMALL_MODELS)
@pytest.mark.parametrize("resolution", [28, 32, 48, 64])
def test_small_cnns_any_size_and_grayscale(name, resolution):
    model, shape = zoo.create(name, resolution=resolution, in_channels=1)
    assert shape == (1, 1, resolution, resolution)
    with torch.no_grad():
        assert model(torch.randn(shape)).shape == (1, 10)
    assert 100_000 <= count_params(model) <= 300_000


def test_vgg_small_at_8_px_drops_only_the_pool_of_a_1_px_map():
    """digits is 8 px: vgg-small keeps three pools there (8 -> 4 -> 2 -> 1) and all four from 16 px up, as before."""
    pools = {r: [m for m in zoo.create("vgg-small", resolution=r, in_channels=1)[0].features
                 if isinstance(m, nn.MaxPool2d)] for r in (8, 16, 28, 32)}
    assert [len(p) for p in pools.values()] == [3, 4, 4, 4]
    model, shape = zoo.create("vgg-small", resolution=8, in_channels=1)
    with torch.no_grad():
        assert model(torch.randn(shape)).shape == (1, 10)
    with pytest.raises(ValueError, match="minimum of 8 px"):
        zoo.create("vgg-small", resolution=7)


def test_small_cnn_channels_floor():
    model, _ = zoo.create("vgg-small", width=0.01)
    assert min(m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d)) == 4


def test_unknown_name():
    with pytest.raises(KeyError) as info:
        zoo.create("resnet50")
    message = str(info.value)
    assert "resnet50" in message and "mobilenetv2" in message and "\n" not in message
    with pytest.raises(ValueError):
        zoo.describe("nope")


def test_bad_arguments():
    with pytest.raises(ValueError, match="resolution"):
        zoo.create("mobilenetv2", resolution=16)
    with pytest.raises(ValueError, match="width"):
        zoo.create("vgg-small", width=0)


def test_name_normalisation():
    assert zoo.create("Proxyless_Mobile", width=0.35, resolution=32)[1] == (1, 3, 32, 32)


def test_initial_weights_follow_from_the_seed_alone():
    """Two builds with one seed are equal whatever the global generator did in between (the demo trained a
    different network every run when they were not); another seed gives other weights; the caller's generator is
    left as it was."""
    import torch

    from kilobyte import zoo

    a, _ = zoo.create("mnist-cnn")
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    b, _ = zoo.create("mnist-cnn")
    assert torch.equal(torch.rand(1), before)  # the global generator untouched by create
    c, _ = zoo.create("mnist-cnn", seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
