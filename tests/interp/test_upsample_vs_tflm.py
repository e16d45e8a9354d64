"""int8 RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR, TRANSPOSE_CONV and GELU: the numpy reference
(`kilobyte.ops.resize`, `kilobyte.ops.transpose_conv`, `kilobyte.ops.lut`) against TensorFlow Lite Micro, bit
for bit, on random shapes and parameters — and GELU, which TFLite Micro does not register, against TFLite's own
interpreter.

Every case is a one-op graph written by Kilobyte's `.tflite` writer and read back equal by the reader (so the
attributes TFLite Micro runs are the ones the reference ran). Resizes draw odd and even sizes up and down, with every
align_corners / half_pixel_centers combination TFLite accepts; transposed convolutions draw kernels, strides 1-3 and
the crops of SAME, VALID and PyTorch's padding + output_padding (which the writer turns into a VALID TRANSPOSE_CONV
and a STRIDED_SLICE), with and without bias and fused ReLU / ReLU6 — and TFLite's own interpreter, which checks
output sizes TFLite Micro takes on trust, runs the same files to the same values. A few cases also have an oracle
that needs no TFLite at all (nearest upsampling by whole factors is `np.repeat`).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from litert_oracle import run_litert

from kilobyte.errors import KilobyteError
from kilobyte.export.tflite import to_tflite
from kilobyte.formats import tflite_schema as S
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import Activation, GeluAttrs, GraphBuilder, Op, QParams, ResizeAttrs, TransposeConvAttrs
from kilobyte.targets import tflm


def random_input(shape, rng) -> np.ndarray:
    x = rng.integers(-128, 128, shape).astype(np.int8)
    x.flat[0], x.flat[-1] = -128, 127
    return x


def random_qparams(rng) -> QParams:
    return QParams.per_tensor(2.0 ** rng.uniform(-8, -2), int(rng.integers(-128, 128)))


def assert_same(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    differ = np.flatnonzero(ours != theirs)
    assert differ.size == 0, f"{differ.size} of {ours.size} values differ, first at {differ[0]}"


def bit_exact_with_tflm(graph, x: np.ndarray) -> np.ndarray:
    """The reference's output, after checking it against TFLite Micro and the file's round trip."""
    model = to_tflite(graph)
    assert from_tflite(model) == graph
    ours = run_int8(graph, x)[graph.outputs[0]]
    assert_same(ours, tflm.run_tflm(model, x, preserve_all=False).outputs[graph.outputs[0]])
    return ours


# -- resizes -------------------------------------------------------------------------------------------------------
def resize_graph(op: Op, shape, attrs: ResizeAttrs, q: QParams):
    b = GraphBuilder(op.value.lower())
    x = b.input(shape, "int8", "x", q)
    return b.build([b.node(op, [x], attrs, dtype="int8", qparams=q)])


sizes = st.integers(1, 9)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 2), hw=st.tuples(sizes, sizes), out=st.tuples(st.integers(1, 19), st.integers(1, 19)),
       c=st.integers(1, 5), align=st.booleans(), half=st.booleans(), seed=st.integers(0, 2**16))
def test_resize_nearest_bit_exact(n, hw, out, c, align, half, seed):
    rng = np.random.default_rng(seed)
    event(f"align_corners={align} half_pixel_centers={half}")
    graph = resize_graph(Op.RESIZE_NEAREST_NEIGHBOR, (n, *hw, c), ResizeAttrs(out, align, half), random_qparams(rng))
    bit_exact_with_tflm(graph, random_input((n, *hw, c), rng))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 2), hw=st.tuples(sizes, sizes), out=st.tuples(st.integers(1, 23), st.integers(1, 23)),
       c=st.integers(1, 5), mode=st.sampled_from(["plain", "align_corners", "half_pixel_centers"]),
       seed=st.integers(0, 2**16))
def test_resize_bilinear_bit_exact(n, hw, out, c, mode, seed):
    rng = np.random.default_rng(seed)
    attrs = ResizeAttrs(out, mode == "align_corners", mode == "half_pixel_centers")
    graph = resize_graph(Op.RESIZE_BILINEAR, (n, *hw, c), attrs, random_qparams(rng))
    x = random_input((n, *hw, c), rng)
    try:
        run_int8(graph, x)
    except KilobyteError as e:  # TFLite Micro would read past the input edge: refused, on one line
        event("refused")
        assert "\n" not in str(e) and "reads past the input edge" in str(e)
        return
    event(mode)
    bit_exact_with_tflm(graph, x)


@pytest.mark.parametrize("factor", [(2, 2), (3, 1), (1, 4)])
def test_nearest_whole_factor_upsampling_repeats_pixels(factor):
    """PyTorch's nn.Upsample(scale_factor=k, mode='nearest') as TFLite writes it: every pixel k times."""
    rng = np.random.default_rng(sum(factor))
    x = random_input((1, 5, 3, 4), rng)
    size = (5 * factor[0], 3 * factor[1])
    y = bit_exact_with_tflm(resize_graph(Op.RESIZE_NEAREST_NEIGHBOR, x.shape, ResizeAttrs(size), random_qparams(rng)),
                            x)
    assert np.array_equal(y, x.repeat(factor[0], axis=1).repeat(factor[1], axis=2))


