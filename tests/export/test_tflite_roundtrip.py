"""Tests for kilobyte.export.tflite: IR -> .tflite -> IR -> .tflite is byte-identical and the graph comes back equal.

Graphs are built by hand with GraphBuilder (random int8 weights, per-channel QParams, int32 biases) so the writer is
tested without the quantiser; quantised zoo models are covered when the quantiser and torch are available.
"""

import numpy as np
import pytest
import tflite

from kilobyte import api, quant
from kilobyte.errors import KilobyteError
from kilobyte.export import save_tflite, to_tflite
from kilobyte.formats import tflite_schema as S
from kilobyte.frontends.tflite import from_tflite
from kilobyte.ir import (
    Activation,
    AddAttrs,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    Graph,
    GraphBuilder,
    MeanAttrs,
    Op,
    PadAttrs,
    PoolAttrs,
    QParams,
    ReshapeAttrs,
)


# -- int8 graph builders (shared in spirit with the reader and TFLM tests) --------------------------------------------
def qp(scale: float, zero_point: int) -> QParams:
    return QParams.per_tensor(scale, zero_point)


def weighted(b: GraphBuilder, rng, op: Op, x: str, wshape, attrs, out_q: QParams, bias=True) -> str:
    """Append CONV / DEPTHWISE / FC with random int8 per-channel weights and an int32 bias (scale s_in * s_w)."""
    axis = 3 if op is Op.DEPTHWISE_CONV_2D else 0
    cout = wshape[axis]
    s_in = float(b.tensors[x].qparams.scale[0])
    s_w = rng.uniform(0.002, 0.02, cout).astype(np.float32)
    name = f"p{len(b.nodes)}"
    w = b.const(f"{name}.weight", rng.integers(-127, 128, wshape).astype(np.int8),
                QParams(s_w, np.zeros(cout, np.int64), axis))
    ins = [x, w]
    if bias:
        ins.append(b.const(f"{name}.bias", rng.integers(-2000, 2000, cout).astype(np.int32),
                           QParams((s_in * s_w).astype(np.float32), np.zeros(cout, np.int64), 0)))
    return b.node(op, ins, attrs, qparams=out_q)


def all_ops_graph(seed: int = 0, float_input: bool = True) -> Graph:
    """Every op of the int8 contract (except int8 MEAN), SAME, VALID and paddings that need PAD / PADV2."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("all_ops")
    if float_input:
        xf = b.input((1, 8, 8, 3), "float32")
        x = b.node(Op.QUANTIZE, [xf], dtype="int8", qparams=qp(0.05, -3))
    else:
        x = b.input((1, 8, 8, 3), "int8", qparams=qp(0.05, -3))
    a = weighted(b, rng, Op.CONV_2D, x, (8, 3, 3, 3), ConvAttrs(padding=(1, 1, 1, 1), activation=Activation.RELU),
                 qp(0.04, -128))
    d = weighted(b, rng, Op.DEPTHWISE_CONV_2D, a, (1, 3, 3, 8), DepthwiseAttrs(padding=(2, 0, 0, 2)), qp(0.03, 5))
    c = b.node(Op.ADD, [a, d], AddAttrs(Activation.RELU6), qparams=qp(0.025, -128))
    m = b.node(Op.MAX_POOL_2D, [c], PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1)), qparams=qp(0.025, -128))
    e = b.node(Op.AVG_POOL_2D, [m], PoolAttrs((3, 3), (1, 1), (1, 1, 1, 1)), qparams=qp(0.025, -128))
    f = weighted(b, rng, Op.CONV_2D, m, (8, 1, 1, 8), ConvAttrs(stride=(1, 1)), qp(0.025, -128), bias=False)
    g = b.node(Op.CONCAT, [e, f], ConcatAttrs(axis=3), qparams=qp(0.025, -128))
    p = b.node(Op.PAD, [g], PadAttrs(((0, 0), (1, 0), (0, 1), (0, 0))), qparams=qp(0.025, -128))
    s = weighted(b, rng, Op.CONV_2D, p, (6, 3, 3, 16), ConvAttrs(stride=(2, 2), padding=(0, 1, 1, 0),
                                                                   dilation=(1, 1)), qp(0.05, 2))
    h = b.node(Op.AVG_POOL_2D, [s], PoolAttrs((2, 2), (2, 2)), qparams=qp(0.05, 2))
    r = b.node(Op.RESHAPE, [h], ReshapeAttrs((1, 6)), qparams=qp(0.05, 2))
    fc = weighted(b, rng, Op.FULLY_CONNECTED, r, (10, 6), FullyConnectedAttrs(), qp(0.1, -7))
    dq = b.node(Op.DEQUANTIZE, [fc], dtype="float32")
    out = b.node(Op.SOFTMAX, [dq])
    return b.build([out])


def mean_graph() -> Graph:
    """MEAN (int8, both keepdims), dilated conv and a MAX_POOL that needs PADV2."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("mean")
    x = b.input((1, 9, 9, 4), "int8", qparams=qp(0.1, 0))
    c = weighted(b, rng, Op.CONV_2D, x, (4, 3, 3, 4), ConvAttrs(padding=(2, 2, 2, 2), dilation=(2, 2)),
                 qp(0.1, 1))
    m = b.node(Op.MAX_POOL_2D, [c], PoolAttrs((2, 2), (2, 2), (1, 0, 0, 1)), qparams=qp(0.1, 1))
    k = b.node(Op.MEAN, [m], MeanAttrs((1, 2), keepdims=True), qparams=qp(0.1, 1))
    y = b.node(Op.MEAN, [k], MeanAttrs((1, 2), keepdims=False), qparams=qp(0.1, 1))
    return b.build([y, k])


