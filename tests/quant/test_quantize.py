"""Post-training quantisation: the int8 graph contract, calibration, and the int8 reference kernels' own rules.

Bit-exactness against TFLite Micro lives in tests/interp/test_int8_vs_tflm.py; here: qparams properties (hypothesis),
per-channel weights and biases, MEAN kept as MEAN with its own params, the float softmax at the edge, shared params,
rejection of non-inference graphs, calibration forms, and hand-checked kernel values. The ops beyond this small net
(LOGISTIC, HARD_SWISH, SUB, MUL with constants, ...) are in test_quantize_ops.py.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kilobyte.errors import KilobyteError, UnsupportedOpError
from kilobyte.interp import eval_node_int8, run_float, run_int8
from kilobyte.ir import (
    Activation,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    GraphBuilder,
    MeanAttrs,
    Op,
    PadAttrs,
    PoolAttrs,
    ReshapeAttrs,
)
from kilobyte.ops.pool import avg_pool_int8, max_pool_int8
from kilobyte.quant import (
    calibrate,
    choose_qparams,
    dequantize_output,
    quantize,
    quantize_input,
    quantize_weights,
    weight_scales,
)

RNG = np.random.default_rng(0)


def small_net(softmax=True, mean_keepdims=False):
    b = GraphBuilder("small")
    x = b.input((1, 8, 6, 3))
    c = b.node(Op.CONV_2D, [x], ConvAttrs((1, 1), (1, 1, 1, 1), activation=Activation.RELU),
               params={"weight": RNG.normal(size=(4, 3, 3, 3)), "bias": RNG.normal(size=4)})
    d = b.node(Op.DEPTHWISE_CONV_2D, [c], DepthwiseAttrs(padding=(1, 1, 1, 1), activation=Activation.RELU6),
               params={"weight": RNG.normal(size=(1, 3, 3, 4)), "bias": RNG.normal(size=4)})
    a = b.node(Op.ADD, [c, d])
    m = b.node(Op.MAX_POOL_2D, [a], PoolAttrs((2, 2), (2, 2)))
    p = b.node(Op.PAD, [m], PadAttrs(((0, 0), (1, 0), (0, 1), (0, 0))))
    k = b.node(Op.CONCAT, [p, p], ConcatAttrs(3))
    g = b.node(Op.MEAN, [k], MeanAttrs((1, 2), mean_keepdims))
    if mean_keepdims:
        g = b.node(Op.RESHAPE, [g], ReshapeAttrs((1, 8)))
    f = b.node(Op.FULLY_CONNECTED, [g], FullyConnectedAttrs(), params={"weight": RNG.normal(size=(5, 8)),
                                                                        "bias": RNG.normal(size=5)})
    return b.build([b.node(Op.SOFTMAX, [f]) if softmax else f])


SAMPLES = RNG.normal(size=(16, 8, 6, 3)).astype(np.float32)


# -- activation params -------------------------------------------------------------------------------------------------
@given(st.floats(-1e4, 1e4), st.floats(-1e4, 1e4))
def test_choose_qparams_properties(a, b):
    lo, hi = min(a, b), max(a, b)
    q = choose_qparams(lo, hi)
    scale, zp = float(q.scale[0]), int(q.zero_point[0])
    assert scale > 0 and -128 <= zp <= 127 and q.axis is None
    if hi - lo > 1e-6:  # the representable range [s·(-128 - zp), s·(127 - zp)] covers [lo, hi] up to one step
        assert scale * (-128 - zp) <= min(lo, 0.0) + scale
        assert scale * (127 - zp) >= max(hi, 0.0) - scale


def test_choose_qparams_all_zero_and_relu_ranges():
    q = choose_qparams(0.0, 0.0)
    assert (float(q.scale[0]), int(q.zero_point[0])) == (1.0, -128)
    q = choose_qparams(0.0, 6.0)  # a ReLU6 range: zero point at the bottom
    assert int(q.zero_point[0]) == -128 and np.isclose(q.scale[0], 6 / 255)
    q = choose_qparams(2.0, 5.0)  # widened to contain 0
    assert int(q.zero_point[0]) == -128 and np.isclose(q.scale[0], 5 / 255)


# -- weights and biases ----------------------------------------------------------------------------------------------
def test_weights_are_per_channel_symmetric():
    w = RNG.normal(size=(6, 3, 3, 2))
    w[2] = 0.0  # a pruned channel must not divide by zero
    s = weight_scales(w, 0)
    q = quantize_weights(w, s, 0)
    assert s.dtype == np.float32 and s[2] == 1.0 and np.all(q[2] == 0)
    for c in (0, 1, 3, 4, 5):
        assert np.abs(q[c]).max() == 127
        np.testing.assert_allclose(q[c] * s[c], w[c], atol=s[c] / 2 + 1e-7)
    assert q.min() >= -127


def test_quantised_graph_follows_the_contract():
    fg = small_net()
    g = quantize(fg, SAMPLES)
    t = g.tensors
    conv_w, conv_b = t["conv_2d_0.weight"], t["conv_2d_0.bias"]
    assert conv_w.dtype == "int8" and conv_w.qparams.axis == 0 and len(conv_w.qparams.scale) == 4
    assert t["depthwise_conv_2d_0.weight"].qparams.axis == 3
    assert t["fully_connected_0.weight"].qparams.axis == 0 and len(t["fully_connected_0.weight"].qparams.scale) == 5
    assert conv_b.dtype == "int32" and conv_b.qparams.axis == 0 and np.all(conv_b.qparams.zero_point == 0)
    np.testing.assert_allclose(conv_b.qparams.scale, t["input"].qparams.scale[0] * conv_w.qparams.scale, rtol=1e-6)
    for name in ("input", "conv_2d_0", "add_0", "max_pool_2d_0", "mean_0", "fully_connected_0"):
        assert t[name].dtype == "int8" and t[name].qparams.axis is None
    # values that are only moved share params: max pool, pad, concat (inputs and output); the mean has its own
    shared = {t[n].qparams for n in ("add_0", "max_pool_2d_0", "pad_0", "concat_0")}
    assert len(shared) == 1
    assert t["mean_0"].qparams == choose_qparams(*calibrate(fg, SAMPLES)["mean_0"]) not in shared
    assert t["conv_2d_0"].qparams.zero_point[0] == -128  # fused ReLU: range [0, max]


def test_mean_stays_mean_and_final_softmax_stays_float():
    """TFLite's int8 MEAN rounds differently from a full-image AVG_POOL_2D: the mean TFLite would run is kept."""
    g = quantize(small_net(), SAMPLES)
    ops = [n.op for n in g.nodes]
    assert g.node("mean_0").op is Op.MEAN and g.node("mean_0").attrs == MeanAttrs((1, 2), False)
    assert ops[-2:] == [Op.DEQUANTIZE, Op.SOFTMAX]
    assert g.tensors["softmax_0"].dtype == "float32" and g.tensors[g.node("softmax_0").inputs[0]].dtype == "float32"
    keep = quantize(small_net(mean_keepdims=True), SAMPLES)
    assert keep.node("mean_0").op is Op.MEAN and keep.node("mean_0").attrs.keepdims


