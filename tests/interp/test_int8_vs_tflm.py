"""int8 reference interpreter vs TensorFlow Lite Micro: bit for bit on every tensor both executors expose.

Two sources of graphs: every zoo model (PyTorch -> frontend -> prepare_for_inference, batch-norm statistics set to
random values so activation ranges are non-trivial) and hypothesis-generated float graphs built directly with
`GraphBuilder` (odd channel counts, kernels 1/3/5/7, strides 1/2, dilation, SAME / VALID / asymmetric padding,
non-square inputs, residual adds, concats, pooling, PAD, MEAN, FC heads, a final softmax). Each is quantised with
random calibration data, written as `.tflite`, run by TFLM with all tensors preserved, and compared with `run_int8`.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.export.tflite import to_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import (
    Activation,
    AddAttrs,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    GraphBuilder,
    MeanAttrs,
    Op,
    PadAttrs,
    PoolAttrs,
    QParams,
    ReshapeAttrs,
)
from kilobyte.quant import quantize, quantize_input
from kilobyte.targets import tflm


def assert_bit_exact(qgraph, x: np.ndarray) -> int:
    """run_int8 and TFLM agree on every common int8 tensor (float tensors: allclose); returns how many compared."""
    ours = run_int8(qgraph, x, keep_all=True)
    theirs = tflm.run_tflm(to_tflite(qgraph), x, preserve_all=True).tensors
    common = [k for k in ours if k in theirs]
    assert set(qgraph.outputs) <= set(common), f"TFLM result lacks graph outputs {qgraph.outputs}"
    failures = []
    for name in common:
        a, b = ours[name], np.asarray(theirs[name]).reshape(ours[name].shape)
        if a.dtype == np.float32:
            if not np.allclose(a, b, rtol=1e-5, atol=1e-6):
                failures.append(f"{name}: float max diff {np.abs(a - b).max()}")
        elif not np.array_equal(a, b):
            failures.append(f"{name}: {int((a != b).sum())} of {a.size} values differ")
    assert not failures, "run_int8 != TFLM on " + "; ".join(failures)
    return len(common)


# -- zoo models ------------------------------------------------------------------------------------------------------
def _randomise_batchnorm(module, seed: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.2)


def _zoo_cases():
    from kilobyte import zoo

    cases = []
    for k, name in enumerate(zoo.names("image")):
        default_px = int(re.search(r"(\d+) px", zoo.describe(name)).group(1))
        cases.append((name, default_px if default_px <= 32 else (64, 80, 96)[k % 3]))  # MCU-sized CNNs as they are
    return cases


@pytest.mark.parametrize("name,resolution", _zoo_cases())
def test_zoo_model_bit_exact(name, resolution):
    pytest.importorskip("torch")
    from kilobyte import zoo
    from kilobyte.frontends import from_torch
    from kilobyte.transforms import prepare_for_inference

    module, shape = zoo.create(name, width=0.35, resolution=resolution)
    _randomise_batchnorm(module, seed=resolution)
    graph = prepare_for_inference(from_torch(module, shape))
    rng = np.random.default_rng(resolution)
    samples = rng.normal(size=(5,) + graph.tensors[graph.inputs[0]].shape[1:]).astype(np.float32)
    qgraph = quantize(graph, samples[:4])
    for x in (samples[:1], samples[4:]):  # a calibration sample and an unseen one (values beyond the ranges)
        assert assert_bit_exact(qgraph, quantize_input(qgraph, x)) >= len(qgraph.nodes)


# -- random graphs ---------------------------------------------------------------------------------------------------
ACTS = st.sampled_from([Activation.NONE, Activation.RELU, Activation.RELU6])


def _same_pad(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TFLite SAME padding along one axis: (before, after)."""
    out = -(-size // s)
    total = max((out - 1) * s + d * (k - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def _window_padding(draw, h: int, w: int, k: int, s: int, d: int, allow_asym: bool):
    """SAME, VALID or (for convs) arbitrary asymmetric padding that still leaves an output."""
    span = d * (k - 1) + 1
    modes = ["same"] + (["valid"] if span <= min(h, w) else []) + (["asym"] if allow_asym else [])
    mode = draw(st.sampled_from(modes))
    if mode == "valid":
        return (0, 0, 0, 0)
    (t, b), (left, r) = _same_pad(h, k, s, d), _same_pad(w, k, s, d)
    if mode == "same":
        return (t, b, left, r)
    pads = [draw(st.integers(0, k - 1)) for _ in range(4)]
    if h + pads[0] + pads[1] < span:
        pads[1] = span - h - pads[0]
    if w + pads[2] + pads[3] < span:
        pads[3] = span - w - pads[2]
    return tuple(pads)


class _RandomNet:
    """Draws a float graph block by block with hypothesis; weights come from a seeded numpy generator."""

    def __init__(self, draw, rng):
        self.draw, self.rng, self.b = draw, rng, GraphBuilder("random")

    def params(self, w_shape, cout, bias=True):
        scale = self.draw(st.sampled_from([0.05, 0.3, 1.0]))
        p = {"weight": self.rng.normal(0, scale, w_shape)}
        if bias:
            p["bias"] = self.rng.normal(0, 0.5, cout)
        return p

    def conv(self, x, cout=None, k=None, stride=None):
        draw = self.draw
        _, h, w, cin = self.b.shape(x)
        k = k or draw(st.sampled_from([1, 3, 5, 7]))
        s = stride or draw(st.sampled_from([1, 2]))
        d = draw(st.sampled_from([1, 1, 2])) if k > 1 and s == 1 else 1
        cout = cout or draw(st.integers(1, 9))
        pad = _window_padding(draw, h, w, k, s, d, allow_asym=True)
        attrs = ConvAttrs((s, s), pad, (d, d), draw(ACTS))
        return self.b.node(Op.CONV_2D, [x], attrs, params=self.params((cout, k, k, cin), cout, draw(st.booleans())))

    def depthwise(self, x):
        draw = self.draw
        _, h, w, c = self.b.shape(x)
        k, s, m = draw(st.sampled_from([3, 5])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 1, 2]))
        pad = _window_padding(draw, h, w, k, s, 1, allow_asym=True)
        attrs = DepthwiseAttrs((s, s), pad, (1, 1), m, draw(ACTS))
        return self.b.node(Op.DEPTHWISE_CONV_2D, [x], attrs, params=self.params((1, k, k, c * m), c * m))

    def pool(self, x):
        draw = self.draw
        _, h, w, _ = self.b.shape(x)
        k, s = draw(st.sampled_from([2, 3])), draw(st.sampled_from([1, 2]))
        pad = _window_padding(draw, h, w, k, s, 1, allow_asym=False)
        op = draw(st.sampled_from([Op.AVG_POOL_2D, Op.MAX_POOL_2D]))
        return self.b.node(op, [x], PoolAttrs((k, k), (s, s), pad, draw(ACTS)))

    def residual(self, x):
        c = self.b.shape(x)[3]
        y = self.conv(x, cout=c, k=self.draw(st.sampled_from([1, 3])), stride=1)
        if self.b.shape(y) != self.b.shape(x):  # VALID / asymmetric padding changed the size: no residual
            return y
        return self.b.node(Op.ADD, [x, y], AddAttrs(self.draw(ACTS)))

    def concat(self, x):
        a = self.conv(x, k=1, stride=1)
        branch = self.draw(st.sampled_from(["conv", "self", "pad"]))
        if branch == "conv":
            other = self.conv(x, k=1, stride=1)
        elif branch == "pad":
            other = self.b.node(Op.PAD, [x], PadAttrs(((0, 0), (0, 0), (0, 0), (1, 2))))
        else:
            other = x
        return self.b.node(Op.CONCAT, [a, other, a] if self.draw(st.booleans()) else [a, other], ConcatAttrs(3))

    def head(self, x):
        draw = self.draw
        kind = draw(st.sampled_from(["none", "mean", "mean_keep", "flatten"]))
        if kind == "none":
            return x
        if kind == "mean_keep":
            return self.b.node(Op.MEAN, [x], MeanAttrs((1, 2), keepdims=True))
        if kind == "mean":
            x = self.b.node(Op.MEAN, [x], MeanAttrs((1, 2)))
        else:
            x = self.b.node(Op.RESHAPE, [x], ReshapeAttrs((1, int(np.prod(self.b.shape(x))))))
        n_in, n_out = self.b.shape(x)[1], draw(st.integers(1, 7))
        y = self.b.node(Op.FULLY_CONNECTED, [x], FullyConnectedAttrs(draw(ACTS)),
                        params=self.params((n_out, n_in), n_out, draw(st.booleans())))
        return self.b.node(Op.SOFTMAX, [y]) if draw(st.booleans()) else y


@st.composite
def random_graphs(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    net = _RandomNet(draw, rng)
    h, w, c = draw(st.integers(5, 12)), draw(st.integers(5, 12)), draw(st.integers(1, 5))
    x = net.b.input((1, h, w, c))
    for _ in range(draw(st.integers(1, 4))):
        block = draw(st.sampled_from(["conv", "depthwise", "pool", "residual", "concat", "pad"]))
        if block == "pad":
            x = net.b.node(Op.PAD, [x], PadAttrs(((0, 0), (1, 0), (0, 2), (0, 0))))
        else:
            x = getattr(net, block)(x)
    graph = net.b.build([net.head(x)])
    spread = draw(st.sampled_from([0.5, 1.0, 4.0]))
    samples = (rng.normal(0.2, spread, (4,) + graph.tensors[graph.inputs[0]].shape[1:])).astype(np.float32)
    return graph, samples


@settings(max_examples=200, deadline=None)
@given(random_graphs(), st.sampled_from(["minmax", "percentile"]))
def test_random_graph_bit_exact(case, method):
    graph, samples = case
    qgraph = quantize(graph, samples[:3], method=method, percentile=99.0)
    assert_bit_exact(qgraph, quantize_input(qgraph, samples[3:]))


# -- MEAN with any axes and params, as imported .tflite files may have it ---------------------------------------------
AXES = st.sampled_from([(1, 2), (2, 1), (1,), (3,), (1, 2, 3)])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 16), st.integers(1, 16), st.integers(1, 6), AXES,
       st.booleans(), st.booleans(), st.integers(0, 2**32 - 1))
def test_int8_mean_bit_exact(h, w, c, axes, keepdims, same_qparams, seed):
    rng = np.random.default_rng(seed)
    q_in = QParams.per_tensor(float(rng.uniform(0.01, 0.2)), int(rng.integers(-128, 128)))
    q_out = q_in if same_qparams else QParams.per_tensor(float(rng.uniform(0.005, 0.2)), int(rng.integers(-128, 128)))
    b = GraphBuilder("mean")
    x = b.input((1, h, w, c), dtype="int8", qparams=q_in)
    qgraph = b.build([b.node(Op.MEAN, [x], MeanAttrs(axes, keepdims), qparams=q_out)])
    assert_bit_exact(qgraph, rng.integers(-128, 128, (1, h, w, c)).astype(np.int8))
