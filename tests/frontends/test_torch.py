"""PyTorch frontend: every converted graph computes what the module computes (oracle: PyTorch itself)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kilobyte import zoo
from kilobyte.errors import UnsupportedOpError
from kilobyte.frontends import from_torch
from kilobyte.interp import run_float
from kilobyte.ir import Op

ZOO_SIZES = {"vgg-small": 32, "resnet-small": 32, "mnist-cnn": 28}  # others (mobile nets): 64 px, width 0.35


def to_nhwc(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def check_against_torch(module: nn.Module, shape, graph=None, atol: float = 1e-4):
    """Run `module` and its IR graph on the same random input and compare every output (NCHW -> NHWC)."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = module.eval()(x)
    graph = graph if graph is not None else from_torch(module, shape)
    got = run_float(graph, to_nhwc(x.numpy()))
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(refs) == len(graph.outputs)
    for name, r in zip(graph.outputs, refs):
        np.testing.assert_allclose(got[name], to_nhwc(r.numpy()), rtol=0, atol=atol, err_msg=name)
    return graph


def ops(graph) -> list[Op]:
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("seed", range(24))
def test_random_net_matches_pytorch(seed, random_net):
    module, shape = random_net(seed)
    check_against_torch(module, shape)


@pytest.mark.parametrize("name", zoo.names("image"))
def test_zoo_model_matches_pytorch(name, randomize_bn):
    module, shape = zoo.create(name, width=0.35, resolution=ZOO_SIZES.get(name, 64))
    randomize_bn(module, seed=1)
    graph = check_against_torch(module, shape)
    assert graph.tensors[graph.inputs[0]].shape == (1, shape[2], shape[3], shape[1])


def test_layouts_follow_the_ir_contract(randomize_bn):
    conv, dw, bn, fc = nn.Conv2d(3, 6, 3, bias=False), nn.Conv2d(6, 12, 5, groups=6), nn.BatchNorm2d(12), \
        nn.Linear(12, 4)
    randomize_bn(bn, 0)
    module = nn.Sequential(conv, dw, bn, nn.AdaptiveAvgPool2d(1), nn.Flatten(), fc)
    g = check_against_torch(module, (1, 3, 16, 12))
    assert g.tensors["input"].shape == (1, 16, 12, 3)
    assert ops(g) == [Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.BATCH_NORM, Op.MEAN, Op.RESHAPE, Op.FULLY_CONNECTED]
    tensors = [[g.tensors[t].data for t in n.inputs[1:]] for n in g.nodes]
    np.testing.assert_array_equal(tensors[0][0], conv.weight.detach().permute(0, 2, 3, 1).numpy())  # OHWI
    np.testing.assert_array_equal(tensors[1][0], dw.weight.detach().permute(1, 2, 3, 0).numpy())  # (1,kh,kw,C)
    assert g.nodes[1].attrs.depth_multiplier == 2
    want_bn = [bn.weight, bn.bias, bn.running_mean, bn.running_var]  # gamma, beta, mean, var
    for got, want in zip(tensors[2], want_bn):
        np.testing.assert_array_equal(got, want.detach().numpy())
    assert g.nodes[3].attrs.axes == (1, 2) and g.nodes[3].attrs.keepdims
    assert g.nodes[4].attrs.shape == (1, 12)
    np.testing.assert_array_equal(tensors[5][0], fc.weight.detach().numpy())  # (out, in), unpermuted


def test_eval_mode_is_restored_and_parameters_copied():
    module = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout(0.5))
    module.train()
    module[1].eval()
    g = from_torch(module, (1, 3, 8, 8))
    assert [m.training for m in module.modules()] == [True, True, False, True]
    with torch.no_grad():
        module[0].weight.add_(1.0)
    assert not np.array_equal(g.tensors["conv_2d_0.weight"].data, module[0].weight.detach().permute(0, 2, 3, 1))


def test_flatten_of_spatial_map_permutes_the_next_linear():
    """IR has no transpose: NHWC-flatten + Linear with W[:, perm] equals PyTorch's NCHW flatten + Linear."""
    fc = nn.Linear(5 * 3 * 4, 7)
    module = nn.Sequential(nn.Conv2d(2, 5, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Dropout(), fc)
    g = check_against_torch(module, (1, 2, 3, 4))
    assert ops(g) == [Op.CONV_2D, Op.RELU, Op.RESHAPE, Op.IDENTITY, Op.FULLY_CONNECTED]
    perm = np.arange(60).reshape(5, 3, 4).transpose(1, 2, 0).ravel()
    np.testing.assert_array_equal(g.tensors[g.nodes[-1].inputs[1]].data, fc.weight.detach().numpy()[:, perm])


def test_flatten_to_the_output_without_linear_is_rejected():
    with pytest.raises(UnsupportedOpError) as e:
        from_torch(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten()), (1, 3, 8, 8))
    assert "\n" not in str(e.value) and "flatten" in str(e.value)


