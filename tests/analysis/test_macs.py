"""analysis.macs: MACs, ops, params and Flash bytes on hand-built graphs, expected values computed by hand."""

import numpy as np

from kilobyte.analysis import node_flash_bytes, node_macs, node_ops, node_params
from kilobyte.ir import (
    ConvAttrs,
    DepthwiseAttrs,
    GeluAttrs,
    GraphBuilder,
    MeanAttrs,
    Op,
    PoolAttrs,
    ReshapeAttrs,
    ResizeAttrs,
    TransposeConvAttrs,
)


def _graph():
    b = GraphBuilder()
    x = b.input((1, 16, 16, 3))
    c = b.node(Op.CONV_2D, [x], ConvAttrs(stride=(2, 2), padding=(1, 1, 1, 1)),
               params={"weight": np.zeros((8, 3, 3, 3)), "bias": np.zeros(8)})  # -> 8x8x8
    d = b.node(Op.DEPTHWISE_CONV_2D, [c], DepthwiseAttrs(padding=(2, 2, 2, 2), dilation=(2, 2)),
               params={"weight": np.zeros((1, 3, 3, 8))})  # -> 8x8x8, no bias
    p = b.node(Op.AVG_POOL_2D, [d], PoolAttrs((2, 2), (2, 2)))  # -> 4x4x8
    a = b.node(Op.ADD, [p, p])
    m = b.node(Op.MEAN, [a], MeanAttrs((1, 2), keepdims=True))  # -> 1x1x1x8
    r = b.node(Op.RESHAPE, [m], ReshapeAttrs((1, 8)))
    f = b.node(Op.FULLY_CONNECTED, [r], params={"weight": np.zeros((10, 8)), "bias": np.zeros(10)})
    return b.build([b.node(Op.SOFTMAX, [f])])


def _by_op(fn):
    g = _graph()
    return {n.name: fn(g, n) for n in g.nodes}


def test_macs():
    assert _by_op(node_macs) == {
        "conv_2d_0": 3 * 3 * 3 * 8 * 8 * 8,  # kh*kw*Cin*Cout*Ho*Wo = 13,824
        "depthwise_conv_2d_0": 3 * 3 * 8 * 8 * 8,  # kh*kw*C*Ho*Wo (dilation does not add MACs) = 4,608
        "avg_pool_2d_0": 0, "add_0": 0, "mean_0": 0, "reshape_0": 0,
        "fully_connected_0": 8 * 10,
        "softmax_0": 0,
    }


def test_ops_outside_macs():
    assert _by_op(node_ops) == {
        "conv_2d_0": 0, "depthwise_conv_2d_0": 0,
        "avg_pool_2d_0": 2 * 2 * 4 * 4 * 8,  # taps per output element = 512
        "add_0": 4 * 4 * 8,
        "mean_0": 4 * 4 * 8,  # every input element summed once
        "reshape_0": 0, "fully_connected_0": 0,
        "softmax_0": 10,
    }


def test_params_and_flash():
    assert _by_op(node_params) == {
        "conv_2d_0": 216 + 8, "depthwise_conv_2d_0": 72, "avg_pool_2d_0": 0, "add_0": 0, "mean_0": 0,
        "reshape_0": 0, "fully_connected_0": 80 + 10, "softmax_0": 0,
    }
    assert _by_op(node_flash_bytes) == {
        "conv_2d_0": 216 * 1 + 8 * 4,  # int8 weights, int32 bias
        "depthwise_conv_2d_0": 72, "avg_pool_2d_0": 0, "add_0": 0, "mean_0": 0, "reshape_0": 0,
        "fully_connected_0": 80 + 10 * 4, "softmax_0": 0,
    }


def test_depth_multiplier_counts_output_channels():
    b = GraphBuilder()
    y = b.node(Op.DEPTHWISE_CONV_2D, [b.input((1, 5, 5, 2))], DepthwiseAttrs(depth_multiplier=3),
               params={"weight": np.zeros((1, 3, 3, 6))})  # -> 3x3x6
    g = b.build([y])
    assert node_macs(g, g.nodes[0]) == 3 * 3 * 6 * 3 * 3


def test_binary_ops_count_one_op_per_output_element_and_no_macs():
    b = GraphBuilder()
    x, s = b.input((1, 4, 5, 6)), b.input((1, 1, 1, 6), name="s")
    y = b.node(Op.MINIMUM, [b.node(Op.MAXIMUM, [b.node(Op.SUB, [s, b.node(Op.MUL, [x, s])]), x]), x])
    g = b.build([y])
    assert {n.name: (node_macs(g, n), node_ops(g, n)) for n in g.nodes} == {
        name: (0, 4 * 5 * 6) for name in ("mul_0", "sub_0", "maximum_0", "minimum_0")}


def test_data_movement_costs_nothing_and_reduce_max_compares_every_input():
    from kilobyte.ir import StridedSliceAttrs, TileAttrs, TransposeAttrs

    b = GraphBuilder()
    x = b.input((1, 4, 5, 6))
    t = b.node(Op.TRANSPOSE, [x], TransposeAttrs((0, 3, 1, 2)))
    s = b.node(Op.STRIDED_SLICE, [t], StridedSliceAttrs((0, 0, 3, 0), (1, 6, -1, 5), (1, 2, -1, 1)))
    r = b.node(Op.TILE, [s], TileAttrs((1, 1, 2, 1)))
    g = b.build([b.node(Op.REDUCE_MAX, [r], MeanAttrs((1, 2), False))])
    assert [node_macs(g, n) for n in g.nodes] == [0, 0, 0, 0]
    assert [node_ops(g, n) for n in g.nodes] == [0, 0, 0, 3 * 8 * 5]


def test_upsampling_macs_ops_and_flash():
    """TRANSPOSE_CONV: weight elements times *input* pixels (every tap scattered, cropped ones too); a bilinear
    resize one interpolation per output element, a nearest one nothing; GELU one op per element."""
    b = GraphBuilder()
    x = b.input((1, 4, 5, 3))
    t = b.node(Op.TRANSPOSE_CONV, [x], TransposeConvAttrs((2, 2), (1, 0, 1, 0)),
               params={"weight": np.zeros((6, 3, 3, 3)), "bias": np.zeros(6)})  # -> (1, 8, 10, 6)
    r = b.node(Op.RESIZE_BILINEAR, [t], ResizeAttrs((11, 13), half_pixel_centers=True))
    n = b.node(Op.RESIZE_NEAREST_NEIGHBOR, [r], ResizeAttrs((22, 26)))
    g = b.build([b.node(Op.GELU, [n], GeluAttrs())])
    assert g.tensors[t].shape == (1, 8, 10, 6)
    by = {nd.op: nd for nd in g.nodes}
    assert node_macs(g, by[Op.TRANSPOSE_CONV]) == 6 * 3 * 3 * 3 * 4 * 5
    assert [node_macs(g, by[op]) for op in (Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR, Op.GELU)] == [0, 0, 0]
    assert [node_ops(g, by[op]) for op in (Op.TRANSPOSE_CONV, Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR,
                                           Op.GELU)] == [0, 11 * 13 * 6, 0, 22 * 26 * 6]
    assert node_params(g, by[Op.TRANSPOSE_CONV]) == 162 + 6
    assert node_flash_bytes(g, by[Op.TRANSPOSE_CONV]) == 162 + 6 * 4
    assert node_flash_bytes(g, by[Op.RESIZE_BILINEAR]) == 0
