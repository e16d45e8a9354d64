"""File quirks TensorFlow Lite Micro accepts, so Kilobyte must too (issue #13, item 7).

Each test crafts a small int8 `.tflite` with the quirk (the writer's serialiser, hand-set fields), then holds three
executors equal on it: TFLite Micro on the file as crafted, the numpy reference on what Kilobyte reads, and the
compiled C (host build).
"""

from __future__ import annotations

import numpy as np
import pytest
import tflite
from test_tflite_reader import craft, qp, t

from kilobyte.api import compile_model, load
from kilobyte.codegen import run_compiled
from kilobyte.export.tflite_ops import TflOp
from kilobyte.interp import run_int8
from kilobyte.ir import QParams
from kilobyte.targets.tflm import run_tflm

B = tflite.BuiltinOperator
RNG = np.random.default_rng(5)


def _check(tmp_path, data: bytes, shape) -> None:
    path = tmp_path / "quirk.tflite"
    path.write_bytes(data)
    model = load(str(path))
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
        want = next(iter(run_tflm(data, x, preserve_all=False).outputs.values()))
        got = run_int8(model.graph, x)[model.graph.outputs[0]]
        np.testing.assert_array_equal(got.reshape(want.shape), want)
        result = compile_model(model, tmp_path / f"c{seed}")
        np.testing.assert_array_equal(run_compiled(result.out_dir, x).reshape(want.shape), want)


def _dw_tensors(bias_axis: int, scales):
    c = len(scales)
    w = RNG.integers(-127, 128, (1, 3, 3, c)).astype(np.int8)
    bias = RNG.integers(-500, 500, c).astype(np.int32)
    sw = np.asarray(scales, np.float32)
    return [t("x", (1, 6, 6, c), "int8", q=qp(0.05, 3)),
            t("w", (1, 3, 3, c), "int8", w, QParams(sw, np.zeros(c, np.int64), 3)),
            t("b", (c,), "int32", bias, QParams((0.05 * sw).astype(np.float32), np.zeros(c, np.int64), bias_axis)),
            t("y", (1, 4, 4, c), "int8", q=qp(0.04, -2))]


def _dw_op():
    return TflOp(B.DEPTHWISE_CONV_2D, ("x", "w", "b"), ("y",),
                 {"Padding": tflite.Padding.VALID, "StrideW": 1, "StrideH": 1, "DepthMultiplier": 1,
                  "DilationWFactor": 1, "DilationHFactor": 1})


def test_depthwise_bias_with_the_weights_axis(tmp_path):
    """Older converters (person_detect) give the 1-D depthwise bias quantized_dimension 3."""
    data = craft(_dw_tensors(3, [0.01, 0.02, 0.015, 0.03]), [_dw_op()], ["x"], ["y"])
    _check(tmp_path, data, (1, 6, 6, 4))


def test_negative_per_channel_weight_scales(tmp_path):
    """MCUNet's published files have channels whose weight (and bias) scale is negative."""
    data = craft(_dw_tensors(0, [0.01, -0.02, 0.015, -0.03]), [_dw_op()], ["x"], ["y"])
    _check(tmp_path, data, (1, 6, 6, 4))
    model = load(str(tmp_path / "quirk.tflite"))
    assert np.all(model.graph.tensors["w"].qparams.scale > 0)


def test_reshape_with_other_output_params(tmp_path):
    """TFLite Micro's RESHAPE copies bytes even when its output's params differ from its input's."""
    w = RNG.integers(-127, 128, (5, 12)).astype(np.int8)
    tensors = [t("x", (1, 2, 2, 3), "int8", q=qp(0.1, 1)), t("s", (2,), "int32", [1, 12]),
               t("r", (1, 12), "int8", q=qp(0.2, -5)),
               t("w", (5, 12), "int8", w, QParams(np.full(5, 0.01, np.float32), np.zeros(5, np.int64), 0)),
               t("y", (1, 5), "int8", q=qp(0.3, 0))]
    ops = [TflOp(B.RESHAPE, ("x", "s"), ("r",), {"NewShape": (1, 12)}),
           TflOp(B.FULLY_CONNECTED, ("r", "w"), ("y",), {})]
    _check(tmp_path, craft(tensors, ops, ["x"], ["y"]), (1, 2, 2, 3))


def test_conv_without_a_bias_tensor(tmp_path):
    w = RNG.integers(-127, 128, (8, 3, 3, 2)).astype(np.int8)
    tensors = [t("x", (1, 5, 5, 2), "int8", q=qp(0.1, -3)),
               t("w", (8, 3, 3, 2), "int8", w, QParams(np.linspace(0.01, 0.05, 8).astype(np.float32),
                                                       np.zeros(8, np.int64), 0)),
               t("y", (1, 3, 3, 8), "int8", q=qp(0.5, 4))]
    ops = [TflOp(B.CONV_2D, ("x", "w"), ("y",), {"Padding": tflite.Padding.VALID, "StrideW": 1, "StrideH": 1,
                                                 "DilationWFactor": 1, "DilationHFactor": 1})]
    _check(tmp_path, craft(tensors, ops, ["x"], ["y"]), (1, 5, 5, 2))


def test_negative_scale_over_minus_128_is_one_line(tmp_path):
    tensors = _dw_tensors(0, [0.01, -0.02, 0.015, -0.03])
    tensors[1].data[0, 0, 0, 1] = -128  # a channel to negate holds -128
    path = tmp_path / "bad.tflite"
    path.write_bytes(craft(tensors, [_dw_op()], ["x"], ["y"]))
    from kilobyte.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="cannot be negated") as e:
        load(str(path))
    assert "\n" not in str(e.value)


def test_depthwise_with_a_depth_multiplier(tmp_path):
    """micro_speech / person_detect: DEPTHWISE_CONV_2D with multiplier > 1 (lowered to an equivalent CONV_2D)."""
    for cin, m in ((1, 8), (3, 2)):
        c = cin * m
        w = RNG.integers(-127, 128, (1, 3, 3, c)).astype(np.int8)
        sw = np.linspace(0.01, 0.03, c).astype(np.float32)
        tensors = [t("x", (1, 7, 6, cin), "int8", q=qp(0.05, 3)),
                   t("w", (1, 3, 3, c), "int8", w, QParams(sw, np.zeros(c, np.int64), 3)),
                   t("b", (c,), "int32", RNG.integers(-300, 300, c).astype(np.int32),
                     QParams((0.05 * sw).astype(np.float32), np.zeros(c, np.int64), 0)),
                   t("y", (1, 5, 4, c), "int8", q=qp(0.08, -4))]
        op = TflOp(B.DEPTHWISE_CONV_2D, ("x", "w", "b"), ("y",),
                   {"Padding": tflite.Padding.VALID, "StrideW": 1, "StrideH": 1, "DepthMultiplier": m,
                    "DilationWFactor": 1, "DilationHFactor": 1})
        (tmp_path / f"{cin}").mkdir()
        _check(tmp_path / f"{cin}", craft(tensors, [op], ["x"], ["y"]), (1, 7, 6, cin))
        assert load(str(tmp_path / f"{cin}" / "quirk.tflite")).graph.nodes[0].op.value == "CONV_2D"
