"""analysis.shapes: activation bytes at int8 from shapes, distinct activation inputs, spatial extent."""

import numpy as np

from kilobyte.analysis.shapes import (
    activation_bytes,
    activation_inputs,
    activation_tensors,
    in_bytes,
    out_bytes,
    spatial_extent,
)
from kilobyte.ir import GraphBuilder, Op


def test_bytes_and_inputs():
    b = GraphBuilder()
    x = b.input((1, 5, 5, 3))  # float32, counted at 1 B per element
    a = b.node(Op.ADD, [x, x])
    y = b.node(Op.FULLY_CONNECTED, [b.node(Op.MEAN, [a])], params={"weight": np.zeros((2, 3))})
    g = b.build([y])
    assert activation_bytes(g, "input") == 75
    assert activation_tensors(g) == ["input", "add_0", "mean_0", "fully_connected_0"]
    add, _, fc = g.nodes
    assert activation_inputs(g, add) == ["input"] and in_bytes(g, add) == 75 and out_bytes(g, add) == 75
    assert activation_inputs(g, fc) == ["mean_0"]  # the weight is not an activation
    assert spatial_extent((1, 7, 5, 3)) == (7, 5) and spatial_extent((1, 10)) == (1, 1)
