"""analysis.memory: lifetimes and analytic per-layer memory, with a residual branch held across nodes."""

import numpy as np

from kilobyte.analysis import analytic_peak, live_bytes, live_tensors, tensor_lifetimes
from kilobyte.ir import DepthwiseAttrs, GraphBuilder, Op


def _residual_graph():
    """input -> conv1x1 = r -> expand 1x1 -> dw3x3 -> project 1x1 -> add(r, .): r is held across the block."""
    b = GraphBuilder()
    x = b.input((1, 8, 8, 4))  # 256 B
    r = b.node(Op.CONV_2D, [x], params={"weight": np.zeros((4, 1, 1, 4))})  # 256 B
    e = b.node(Op.CONV_2D, [r], params={"weight": np.zeros((16, 1, 1, 4))})  # 1024 B
    d = b.node(Op.DEPTHWISE_CONV_2D, [e], DepthwiseAttrs(padding=(1, 1, 1, 1)),
               params={"weight": np.zeros((1, 3, 3, 16))})  # 1024 B
    p = b.node(Op.CONV_2D, [d], params={"weight": np.zeros((4, 1, 1, 16))})  # 256 B
    return b.build([b.node(Op.ADD, [r, p])])  # 256 B


def test_lifetimes():
    assert tensor_lifetimes(_residual_graph()) == {
        "input": (0, 0), "conv_2d_0": (0, 4), "conv_2d_1": (1, 2), "depthwise_conv_2d_0": (2, 3),
        "conv_2d_2": (3, 4), "add_0": (4, 4),
    }


def test_residual_held_across_block():
    g = _residual_graph()
    assert live_tensors(g)[2] == ["conv_2d_0", "conv_2d_1", "depthwise_conv_2d_0"]  # r held during the dw
    assert live_bytes(g) == [
        256 + 256,  # first conv: graph input + output
        256 + 1024,  # expand: r is its input (counted once although it is also held for the add)
        1024 + 1024 + 256,  # depthwise: in + out + r held
        1024 + 256 + 256,  # project: in + out + r held
        256 + 256 + 256,  # add: both inputs + output
    ]
    assert analytic_peak(g) == 2304


def test_graph_input_held_and_outputs_live_to_the_end():
    b = GraphBuilder()
    x = b.input((1, 4))  # 4 B, read by node 0 and node 2
    y = b.node(Op.RELU, [x])  # a graph output: held to the end
    z = b.node(Op.RELU6, [y])
    g = b.build([b.node(Op.ADD, [x, z]), y])
    assert tensor_lifetimes(g)["input"] == (0, 2) and tensor_lifetimes(g)["relu_0"] == (0, 2)
    assert live_bytes(g) == [4 + 4, 4 + 4 + 4, 4 + 4 + 4 + 4]


def test_weights_excluded_and_float_counted_at_int8():
    b = GraphBuilder()
    y = b.node(Op.FULLY_CONNECTED, [b.input((1, 100))], params={"weight": np.zeros((10, 100))})
    assert live_bytes(b.build([y])) == [100 + 10]  # float32 tensors, 1 B per element; 1000 weights not counted


def test_graph_without_nodes():
    b = GraphBuilder()
    assert analytic_peak(b.build([b.input((1, 4))])) == 0
