"""Random training-shaped graphs (conv/depthwise/FC with BN, ReLU, PAD, IDENTITY, residual adds, shared tensors).

Used by the transform tests as inputs for "outputs equal before and after". Every structure a pass must refuse is
also generated: BN after ADD, activations on tensors with two readers, PAD before pooling, intermediate outputs.
"""

from __future__ import annotations

import numpy as np

from kilobyte.interp import run_float
from kilobyte.ir import ConvAttrs, DepthwiseAttrs, Graph, GraphBuilder, MeanAttrs, Op, PadAttrs, PoolAttrs, ReshapeAttrs


def random_graph(seed: int) -> Graph:
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"random_{seed}")
    x = b.input((1, int(rng.integers(5, 9)), int(rng.integers(5, 9)), int(rng.integers(2, 5))))
    outputs = []
    for _ in range(int(rng.integers(3, 7))):
        unit = rng.choice(["conv", "dw", "residual", "pool", "shared", "concat"])
        x = UNITS[unit](b, rng, x)
        if rng.random() < 0.15:
            outputs.append(x)  # an intermediate graph output: passes must not fuse into it
    return b.build([_head(b, rng, x)] + outputs)


def bn_params(rng, c: int) -> dict[str, np.ndarray]:
    return {"gamma": rng.uniform(0.5, 1.5, c), "beta": rng.normal(0, 0.5, c), "mean": rng.normal(0, 0.5, c),
            "var": rng.uniform(0.5, 1.5, c)}


def _maybe(rng, p: float) -> bool:
    return bool(rng.random() < p)


def _tail(b: GraphBuilder, rng, y: str) -> str:
    """Optional IDENTITY, BN and activation after a linear op."""
    if _maybe(rng, 0.3):
        y = b.node(Op.IDENTITY, [y])
    if _maybe(rng, 0.7):
        y = b.node(Op.BATCH_NORM, [y], params=bn_params(rng, b.shape(y)[-1]))
    if _maybe(rng, 0.7):
        y = b.node(Op.RELU if _maybe(rng, 0.5) else Op.RELU6, [y])
    return y


def _pad_or_padding(b: GraphBuilder, rng, x: str):
    """Either an explicit PAD node on H/W (returns padded tensor, zero padding) or conv padding."""
    pads = tuple(int(v) for v in rng.integers(0, 2, 4))
    if _maybe(rng, 0.4):
        x = b.node(Op.PAD, [x], PadAttrs(((0, 0), (pads[0], pads[1]), (pads[2], pads[3]), (0, 0))))
        return x, (0, 0, 0, 0)
    return x, pads


def _conv(b: GraphBuilder, rng, x: str) -> str:
    x, padding = _pad_or_padding(b, rng, x)
    cin, cout, k = b.shape(x)[-1], int(rng.integers(2, 6)), int(rng.choice([1, 3]))
    stride = 2 if min(b.shape(x)[1:3]) >= 6 and _maybe(rng, 0.3) else 1
    params = {"weight": rng.normal(0, 1 / np.sqrt(k * k * cin), (cout, k, k, cin))}
    if _maybe(rng, 0.5):
        params["bias"] = rng.normal(0, 0.1, cout)
    y = b.node(Op.CONV_2D, [x], ConvAttrs((stride, stride), padding), params=params)
    return _tail(b, rng, y)


def _dw(b: GraphBuilder, rng, x: str) -> str:
    x, padding = _pad_or_padding(b, rng, x)
    c, m = b.shape(x)[-1], int(rng.choice([1, 2]))
    params = {"weight": rng.normal(0, 1 / 3, (1, 3, 3, c * m))}
    if _maybe(rng, 0.5):
        params["bias"] = rng.normal(0, 0.1, c * m)
    y = b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs(padding=padding, depth_multiplier=m), params=params)
    return _tail(b, rng, y)


