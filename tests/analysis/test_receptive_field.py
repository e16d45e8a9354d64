"""analysis.receptive_field: Eq. 4.1 on hand-built chains and branches, expected values by hand."""

import numpy as np

from kilobyte.analysis import input_region, receptive_field, receptive_fields
from kilobyte.ir import ConvAttrs, DepthwiseAttrs, GraphBuilder, MeanAttrs, Op, PoolAttrs


def _chain():
    """conv3 s2 -> dw3 s1 -> dw3 s2 -> conv1x1 (the first three layers of a MobileNet-like stem)."""
    b = GraphBuilder()
    y = b.node(Op.CONV_2D, [b.input((1, 32, 32, 3))], ConvAttrs((2, 2), (1, 1, 1, 1)),
               params={"weight": np.zeros((4, 3, 3, 3))})
    dw = {"weight": np.zeros((1, 3, 3, 4))}
    y = b.node(Op.DEPTHWISE_CONV_2D, [y], DepthwiseAttrs(padding=(1, 1, 1, 1)), params=dw)
    y = b.node(Op.DEPTHWISE_CONV_2D, [y], DepthwiseAttrs((2, 2), (1, 1, 1, 1)), params=dw)
    y = b.node(Op.CONV_2D, [y], params={"weight": np.zeros((8, 1, 1, 4))})
    return b.build([y])


def test_chain_by_hand():
    # R = 1 at the node, walk back with R <- (R - 1) * s + k:
    #   conv3 s2:            1 -> 3
    #   dw3 s1:         1 -> 3 -> (3-1)*2+3 = 7
    #   dw3 s2:    1 -> 3 -> 5 -> (5-1)*2+3 = 11
    #   conv1x1 keeps R:                      11
    assert receptive_fields(_chain()) == {"conv_2d_0": 3, "depthwise_conv_2d_0": 7, "depthwise_conv_2d_1": 11,
                                          "conv_2d_1": 11}


def test_output_patch_by_hand():
    g = _chain()
    # 2-pixel patch of the last dw: 2 -> (2-1)*2+3 = 5 -> 7 -> (7-1)*2+3 = 15
    assert input_region(g, "depthwise_conv_2d_1", 2) == 15
    # 4-pixel patch: 4 -> 9 -> 11 -> (11-1)*2+3 = 23
    assert input_region(g, g.node("conv_2d_1"), 4) == 23
    assert input_region(g, "depthwise_conv_2d_1", 1) == receptive_field(g, "depthwise_conv_2d_1") == 11


def test_branches_take_the_max_and_pooling_dilation_count():
    b = GraphBuilder()
    x = b.input((1, 16, 16, 2))
    p = b.node(Op.MAX_POOL_2D, [x], PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1)))  # 1 -> 3
    q = b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs((2, 2), (2, 2, 2, 2), dilation=(2, 2)),
               params={"weight": np.zeros((1, 3, 3, 2))})  # span 2*(3-1)+1 = 5: 1 -> 5
    a = b.node(Op.ADD, [p, q])  # max(3, 5)
    c = b.node(Op.CONV_2D, [a], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": np.zeros((2, 3, 3, 2))})
    g = b.build([c])
    # conv3 s1 after the add: 1 -> 3, then pool: (3-1)*2+3 = 7, dw: (3-1)*2+5 = 9 -> max 9
    assert receptive_fields(g) == {"max_pool_2d_0": 3, "depthwise_conv_2d_0": 5, "add_0": 5, "conv_2d_0": 9}


def test_global_pooling_and_fc_see_the_whole_map():
    b = GraphBuilder()
    y = b.node(Op.CONV_2D, [b.input((1, 9, 9, 2))], ConvAttrs((2, 2)), params={"weight": np.zeros((2, 3, 3, 2))})
    m = b.node(Op.MEAN, [y], MeanAttrs((1, 2)))  # conv output is 4x4: R = 4 -> (4-1)*2+3 = 9
    f = b.node(Op.FULLY_CONNECTED, [m], params={"weight": np.zeros((3, 2))})
    g = b.build([f])
    assert receptive_fields(g) == {"conv_2d_0": 3, "mean_0": 9, "fully_connected_0": 9}


def test_analysis_does_not_mutate():
    g = _chain()
    before = str(g)
    receptive_fields(g, 7)
    assert str(g) == before