def test_int8_graph_tracks_the_float_graph():
    fg = small_net(softmax=False)
    g = quantize(fg, SAMPLES)
    x = SAMPLES[:4]
    got = dequantize_output(g, run_int8(g, quantize_input(g, x))["fully_connected_0"])
    want = np.concatenate([run_float(fg, s[None])["fully_connected_0"] for s in x])
    step = float(g.tensors["fully_connected_0"].qparams.scale[0])
    assert np.abs(got - want).max() < 12 * step  # a few steps of accumulated rounding, not garbage
    with_softmax = quantize(small_net(), SAMPLES)
    probs = run_int8(with_softmax, quantize_input(with_softmax, x))["softmax_0"]
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


# -- rejected graphs -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [Op.BATCH_NORM, Op.RELU, Op.RELU6])
def test_rejects_training_ops_naming_the_node(op):
    """A BN the inference transforms would fold, or a ReLU they would fuse: prepare_for_inference was not run."""
    b = GraphBuilder()
    x = b.node(Op.CONV_2D, [b.input((1, 4, 4, 2))], params={"weight": np.ones((2, 1, 1, 2))})
    if op is Op.BATCH_NORM:
        y = b.node(op, [x], params={k: np.ones(2) for k in ("gamma", "beta", "mean", "var")})
    else:
        y = b.node(op, [x])
    with pytest.raises(KilobyteError, match=f"node '{op.value.lower()}_0'.*prepare_for_inference") as e:
        quantize(b.build([y]), np.zeros((2, 4, 4, 2), np.float32))
    assert "\n" not in str(e.value)


def test_rejects_constant_activation_operand():
    b = GraphBuilder()
    x = b.input((1, 4))
    y = b.node(Op.CONCAT, [x, b.const("offset", np.ones((1, 4), np.float32))], ConcatAttrs(axis=1))
    with pytest.raises(UnsupportedOpError, match="concat_0.*offset"):
        quantize(b.build([y]), np.zeros((1, 4), np.float32))


def test_a_log_of_zero_in_calibration_names_the_tensor_and_op():
    """LOG of a non-positive value calibrates to -inf: one line naming the tensor and the LOG node, not a bare
    "range is not finite"."""
    b = GraphBuilder("logs")
    y = b.node(Op.LOG, [b.input((1, 2, 2, 3))])
    x = np.abs(np.random.default_rng(0).normal(size=(4, 2, 2, 3))).astype(np.float32)
    x[0, 0, 0, 0] = 0.0
    with pytest.raises(KilobyteError, match=f"tensor '{y}' \\(LOG '.*'\\).*calibration data") as e:
        quantize(b.build([y]), x)
    assert "\n" not in str(e.value)


