"""Tests for kilobyte.targets.tflm: TFLite Micro runs our .tflite files, returns every tensor, and sizes the arena.

The oracle for the bridge itself is arithmetic done by hand (a 1x1 conv with unit scales); the oracle for the
writer's int8 semantics is the numpy int8 reference, which TFLM must match bit for bit on every tensor.
"""

import sys

import numpy as np
import pytest

from kilobyte import api, quant
from kilobyte.errors import KilobyteError
from kilobyte.export import to_tflite
from kilobyte.interp import int8_ref
from kilobyte.ir import Activation, ConvAttrs, DepthwiseAttrs, GraphBuilder, Op, PoolAttrs, QParams
from kilobyte.targets.tflm import run_tflm, tflm_arena_bytes, tflm_arena_report, tflm_invoke_latency

tflm = pytest.importorskip("tflite_micro")


def per_channel(scales, axis=0):
    scales = np.asarray(scales, np.float32)
    return QParams(scales, np.zeros(len(scales), np.int64), axis)


def unit_conv_graph(h=2, w=2):
    """(1,h,w,2) int8 -> 1x1 CONV_2D with unit scales; input zero point 1, output zero point -3."""
    b = GraphBuilder("unit")
    x = b.input((1, h, w, 2), "int8", qparams=QParams.per_tensor(1.0, 1))
    wt = b.const("c.weight", np.array([[2, 3], [-1, 1]], np.int8).reshape(2, 1, 1, 2), per_channel([1.0, 1.0]))
    bias = b.const("c.bias", np.array([1, -2], np.int32), per_channel([1.0, 1.0]))
    y = b.node(Op.CONV_2D, [x, wt, bias], ConvAttrs(), qparams=QParams.per_tensor(1.0, -3))
    return b.build([y])


def test_unit_conv_matches_hand_computation():
    x = np.array([[[1, 2], [3, -4]], [[100, 50], [-7, 0]]], np.int8).reshape(1, 2, 2, 2)
    r = run_tflm(to_tflite(unit_conv_graph()), x)
    # y[c] = sum_k w[c,k] * (x[k] - 1) + b[c] - 3, saturated to int8; e.g. at (1,0): 2*99 + 3*49 + 1 - 3 = 343 -> 127
    want = np.array([[[1, -4], [-13, -12]], [[127, -55], [-21, 2]]], np.int8).reshape(1, 2, 2, 2)
    np.testing.assert_array_equal(r.outputs["conv_2d_0"], want)
    assert r.outputs["conv_2d_0"].dtype == np.int8
    assert set(r.tensors) >= {"input", "c.weight", "c.bias", "conv_2d_0"}
    np.testing.assert_array_equal(r.tensors["input"], x)
    np.testing.assert_array_equal(r.tensors["c.bias"], [1, -2])


def test_arena_is_the_smallest_that_allocates_and_grows_with_tensors():
    tiny, small, big = (to_tflite(unit_conv_graph(h, h)) for h in (4, 16, 32))
    a_tiny, a_small, a_big = tflm_arena_bytes(tiny), tflm_arena_bytes(small), tflm_arena_bytes(big)
    assert 0 < a_tiny < a_small < a_big
    # Input and output are live together: (32*32 - 16*16) * (2 + 2) bytes more. (The tiny model's arena is set by
    # the kernels' temporary allocations during Prepare, not by its 64 bytes of activations.)
    assert a_big - a_small == (32 * 32 - 16 * 16) * 4
    report = tflm_arena_report(big)
    assert report["head"] == 32 * 32 * 4 and report["total"] == report["head"] + report["tail"]
    assert abs(report["total"] - a_big) <= 16  # the recorded total is off by alignment slack only...
    assert tflm_arena_report(tiny)["total"] < a_tiny - 256  # ...unless Prepare's temporaries dominate
    rt = tflm.runtime
    rt.Interpreter.from_bytes(big, arena_size=a_big)
    with pytest.raises(RuntimeError):
        rt.Interpreter.from_bytes(big, arena_size=a_big - 1)
    assert run_tflm(big, np.zeros((1, 32, 32, 2), np.int8)).arena_bytes == a_big


