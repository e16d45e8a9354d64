"""IR: verify() catches malformed graphs with a message naming the node; printing is one line per node."""

import dataclasses

import numpy as np
import pytest

from kilobyte.ir import Activation, ConvAttrs, Graph, GraphBuilder, GraphError, Node, Op, PoolAttrs, QParams, Tensor


def _conv_graph():
    b = GraphBuilder()
    x = b.input((1, 8, 8, 3))
    w = np.ones((4, 3, 3, 3), np.float32)
    y = b.node(Op.CONV_2D, [x], ConvAttrs(stride=(2, 2), padding=(1, 1, 1, 1), activation=Activation.RELU),
               params={"weight": w, "bias": np.zeros(4, np.float32)}, origin="features.0")
    z = b.node(Op.MAX_POOL_2D, [y], PoolAttrs((2, 2), (2, 2)))
    return b.build([z])


def test_print_one_line_per_node():
    g = _conv_graph()
    lines = str(g).splitlines()
    assert len(lines) == len(g.nodes) + 2
    assert lines[1] == ("  %conv_2d_0:float32[1x4x4x4] = CONV_2D(%input:float32[1x8x8x3], %conv_2d_0.weight, "
                        "%conv_2d_0.bias) {stride=(2, 2), padding=(1, 1, 1, 1), activation=RELU}  "
                        "# conv_2d_0 <- features.0")
    assert lines[2].startswith("  %max_pool_2d_0:float32[1x2x2x4] = MAX_POOL_2D(%conv_2d_0:float32[1x4x4x4])")


def test_wrong_output_shape_is_named():
    g = _conv_graph()
    tensors = dict(g.tensors)
    tensors["conv_2d_0"] = dataclasses.replace(tensors["conv_2d_0"], shape=(1, 5, 5, 4))
    with pytest.raises(GraphError, match="node 'conv_2d_0' \\(CONV_2D\\): output shape"):
        g.replace(tensors=tensors).verify()


def test_bad_order_is_a_cycle_error():
    g = _conv_graph()
    with pytest.raises(GraphError, match="reads 'conv_2d_0' before it is produced"):
        g.replace(nodes=tuple(reversed(g.nodes))).verify()


def test_attrs_type_checked():
    g = _conv_graph()
    bad = dataclasses.replace(g.nodes[1], attrs=ConvAttrs())
    with pytest.raises(GraphError, match="attrs must be PoolAttrs"):
        g.replace(nodes=(g.nodes[0], bad)).verify()


def test_int8_needs_qparams_and_matching_axis():
    t = Tensor("x", (1, 2, 2, 3), "int8")
    g = Graph({"x": t}, (), ("x",), ("x",))
    with pytest.raises(GraphError, match="int8 tensor without quantisation params"):
        g.verify()
    q = QParams(np.ones(2, np.float32), np.zeros(2, np.int64), axis=3)
    g = Graph({"x": dataclasses.replace(t, qparams=q)}, (), ("x",), ("x",))
    with pytest.raises(GraphError, match="2 scales for 3 channels"):
        g.verify()


def test_weights_must_be_constant():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 2))
    w = b.input((3, 1, 1, 2), name="w")
    b.tensors["y"] = Tensor("y", (1, 4, 4, 3))
    b.nodes.append(Node("c", Op.CONV_2D, (x, w), ("y",), ConvAttrs()))
    with pytest.raises(GraphError, match="weights and bias must be constant"):
        b.build(["y"])


def test_missing_output_and_duplicate_producer():
    g = _conv_graph()
    with pytest.raises(GraphError, match="graph output 'nope'"):
        Graph({**g.tensors, "nope": Tensor("nope", (1,))}, g.nodes, g.inputs, ("nope",)).verify()
    dup = dataclasses.replace(g.nodes[1], name="again", inputs=("conv_2d_0",), outputs=("conv_2d_0",),
                              op=Op.RELU, attrs=None)
    with pytest.raises(GraphError, match="produced twice"):
        g.replace(nodes=g.nodes + (dup,)).verify()


def test_graph_equality_and_constants_read_only():
    a, b = _conv_graph(), _conv_graph()
    assert a == b
    w = a.tensors["conv_2d_0.weight"].data
    with pytest.raises(ValueError):
        w[0, 0, 0, 0] = 2.0
