"""Tests for kilobyte.frontends.tflite: .tflite -> IR, including files Kilobyte did not write and malformed ones.

Foreign-looking files are crafted with the writer's serialiser and hand-made operator lists (so every schema
variant the reader accepts is exercised without TensorFlow); malformed files are made by cutting or patching bytes.
"""

import os
import struct
from types import SimpleNamespace

import numpy as np
import pytest
import tflite
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.errors import KilobyteError, ModelFileError, UnsupportedOpError
from kilobyte.export import save_tflite, to_tflite
from kilobyte.export.tflite import _Writer
from kilobyte.export.tflite_ops import TflOp
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_float
from kilobyte.ir import (
    Activation,
    AddAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    GraphBuilder,
    NoAttrs,
    Op,
    PoolAttrs,
    QParams,
    Tensor,
    TransposeConvAttrs,
)

B = tflite.BuiltinOperator


def qp(scale, zero_point):
    return QParams.per_tensor(scale, zero_point)


def int8_conv_graph():
    """input -> CONV_2D (SAME, stride 2) -> DEPTHWISE (asymmetric padding: PAD) -> MAX_POOL (PADV2)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("convs")
    x = b.input((1, 7, 7, 2), "int8", qparams=qp(0.1, 0))
    w = b.const("c.weight", rng.integers(-127, 128, (4, 3, 3, 2)).astype(np.int8),
                QParams(np.full(4, 0.01, np.float32), np.zeros(4, np.int64), 0))
    bias = b.const("c.bias", np.arange(4, dtype=np.int32),
                   QParams(np.full(4, 0.001, np.float32), np.zeros(4, np.int64), 0))
    c = b.node(Op.CONV_2D, [x, w, bias], ConvAttrs((2, 2), (1, 1, 1, 1), activation=Activation.RELU6),
               qparams=qp(0.05, -128))
    dw = b.const("d.weight", rng.integers(-127, 128, (1, 3, 3, 4)).astype(np.int8),
                 QParams(np.linspace(0.01, 0.02, 4).astype(np.float32), np.zeros(4, np.int64), 3))
    d = b.node(Op.DEPTHWISE_CONV_2D, [c, dw], DepthwiseAttrs(padding=(0, 2, 1, 1)), qparams=qp(0.05, 3))
    m = b.node(Op.MAX_POOL_2D, [d], PoolAttrs((2, 2), (2, 2), (1, 1, 1, 1)), qparams=qp(0.05, 3))
    return b.build([m])


def craft(tensors, ops, inputs, outputs) -> bytes:
    """A .tflite with exactly these tensors and operators (no node-name metadata), via the writer's serialiser."""
    graph = SimpleNamespace(name="crafted", nodes=(), inputs=tuple(inputs), outputs=tuple(outputs))
    return _Writer(graph, tensors, ops).serialise()


def t(name, shape, dtype="float32", data=None, q=None):
    if data is not None:
        data = np.asarray(data, dtype).reshape(shape)
    return Tensor(name, tuple(shape), dtype, data, q)


# -- reading what the writer wrote --------------------------------------------------------------------------------
def test_same_valid_and_writer_pads_become_explicit_padding():
    g = int8_conv_graph()
    r = from_tflite(to_tflite(g))
    assert r == g
    conv, dw, pool = r.nodes
    assert conv.attrs.padding == (1, 1, 1, 1) and conv.attrs.activation is Activation.RELU6
    assert dw.attrs.padding == (0, 2, 1, 1) and dw.inputs == ("conv_2d_0", "d.weight")
    assert pool.attrs.padding == (1, 1, 1, 1)
    assert r.tensors["d.weight"].qparams.axis == 3 and r.tensors["c.weight"].qparams.axis == 0
    assert r.tensors["c.bias"].dtype == "int32" and r.tensors["c.bias"].qparams.axis == 0
    assert r.tensors["conv_2d_0"].qparams.axis is None
    assert not any(name.endswith(".pad") for name in r.tensors)


def test_reads_a_path(tmp_path):
    g = int8_conv_graph()
    path = save_tflite(g, tmp_path / "convs.tflite")
    assert from_tflite(path) == g and from_tflite(str(path)).name == "convs"


def test_foreign_float_model_runs_like_tflm():
    tflm = pytest.importorskip("tflite_micro")
    path = os.path.join(os.path.dirname(tflm.runtime.__file__), "sine_float.tflite")
    g = from_tflite(path)
    assert [n.op for n in g.nodes] == [Op.FULLY_CONNECTED] * 3
    assert g.inputs == ("serving_default_dense_input:0",)
    from kilobyte.targets.tflm import run_tflm

    x = np.array([[0.5]], np.float32)
    want = run_tflm(open(path, "rb").read(), x, preserve_all=False).outputs
    got = run_float(g, x)
    np.testing.assert_allclose(got[g.outputs[0]], want[g.outputs[0]], rtol=1e-5, atol=1e-6)