def test_mean_heads_map_to_mean_and_drop_needless_flatten():
    class MeanHead(nn.Module):
        def forward(self, x):
            return torch.flatten(x.mean((2, 3)), 1)

    g = check_against_torch(nn.Sequential(nn.Conv2d(3, 6, 1), MeanHead()), (1, 3, 5, 5))
    assert ops(g) == [Op.CONV_2D, Op.MEAN]
    assert not g.nodes[1].attrs.keepdims and g.tensors[g.outputs[0]].shape == (1, 6)


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_padding_counts_like_pytorch(count_include_pad):
    module = nn.Sequential(nn.AvgPool2d(3, 2, 1, count_include_pad=count_include_pad))
    g = check_against_torch(module, (1, 3, 9, 8))
    if count_include_pad:  # the IR averages in-image taps only: zero-pad explicitly, then pool VALID
        assert ops(g) == [Op.PAD, Op.AVG_POOL_2D] and g.nodes[1].attrs.padding == (0, 0, 0, 0)
    else:
        assert ops(g) == [Op.AVG_POOL_2D] and g.nodes[0].attrs.padding == (1, 1, 1, 1)


@pytest.mark.parametrize("padding,kernel", [("same", 4), ("same", 3), ("valid", 3), ((2, 0), 5), (3, 7)])
def test_conv_padding_forms(padding, kernel):
    g = check_against_torch(nn.Sequential(nn.Conv2d(3, 5, kernel, padding=padding)), (1, 3, 11, 9))
    if padding == "same" and kernel == 4:
        assert g.nodes[0].attrs.padding == (1, 2, 1, 2)  # the odd pixel goes at the end, as in PyTorch


def test_functional_forms():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 3, 3, 3))
            self.fc = nn.Linear(6 * 4 * 3 + 6, 5)

        def forward(self, x):
            y = F.conv2d(x, self.w, None, 1, 1)
            y = torch.relu(y)
            z = F.pad(y, (1, 1, 0, 2))
            z = F.max_pool2d(z, 3, 1)
            y = torch.add(y, z)
            y += F.relu6(y)
            y = F.avg_pool2d(y.clamp(0, 6), 2)
            s = torch.softmax(y, dim=1)
            flat = torch.cat([y.reshape(1, -1), F.adaptive_avg_pool2d(s, 1).view(s.shape[0], -1)], dim=1)
            return self.fc(F.dropout(flat, 0.3, self.training)), s

    g = check_against_torch(Net(), (1, 3, 8, 6))
    assert Op.SOFTMAX in ops(g) and Op.CONCAT in ops(g) and len(g.outputs) == 2


def test_depth_multiplier_and_dilation():
    module = nn.Sequential(nn.Conv2d(4, 12, 3, padding=2, dilation=2, groups=4), nn.ReLU6(),
                           nn.Conv2d(12, 6, 3, padding=2, dilation=2))
    g = check_against_torch(module, (1, 4, 10, 10))
    assert g.nodes[0].attrs.depth_multiplier == 3 and g.nodes[2].attrs.dilation == (2, 2)


def test_unsupported_module_names_node_and_op():
    act = nn.Sequential(OrderedDict(conv=nn.Conv2d(8, 8, 1), act=nn.Tanh()))
    module = nn.Sequential(OrderedDict(features=nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                                                              act)))
    with pytest.raises(UnsupportedOpError) as e:
        from_torch(module, (1, 3, 8, 8))
    msg = str(e.value)
    assert msg.startswith("node 'features.3.act' (torch.nn.Tanh): unsupported op; supported: ") and "\n" not in msg


@pytest.mark.parametrize("make,shape,needle", [
    (lambda: nn.LSTM(8, 16, batch_first=True), (1, 5, 8), "node 'lstm' (torch.nn.LSTM): unsupported op"),
    (lambda: nn.Sequential(nn.Conv2d(4, 8, 3, groups=2)), (1, 4, 6, 6), "(torch.nn.Conv2d): grouped convolution"),
    (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.Tanh()), (1, 3, 6, 6), "node '1' (torch.nn.Tanh)"),
    (lambda: nn.Sequential(nn.MaxPool2d(2, ceil_mode=True)), (1, 3, 5, 5), "ceil_mode"),
    (lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")), (1, 3, 6, 6), "padding_mode"),
])
def test_unsupported_inputs_get_one_line_errors(make, shape, needle):
    with pytest.raises(UnsupportedOpError) as e:
        from_torch(make(), shape)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unsupported_function_and_untraceable_model():
    class Tanh(nn.Module):
        def forward(self, x):
            return torch.tanh(x)

    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(UnsupportedOpError, match=r"^node 'tanh' \(torch\.tanh\): unsupported op"):
        from_torch(Tanh(), (1, 3, 4, 4))
    with pytest.raises(UnsupportedOpError, match=r"^model Branchy: torch\.fx cannot trace"):
        from_torch(Branchy(), (1, 3, 4, 4))