def test_every_ir_tensor_is_returned_and_matches_the_int8_reference():
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "export"))
    try:
        from test_tflite_roundtrip import all_ops_graph
    finally:
        sys.path.pop(0)
    for float_input in (False, True):
        g = all_ops_graph(3, float_input=float_input)
        rng = np.random.default_rng(7)
        x = rng.normal(size=(1, 8, 8, 3)).astype(np.float32) if float_input else \
            rng.integers(-128, 128, (1, 8, 8, 3)).astype(np.int8)
        r = run_tflm(to_tflite(g), x)
        assert set(g.tensors) <= set(r.tensors)
        ref = int8_ref.run_int8(g, x, keep_all=True)
        for name, want in ref.items():
            if want.dtype == np.float32:  # DEQUANTIZE -> SOFTMAX tail: float arithmetic
                np.testing.assert_allclose(r.tensors[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
            else:
                np.testing.assert_array_equal(r.tensors[name], want, err_msg=name)


def test_depthwise_without_bias_runs():
    # TFLM crashes on a depthwise conv whose bias input is -1: the writer must leave the bias out instead
    b = GraphBuilder()
    x = b.input((1, 3, 3, 2), "int8", qparams=QParams.per_tensor(1.0, 0))
    w = b.const("d.weight", np.ones((1, 3, 3, 2), np.int8), per_channel([1.0, 1.0], axis=3))
    y = b.node(Op.DEPTHWISE_CONV_2D, [x, w], DepthwiseAttrs(padding=(1, 1, 1, 1), activation=Activation.RELU),
               qparams=QParams.per_tensor(1.0, 0))
    r = run_tflm(to_tflite(b.build([y])), np.ones((1, 3, 3, 2), np.int8))
    np.testing.assert_array_equal(r.outputs[y][0, :, :, 0], [[4, 6, 4], [6, 9, 6], [4, 6, 4]])


def test_inputs_by_name_and_without_preserving():
    g = unit_conv_graph()
    data = to_tflite(g)
    x = np.ones((1, 2, 2, 2), np.int8)
    kept = run_tflm(data, {"input": x})
    lean = run_tflm(data, x, preserve_all=False)
    np.testing.assert_array_equal(kept.outputs["conv_2d_0"], lean.outputs["conv_2d_0"])
    assert lean.tensors == {}
    with pytest.raises(KilobyteError, match="do not match the model inputs"):
        run_tflm(data, {"x": x})
    with pytest.raises(KilobyteError, match="shape"):
        run_tflm(data, np.ones((1, 3, 3, 2), np.int8))
    with pytest.raises(KilobyteError, match="do not fit"):
        run_tflm(data, np.full((1, 2, 2, 2), 0.5))


def test_latency_is_a_positive_median():
    g = unit_conv_graph(8, 8)
    assert 0 < tflm_invoke_latency(to_tflite(g), np.zeros((1, 8, 8, 2), np.int8), repeats=5) < 1


def test_missing_wheel_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tflite_micro", None)
    with pytest.raises(KilobyteError, match=r"pip install kilobyte\[tflm\]"):
        run_tflm(to_tflite(unit_conv_graph()), np.zeros((1, 2, 2, 2), np.int8))


def quantised_zoo_model(name, **kw):
    pytest.importorskip("torch")
    g = api.load(name, **kw).graph
    rng = np.random.default_rng(0)
    shape = g.tensors[g.inputs[0]].shape
    q = quant.quantize(g, [rng.normal(size=shape).astype(np.float32) for _ in range(4)])
    return q, quant.quantize_input(q, rng.normal(size=shape).astype(np.float32))


# The randomly initialised MobileNet-style zoo models are left out: their activations vanish with depth, the
# quantiser gives RELU6 outputs scales below 6 / 2^31, and TFLM refuses them in Prepare (as in the next test).
@pytest.mark.parametrize("name", ["vgg-small", "resnet-small"])
def test_quantised_zoo_models_are_bit_exact_with_the_int8_reference(name):
    from kilobyte.interp import run_int8

    q, x = quantised_zoo_model(name)
    r = run_tflm(to_tflite(q), x)
    for tname, want in run_int8(q, x, keep_all=True).items():
        if want.dtype == np.float32:
            np.testing.assert_allclose(r.tensors[tname], want, rtol=1e-5, atol=1e-6, err_msg=tname)
        else:
            np.testing.assert_array_equal(r.tensors[tname], want, err_msg=tname)


def test_a_model_tflm_refuses_is_a_clear_error_not_an_arena_search():
    # RELU6 on an output scale below 6 / 2^31: TFLite's activation range overflows int32 and Prepare fails
    b = GraphBuilder()
    x = b.input((1, 2, 2, 2), "int8", qparams=QParams.per_tensor(1.0, 0))
    w = b.const("c.weight", np.ones((2, 1, 1, 2), np.int8), per_channel([1.0, 1.0]))
    y = b.node(Op.CONV_2D, [x, w], ConvAttrs(activation=Activation.RELU6), qparams=QParams.per_tensor(1e-10, 0))
    with pytest.raises(KilobyteError, match="TFLM cannot prepare the model: .*no_integer_overflow.*CONV_2D"):
        run_tflm(to_tflite(b.build([y])), np.zeros((1, 2, 2, 2), np.int8))


def test_pool_padding_through_padv2_matches_reference():
    b = GraphBuilder()
    x = b.input((1, 5, 5, 3), "int8", qparams=QParams.per_tensor(0.1, -2))
    y = b.node(Op.MAX_POOL_2D, [x], PoolAttrs((3, 3), (2, 2), (2, 0, 1, 1)), qparams=QParams.per_tensor(0.1, -2))
    g = b.build([y])
    xv = np.random.default_rng(3).integers(-128, 128, (1, 5, 5, 3)).astype(np.int8)
    r = run_tflm(to_tflite(g), xv)
    np.testing.assert_array_equal(r.outputs[y], int8_ref.run_int8(g, xv)[y])