def float_graph() -> Graph:
    rng = np.random.default_rng(2)
    b = GraphBuilder("float")
    x = b.input((1, 6, 6, 2))
    c = b.node(Op.CONV_2D, [x], ConvAttrs(padding=(0, 2, 1, 0), activation=Activation.RELU6),
               params={"weight": rng.normal(size=(3, 3, 3, 2)), "bias": rng.normal(size=3)})
    m = b.node(Op.MAX_POOL_2D, [c], PoolAttrs((2, 2), (1, 1), (1, 0, 1, 0)))
    d = b.node(Op.DEPTHWISE_CONV_2D, [m], DepthwiseAttrs(padding=(1, 1, 1, 1), depth_multiplier=2),
               params={"weight": rng.normal(size=(1, 3, 3, 6))})
    n = int(np.prod(b.shape(d)))
    r = b.node(Op.RESHAPE, [d], ReshapeAttrs((1, n)))
    f = b.node(Op.FULLY_CONNECTED, [r], params={"weight": rng.normal(size=(4, n)), "bias": rng.normal(size=4)})
    return b.build([b.node(Op.SOFTMAX, [f])])


def binary_graph() -> Graph:
    """SUB and MUL (fused activations, a per-channel (1,1,1,C) operand), MAXIMUM, MINIMUM: two int8 inputs."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("binary")
    x = b.input((1, 6, 5, 4), "int8", qparams=qp(0.05, -3))
    se = b.input((1, 1, 1, 4), "int8", "se", qparams=qp(1 / 256, -128))
    a = weighted(b, rng, Op.CONV_2D, x, (4, 3, 3, 4), ConvAttrs(padding=(1, 1, 1, 1)), qp(0.04, 2))
    m = b.node(Op.MUL, [a, se], AddAttrs(Activation.RELU), qparams=qp(0.03, -128))
    s = b.node(Op.SUB, [se, m], AddAttrs(Activation.RELU6), qparams=qp(0.02, -128))
    hi = b.node(Op.MAXIMUM, [s, s], qparams=qp(0.02, -128))
    lo = b.node(Op.MINIMUM, [hi, s], qparams=qp(0.02, -128))
    return b.build([lo])


GRAPHS = {"all_ops": all_ops_graph, "all_ops_int8_input": lambda: all_ops_graph(3, float_input=False),
          "mean": mean_graph, "float": float_graph, "binary": binary_graph}


def model_of(data: bytes):
    return tflite.Model.GetRootAs(data, 0)


def ops_of(data: bytes) -> list[int]:
    m = model_of(data)
    sg = m.Subgraphs(0)
    return [S.BUILTIN_NAMES[max(m.OperatorCodes(sg.Operators(i).OpcodeIndex()).BuiltinCode(),
                                m.OperatorCodes(sg.Operators(i).OpcodeIndex()).DeprecatedBuiltinCode())]
            for i in range(sg.OperatorsLength())]


# -- round trip ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_round_trip_is_identical(name):
    g = GRAPHS[name]()
    data = to_tflite(g)
    g2 = from_tflite(data)
    assert g2 == g, f"{g}\n!=\n{g2}"
    assert [n.name for n in g2.nodes] == [n.name for n in g.nodes]
    assert to_tflite(g2) == data


def test_output_is_deterministic_whatever_the_tensor_order():
    g = all_ops_graph()
    shuffled = g.replace(tensors=dict(reversed(list(g.tensors.items()))))
    assert to_tflite(g) == to_tflite(g) == to_tflite(shuffled)


def test_file_follows_the_schema():
    g = all_ops_graph()
    data = to_tflite(g)
    assert data[4:8] == b"TFL3" and tflite.Model.ModelBufferHasIdentifier(data, 0)
    m = model_of(data)
    assert m.Version() == 3 and m.Description() == b"kilobyte"
    assert m.Buffers(0).DataLength() == 0
    codes = [(m.OperatorCodes(i).BuiltinCode(), m.OperatorCodes(i).DeprecatedBuiltinCode())
             for i in range(m.OperatorCodesLength())]
    assert len({c for c, _ in codes}) == len(codes)  # deduplicated
    assert all(dep == min(c, 127) for c, dep in codes)
    sg = m.Subgraphs(0)
    for i in range(sg.TensorsLength()):
        q = sg.Tensors(i).Quantization()
        if q is not None and q.ScaleLength():
            assert q.ScaleLength() == q.ZeroPointLength()
    names = {sg.Tensors(i).Name().decode() for i in range(sg.TensorsLength())}
    assert set(g.tensors) <= names


def test_constant_buffers_are_16_byte_aligned():
    g = all_ops_graph()
    data = to_tflite(g)
    m = model_of(data)
    sg = m.Subgraphs(0)
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        buf = m.Buffers(t.Buffer())
        if buf.DataLength() == 0:
            continue
        start = buf._tab.Vector(buf._tab.Offset(4))  # absolute offset of the first data byte in the file
        assert start % 16 == 0, t.Name()
        ir = g.tensors.get(t.Name().decode())
        if ir is not None:
            assert data[start:start + buf.DataLength()] == ir.data.tobytes()


def test_padding_that_is_neither_same_nor_valid_becomes_pad():
    data = to_tflite(all_ops_graph())
    ops = ops_of(data)
    assert ops.count("PAD") == 3  # depthwise (2,0,0,2), the IR PAD node, stride-2 conv (0,1,1,0); and
    assert ops.count("PADV2") == 1  # the max pool (1,1,1,1) with stride 2 (SAME would be (0,1,0,1))
    sg = model_of(data).Subgraphs(0)
    names = [sg.Tensors(i).Name().decode() for i in range(sg.TensorsLength())]
    assert "depthwise_conv_2d_0.pad" in names and "max_pool_2d_0.pad" in names
    value = next(i for i, n in enumerate(names) if n == "max_pool_2d_0.pad.value")
    assert sg.Tensors(value).Type() == tflite.TensorType.INT8


def test_same_padding_is_written_as_same():
    b = GraphBuilder()
    x = b.input((1, 7, 7, 2), "int8", qparams=qp(0.1, 0))
    y = weighted(b, np.random.default_rng(0), Op.CONV_2D, x, (2, 3, 3, 2), ConvAttrs((2, 2), (1, 1, 1, 1)),
                 qp(0.1, 0))
    data = to_tflite(b.build([y]))
    assert ops_of(data) == ["CONV_2D"]
    sg = model_of(data).Subgraphs(0)
    opts = tflite.Conv2DOptions()
    table = sg.Operators(0).BuiltinOptions()
    opts.Init(table.Bytes, table.Pos)
    assert opts.Padding() == tflite.Padding.SAME and (opts.StrideH(), opts.StrideW()) == (2, 2)


def test_avg_pool_with_inexpressible_padding_is_refused():
    b = GraphBuilder()
    x = b.input((1, 8, 8, 2), "int8", qparams=qp(0.1, 0))
    y = b.node(Op.AVG_POOL_2D, [x], PoolAttrs((3, 3), (1, 1), (0, 2, 0, 2)), qparams=qp(0.1, 0))
    with pytest.raises(KilobyteError, match="avg_pool_2d_0"):
        to_tflite(b.build([y]))


def test_training_op_is_refused():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 2))
    y = b.node(Op.BATCH_NORM, [x], params={k: np.ones(2) for k in ("gamma", "beta", "mean", "var")})
    with pytest.raises(KilobyteError, match="batch_norm_0"):
        to_tflite(b.build([y]))


def test_save_tflite_is_atomic(tmp_path):
    g = mean_graph()
    path = save_tflite(g, tmp_path / "m.tflite")
    assert path.read_bytes() == to_tflite(g)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite"]
    b = GraphBuilder()
    x = b.input((1, 8, 8, 2), "int8", qparams=qp(0.1, 0))
    bad = b.build([b.node(Op.AVG_POOL_2D, [x], PoolAttrs((3, 3), (1, 1), (0, 2, 0, 2)), qparams=qp(0.1, 0))])
    with pytest.raises(KilobyteError):
        save_tflite(bad, tmp_path / "bad.tflite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite"]


# -- quantised zoo models -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["vgg-small", "resnet-small", "mobilenetv2"])
def test_quantised_zoo_models_round_trip(name):
    pytest.importorskip("torch")
    kw = {"resolution": 32, "width": 0.35} if name == "mobilenetv2" else {}
    g = api.load(name, **kw).graph
    rng = np.random.default_rng(0)
    shape = g.tensors[g.inputs[0]].shape
    q = quant.quantize(g, [rng.normal(size=shape).astype(np.float32) for _ in range(4)])
    data = to_tflite(q)
    q2 = from_tflite(data)
    assert q2 == q
    assert to_tflite(q2) == data