def test_bilinear_identity_size_copies_and_constant_planes_stay_constant():
    """Resizing to the input's own size (any mode) is a copy; a constant plane interpolates to itself, at both ends
    of the int8 range."""
    rng = np.random.default_rng(3)
    x = random_input((1, 6, 7, 3), rng)
    for align, half in ((False, False), (True, False), (False, True)):
        graph = resize_graph(Op.RESIZE_BILINEAR, x.shape, ResizeAttrs((6, 7), align, half), random_qparams(rng))
        assert np.array_equal(bit_exact_with_tflm(graph, x), x)
    planes = np.broadcast_to(np.array([-128, 127, 0, -1], np.int8), (1, 3, 5, 4)).copy()
    graph = resize_graph(Op.RESIZE_BILINEAR, planes.shape, ResizeAttrs((7, 12), False, True), random_qparams(rng))
    y = bit_exact_with_tflm(graph, planes)
    assert np.array_equal(y, np.broadcast_to(planes[:, :1, :1], y.shape))


def test_bilinear_sizes_tflm_reads_past_are_one_line_errors_naming_the_node():
    graph = resize_graph(Op.RESIZE_BILINEAR, (1, 2, 2, 1), ResizeAttrs((80, 2)), QParams.per_tensor(0.1, 0))
    with pytest.raises(KilobyteError) as err:
        run_int8(graph, np.zeros((1, 2, 2, 1), np.int8))
    msg = str(err.value)
    assert "\n" not in msg and f"node '{graph.nodes[0].name}'" in msg and "2 -> 80" in msg


# -- TRANSPOSE_CONV ------------------------------------------------------------------------------------------------
def crop(form: str, size: int, k: int, s: int, p: int, output_padding: int) -> tuple[int, int, int]:
    """(output size, crop before, crop after) along one axis for a crop form. SAME and VALID are TFLite's (output
    size in*s and (in-1)*s + max(k, s), crop before from TFLite's padding rule); `torch` is nn.ConvTranspose2d's
    padding p and output_padding (crop after p - output_padding, negative when output_padding > p)."""
    full = (size - 1) * s + k
    if form == "torch":
        before, after = p, p - output_padding
        return full - before - after, before, after
    out = size * s if form == "same" else (size - 1) * s + max(k, s)
    before = S.transpose_conv_crop(S.SAME if form == "same" else S.VALID, out, k, s)
    return out, before, full - before - out


def transpose_conv_graph(rng, shape, cout: int, kernel, stride, padding, bias: bool, act: Activation):
    """A one-node int8 TRANSPOSE_CONV with random per-channel weights (OHWI), an optional int32 bias, and an output
    scale that spreads the sums over the int8 range."""
    b = GraphBuilder("transpose_conv")
    q_in = random_qparams(rng)
    x = b.input(shape, "int8", "x", q_in)
    s_w = (2.0 ** rng.uniform(-9, -5, cout)).astype(np.float32)
    zeros = np.zeros(cout, np.int64)
    w = b.const("w", rng.integers(-127, 128, (cout, *kernel, shape[-1])).astype(np.int8), QParams(s_w, zeros, 0))
    inputs = [x, w]
    taps = -(-kernel[0] // stride[0]) * -(-kernel[1] // stride[1]) * shape[-1]  # products per output value
    if bias:
        b_q = QParams((np.float32(q_in.scale[0]) * s_w).astype(np.float32), zeros, 0)
        inputs.append(b.const("b", np.round(rng.normal(0, 3000 * np.sqrt(taps), cout)).astype(np.int32), b_q))
    s_out = float(q_in.scale[0]) * float(s_w.mean()) * 5000 * np.sqrt(taps) / (127 * rng.uniform(0.5, 2.0))
    attrs = TransposeConvAttrs(tuple(stride), tuple(padding), act)
    y = b.node(Op.TRANSPOSE_CONV, inputs, attrs, dtype="int8",
               qparams=QParams.per_tensor(s_out, int(rng.integers(-100, 100))))
    return b.build([y])


@settings(max_examples=400, deadline=None)
@given(hw=st.tuples(st.integers(1, 6), st.integers(1, 6)), cin=st.integers(1, 5), cout=st.integers(1, 7),
       kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)), stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       form=st.sampled_from(["same", "valid", "torch"]), bias=st.booleans(),
       act=st.sampled_from([Activation.NONE, Activation.RELU, Activation.RELU6]), data=st.data())
