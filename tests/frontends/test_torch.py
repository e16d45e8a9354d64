"""PyTorch frontend: every converted graph computes what the module computes (oracle: PyTorch itself)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from breadth_models import to_ir_layout as to_nhwc
from torch import nn

from kilobyte import zoo
from kilobyte.errors import UnsupportedOpError
from kilobyte.frontends import from_torch
from kilobyte.interp import run_float
from kilobyte.ir import Op

ZOO_SIZES = {"vgg-small": 32, "resnet-small": 32, "mnist-cnn": 28}  # others (mobile nets): 64 px, width 0.35




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
    act = nn.Sequential(OrderedDict(conv=nn.Conv2d(8, 8, 1), act=nn.Softplus()))
    module = nn.Sequential(OrderedDict(features=nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                                                              act)))
    with pytest.raises(UnsupportedOpError) as e:
        from_torch(module, (1, 3, 8, 8))
    msg = str(e.value)
    assert msg.startswith("node 'features.3.act' (torch.nn.Softplus): unsupported op; supported: ") and "\n" not in msg


@pytest.mark.parametrize("make,shape,needle", [
    (lambda: nn.LSTM(8, 16, batch_first=True), (1, 5, 8), "node 'lstm' (torch.nn.LSTM): unsupported op"),
    (lambda: nn.Sequential(nn.Conv2d(4, 8, 3, groups=2)), (1, 4, 6, 6), "(torch.nn.Conv2d): grouped convolution"),
    (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.Softplus()), (1, 3, 6, 6), "node '1' (torch.nn.Softplus)"),
    (lambda: nn.Sequential(nn.MaxPool2d(2, ceil_mode=True)), (1, 3, 5, 5), "ceil_mode"),
    (lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")), (1, 3, 6, 6), "padding_mode"),
])
def test_unsupported_inputs_get_one_line_errors(make, shape, needle):
    with pytest.raises(UnsupportedOpError) as e:
        from_torch(make(), shape)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unsupported_function_and_untraceable_model():
    class Sine(nn.Module):
        def forward(self, x):
            return torch.sin(x)

    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(UnsupportedOpError, match=r"^node 'sin' \(torch\.sin\): unsupported op"):
        from_torch(Sine(), (1, 3, 4, 4))
    with pytest.raises(UnsupportedOpError, match=r"^model Branchy: torch\.fx cannot trace"):
        from_torch(Branchy(), (1, 3, 4, 4))


# -- activations and arithmetic --------------------------------------------------------------------------------------
class Arithmetic(nn.Module):
    """Every activation and arithmetic form, functional and as modules, including constants on either side."""

    def __init__(self):
        super().__init__()
        self.conv, self.se = nn.Conv2d(3, 6, 3, padding=1), nn.Conv2d(6, 6, 1)
        self.act = nn.Sequential(nn.Hardswish(), nn.LeakyReLU(0.2), nn.SiLU(), nn.Hardsigmoid(), nn.Sigmoid())
        self.register_buffer("shift", torch.linspace(-1, 1, 6).reshape(6, 1, 1))

    def forward(self, x):
        y = self.conv(x * 2.0 - 1.0)
        a = F.hardswish(y) + F.leaky_relu(y, 0.05) - F.silu(y) * 0.5
        b = torch.sigmoid(self.se(a.mean((2, 3), keepdim=True)))  # squeeze-excite: (1, C, 1, 1) over (1, C, H, W)
        z = torch.maximum(a * b, y.sigmoid()) - torch.minimum(self.act(y), 3 + a)
        z = torch.max(z, F.hardsigmoid(y)) / 4 - self.shift
        z = torch.sub(1.0, -z).mul(y)
        return F.log_softmax(z, dim=1), torch.softmax(torch.min(z, y), 1)


def test_activations_and_arithmetic_match_pytorch():
    g = check_against_torch(Arithmetic(), (1, 3, 6, 5))
    used = set(ops(g))
    assert {Op.HARD_SWISH, Op.LEAKY_RELU, Op.LOGISTIC, Op.MUL, Op.SUB, Op.MAXIMUM, Op.MINIMUM, Op.LOG_SOFTMAX,
            Op.SOFTMAX, Op.BATCH_NORM, Op.RELU6} <= used
    assert Op.ADD in used  # two activations of one shape
    se_mul = next(n for n in g.nodes if n.op is Op.MUL and g.tensors[n.inputs[1]].shape == (1, 1, 1, 6))
    assert g.tensors[se_mul.inputs[0]].shape == (1, 6, 5, 6)


def test_hardsigmoid_is_relu6_of_a_shift_then_a_scale():
    """relu6(x + 3) / 6: after the inference transforms the shift is in the conv bias and the ReLU6 fused, leaving
    the 1/6 — quantize() makes it a MUL by a constant, as TFLite's converter writes hard sigmoid."""
    from kilobyte.quant import quantize
    from kilobyte.transforms import prepare_for_inference

    module = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Hardsigmoid())
    g = prepare_for_inference(check_against_torch(module, (1, 3, 4, 4)))
    assert ops(g) == [Op.CONV_2D, Op.BATCH_NORM] and g.nodes[0].attrs.activation.value == "RELU6"
    q = quantize(g, np.random.default_rng(0).normal(size=(8, 4, 4, 3)).astype(np.float32))
    assert ops(q) == [Op.CONV_2D, Op.MUL]
    const = q.tensors[q.nodes[1].inputs[1]]
    assert const.dtype == "int8" and const.shape == (1, 1, 1, 4)
    np.testing.assert_allclose((const.data.astype(np.float32) - const.qparams.zero_point[0]) * const.qparams.scale[0],
                               1 / 6, rtol=1e-6)


