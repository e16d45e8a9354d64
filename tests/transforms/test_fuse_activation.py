"""fuse_activation: golden IR, non-fusable cases, outputs unchanged, input untouched."""

import numpy as np
import pytest

from kilobyte.ir import Activation, ConvAttrs, GraphBuilder, Op, PoolAttrs
from kilobyte.transforms import fuse_activation

from .random_graphs import assert_same_outputs, random_graph

RNG = np.random.default_rng(1)


def test_golden():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 2))
    c0 = b.node(Op.CONV_2D, [x], params={"weight": RNG.normal(size=(2, 1, 1, 2))})
    r0 = b.node(Op.RELU, [c0])  # fused
    c1 = b.node(Op.CONV_2D, [r0], params={"weight": RNG.normal(size=(2, 1, 1, 2))})
    r1 = b.node(Op.RELU6, [c1])  # c1 has two readers: stays
    a = b.node(Op.ADD, [c1, r1])
    r2 = b.node(Op.RELU6, [b.node(Op.RELU, [a])])  # RELU fuses into ADD; RELU6 after RELU stays
    p = b.node(Op.RELU, [b.node(Op.MAX_POOL_2D, [r2], PoolAttrs())])  # fused into pooling
    g = b.build([p])
    before = str(g)
    out = fuse_activation(g)
    assert str(out) == "\n".join([
        "graph model(%input:float32[1x4x4x2])",
        "  %conv_2d_0:float32[1x4x4x2] = CONV_2D(%input:float32[1x4x4x2], %conv_2d_0.weight) {activation=RELU}"
        "  # conv_2d_0",
        "  %conv_2d_1:float32[1x4x4x2] = CONV_2D(%conv_2d_0:float32[1x4x4x2], %conv_2d_1.weight)  # conv_2d_1",
        "  %relu6_0:float32[1x4x4x2] = RELU6(%conv_2d_1:float32[1x4x4x2])  # relu6_0",
        "  %add_0:float32[1x4x4x2] = ADD(%conv_2d_1:float32[1x4x4x2], %relu6_0:float32[1x4x4x2])"
        " {activation=RELU}  # add_0",
        "  %relu6_1:float32[1x4x4x2] = RELU6(%add_0:float32[1x4x4x2])  # relu6_1",
        "  %max_pool_2d_0:float32[1x2x2x2] = MAX_POOL_2D(%relu6_1:float32[1x4x4x2]) {activation=RELU}"
        "  # max_pool_2d_0",
        "  return max_pool_2d_0",
    ])
    assert str(g) == before
    assert_same_outputs(g, out)


def test_producer_with_activation_or_graph_output_not_fused():
    b = GraphBuilder()
    x = b.input((1, 2, 2, 2))
    c = b.node(Op.CONV_2D, [x], ConvAttrs(activation=Activation.RELU6), params={"weight": np.ones((2, 1, 1, 2))})
    d = b.node(Op.CONV_2D, [x], params={"weight": np.ones((2, 1, 1, 2))})
    g = b.build([b.node(Op.RELU, [c]), b.node(Op.RELU, [d]), d])
    assert str(fuse_activation(g)) == str(g)


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs(seed):
    g = random_graph(seed)
    before = str(g)
    out = fuse_activation(g).verify()
    assert str(g) == before
    assert_same_outputs(g, out, seed)
