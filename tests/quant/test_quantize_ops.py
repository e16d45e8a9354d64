"""quantize() beyond the conv / pool / ADD core: the output parameters TFLite's converter chooses for each op, the
lowering of unfoldable batch norms to MUL / SUB by constants, refused parameter groups, and every such graph compiled
and verified against TFLite Micro (C == numpy reference == TFLM, byte for byte) and its float original."""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.errors import UnsupportedOpError
from kilobyte.interp import run_float, run_int8
from kilobyte.ir import (
    Activation,
    AddAttrs,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    GeluAttrs,
    GraphBuilder,
    LeakyReluAttrs,
    MeanAttrs,
    Op,
    PoolAttrs,
    QParams,
    ReshapeAttrs,
    ResizeAttrs,
    TransposeConvAttrs,
)
from kilobyte.quant import calibrate, choose_qparams, dequantize_output, quantize, quantize_input


def every_op_net(seed: int):
    """A float inference graph with each op quantize() learnt: HARD_SWISH, LEAKY_RELU (negative alpha in odd seeds),
    a squeeze-excite (MEAN, LOGISTIC, broadcast MUL), SUB with a fused ReLU, MAXIMUM / MINIMUM (one with a per-channel
    constant), a BATCH_NORM after them (lowered to MUL / SUB by constants), a standing RELU6 and RELU, a MEAN head, a
    SOFTMAX inside the graph and a final LOG_SOFTMAX."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"every_op_{seed}")
    x = b.input((1, 9, 7, 3))
    c = 8

    def conv(t, cout, k=1, act=Activation.NONE):
        cin = b.shape(t)[-1]
        return b.node(Op.CONV_2D, [t], ConvAttrs(padding=(k // 2,) * 4, activation=act),
                      params={"weight": rng.normal(0, 1 / np.sqrt(k * k * cin), (cout, k, k, cin)),
                              "bias": rng.normal(0, 0.3, cout)})

    y = b.node(Op.HARD_SWISH, [conv(x, c, 3)])
    z = b.node(Op.DEPTHWISE_CONV_2D, [y], DepthwiseAttrs(padding=(1, 1, 1, 1)),
               params={"weight": rng.normal(0, 0.5, (1, 3, 3, c)), "bias": rng.normal(0, 0.2, c)})
    z = b.node(Op.LEAKY_RELU, [z], LeakyReluAttrs(alpha=0.1 if seed % 2 == 0 else -0.3))
    s = b.node(Op.LOGISTIC, [conv(b.node(Op.MEAN, [z], MeanAttrs((1, 2), True)), c, act=Activation.RELU)])
    z = b.node(Op.MUL, [z, s])  # (1, 9, 7, 8) x (1, 1, 1, 8)
    d = b.node(Op.SUB, [z, conv(y, c)], AddAttrs(Activation.RELU))
    m = b.node(Op.MAXIMUM, [d, b.const("floor", rng.normal(0, 0.3, (1, 1, 1, c)).astype(np.float32))])
    m = b.node(Op.MINIMUM, [m, y])
    m = b.node(Op.BATCH_NORM, [m], params={"gamma": rng.uniform(0.5, 2, c), "beta": rng.normal(0, 1, c),
                                           "mean": rng.normal(0, 0.3, c), "var": rng.uniform(0.5, 1.5, c)})
    m = b.node(Op.RELU, [b.node(Op.RELU6, [m])])  # the RELU6 fuses into the BN's SUB; the RELU is left standing
    h = b.node(Op.MEAN, [b.node(Op.MAX_POOL_2D, [m], PoolAttrs((2, 2), (2, 2)))], MeanAttrs((1, 2), False))
    h = b.node(Op.SOFTMAX, [b.node(Op.FULLY_CONNECTED, [h], FullyConnectedAttrs(),
                                   params={"weight": rng.normal(0, 1, (6, c)), "bias": rng.normal(0, 0.5, 6)})])
    h = b.node(Op.FULLY_CONNECTED, [h], FullyConnectedAttrs(), params={"weight": rng.normal(0, 3, (4, 6))})
    return b.build([b.node(Op.LOG_SOFTMAX, [h])])


def samples(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed + 100).normal(0.3, 1.0, (n, 9, 7, 3)).astype(np.float32)


def nodes_of(g, op: Op):
    return [n for n in g.nodes if n.op is op]


def test_output_params_are_tflites():
    fg = every_op_net(0)
    q = quantize(fg, samples(0, 16))
    t = q.tensors

    def qp(name):
        return float(t[name].qparams.scale[0]), int(t[name].qparams.zero_point[0])

    assert qp("logistic_0") == (1 / 256, -128)
    assert qp("softmax_0") == (1 / 256, -128)  # inside the graph: int8
    assert qp("log_softmax_0") == (16 / 256, 127)
    for op in (Op.MAXIMUM, Op.MINIMUM):  # inputs (the constant too) and output share one set
        n = nodes_of(q, op)[0]
        assert len({t[x].qparams for x in (*n.inputs, n.outputs[0])}) == 1
    assert t["floor"].dtype == "int8" and t["floor"].qparams == t["maximum_0"].qparams
    ranges = calibrate(fg, samples(0, 16))
    for name in ("leaky_relu_0", "mul_0", "mean_0", "mean_1", "fully_connected_0"):  # calibrated on their own
        assert t[name].qparams == choose_qparams(*ranges[name]), name
    group = [ranges[n] for n in ("sub_0", "maximum_0", "hard_swish_0", "minimum_0")]  # MAXIMUM, MINIMUM's operands
    group.append((float(fg.tensors["floor"].data.min()), float(fg.tensors["floor"].data.max())))
    assert t["minimum_0"].qparams == choose_qparams(min(r[0] for r in group), max(r[1] for r in group))


def test_unfoldable_batch_norm_becomes_mul_and_sub_by_constants():
    q = quantize(every_op_net(0), samples(0, 16))
    bn = [n for n in q.nodes if n.name.startswith("batch_norm_0")]
    assert [n.op for n in bn] == [Op.MUL, Op.SUB] and bn[1].attrs.activation is Activation.RELU6
    for n in bn:
        const = q.tensors[n.inputs[1]]
        assert const.dtype == "int8" and const.shape == (1, 1, 1, 8) and const.qparams.axis is None
        lo, hi = const.data.min(), const.data.max()
        assert lo == -128 or hi == 127  # its own range, per tensor
    assert Op.BATCH_NORM not in [n.op for n in q.nodes] and nodes_of(q, Op.RELU)  # the RELU stands alone


@pytest.mark.parametrize("seed", range(4))
def test_every_op_compiles_bit_exact_with_tflm_and_tracks_float(seed, tmp_path):
    fg = every_op_net(seed)
    data = samples(seed, 24)
    q = quantize(fg, data[:16])
    report = verify_project(compile_graph(q, tmp_path / "m").out_dir, n_random=4)
    assert report.ok and report.engines == ("c-host", "reference", "tflm"), report.mismatches
    got = dequantize_output(q, run_int8(q, quantize_input(q, data[16:]))["log_softmax_0"])
    want = np.concatenate([run_float(fg, x[None])["log_softmax_0"] for x in data[16:]])
    in_range = want > -15.9  # TFLite's LOG_SOFTMAX output saturates at -16
    assert np.abs(got - want)[in_range].max() < 8 * 16 / 256  # a few steps of 1/16 through ~15 int8 layers


def test_fixed_params_do_not_mix_with_computed_ones():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 3))
    y = b.node(Op.CONCAT, [b.node(Op.LOGISTIC, [x]), b.node(Op.HARD_SWISH, [x])], ConcatAttrs(3))
    with pytest.raises(UnsupportedOpError, match=r"tensor 'hard_swish_0' must share quantisation params with the "
                                                 r"output of node 'logistic_0' \(LOGISTIC\)"):
        quantize(b.build([y]), np.zeros((2, 4, 4, 3), np.float32))
    b = GraphBuilder()
    x = b.input((1, 6))
    y = b.node(Op.CONCAT, [b.node(Op.LOGISTIC, [x]), b.node(Op.LOG_SOFTMAX, [x])], ConcatAttrs(1))
    with pytest.raises(UnsupportedOpError, match="log_softmax_0.*TFLite fixes them differently"):
        quantize(b.build([y]), np.zeros((2, 1, 6), np.float32))


def test_fixed_params_travel_through_moving_ops():
    b = GraphBuilder()
    x = b.node(Op.LOGISTIC, [b.input((1, 4, 4, 3))])
    y = b.node(Op.RESHAPE, [b.node(Op.MAX_POOL_2D, [x], PoolAttrs((2, 2), (2, 2)))], ReshapeAttrs((1, 12)))
    q = quantize(b.build([y]), np.random.default_rng(0).normal(size=(4, 4, 4, 3)).astype(np.float32))
    assert {q.tensors[n].qparams for n in ("logistic_0", "max_pool_2d_0", "reshape_0")} == {
        QParams.per_tensor(1 / 256, -128)}


def test_constant_operand_rules():
    b = GraphBuilder()
    x = b.input((1, 4))
    two = b.const("two", np.full((1, 4), 2.0, np.float32))
    with pytest.raises(UnsupportedOpError, match="mul_0.*'two'"):  # both operands constant: nothing to quantise
        quantize(b.build([b.node(Op.ADD, [x, b.node(Op.MUL, [two, two])])]), np.zeros((1, 4), np.float32))


# -- decoders: TRANSPOSE_CONV, resizes, GELU --------------------------------------------------------------------------
def decoder_net(seed: int, gelu: bool):
    """A float decoder: conv -> TRANSPOSE_CONV (k3 s2, PyTorch's padding 1 / output_padding 1, fused ReLU) ->
    bilinear resize (half-pixel centres) -> [GELU (tanh in odd seeds)] -> nearest resize by 2 -> conv."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"decoder_{seed}")
    x = b.input((1, 5, 6, 3))
    y = b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)),
               params={"weight": rng.normal(0, 0.3, (8, 3, 3, 3)), "bias": rng.normal(0, 0.3, 8)})
    y = b.node(Op.TRANSPOSE_CONV, [y], TransposeConvAttrs((2, 2), (1, 0, 1, 0), Activation.RELU),
               params={"weight": rng.normal(0, 0.2, (6, 3, 3, 8)) * rng.uniform(0.2, 2, (6, 1, 1, 1)),
                       "bias": rng.normal(0, 0.3, 6)})
    y = b.node(Op.RESIZE_BILINEAR, [y], ResizeAttrs((13, 15), half_pixel_centers=True))
    if gelu:
        y = b.node(Op.GELU, [y], GeluAttrs(approximate=seed % 2 == 1))
    y = b.node(Op.RESIZE_NEAREST_NEIGHBOR, [y], ResizeAttrs((26, 30)))
    return b.build([b.node(Op.CONV_2D, [y], ConvAttrs(), params={"weight": rng.normal(0, 0.5, (4, 1, 1, 6))})])