@pytest.mark.parametrize("expr,op,shape", [
    (lambda x: x * torch.arange(75.0).reshape(1, 3, 5, 5), Op.MUL, (1, 5, 5, 3)),  # a full map, NCHW -> NHWC
    (lambda x: x + torch.linspace(-1, 1, 25).reshape(1, 1, 5, 5), Op.ADD, (1, 5, 5, 1)),  # (H, W) positional
    (lambda x: torch.linspace(0, 1, 5) - x, Op.SUB, (1, 1, 5, 1)),  # a (W,) row, the constant first
    (lambda x: x * torch.linspace(1, 2, 15).reshape(3, 5, 1), Op.MUL, (1, 5, 1, 3)),  # (C, H, 1)
])
def test_constants_varying_beyond_channels_are_one_binary_op(expr, op, shape):
    """A constant varying along more than the channel axis stays one ADD / SUB / MUL, the constant in IR layout in its
    own broadcast shape (a per-channel or single value one is a BATCH_NORM, folded or lowered later)."""
    class Net(nn.Module):
        def forward(self, x):
            return expr(x)

    g = check_against_torch(Net(), (1, 3, 5, 5))
    assert ops(g) == [op]
    const = [t for t in g.nodes[0].inputs if g.tensors[t].is_const]
    assert [g.tensors[t].shape for t in const] == [shape]
    assert (g.nodes[0].inputs[0] in const) == (op is Op.SUB)


def test_add_of_a_per_channel_map_broadcasts():
    """x + x.mean((2, 3), keepdim=True): an ADD of a (1, 1, 1, C) map over (1, H, W, C), as TFLite broadcasts it."""
    class Net(nn.Module):
        def forward(self, x):
            return x + x.mean((2, 3), keepdim=True)

    g = check_against_torch(Net(), (1, 3, 5, 5))
    add = next(n for n in g.nodes if n.op is Op.ADD)
    assert [g.tensors[t].shape for t in add.inputs] == [(1, 5, 5, 3), (1, 1, 1, 3)]


@pytest.mark.parametrize("expr,needle", [
    (lambda x: x * x.mean(1, keepdim=True), "mean over axes (1,)"),
    (lambda x: torch.maximum(x, torch.zeros(1)), "maximum with a constant operand"),
    (lambda x: x * torch.ones(1, 1, 3, 5, 5), "of shape (1, 1, 3, 5, 5) does not broadcast to (1, 3, 5, 5)"),
    (lambda x: 2.0 / x, "main input is a constant"),
    (lambda x: x + x.mean((2, 3)), "add of shapes (1, 3, 5, 5) and (1, 3)"),
])
def test_arithmetic_that_has_no_lowering_is_refused(expr, needle):
    class Net(nn.Module):
        def forward(self, x):
            return expr(x)

    with pytest.raises(UnsupportedOpError) as e:
        from_torch(Net(), (1, 3, 5, 5))
    assert needle in str(e.value) and "\n" not in str(e.value)


