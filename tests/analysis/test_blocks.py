"""analysis.blocks: the documented block rule on a hand-built mini MobileNetV2."""

import numpy as np

from kilobyte.analysis import block_ids, group_blocks
from kilobyte.ir import ConvAttrs, DepthwiseAttrs, GraphBuilder, Op

RNG = np.random.default_rng(0)


def _pw(b, x, cout):
    return b.node(Op.CONV_2D, [x], params={"weight": RNG.normal(size=(cout, 1, 1, b.shape(x)[-1]))})


def _dw(b, x, stride=1):
    return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs((stride, stride), (1, 1, 1, 1)),
                  params={"weight": RNG.normal(size=(1, 3, 3, b.shape(x)[-1]))})


def mini_mobilenet():
    b = GraphBuilder()
    x = b.node(Op.CONV_2D, [b.input((1, 16, 16, 3))], ConvAttrs((2, 2), (1, 1, 1, 1)),
               params={"weight": RNG.normal(size=(8, 3, 3, 3))})  # stem
    x = _pw(b, _dw(b, x), 4)  # t=1 block: dw, project
    x = _pw(b, _dw(b, _pw(b, x, 12), 2), 6)  # expand, dw s2, project
    y = _pw(b, _dw(b, _pw(b, x, 18)), 6)  # residual block: the skip x is itself a projection output
    x = b.node(Op.ADD, [x, y])
    x = b.node(Op.MEAN, [_pw(b, x, 16)])  # head: 1x1 conv reading an ADD (not a projection), pooling, FC
    return b.build([b.node(Op.FULLY_CONNECTED, [x], params={"weight": RNG.normal(size=(5, 16))})])


def test_blocks_of_mini_mobilenet():
    assert group_blocks(mini_mobilenet()) == [
        ("conv_2d_0",),
        ("depthwise_conv_2d_0", "conv_2d_1"),
        ("conv_2d_2", "depthwise_conv_2d_1", "conv_2d_3"),
        ("conv_2d_4", "depthwise_conv_2d_2", "conv_2d_5", "add_0"),
        ("conv_2d_6", "mean_0", "fully_connected_0"),
    ]


def test_block_ids():
    assert block_ids(mini_mobilenet()) == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4]


def test_projection_through_activation_nodes():
    b = GraphBuilder()
    x = b.node(Op.RELU6, [_dw(b, b.input((1, 4, 4, 2)))])
    y = _pw(b, x, 2)
    g = b.build([b.node(Op.RELU, [y])])
    assert group_blocks(g) == [("depthwise_conv_2d_0", "relu6_0", "conv_2d_0"), ("relu_0",)]
