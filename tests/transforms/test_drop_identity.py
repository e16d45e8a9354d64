"""drop_identity: golden IR, outputs unchanged, input graph untouched."""

import numpy as np
import pytest

from kilobyte.ir import GraphBuilder, Op
from kilobyte.transforms import drop_identity

from .random_graphs import assert_same_outputs, random_graph


def test_golden_chain_and_output():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 2))
    y = b.node(Op.RELU, [b.node(Op.IDENTITY, [x])])
    g = b.build([b.node(Op.IDENTITY, [y])])  # the graph output is an identity's output
    before = str(g)
    out = drop_identity(g)
    assert str(out) == "\n".join([
        "graph model(%input:float32[1x4x4x2])",
        "  %relu_0:float32[1x4x4x2] = RELU(%input:float32[1x4x4x2])  # relu_0",
        "  return relu_0",
    ])
    assert sorted(out.tensors) == ["input", "relu_0"]
    assert str(g) == before


def test_identity_with_two_readers():
    b = GraphBuilder()
    i = b.node(Op.IDENTITY, [b.input((1, 2, 2, 1))])
    g = b.build([b.node(Op.ADD, [i, b.node(Op.RELU, [i])])])
    assert str(drop_identity(g)).splitlines()[1:3] == [
        "  %relu_0:float32[1x2x2x1] = RELU(%input:float32[1x2x2x1])  # relu_0",
        "  %add_0:float32[1x2x2x1] = ADD(%input:float32[1x2x2x1], %relu_0:float32[1x2x2x1])  # add_0",
    ]


def test_identity_from_input_to_output():
    b = GraphBuilder()
    g = b.build([b.node(Op.IDENTITY, [b.input((1, 3))])])
    out = drop_identity(g).verify()
    assert out.nodes == () and out.outputs == ("input",)
    assert_same_outputs(g, out)


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs(seed):
    g = random_graph(seed)
    before = str(g)
    out = drop_identity(g).verify()
    assert str(g) == before
    assert not any(n.op is Op.IDENTITY for n in out.nodes)
    assert [n.name for n in out.nodes] == [n.name for n in g.nodes if n.op is not Op.IDENTITY]
    assert_same_outputs(g, out, seed)


def test_constants_are_shared_not_copied():
    b = GraphBuilder()
    y = b.node(Op.FULLY_CONNECTED, [b.node(Op.IDENTITY, [b.input((1, 3))])], params={"weight": np.ones((2, 3))})
    g = b.build([y])
    assert drop_identity(g).tensors["fully_connected_0.weight"] is g.tensors["fully_connected_0.weight"]