def test_add_of_a_broadcast_constant_is_int8_from_its_own_range():
    """ADD of a (4,) constant (a folded batch norm's bias): the constant int8 per tensor over its own range, kept in
    its shape; the int8 result within a step or two of the float one."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    bias = np.array([-0.5, 0.25, 1.5, 3.0], np.float32)
    y = b.node(Op.ADD, [b.input((1, 3, 3, 4)), b.const("bias", bias)])
    x = rng.normal(size=(16, 3, 3, 4)).astype(np.float32)
    q = quantize(b.build([y]), x)
    k = q.tensors["bias"]
    assert k.dtype == "int8" and k.shape == (4,) and (k.data.min(), k.data.max()) == (-128, 127)
    step = float(q.tensors[y].qparams.scale[0])
    got = dequantize_output(q, run_int8(q, quantize_input(q, x))[y], y)
    assert np.abs(got - (x + bias)).max() <= 2 * step


def test_rejects_already_quantised_graph():
    g = quantize(small_net(), SAMPLES)
    with pytest.raises(KilobyteError, match="already quantised"):
        quantize(g, SAMPLES)


# -- calibration -----------------------------------------------------------------------------------------------------
def test_calibration_input_forms_agree():
    g = small_net()
    a = calibrate(g, SAMPLES[:3])
    assert a == calibrate(g, SAMPLES[:3, None])
    assert a == calibrate(g, list(SAMPLES[:3]))
    assert a == calibrate(g, {"input": SAMPLES[:3]})
    assert a == calibrate(g, [{"input": s[None]} for s in SAMPLES[:3]])
    with pytest.raises(KilobyteError, match="shape"):
        calibrate(g, np.zeros((3, 5, 5, 3), np.float32))
    with pytest.raises(KilobyteError, match="unknown"):
        calibrate(g, SAMPLES, method="kl")


def test_percentile_ignores_outliers():
    b = GraphBuilder()
    g = b.build([b.node(Op.RELU, [b.input((1, 1000))])])
    x = RNG.uniform(-1, 1, size=(4, 1000)).astype(np.float32)
    x[0, 0] = 50.0
    assert calibrate(g, x)["input"][1] == 50.0
    lo, hi = calibrate(g, x, method="percentile", percentile=99.9)["input"]
    assert -1.0 <= lo < -0.9 and 0.9 < hi <= 1.0


def test_percentile_pool_is_bounded_and_weighs_samples_equally(monkeypatch):
    calibration = importlib.import_module("kilobyte.quant.calibrate")  # the package's `calibrate` is the function
    monkeypatch.setattr(calibration, "PERCENTILE_POOL_SIZE", 1000)
    b = GraphBuilder()
    g = b.build([b.node(Op.RELU, [b.input((1, 100))])])
    x = RNG.uniform(0, 1, size=(60, 100)).astype(np.float32)
    x[:30] += 1.0  # early samples in [1, 2], late ones in [0, 1]: thinning must not favour either half
    lo, hi = calibrate(g, x, method="percentile", percentile=75.0)["input"]
    assert abs(lo - 0.5) < 0.08 and abs(hi - 1.5) < 0.08


# -- interpreter -----------------------------------------------------------------------------------------------------
def test_run_int8_batch_equals_single_runs_and_node_by_node():
    g = quantize(small_net(), SAMPLES)
    xq = quantize_input(g, SAMPLES[:5])
    batch = run_int8(g, xq, keep_all=True)
    for i in range(5):
        single = run_int8(g, xq[i:i + 1], keep_all=True)
        for k, v in single.items():
            np.testing.assert_array_equal(batch[k][i:i + 1], v, err_msg=k)
    env = {"input": xq[:1]}  # eval_node_int8 alone, as a memory-plan executor drives it
    for node in g.nodes:
        args = [env[t] if t in env else g.tensors[t].data for t in node.inputs]
        env[node.outputs[0]] = eval_node_int8(g, node, args)
    np.testing.assert_array_equal(env["softmax_0"], batch["softmax_0"][:1])


def test_run_int8_rejects_float_input():
    g = quantize(small_net(), SAMPLES)
    with pytest.raises(KilobyteError, match="quantize_input"):
        run_int8(g, SAMPLES[:1])


def test_avg_pool_rounding_and_in_image_count():
    x = np.array([1, 2, -1, -2, 3, 4, 5, 7], np.int8).reshape(1, 1, 8, 1)
    # windows of 2: 1.5 -> 2, -1.5 -> -2, 3.5 -> 4, 6 -> 6 (ties away from zero, like TFLite)
    assert avg_pool_int8(x, (1, 2), (1, 2), (0, 0, 0, 0)).ravel().tolist() == [2, -2, 4, 6]
    # padded taps are not counted: the corner window sees only x[0] = 1, the next one 2 and -1 -> 0.5 -> 1
    assert avg_pool_int8(x, (1, 2), (1, 2), (0, 0, 1, 1)).ravel().tolist()[:2] == [1, 1]
    assert avg_pool_int8(x, (1, 2), (1, 2), (0, 0, 0, 0), act_min=0).ravel().tolist() == [2, 0, 4, 6]


def test_max_pool_ignores_padding():
    x = np.full((1, 2, 2, 1), -100, np.int8)
    out = max_pool_int8(x, (3, 3), (1, 1), (1, 1, 1, 1))
    assert out.shape == (1, 2, 2, 1) and np.all(out == -100)  # padded taps never win, even over negatives
