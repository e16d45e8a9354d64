"""analysis.dead_weights: convolution taps that only ever read padding, expected values by hand."""

import numpy as np

from kilobyte.analysis import dead_weights
from kilobyte.analysis.dead_weights import live_taps
from kilobyte.api import load
from kilobyte.ir import ConvAttrs, DepthwiseAttrs, GraphBuilder, Op


def test_live_taps_by_hand():
    # output o reads input o*s - pad + i*d through offset i; real inputs are [0, size)
    assert live_taps(1, 1, 3, 1, 1) == [False, True, False]  # 1 px, pad 1: reads -1, 0, 1
    assert live_taps(2, 2, 5, 1, 2) == [False, True, True, True, False]  # o=0: -2..2, o=1: -1..3
    assert live_taps(2, 1, 3, 2, 0) == [True, True, False]  # TF SAME on 2 px, stride 2: pad (0, 1), reads 0, 1, 2
    assert live_taps(3, 2, 3, 2, 1) == [True, True, True]  # 3 px, stride 2: o=0 reads -1, 0, 1; o=1 reads 1, 2, 3
    assert live_taps(3, 1, 3, 1, 1, dilation=2) == [False, True, False]  # 3 px, dilation 2, pad 1 -> out 1: -1, 1, 3


def test_graph_by_hand():
    """conv 3x3 pad 1 on a 1x1 map (2 -> 3 ch): 8 of 9 taps dead = 48 of 54 weights; conv 5x5 pad 2 on 2x2 (3 -> 4):
    3x3 of 25 taps live, 16 * 3 * 4 = 192 of 300 dead; a depthwise conv on a 1x1 map is not counted (not a CONV_2D)."""
    b = GraphBuilder()
    y = b.node(Op.CONV_2D, [b.input((1, 1, 1, 2))], ConvAttrs(padding=(1, 1, 1, 1)),
               params={"weight": np.zeros((3, 3, 3, 2))})
    y = b.node(Op.DEPTHWISE_CONV_2D, [y], DepthwiseAttrs(padding=(1, 1, 1, 1)),
               params={"weight": np.zeros((1, 3, 3, 3))})
    b2 = GraphBuilder()
    z = b2.node(Op.CONV_2D, [b2.input((1, 2, 2, 3))], ConvAttrs(padding=(2, 2, 2, 2)),
                params={"weight": np.zeros((4, 5, 5, 3))})
    first, second = dead_weights(b.build([y])), dead_weights(b2.build([z]))
    assert first.per_node == {"conv_2d_0": (48, 54)}
    assert second.per_node == {"conv_2d_0": (192, 300)}
    assert first.fraction == 48 / 54 and second.fraction == 192 / 300


def test_vgg_small_on_8px_digits_has_63_percent_dead():
    """The old pruning showcase: vgg-small at 8 px runs its last four 64 -> 64 3x3 convs on 1x1 maps (8 -> 4 -> 2 ->
    1, the fourth pool dropped): 4 * 8 * 64 * 64 = 131,072 dead of 1*16*9 + 16*32*9 + 32*64*9 + 5*64*64*9 = 207,504.
    At 48 px the smallest map is 3x3 (48 -> 24 -> 12 -> 6 -> 3): none dead."""
    d8 = dead_weights(load("vgg-small", resolution=8, channels=1).graph)
    assert (d8.dead, d8.total) == (131072, 207504)
    assert dead_weights(load("vgg-small", resolution=48, channels=1).graph).dead == 0