def _residual(b: GraphBuilder, rng, x: str) -> str:
    c = b.shape(x)[-1]
    y = b.node(Op.CONV_2D, [x], params={"weight": rng.normal(0, 1 / np.sqrt(c), (c, 1, 1, c))})
    y = b.node(Op.BATCH_NORM, [y], params=bn_params(rng, c))
    y = b.node(Op.ADD, [x, y])
    return _tail(b, rng, y)  # may put a BN after the ADD: not foldable


def _pool(b: GraphBuilder, rng, x: str) -> str:
    if _maybe(rng, 0.5):
        x = b.node(Op.PAD, [x], PadAttrs(((0, 0), (1, 0), (0, 1), (0, 0))))  # not foldable into pooling
    op = Op.MAX_POOL_2D if _maybe(rng, 0.5) else Op.AVG_POOL_2D
    y = b.node(op, [x], PoolAttrs((2, 2), (1, 1), (0, 1, 1, 0)))
    return b.node(Op.RELU, [y]) if _maybe(rng, 0.5) else y


def _shared(b: GraphBuilder, rng, x: str) -> str:
    """A conv whose output has two readers: neither BN nor ReLU may fuse into it."""
    c = b.shape(x)[-1]
    y = b.node(Op.CONV_2D, [x], params={"weight": rng.normal(0, 1 / np.sqrt(c), (c, 1, 1, c))})
    z = b.node(Op.RELU6, [y]) if _maybe(rng, 0.5) else b.node(Op.BATCH_NORM, [y], params=bn_params(rng, c))
    return b.node(Op.ADD, [y, z])


def _same_conv(b: GraphBuilder, rng, x: str) -> str:
    """3x3 conv keeping H and W (so branches can be concatenated), with its tail."""
    cin, cout = b.shape(x)[-1], int(rng.integers(1, 4))
    params = {"weight": rng.normal(0, 1 / np.sqrt(9 * cin), (cout, 3, 3, cin))}
    return _tail(b, rng, b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)), params=params))


def _concat(b: GraphBuilder, rng, x: str) -> str:
    if _maybe(rng, 0.5):
        y = b.node(Op.CONCAT, [_same_conv(b, rng, x), _same_conv(b, rng, x)])
    else:
        y = b.node(Op.CONCAT, [x, x])
    return b.node(Op.RELU, [y]) if _maybe(rng, 0.5) else y


UNITS = {"conv": _conv, "dw": _dw, "residual": _residual, "pool": _pool, "shared": _shared, "concat": _concat}


def _head(b: GraphBuilder, rng, x: str) -> str:
    """Global average pool (MEAN or MEAN+RESHAPE), FC, optional BN / ReLU / IDENTITY."""
    c = b.shape(x)[-1]
    if _maybe(rng, 0.5):
        y = b.node(Op.MEAN, [x])
    else:
        y = b.node(Op.RESHAPE, [b.node(Op.MEAN, [x], MeanAttrs((1, 2), keepdims=True))], ReshapeAttrs((1, c)))
    out = int(rng.integers(2, 6))
    params = {"weight": rng.normal(0, 1 / np.sqrt(c), (out, c))}
    if _maybe(rng, 0.5):
        params["bias"] = rng.normal(0, 0.1, out)
    return _tail(b, rng, b.node(Op.FULLY_CONNECTED, [y], params=params))


def assert_same_outputs(before: Graph, after: Graph, seed: int = 0) -> None:
    """Run both graphs on the same random input; outputs compared by position (names may move)."""
    rng = np.random.default_rng(seed)
    feeds = {name: rng.normal(0, 1, before.tensors[name].shape) for name in before.inputs}
    want, got = run_float(before, feeds), run_float(after, feeds)
    assert len(before.outputs) == len(after.outputs)
    for a, b in zip(before.outputs, after.outputs):
        np.testing.assert_allclose(got[b], want[a], atol=1e-5, rtol=1e-5)