# -- schema variants of other writers -----------------------------------------------------------------------------
def test_reshape_shape_from_tensor_with_inferred_dimension():
    tensors = [t("x", (1, 2, 2, 2)), t("shape", (2,), "int32", [-1, 8]), t("y", (1, 8))]
    g = from_tflite(craft(tensors, [TflOp(B.RESHAPE, ("x", "shape"), ("y",), {})], ["x"], ["y"]))
    assert g.nodes[0].op is Op.RESHAPE and g.nodes[0].attrs.shape == (1, 8)
    assert "shape" not in g.tensors  # consumed into attrs


def test_reshape_shape_from_options_only():
    tensors = [t("x", (1, 2, 2, 2)), t("y", (1, 8))]
    g = from_tflite(craft(tensors, [TflOp(B.RESHAPE, ("x",), ("y",), {"NewShape": (1, 8)})], ["x"], ["y"]))
    assert g.nodes[0].attrs.shape == (1, 8)


def test_fully_connected_on_4d_input_gets_an_explicit_flatten_and_no_bias():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensors = [t("x", (1, 1, 1, 4)), t("w", (3, 4), data=w), t("y", (1, 3))]
    ops = [TflOp(B.FULLY_CONNECTED, ("x", "w", None), ("y",), {"FusedActivationFunction": 0})]
    g = from_tflite(craft(tensors, ops, ["x"], ["y"]))
    assert [n.op for n in g.nodes] == [Op.RESHAPE, Op.FULLY_CONNECTED]
    assert g.nodes[1].inputs == ("y.flatten", "w")
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 1, 4)
    np.testing.assert_allclose(run_float(g, x)["y"], x.reshape(1, 4) @ w.T)


def test_mean_and_padv2_with_the_zero_point():
    q = qp(0.5, 3)
    tensors = [t("x", (1, 4, 4, 2), "int8", q=q), t("pads", (4, 2), "int32", [0, 0, 1, 1, 0, 2, 0, 0]),
               t("v", (1,), "int8", [3], q), t("p", (1, 6, 6, 2), "int8", q=q), t("axes", (2,), "int32", [1, 2]),
               t("m", (1, 1, 1, 2), "int8", q=q)]
    ops = [TflOp(B.PADV2, ("x", "pads", "v"), ("p",), {}), TflOp(B.MEAN, ("p", "axes"), ("m",), {"KeepDims": True})]
    g = from_tflite(craft(tensors, ops, ["x"], ["m"]))
    assert [n.op for n in g.nodes] == [Op.PAD, Op.MEAN]
    assert g.nodes[0].attrs.pads == ((0, 0), (1, 1), (0, 2), (0, 0))
    assert g.nodes[1].attrs.axes == (1, 2) and g.nodes[1].attrs.keepdims
    assert set(g.tensors) == {"x", "p", "m"}


def test_padv2_with_another_constant_is_unsupported():
    tensors = [t("x", (1, 2, 2, 1)), t("pads", (4, 2), "int32", [0, 0, 1, 1, 1, 1, 0, 0]), t("v", (1,), data=[7.0]),
               t("p", (1, 4, 4, 1))]
    with pytest.raises(UnsupportedOpError, match="operator 0 .*PADV2.*'p'"):
        from_tflite(craft(tensors, [TflOp(B.PADV2, ("x", "pads", "v"), ("p",), {})], ["x"], ["p"]))


def test_unsupported_operator_names_index_output_and_op():
    tensors = [t("x", (1, 4)), t("y", (1, 4))]
    with pytest.raises(UnsupportedOpError, match=r"<tflite bytes>: operator 0 \(SIN, output 'y'\)"):
        from_tflite(craft(tensors, [TflOp(B.SIN, ("x",), ("y",), {})], ["x"], ["y"]))


def test_unsupported_fused_activation():
    tensors = [t("a", (1, 4)), t("b", (1, 4)), t("y", (1, 4))]
    ops = [TflOp(B.ADD, ("a", "b"), ("y",), {"FusedActivationFunction": tflite.ActivationFunctionType.TANH})]
    with pytest.raises(UnsupportedOpError, match="TANH"):
        from_tflite(craft(tensors, ops, ["a", "b"], ["y"]))


def test_binary_ops_need_two_operands():
    tensors = [t("a", (1, 4)), t("y", (1, 4))]
    ops = [TflOp(B.MAXIMUM, ("a",), ("y",), {})]
    with pytest.raises(ModelFileError, match=r"operator 0 \(MAXIMUM, output 'y'\): MAXIMUM needs two operands"):
        from_tflite(craft(tensors, ops, ["a"], ["y"]))


