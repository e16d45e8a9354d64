"""int8 PRELU: the reference's per-channel tables (kilobyte.ops.prelu) against TFLite Micro, exhaustively.

A (1, 16, 16, C) input holds every int8 value once in each channel, so one run compares every channel's whole
table; alphas cover the int8 range (negative, zero, above one), per channel ((C,), (1, 1, C)) and single ((1,)).
"""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.errors import KilobyteError
from kilobyte.export.tflite import to_tflite
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import GraphBuilder, Op, QParams
from kilobyte.targets import tflm

C = 5
EVERY_VALUE = np.tile(np.arange(-128, 128, dtype=np.int8).reshape(1, 16, 16, 1), (1, 1, 1, C))

# (alpha shape, int8 alphas, alpha (scale, zp), input (scale, zp), output (scale, zp))
CASES = [((C,), [10, -20, 127, -128, 0], (0.01, 0), (0.05, -10), (0.04, 3)),
         ((1, 1, C), [10, -20, 127, -128, 50], (0.02, 5), (0.1, 20), (0.03, -50)),
         ((1,), [40], (0.01, -3), (0.05, -10), (0.05, -10)),
         ((C,), [1, 2, 3, 4, 5], (0.3, 0), (0.042607866, -3), (0.034086294, 20)),  # s_in / s_out a float32 tie
         ((C,), [-128, -64, 0, 64, 127], (1 / 128, 0), (0.003, 100), (0.0021, 0))]


def prelu_graph(alpha_shape, alphas, q_alpha, q_in, q_out, shape=EVERY_VALUE.shape):
    b = GraphBuilder("prelu")
    x = b.input(tuple(shape), "int8", qparams=QParams.per_tensor(*q_in))
    a = b.const("alpha", np.asarray(alphas, np.int8).reshape(alpha_shape), qparams=QParams.per_tensor(*q_alpha))
    return b.build([b.node(Op.PRELU, [x, a], None, qparams=QParams.per_tensor(*q_out))])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3]}-{c[4]}")
def test_every_value_in_every_channel_equals_tflm(case):
    graph = prelu_graph(*case)
    ours = run_int8(graph, EVERY_VALUE)[graph.outputs[0]]
    theirs = tflm.run_tflm(to_tflite(graph), EVERY_VALUE).outputs[graph.outputs[0]].reshape(ours.shape)
    differ = np.argwhere(ours != theirs)
    assert differ.size == 0, f"{len(differ)} differ, first at {differ[0]}: ours {ours[tuple(differ[0])]}"
    per_channel = {tuple(theirs[..., c].reshape(-1)) for c in range(C)}
    assert len(per_channel) == len(set(case[1])) and len(np.unique(theirs)) > 100  # tables really differ


def test_prelu_round_trips_through_tflite():
    graph = prelu_graph(*CASES[1])
    back = from_tflite(to_tflite(graph))
    assert [n.op for n in back.nodes] == [Op.PRELU]
    np.testing.assert_array_equal(run_int8(back, EVERY_VALUE)[back.outputs[0]],
                                  run_int8(graph, EVERY_VALUE)[graph.outputs[0]])


def test_alpha_varying_along_pixels_is_refused():
    graph = prelu_graph((16, 1, 1), np.arange(16), (0.01, 0), (0.05, 0), (0.05, 0))
    with pytest.raises(KilobyteError, match="'prelu_0' \\(PRELU\\): alpha of shape \\(16, 1, 1\\) varies along more"):
        run_int8(graph, EVERY_VALUE)