# -- 1-D signals: (N, C, L) is an IR image (N, 1, L, C) ---------------------------------------------------------------
class Signal(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv1d(5, 8, 3, padding="same"), nn.BatchNorm1d(8), nn.ReLU(), nn.MaxPool1d(2),
                               nn.Conv1d(8, 8, 5, stride=2, padding=2, groups=8), nn.ZeroPad1d((1, 2)),
                               nn.AvgPool1d(3, 1, 1))
        self.w = nn.Parameter(torch.randn(6, 5, 3))
        self.fc = nn.Linear(8 * 9 + 6, 4)

    def forward(self, x):  # (1, 5, 25)
        y = self.a(x)  # (1, 8, 9): flattened channel-major, so the Linear's columns are permuted
        z = F.adaptive_max_pool1d(F.conv1d(x, self.w, dilation=2), 1)  # (1, 6, 1)
        w = F.adaptive_avg_pool1d(F.max_pool1d(x, 3, 2), 1).squeeze(-1)  # (1, 5)
        return self.fc(torch.cat([y.flatten(1), z.view(1, -1)], 1)), torch.softmax(w, -1)


def test_one_dimensional_layers_match_pytorch(randomize_bn):
    g = check_against_torch(randomize_bn(Signal(), 0), (1, 5, 25))
    assert g.tensors["input"].shape == (1, 1, 25, 5)
    convs = [n for n in g.nodes if n.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D)]
    assert [g.tensors[n.inputs[1]].shape[1] for n in convs] == [1, 1, 1]  # 1 x k windows
    assert convs[0].attrs.padding == (0, 0, 1, 1) and convs[2].attrs.dilation == (1, 2)
    pad = next(n for n in g.nodes if n.op is Op.PAD)
    assert pad.attrs.pads == ((0, 0), (0, 0), (1, 2), (0, 0))


def test_shape_only_methods_emit_no_transpose():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 6, (1, 3))

        def forward(self, x):  # (1, 4, 9)
            y = self.conv(x.unsqueeze(2)).squeeze(2)  # a 1-D conv written as a 2-D one: no node for either
            y = y.permute(0, 1, 2).unsqueeze(2)  # (1, 6, 1, 7): the same IR tensor (1, 1, 7, 6), no node
            z = y.squeeze(2).unsqueeze(-1).transpose(2, 3)  # unit axes moved only: RESHAPEs, no transpose
            return y.mean((2, 3)), z

    g = check_against_torch(Net(), (1, 4, 9))
    mean = next(n for n in g.nodes if n.op is Op.MEAN)
    assert mean.inputs[0] == "conv_2d_0" and mean.attrs.axes == (1, 2)
    assert sorted(op.value for op in ops(g)) == ["CONV_2D", "MEAN", "RESHAPE", "RESHAPE"]


def test_transpose_that_moves_data_is_refused():
    class Net(nn.Module):
        def forward(self, x):
            return x.transpose(1, 2)

    with pytest.raises(UnsupportedOpError, match=r"transpose \[0, 2, 1\].*the IR has no TRANSPOSE"):
        from_torch(Net(), (1, 4, 9))


@pytest.mark.parametrize("make,needle", [
    (lambda: Lambda(lambda x: x.amax((2, 3))), "(Tensor.amax): needs REDUCE_MAX"),
    (lambda: Lambda(lambda x: torch.max(x, 1)[0]), "(torch.max): a maximum reduction needs REDUCE_MAX"),
    (lambda: Lambda(lambda x: x[:, :, 1:]), "(operator.getitem): slicing a tensor needs STRIDED_SLICE"),
    (lambda: Lambda(lambda x: x.repeat(1, 2, 1, 1)), "(Tensor.repeat): needs TILE"),
    (lambda: Lambda(lambda x: x * x.mean((2, 3), keepdim=True).expand_as(x)), "(Tensor.expand_as): needs TILE (sub,"),
])
def test_ops_the_ir_lacks_name_what_they_need(make, needle):
    with pytest.raises(UnsupportedOpError) as e:
        from_torch(make(), (1, 3, 4, 4))
    assert needle in str(e.value) and "which the IR does not have yet" in str(e.value) and "\n" not in str(e.value)


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Upsampler(nn.Module):
    """Every upsampling form PyTorch offers for 2-D and 1-D, and both GELUs."""

    def __init__(self):
        super().__init__()
        self.t1 = nn.ConvTranspose2d(3, 6, 3, stride=2, padding=1, output_padding=1)
        self.t2 = nn.ConvTranspose2d(6, 4, (2, 3), stride=(2, 1), padding=(0, 1))
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.up_nn = nn.UpsamplingNearest2d(scale_factor=2)
        self.up_bl = nn.UpsamplingBilinear2d(size=(9, 13))
        self.gelu = nn.GELU(approximate="tanh")

    def forward(self, x):
        y = F.gelu(self.t1(x))
        a = self.up(self.gelu(self.t2(y)))
        b = F.interpolate(y, size=(11, 7), mode="nearest-exact")
        c = F.interpolate(self.up_nn(y), scale_factor=0.5, mode="nearest")
        d = F.interpolate(y, size=(5, 6), mode="bilinear", align_corners=True)
        return a, b, self.up_bl(c) + 0, d