def test_transpose_conv_bit_exact(hw, cin, cout, kernel, stride, form, bias, act, data):
    axes = []
    for size, k, s in zip(hw, kernel, stride):
        p = data.draw(st.integers(0, k - 1)) if form == "torch" else 0
        output_padding = data.draw(st.integers(0, s - 1)) if form == "torch" else 0
        axes.append(crop(form, size, k, s, p, output_padding))
    if min(out for out, _, _ in axes) < 1:
        return  # PyTorch refuses an empty output too
    padding = (axes[0][1], axes[0][2], axes[1][1], axes[1][2])
    event(f"{form}, stride {stride}" if max(stride) > 1 else f"{form}, stride 1")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    graph = transpose_conv_graph(rng, (1, *hw, cin), cout, kernel, stride, padding, bias, act)
    assert graph.tensors[graph.outputs[0]].shape[1:3] == tuple(out for out, _, _ in axes)
    x = random_input((1, *hw, cin), rng)
    ours = bit_exact_with_tflm(graph, x)
    # TFLite itself (stricter than TFLite Micro about output sizes) takes the file too and agrees
    assert_same(ours, run_litert(to_tflite(graph), {"x": x})[graph.outputs[0]])


@pytest.mark.parametrize("form,p,output_padding", [("same", 0, 0), ("valid", 0, 0), ("torch", 1, 1), ("torch", 0, 1),
                                                   ("torch", 1, 0), ("torch", 2, 1)])
def test_transpose_conv_stride_2_decoder_forms(form, p, output_padding):
    """The decoder layers people ship: k3 and k4, stride 2, on an odd-sized 5x7 map with 8 channels."""
    for k in (3, 4):
        axes = [crop(form, size, k, 2, min(p, k - 1), output_padding) for size in (5, 7)]
        padding = (axes[0][1], axes[0][2], axes[1][1], axes[1][2])
        rng = np.random.default_rng(k + 10 * p + output_padding)
        graph = transpose_conv_graph(rng, (1, 5, 7, 8), 6, (k, k), (2, 2), padding, True, Activation.NONE)
        bit_exact_with_tflm(graph, random_input((1, 5, 7, 8), rng))


def test_transpose_conv_k_equals_stride_places_one_product_per_output():
    """k == stride, VALID, no bias, identity-like weights: each output pixel is one input pixel times one tap, so
    the int8 result is the input upsampled by repetition, requantised (an oracle without TFLite)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("pixel_shuffle")
    q = QParams.per_tensor(0.05, 0)
    x = b.input((1, 3, 4, 2), "int8", "x", q)
    w = np.zeros((2, 2, 2, 2), np.int8)
    w[0, :, :, 0] = w[1, :, :, 1] = 64
    wq = b.const("w", w, QParams(np.full(2, 1 / 64, np.float32), np.zeros(2, np.int64), 0))
    graph = b.build([b.node(Op.TRANSPOSE_CONV, [x, wq], TransposeConvAttrs((2, 2)), dtype="int8", qparams=q)])
    xs = random_input((1, 3, 4, 2), rng)
    y = bit_exact_with_tflm(graph, xs)
    assert np.array_equal(y, xs.repeat(2, axis=1).repeat(2, axis=2))


# -- GELU (TFLite's interpreter: TFLite Micro has no GELU) ---------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(approximate=st.booleans(), seed=st.integers(0, 2**16))
def test_gelu_every_input_value_bit_exact_with_tflite(approximate, seed):
    rng = np.random.default_rng(seed)
    q_in = random_qparams(rng)
    q_out = QParams.per_tensor(float(q_in.scale[0]) * 2.0 ** rng.uniform(-1.5, 1), int(rng.integers(-128, 0)))
    b = GraphBuilder("gelu")
    x = b.input((1, 16, 16), "int8", "x", q_in)
    graph = b.build([b.node(Op.GELU, [x], GeluAttrs(approximate), dtype="int8", qparams=q_out)])
    model = to_tflite(graph)
    assert from_tflite(model) == graph
    xs = np.arange(-128, 128, dtype=np.int8).reshape(1, 16, 16)
    ours = run_int8(graph, xs)[graph.outputs[0]]
    assert_same(ours, run_litert(model, {"x": xs})[graph.outputs[0]])


def test_tflm_has_no_gelu():
    """Why GELU is checked against TFLite instead: TFLite Micro cannot prepare a model with it."""
    b = GraphBuilder("gelu")
    x = b.input((1, 4), "int8", "x", QParams.per_tensor(0.05, 0))
    graph = b.build([b.node(Op.GELU, [x], GeluAttrs(), dtype="int8", qparams=QParams.per_tensor(0.03, -20))])
    with pytest.raises(Exception, match="GELU"):
        tflm.run_tflm(to_tflite(graph), np.zeros((1, 4), np.int8), preserve_all=False)
    assert tflm.tflm_missing_ops(graph) == ["GELU"]


def test_transpose_conv_appending_a_stride_or_more_cannot_be_written():
    """A crop after of -stride or less appends rows TFLite cannot express (its output may exceed the uncropped size
    by stride - 1 at most; PyTorch's output_padding stays below the stride too): a one-line error naming the node."""
    rng = np.random.default_rng(0)
    graph = transpose_conv_graph(rng, (1, 3, 3, 2), 4, (3, 3), (2, 2), (0, -2, 0, 0), True, Activation.NONE)
    with pytest.raises(KilobyteError) as err:
        to_tflite(graph)
    msg = str(err.value)
    assert "\n" not in msg and f"node '{graph.nodes[0].name}'" in msg and "stride - 1" in msg
