"""fold_pad: golden IR, non-foldable cases (pooling, channel pad, mixed readers), outputs unchanged."""

import numpy as np
import pytest

from kilobyte.ir import ConvAttrs, DepthwiseAttrs, GraphBuilder, Op, PadAttrs, PoolAttrs
from kilobyte.transforms import fold_pad

from .random_graphs import assert_same_outputs, random_graph

RNG = np.random.default_rng(2)


def test_golden_two_conv_readers():
    b = GraphBuilder()
    p = b.node(Op.PAD, [b.input((1, 4, 4, 2))], PadAttrs(((0, 0), (0, 1), (2, 0), (0, 0))))
    c = b.node(Op.CONV_2D, [p], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": RNG.normal(size=(2, 3, 3, 2))})
    d = b.node(Op.DEPTHWISE_CONV_2D, [p], DepthwiseAttrs(stride=(2, 2)),
               params={"weight": RNG.normal(size=(1, 1, 1, 2))})
    g = b.build([c, d])
    before = str(g)
    out = fold_pad(g)
    assert str(out) == "\n".join([
        "graph model(%input:float32[1x4x4x2])",
        "  %conv_2d_0:float32[1x5x6x2] = CONV_2D(%input:float32[1x4x4x2], %conv_2d_0.weight)"
        " {padding=(1, 2, 3, 1)}  # conv_2d_0",
        "  %depthwise_conv_2d_0:float32[1x3x3x2] = DEPTHWISE_CONV_2D(%input:float32[1x4x4x2],"
        " %depthwise_conv_2d_0.weight) {stride=(2, 2), padding=(0, 1, 2, 0)}  # depthwise_conv_2d_0",
        "  return conv_2d_0, depthwise_conv_2d_0",
    ])
    assert "pad_0" not in out.tensors
    assert str(g) == before
    assert_same_outputs(g, out)


def _not_folded(g):
    out = fold_pad(g)
    assert str(out) == str(g)


def test_pad_before_pooling_not_folded():
    for op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        b = GraphBuilder()
        p = b.node(Op.PAD, [b.input((1, 4, 4, 2))], PadAttrs(((0, 0), (1, 1), (1, 1), (0, 0))))
        _not_folded(b.build([b.node(op, [p], PoolAttrs())]))


def test_pad_with_conv_and_other_reader_not_folded():
    b = GraphBuilder()
    p = b.node(Op.PAD, [b.input((1, 4, 4, 2))], PadAttrs(((0, 0), (1, 1), (1, 1), (0, 0))))
    c = b.node(Op.CONV_2D, [p], params={"weight": RNG.normal(size=(2, 3, 3, 2))})
    _not_folded(b.build([c, b.node(Op.RELU, [p])]))


def test_channel_pad_not_folded():
    b = GraphBuilder()
    p = b.node(Op.PAD, [b.input((1, 4, 4, 2))], PadAttrs(((0, 0), (1, 1), (1, 1), (0, 1))))
    _not_folded(b.build([b.node(Op.CONV_2D, [p], params={"weight": RNG.normal(size=(2, 3, 3, 3))})]))


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs(seed):
    g = random_graph(seed)
    before = str(g)
    out = fold_pad(g).verify()
    assert str(g) == before
    for n in out.nodes:
        if n.op is Op.PAD:
            assert any(r.op not in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D) for r in out.consumers(n.outputs[0]))
    assert_same_outputs(g, out, seed)