def test_foreign_mul_and_minimum_are_read():
    """Hand-made MUL (a per-channel operand, fused ReLU) and MINIMUM operators read into the IR ops and attrs."""
    tensors = [t("a", (1, 2, 2, 3)), t("s", (1, 1, 1, 3)), t("m", (1, 2, 2, 3)), t("y", (1, 2, 2, 3))]
    ops = [TflOp(B.MUL, ("a", "s"), ("m",), {"FusedActivationFunction": tflite.ActivationFunctionType.RELU}),
           TflOp(B.MINIMUM, ("m", "a"), ("y",), {})]
    g = from_tflite(craft(tensors, ops, ["a", "s"], ["y"]))
    assert [(n.op, n.inputs, n.attrs) for n in g.nodes] == [
        (Op.MUL, ("a", "s"), AddAttrs(Activation.RELU)), (Op.MINIMUM, ("m", "a"), NoAttrs())]


# -- malformed files ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_bytes():
    return to_tflite(int8_conv_graph())


def _sg(data):
    return tflite.Model.GetRootAs(data, 0).Subgraphs(0)


def test_truncated_file(model_bytes):
    for cut in (0, 6, 40, len(model_bytes) // 2, len(model_bytes) - 20):
        with pytest.raises(ModelFileError, match="truncated|corrupt") as e:
            from_tflite(model_bytes[:cut])
        assert "\n" not in str(e.value)


def test_wrong_identifier(model_bytes):
    with pytest.raises(ModelFileError, match="TFL3"):
        from_tflite(model_bytes[:4] + b"TFL2" + model_bytes[8:])


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="nope.tflite"):
        from_tflite(tmp_path / "nope.tflite")


def _patched(data: bytes, fmt: str, pos: int, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, pos, value)
    return bytes(buf)


def test_buffer_index_out_of_range(model_bytes):
    sg = _sg(model_bytes)
    k = next(i for i in range(sg.TensorsLength()) if sg.Tensors(i).Buffer() > 0)
    tab = sg.Tensors(k)._tab
    bad = _patched(model_bytes, "<I", tab.Pos + tab.Offset(8), 999)
    with pytest.raises(ModelFileError, match="buffer .*index 999 out of range"):
        from_tflite(bad)


def test_tensor_index_out_of_range(model_bytes):
    tab = _sg(model_bytes).Operators(0)._tab
    bad = _patched(model_bytes, "<i", tab.Vector(tab.Offset(6)), 999)
    with pytest.raises(ModelFileError, match="input tensor .*index 999 out of range"):
        from_tflite(bad)


def test_opcode_index_out_of_range(model_bytes):
    sg = _sg(model_bytes)
    k = next(i for i in range(sg.OperatorsLength()) if sg.Operators(i).OpcodeIndex() > 0)
    tab = sg.Operators(k)._tab
    bad = _patched(model_bytes, "<I", tab.Pos + tab.Offset(4), 77)
    with pytest.raises(ModelFileError, match="opcode .*index 77 out of range"):
        from_tflite(bad)


def test_unsupported_builtin_code(model_bytes):
    code = tflite.Model.GetRootAs(model_bytes, 0).OperatorCodes(0)  # CONV_2D, used by operator 0
    tab = code._tab
    bad = _patched(model_bytes, "<i", tab.Pos + tab.Offset(10), B.TANH)
    bad = _patched(bad, "<b", tab.Pos + tab.Offset(4), B.TANH)
    with pytest.raises(UnsupportedOpError, match=r"operator 0 \(TANH, output 'conv_2d_0'\)"):
        from_tflite(bad)


