"""Tests for kilobyte.targets.litert: TFLite's own interpreter runs our .tflite files where TFLite Micro cannot (GELU,
TILE), returns internal tensors by name, and says on one line what is missing.

The oracle for the bridge is arithmetic done by hand (a 1x1 conv with unit scales, then a TILE), whose internal
tensor the bridge must return too; that the interpreter matches the int8 reference on GELU and TILE is tested in
tests/interp (test_upsample_vs_tflm.py, test_movement_vs_tflm.py).
"""

import os

import numpy as np
import pytest

from kilobyte.errors import KilobyteError
from kilobyte.export import to_tflite
from kilobyte.ir import GraphBuilder, Op, QParams, TileAttrs
from kilobyte.targets.litert import litert_available, run_litert
from kilobyte.targets.tflm import tflm_missing_ops

if not litert_available() and not os.environ.get("CI"):
    pytest.skip("TFLite's interpreter is not installed: pip install 'kilobyte[litert]'", allow_module_level=True)


def unit_conv_then_tile():
    """(1,1,2,2) int8 -> 1x1 CONV_2D (unit scales, input zero point 1, output zero point -3) -> TILE x2 along W."""
    b = GraphBuilder("unit")
    q1 = QParams(np.ones(2, np.float32), np.zeros(2, np.int64), 0)
    x = b.input((1, 1, 2, 2), "int8", "x", QParams.per_tensor(1.0, 1))
    w = b.const("w", np.array([[2, 3], [-1, 1]], np.int8).reshape(2, 1, 1, 2), q1)
    bias = b.const("b", np.array([1, -2], np.int32), q1)
    c = b.node(Op.CONV_2D, [x, w, bias], dtype="int8", qparams=QParams.per_tensor(1.0, -3))
    return b.build([b.node(Op.TILE, [c], TileAttrs((1, 1, 2, 1)), dtype="int8", qparams=QParams.per_tensor(1.0, -3))])


def test_runs_what_tflm_cannot_and_returns_internal_tensors():
    g = unit_conv_then_tile()
    assert tflm_missing_ops(g) == ["TILE"]
    x = np.array([[[[3, 1], [-1, 2]]]], np.int8)  # x - 1: (2, 0) and (-2, 1)
    conv = np.array([[[[2 * 2 + 1 - 3, -2 - 2 - 3], [-4 + 3 + 1 - 3, 2 + 1 - 2 - 3]]]], np.int8)  # + bias, - 3
    got = run_litert(to_tflite(g), x, [g.nodes[0].outputs[0], g.outputs[0]])
    assert np.array_equal(got[g.nodes[0].outputs[0]], conv)
    assert np.array_equal(got[g.outputs[0]], np.concatenate([conv, conv], axis=2))


def test_an_unknown_tensor_is_a_one_line_error():
    g = unit_conv_then_tile()
    with pytest.raises(KilobyteError) as err:
        run_litert(to_tflite(g), np.zeros((1, 1, 2, 2), np.int8), ["nope"])
    assert "'nope'" in str(err.value) and "\n" not in str(err.value)