def decoder_samples(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed + 200).normal(0, 1.0, (n, 5, 6, 3)).astype(np.float32)


@pytest.mark.parametrize("seed", range(2))
def test_decoder_params_are_tflites(seed):
    """Resizes share their input's params (TFLite Micro never rescales them); TRANSPOSE_CONV weights are int8
    per output channel (axis 0, symmetric) with int32 biases at s_in * s_w; GELU is calibrated on its own."""
    fg = decoder_net(seed, gelu=True)
    q = quantize(fg, decoder_samples(seed, 16))
    t = q.tensors
    for op in (Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR):
        n = nodes_of(q, op)[0]
        assert t[n.inputs[0]].qparams == t[n.outputs[0]].qparams, op
    tc = nodes_of(q, Op.TRANSPOSE_CONV)[0]
    w, bias = t[tc.inputs[1]], t[tc.inputs[2]]
    assert w.dtype == "int8" and w.qparams.axis == 0 and w.qparams.scale.size == 6
    assert not w.qparams.zero_point.any() and (np.abs(w.data).max(axis=(1, 2, 3)) == 127).all()
    assert bias.dtype == "int32"
    np.testing.assert_allclose(bias.qparams.scale, t[tc.inputs[0]].qparams.scale[0] * w.qparams.scale, rtol=1e-6)
    assert tc.attrs.activation is Activation.RELU and t[tc.outputs[0]].qparams.zero_point[0] == -128
    g = nodes_of(q, Op.GELU)[0]
    assert t[g.outputs[0]].qparams == choose_qparams(*calibrate(fg, decoder_samples(seed, 16))[g.outputs[0]])


@pytest.mark.parametrize("seed", range(2))
def test_decoder_compiles_bit_exact_with_tflm_and_tracks_float(seed, tmp_path):
    """C == reference == TFLite Micro; on the calibration inputs (no value outside its calibrated range) the int8
    output stays within a few output steps of the float graph's."""
    fg = decoder_net(seed, gelu=False)
    data = decoder_samples(seed, 16)
    q = quantize(fg, data)
    report = verify_project(compile_graph(q, tmp_path / "m").out_dir, n_random=4)
    assert report.ok and report.engines == ("c-host", "reference", "tflm"), report.mismatches
    got = dequantize_output(q, run_int8(q, quantize_input(q, data))[q.outputs[0]])
    want = np.concatenate([run_float(fg, x[None])[fg.outputs[0]] for x in data])
    steps = np.abs(got - want) / float(q.tensors[q.outputs[0]].qparams.scale[0])
    assert steps.max() < 6 and np.median(steps) < 1, (steps.max(), np.median(steps))
