"""prepare_for_inference (transforms/__init__.py): golden IR of conv-BN-ReLU6 blocks, outputs, idempotence.

The pass list is pinned by what it does, not by restating it: the golden block needs every pass and the order
identity -> BN -> activation, and idempotence on random graphs fails if a pass runs before one that exposes work
for it (fold_pad and fuse_activation commute, as INFERENCE_PASSES' comment says)."""

import numpy as np
import pytest

from kilobyte.ir import ConvAttrs, GraphBuilder, Op, PadAttrs
from kilobyte.transforms import drop_unused_tensors, prepare_for_inference

from .random_graphs import assert_same_outputs, bn_params, random_graph

RNG = np.random.default_rng(3)


def test_golden_mobilenet_like_block():
    b = GraphBuilder("block")
    x = b.input((1, 6, 6, 3))
    y = b.node(Op.PAD, [x], PadAttrs(((0, 0), (1, 1), (1, 1), (0, 0))))
    y = b.node(Op.CONV_2D, [y], ConvAttrs(stride=(2, 2)), params={"weight": RNG.normal(size=(4, 3, 3, 3))})
    y = b.node(Op.RELU6, [b.node(Op.BATCH_NORM, [b.node(Op.IDENTITY, [y])], params=bn_params(RNG, 4))])
    z = b.node(Op.CONV_2D, [y], params={"weight": RNG.normal(size=(4, 1, 1, 4))})
    z = b.node(Op.ADD, [y, b.node(Op.BATCH_NORM, [z], params=bn_params(RNG, 4))])
    g = b.build([b.node(Op.IDENTITY, [z])])
    before = str(g)
    out = prepare_for_inference(g)
    assert str(out) == "\n".join([
        "graph block(%input:float32[1x6x6x3])",
        "  %conv_2d_0:float32[1x3x3x4] = CONV_2D(%input:float32[1x6x6x3], %conv_2d_0.weight, %conv_2d_0.bias)"
        " {stride=(2, 2), padding=(1, 1, 1, 1), activation=RELU6}  # conv_2d_0",
        "  %conv_2d_1:float32[1x3x3x4] = CONV_2D(%conv_2d_0:float32[1x3x3x4], %conv_2d_1.weight, %conv_2d_1.bias)"
        "  # conv_2d_1",
        "  %add_0:float32[1x3x3x4] = ADD(%conv_2d_0:float32[1x3x3x4], %conv_2d_1:float32[1x3x3x4])  # add_0",
        "  return add_0",
    ])
    assert sorted(out.tensors) == ["add_0", "conv_2d_0", "conv_2d_0.bias", "conv_2d_0.weight", "conv_2d_1",
                                   "conv_2d_1.bias", "conv_2d_1.weight", "input"]
    assert str(g) == before
    assert_same_outputs(g, out)


@pytest.mark.parametrize("seed", range(30))
def test_random_graphs(seed):
    g = random_graph(seed)
    before = str(g)
    out = prepare_for_inference(g)
    assert str(g) == before
    assert not any(n.op is Op.IDENTITY for n in out.nodes)
    assert {n.name for n in out.nodes} <= {n.name for n in g.nodes}
    assert drop_unused_tensors(out) is out  # nothing left over
    assert_same_outputs(g, out, seed)
    assert prepare_for_inference(out) == out  # idempotent
