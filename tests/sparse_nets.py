"""Random int8 convolutions and small models whose weights are pruned in filterlet patterns (DTMM), shared by the
host and Cortex-M tests of the sparse weight formats (FWCS, CSR)."""

from __future__ import annotations

import math

import numpy as np

from kilobyte.ir import Activation, ConvAttrs, GraphBuilder, Op, QParams
from kilobyte.prune.layers import ConvLayer
from kilobyte.transforms import set_weight_format


def prune_filterlets(rng, w: np.ndarray, sparsity: float, dead_filters: int = 0, extra: float = 0.1) -> np.ndarray:
    """`w` (OHWI int8) with a `sparsity` fraction of its filterlets zeroed, an `extra` fraction of single weights
    zeroed (kept filterlets hold zeros too), and the first `dead_filters` filters zeroed entirely."""
    cout, kh, kw, cin = w.shape
    w = w.copy()
    lets = w.reshape(cout, kh * kw, cin)
    drop = rng.random((cout, kh * kw)) < sparsity
    lets[drop] = 0
    lets[rng.random(lets.shape) < extra] = 0
    lets[:dead_filters] = 0
    return lets.reshape(w.shape)


def pruned_conv(seed: int, *, hw=(7, 8), cin=5, cout=6, k=3, stride=1, padding="same", sparsity=0.5,
                dead_filters=0, act=Activation.NONE, extra=0.1):
    """A one-CONV_2D int8 graph with random scales, zero points and bias, its weights pruned (`prune_filterlets`);
    `padding` "same" (TFLite's SAME: the extra pixel at the bottom / right) or "valid". Returns (graph, input)."""
    rng = np.random.default_rng(seed)
    h, w_ = hw
    if padding == "same":
        ph = max((math.ceil(h / stride) - 1) * stride + k - h, 0)
        pw = max((math.ceil(w_ / stride) - 1) * stride + k - w_, 0)
        pad = (ph // 2, ph - ph // 2, pw // 2, pw - pw // 2)
    else:
        pad = (0, 0, 0, 0)
    s_in = 2.0 ** rng.uniform(-6, -2)
    s_w = np.asarray(2.0 ** rng.uniform(-8, -5, cout), np.float32)
    s_out = s_in * float(s_w.mean()) * math.sqrt(k * k * cin) * 2.0 ** rng.uniform(3, 7)
    zi, zo = (int(v) for v in rng.integers(-128, 128, 2))
    wq = prune_filterlets(rng, rng.integers(-127, 128, (cout, k, k, cin)).astype(np.int8), sparsity, dead_filters,
                          extra)
    bias = np.round(rng.normal(0, 3000 * math.sqrt(k * k * cin), cout)).astype(np.int32)
    b = GraphBuilder()
    x = b.input((1, h, w_, cin), "int8", qparams=QParams.per_tensor(float(s_in), zi))
    wt = b.const("w", wq, QParams(s_w, np.zeros(cout, np.int64), 0))
    bt = b.const("b", bias, QParams((np.float32(s_in) * s_w).astype(np.float32), np.zeros(cout, np.int64), 0))
    y = b.node(Op.CONV_2D, [x, wt, bt], ConvAttrs((stride, stride), pad, activation=act), dtype="int8",
               qparams=QParams.per_tensor(float(s_out), zo))
    return b.build([y]), rng.integers(-128, 128, (1, h, w_, cin)).astype(np.int8)


def _same_pad(size: int, k: int, stride: int) -> tuple[int, int]:
    total = max((math.ceil(size / stride) - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


def pruned_chain(seed: int, chain, sparsities) -> tuple[object, np.ndarray, list[ConvLayer]]:
    """`chain` — (input H = W, input C, [(N, kernel, stride), ...]) — as an int8 graph of SAME convs with random
    weights, scales and zero points, layer i's filterlets pruned at random to `sparsities[i]` (no other zero weight
    but one, so that `set_weight_format` makes every layer sparse); (graph, input, the layers' geometry)."""
    rng = np.random.default_rng(seed)
    hw, cin, convs = chain
    b = GraphBuilder(f"chain{seed}")
    scale = 2.0 ** -4
    x = b.input((1, hw, hw, cin), "int8", qparams=QParams.per_tensor(scale, int(rng.integers(-128, 128))))
    layers = []
    for i, ((n, k, stride), s) in enumerate(zip(convs, sparsities)):
        w = (rng.integers(1, 128, (n, k, k, cin)) * rng.choice([-1, 1], (n, k, k, cin))).astype(np.int8)
        w.reshape(n, k * k, cin)[rng.random((n, k * k)) < s] = 0  # whole filterlets
        w[0, 0, 0, 0] = 0  # a zero at any sparsity: set_weight_format keeps a layer with none dense
        s_w = np.asarray(2.0 ** rng.uniform(-8, -5, n), np.float32)
        bias = np.round(rng.normal(0, 3000 * math.sqrt(k * k * cin), n)).astype(np.int32)
        wt = b.const(f"w{i}", w, QParams(s_w, np.zeros(n, np.int64), 0))
        bt = b.const(f"b{i}", bias, QParams((np.float32(scale) * s_w).astype(np.float32), np.zeros(n, np.int64), 0))
        pad = _same_pad(hw, k, stride)
        out_scale = scale * float(s_w.mean()) * math.sqrt(k * k * cin) * 2.0 ** rng.uniform(3, 5)
        x = b.node(Op.CONV_2D, [x, wt, bt], ConvAttrs((stride, stride), pad + pad), dtype="int8",
                   qparams=QParams.per_tensor(out_scale, int(rng.integers(-128, 128))))
        hw = math.ceil(hw / stride)
        layers.append(ConvLayer(f"c{i}", n, cin, k, k, hw, hw))
        cin, scale = n, out_scale
    size, channels = chain[0], chain[1]
    return b.build([x]), rng.integers(-128, 128, (1, size, size, channels)).astype(np.int8), layers


CASES = [  # (name, pruned_conv kwargs): strides 1/2, same/valid, k 1/3/5, Cin odd and even, dead filters, 0..0.99
    ("k3s1same_c5", dict(k=3, cin=5, sparsity=0.5, dead_filters=1)),
    ("k3s2same_c8", dict(k=3, stride=2, cin=8, cout=9, sparsity=0.7, act=Activation.RELU)),
    ("k5s1valid_c4", dict(k=5, cin=4, hw=(9, 9), sparsity=0.9, dead_filters=2)),
    ("k5s2same_c3", dict(k=5, stride=2, cin=3, hw=(9, 10), sparsity=0.3)),
    ("k1s1valid_c16", dict(k=1, cin=16, cout=12, sparsity=0.8)),
    ("k1s2same_c7", dict(k=1, stride=2, cin=7, sparsity=0.6)),
    ("k3s1valid_c12", dict(k=3, cin=12, cout=5, sparsity=0.99)),
    ("k3s1same_c16_dense", dict(k=3, cin=16, cout=8, sparsity=0.0, act=Activation.RELU6)),
    ("k3s1same_c32_all_dead", dict(k=3, cin=32, cout=4, hw=(5, 5), sparsity=0.5, dead_filters=4)),
    ("k3s1same_c1", dict(k=3, cin=1, cout=6, sparsity=0.4)),
    ("k3s2same_c2", dict(k=3, stride=2, cin=2, cout=5, sparsity=0.5, dead_filters=1)),
]


def case_graph(i: int, fmt: str):
    """CASES[i] as (graph with `fmt` weights, input)."""
    name, kw = CASES[i]
    g, x = pruned_conv(100 + i, **kw)
    g = set_weight_format(g, fmt)
    return g.replace(name=f"{name}_{fmt}"), x