@settings(max_examples=150)
@given(st.data())
def test_corrupted_bytes_never_escape_as_raw_exceptions(model_bytes, data):
    buf = bytearray(model_bytes)
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(8, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    try:
        from_tflite(bytes(buf))
    except KilobyteError as e:
        assert "\n" not in str(e)


# -- upsampling operators as other writers lay them out ------------------------------------------------------------
def _transpose_conv_file(out_shape, padding, given=None, slice_to=None):
    """A float TRANSPOSE_CONV (k3, stride 2, no bias operand) of x (1, 3, 4, 2), optionally followed by a foreign
    STRIDED_SLICE (not named as the writer names its own) cutting one row and column off the top and left."""
    w = np.random.default_rng(0).standard_normal((5, 3, 3, 2)).astype(np.float32)
    full = "t" if slice_to is not None else "y"
    tensors = [t("x", (1, 3, 4, 2)), t("w", w.shape, data=w),
               t("shape", (4,), "int32", given if given is not None else out_shape), t(full, out_shape)]
    ops = [TflOp(B.TRANSPOSE_CONV, ("shape", "w", "x"), (full,), {"Padding": padding, "StrideH": 2, "StrideW": 2})]
    if slice_to is not None:
        end = [1, 1 + slice_to[0], 1 + slice_to[1], 5]
        tensors += [t("b", (4,), "int32", [0, 1, 1, 0]), t("e", (4,), "int32", end), t("s", (4,), "int32", [1] * 4),
                    t("y", (1, *slice_to, 5))]
        ops.append(TflOp(B.STRIDED_SLICE, (full, "b", "e", "s"), ("y",), {}))
    return craft(tensors, ops, ["x"], ["y"])


@pytest.mark.parametrize("padding,out_shape,crop", [
    (tflite.Padding.SAME, (1, 6, 8, 5), (0, 1, 0, 1)),  # TFLite's SAME: in * stride, the extra row at the bottom
    (tflite.Padding.VALID, (1, 7, 9, 5), (0, 0, 0, 0)),
    (tflite.Padding.VALID, (1, 8, 10, 5), (0, -1, 0, -1)),  # a taller output only the bias reaches
])
def test_foreign_transpose_conv_runs_like_tflm(padding, out_shape, crop):
    from kilobyte.targets.tflm import run_tflm

    model = _transpose_conv_file(out_shape, padding)
    g = from_tflite(model)
    assert [n.op for n in g.nodes] == [Op.TRANSPOSE_CONV] and g.nodes[0].attrs.padding == crop
    assert g.nodes[0].inputs == ("x", "w")  # no bias operand: none in the IR either
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 2)).astype(np.float32)
    want = run_tflm(model, x, preserve_all=False).outputs["y"]
    np.testing.assert_allclose(run_float(g, x)["y"], want, rtol=1e-5, atol=1e-5)


def test_only_the_writers_own_slice_folds_into_the_crop():
    """A slice named `<out>.uncropped`'s reader is the writer's crop and folds back; another writer's slice of a
    TRANSPOSE_CONV stays a STRIDED_SLICE — both compute the same values."""
    x = np.random.default_rng(2).standard_normal((1, 3, 4, 2)).astype(np.float32)
    foreign = from_tflite(_transpose_conv_file((1, 7, 9, 5), tflite.Padding.VALID, slice_to=(5, 7)))
    assert [n.op for n in foreign.nodes] == [Op.TRANSPOSE_CONV, Op.STRIDED_SLICE]
    b = GraphBuilder("own")
    w = b.const("w", foreign.tensors["w"].data)
    b_x = b.input((1, 3, 4, 2), name="x")
    own = b.build([b.node(Op.TRANSPOSE_CONV, [b_x, w], TransposeConvAttrs((2, 2), (1, 1, 1, 1)))])
    read = from_tflite(to_tflite(own))
    assert read == own and [n.op for n in read.nodes] == [Op.TRANSPOSE_CONV]
    np.testing.assert_allclose(run_float(read, x)[read.outputs[0]], run_float(foreign, x)[foreign.outputs[0]],
                               rtol=1e-6, atol=1e-6)


def test_upsampling_operands_that_disagree_are_one_line_errors():
    bad_shape = _transpose_conv_file((1, 7, 9, 5), tflite.Padding.VALID, given=[1, 7, 8, 5])
    resize = craft([t("x", (1, 2, 2, 1)), t("size", (3,), "int32", [4, 4, 1]), t("y", (1, 4, 4, 1))],
                   [TflOp(B.RESIZE_NEAREST_NEIGHBOR, ("x", "size"), ("y",), {})], ["x"], ["y"])
    for model, needle in ((bad_shape, "output shape operand [1, 7, 8, 5] differs"),
                          (resize, "size int32[3] is not two integers")):
        with pytest.raises(ModelFileError) as err:
            from_tflite(model)
        assert needle in str(err.value) and "\n" not in str(err.value) and "operator 0" in str(err.value)


def test_int8_conv_without_bias_is_written_with_a_zero_one_and_read_without():
    """TFLite (not TFLite Micro) refuses an int8 CONV_2D without a bias: the file gets zeros at the bias scale, which
    TFLite then runs like TFLite Micro, and the reader drops them again."""
    from litert_oracle import run_litert

    from kilobyte.interp import run_int8

    rng = np.random.default_rng(4)
    b = GraphBuilder("no_bias")
    x = b.input((1, 5, 4, 3), "int8", "x", qp(0.05, 3))
    w = b.const("w", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
                QParams(np.linspace(0.01, 0.02, 4).astype(np.float32), np.zeros(4, np.int64), 0))
    g = b.build([b.node(Op.CONV_2D, [x, w], ConvAttrs(padding=(1, 1, 1, 1)), dtype="int8", qparams=qp(0.1, -2))])
    model = to_tflite(g)
    assert from_tflite(model) == g
    xs = rng.integers(-128, 128, (1, 5, 4, 3)).astype(np.int8)
    np.testing.assert_array_equal(run_litert(model, {"x": xs})["conv_2d_0"], run_int8(g, xs)["conv_2d_0"])