def test_upsampling_and_gelu_match_pytorch():
    module = Upsampler().eval()
    g = from_torch(module, (1, 3, 4, 5))
    x = torch.randn(1, 3, 4, 5)
    with torch.no_grad():
        want = module(x)
    got = run_float(g, x.numpy().transpose(0, 2, 3, 1))
    for name, ref in zip(g.outputs, want):
        np.testing.assert_allclose(got[name], ref.numpy().transpose(0, 2, 3, 1), rtol=0, atol=1e-5, err_msg=name)
    assert {Op.TRANSPOSE_CONV, Op.GELU, Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR} <= {n.op for n in g.nodes}


def test_conv_transpose_1d_matches_pytorch():
    module = nn.ConvTranspose1d(4, 3, 5, stride=3, padding=2, output_padding=1).eval()
    g = from_torch(module, (1, 4, 7))
    x = torch.randn(1, 4, 7)
    with torch.no_grad():
        want = module(x).numpy()
    got = run_float(g, x.numpy().transpose(0, 2, 1)[:, None])[g.outputs[0]]
    np.testing.assert_allclose(got, want.transpose(0, 2, 1)[:, None], rtol=0, atol=1e-5)


@pytest.mark.parametrize("make,needle", [
    (lambda: Lambda(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic")), "mode='bicubic'"),
    (lambda: Lambda(lambda x: F.interpolate(x, scale_factor=1.3)), "fractional sizes"),
    (lambda: nn.ConvTranspose2d(3, 6, 2, groups=3), "groups=3"),
    (lambda: nn.ConvTranspose2d(3, 6, 2, dilation=2), "dilation=(2, 2)"),
])
def test_upsampling_it_cannot_express_is_a_one_line_error(make, needle):
    with pytest.raises(UnsupportedOpError) as e:
        from_torch(make(), (1, 3, 4, 4))
    assert needle in str(e.value) and "\n" not in str(e.value)


class Saturating(nn.Module):
    """exp, log (of a positive value), tanh and the [-1, 1] clamps in their function, method and module forms."""

    def __init__(self):
        super().__init__()
        self.conv, self.hardtanh = nn.Conv2d(3, 6, 3, padding=1), nn.Hardtanh()

    def forward(self, x):
        y = self.conv(x)
        a = torch.log(torch.exp(y) + 1.0) - y.exp()
        b = F.hardtanh(y, -1.0, 1.0) + y.clamp(-1, 1) + self.hardtanh(y)
        return torch.tanh(a) * (b + 4.0).log()


def test_exp_log_and_unit_clamps_match_pytorch():
    g = check_against_torch(Saturating(), (1, 3, 5, 4))
    used = ops(g)
    assert used.count(Op.EXP) == 2 and used.count(Op.LOG) == 2 and used.count(Op.RELU_N1_TO_1) == 3
    assert Op.TANH in used


def test_elu_with_another_alpha_is_refused():
    with pytest.raises(UnsupportedOpError, match="alpha=0.5; TFLite's ELU has alpha 1 only"):
        from_torch(nn.Sequential(nn.Conv2d(3, 4, 1), nn.ELU(alpha=0.5)), (1, 3, 4, 4))


class PReLUs(nn.Module):
    """nn.PReLU per channel and single, and F.prelu, on 4-D and 2-D activations."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 6, 3, padding=1), nn.Linear(6, 5)
        self.per_channel, self.single, self.head = nn.PReLU(6), nn.PReLU(), nn.PReLU(5)
        with torch.no_grad():
            for m in (self.per_channel, self.single, self.head):
                m.weight.copy_(torch.linspace(-0.7, 1.3, m.weight.numel()))

    def forward(self, x):
        y = self.single(self.per_channel(self.conv(x)))
        y = F.prelu(y, torch.full((1,), 0.3)).mean((2, 3))
        return self.head(self.fc(y))


def test_prelu_matches_pytorch():
    g = check_against_torch(PReLUs(), (1, 3, 5, 4))
    prelus = [n for n in g.nodes if n.op is Op.PRELU]
    assert [g.tensors[n.inputs[1]].shape for n in prelus] == [(6,), (1,), (1,), (5,)]
