"""Tests for kernels/calls.py: every entry point is a function the runtime defines, in its family's file (or the C
library's memmove); the variant a node calls follows its kernel, stride, dilation and the plan's in-place choice."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_symbols import defined_functions

from kilobyte.ir import ConvAttrs, DepthwiseAttrs, GraphBuilder, Op
from kilobyte.kernels.calls import ENTRY_POINTS, node_function
from kilobyte.runtime import C_DIR, KERNEL_FILES


@pytest.mark.parametrize("family", [f for f in ENTRY_POINTS if f != "reshape"])
def test_entry_points_are_defined_in_their_family_file(family):
    files = [C_DIR / KERNEL_FILES[family], *sorted((C_DIR / "arm").glob(KERNEL_FILES[family]))]
    for path in files:
        missing = set(ENTRY_POINTS[family]) - defined_functions(path)
        assert not missing, (path.name, sorted(missing))


def _conv(op, k, stride=1, dilation=1, pad=0):
    b = GraphBuilder()
    x = b.input((1, 12, 12, 4))
    if op is Op.CONV_2D:
        attrs, w = ConvAttrs((stride, stride), (pad,) * 4, (dilation, dilation)), np.zeros((8, k, k, 4))
    else:
        attrs, w = DepthwiseAttrs((stride, stride), (pad,) * 4, (dilation, dilation)), np.zeros((1, k, k, 4))
    y = b.node(op, [x], attrs, params={"weight": w})
    return b.build([y]), b.nodes[0]


@pytest.mark.parametrize("op,k,stride,dilation,pad,in_place,expected", [
    (Op.CONV_2D, 1, 1, 1, 0, False, "kb_conv_1x1"),
    (Op.CONV_2D, 1, 2, 1, 0, False, "kb_conv"),
    (Op.CONV_2D, 3, 2, 1, 1, False, "kb_conv_3x3"),
    (Op.CONV_2D, 3, 1, 2, 2, False, "kb_conv"),
    (Op.CONV_2D, 5, 1, 1, 2, False, "kb_conv"),
    (Op.DEPTHWISE_CONV_2D, 3, 1, 1, 1, False, "kb_depthwise_3x3"),
    (Op.DEPTHWISE_CONV_2D, 3, 1, 2, 2, False, "kb_depthwise"),
    (Op.DEPTHWISE_CONV_2D, 5, 1, 1, 2, False, "kb_depthwise"),
    (Op.DEPTHWISE_CONV_2D, 3, 2, 1, 1, True, "kb_depthwise_inplace_3x3"),
    (Op.DEPTHWISE_CONV_2D, 5, 1, 1, 2, True, "kb_depthwise_inplace_5x5"),
    (Op.DEPTHWISE_CONV_2D, 3, 1, 2, 2, True, "kb_depthwise_inplace"),
    (Op.DEPTHWISE_CONV_2D, 4, 1, 1, 2, True, "kb_depthwise_inplace"),
])
def test_the_variant_follows_the_window_and_the_plan(op, k, stride, dilation, pad, in_place, expected):
    graph, node = _conv(op, k, stride, dilation, pad)
    assert node_function(graph, node, in_place) == expected
