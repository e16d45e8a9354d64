"""ONNX frontend: imported graphs compute what ONNX Runtime computes, and a module exported to ONNX gives the same
IR as the module itself once the inference transforms have run (the exporter may already have folded BN)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from breadth_models import to_ir_layout as to_nhwc
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from kilobyte import zoo
from kilobyte.errors import ModelFileError, UnsupportedOpError
from kilobyte.frontends import from_onnx, from_torch
from kilobyte.interp import run_float
from kilobyte.ir import Op
from kilobyte.ir.compare import assert_graphs_equivalent
from kilobyte.transforms import prepare_for_inference

ZOO_SIZES = {"vgg-small": 32, "resnet-small": 32, "mnist-cnn": 28}  # others (mobile nets): 48 px, width 0.35




def check_against_onnxruntime(model: bytes | onnx.ModelProto, atol: float = 1e-4):
    """Import `model`, run it in ONNX Runtime and in the float IR interpreter, compare every output."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    graph = from_onnx(onnx.load_from_string(data))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in feed.shape])
    x = x.astype(np.float32)
    refs = session.run(None, {feed.name: x})
    got = run_float(graph, to_nhwc(x))
    for name, ref in zip(graph.outputs, refs):
        np.testing.assert_allclose(got[name], to_nhwc(ref), rtol=0, atol=atol, err_msg=name)
    return graph


def check_export_equivalence(module: nn.Module, shape, export_onnx, **export):
    data = export_onnx(module, shape, **export)
    imported = check_against_onnxruntime(data)
    assert_graphs_equivalent(prepare_for_inference(from_torch(module, shape)), prepare_for_inference(imported))


@pytest.mark.parametrize("seed", range(24))
def test_random_net_export_is_equivalent(seed, random_net, export_onnx):
    check_export_equivalence(*random_net(seed), export_onnx)


@pytest.mark.parametrize("name", zoo.names("image"))
def test_zoo_model_export_is_equivalent(name, export_onnx, randomize_bn):
    module, shape = zoo.create(name, width=0.35, resolution=ZOO_SIZES.get(name, 48))
    check_export_equivalence(randomize_bn(module, seed=1), shape, export_onnx)


def test_dynamo_export_is_equivalent(random_net, export_onnx):
    """The torch.export-based exporter (opset 18: ReduceMean axes as an input, unfolded BatchNormalization).

    One net only: the first dynamo export costs seconds of set-up. Seed 1 has a residual add, pads and a mean head.
    """
    check_export_equivalence(*random_net(1), export_onnx, opset=18, dynamo=True)


def test_mlp_with_batchnorm1d(export_onnx):
    bn = nn.BatchNorm1d(16)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    module = nn.Sequential(nn.Linear(10, 16), bn, nn.ReLU6(), nn.Linear(16, 3), nn.Softmax(dim=-1))
    check_export_equivalence(module, (1, 10), export_onnx)
    assert from_torch(module, (1, 10)).nodes[1].attrs.eps == from_onnx(
        onnx.load_from_string(export_onnx(module, (1, 10)))).nodes[1].attrs.eps == 1e-5


def test_files_and_paths(tmp_path, random_net, export_onnx):
    module, shape = random_net(2)
    path = tmp_path / "net.onnx"
    path.write_bytes(export_onnx(module, shape))
    assert from_onnx(path) == from_onnx(str(path)) == from_onnx(onnx.load(str(path)))


@pytest.mark.parametrize("content", [b"", b"not an onnx model at all" * 20, "truncated"])
def test_unreadable_file_names_the_file(tmp_path, content, random_net, export_onnx):
    if content == "truncated":
        data = export_onnx(*random_net(0))
        content = data[: len(data) * 2 // 3]
    path = tmp_path / "broken.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelFileError) as e:
        from_onnx(path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_missing_file():
    with pytest.raises(ModelFileError, match="nowhere.onnx: no such ONNX file"):
        from_onnx("/nonexistent/nowhere.onnx")


def test_unsupported_op_names_the_node(tmp_path, export_onnx):
    path = tmp_path / "softplus.onnx"
    path.write_bytes(export_onnx(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Softplus()), (1, 3, 8, 8)))
    with pytest.raises(UnsupportedOpError) as e:
        from_onnx(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: node '/1/Softplus' (ONNX Softplus): unsupported op; supported: ")
    assert "\n" not in msg


# -- hand-built models: the ONNX forms PyTorch's exporter does not produce ------------------------------------------
def make_model(nodes, shape, inits: dict, out_shape, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "hand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def rand(*shape) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def test_gemm_variants_and_matmul_add():
    nodes = [
        helper.make_node("Flatten", ["x"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w1", "b1"], ["g"], alpha=0.5, beta=2.0, transB=0),  # w1 is (in, out)
        helper.make_node("MatMul", ["g", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["a"]),
        helper.make_node("Clip", ["a", "lo", "hi"], ["c"]),
        helper.make_node("Softmax", ["c"], ["y"], axis=-1),
    ]
    inits = {"w1": rand(24, 7), "b1": rand(7), "w2": rand(7, 5), "b2": rand(5), "lo": np.float32(0),
             "hi": np.float32(6)}
    g = check_against_onnxruntime(make_model(nodes, [1, 2, 3, 4], inits, [1, 5]))
    assert [n.op for n in g.nodes] == [Op.RESHAPE, Op.FULLY_CONNECTED, Op.FULLY_CONNECTED, Op.RELU6, Op.SOFTMAX]
    assert len(g.nodes[2].inputs) == 3  # the Add became the bias


def test_opset_10_attributes_and_global_pool():
    nodes = [
        helper.make_node("Pad", ["x"], ["p"], pads=[0, 0, 1, 2, 0, 0, 2, 1], mode="constant", value=0.0),
        helper.make_node("Conv", ["p", "w"], ["c"], kernel_shape=[3, 3], auto_pad="SAME_LOWER", strides=[2, 2]),
        helper.make_node("Clip", ["c"], ["r"], min=0.0, max=6.0),
        helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
        helper.make_node("GlobalAveragePool", ["m"], ["y"]),
    ]
    g = check_against_onnxruntime(make_model(nodes, [1, 3, 7, 6], {"w": rand(5, 3, 3, 3)}, [1, 5, 1, 1], opset=10))
    assert [n.op for n in g.nodes] == [Op.PAD, Op.CONV_2D, Op.RELU6, Op.MAX_POOL_2D, Op.MEAN]


def test_reduce_mean_pad_axes_and_reshape_forms():
    nodes = [
        helper.make_node("Pad", ["x", "pads", "zero", "axes"], ["p"], mode="constant"),  # opset 18: pads on H, W
        helper.make_node("BatchNormalization", ["p", "gamma", "beta", "mean", "var"], ["b"], epsilon=1e-3),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("AveragePool", ["r"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("Dropout", ["a"], ["d", "mask"]),
        helper.make_node("ReduceMean", ["d", "rm_axes"], ["m"], keepdims=1),
        helper.make_node("Reshape", ["m", "shape"], ["y"]),
    ]
    c = 3
    inits = {"pads": np.array([1, 0, 2, 1], np.int64), "zero": np.float32(0), "axes": np.array([2, 3], np.int64),
             "gamma": rand(c) + 2, "beta": rand(c), "mean": rand(c), "var": np.abs(rand(c)) + 0.5,
             "rm_axes": np.array([-1, -2], np.int64), "shape": np.array([0, -1], np.int64)}
    g = check_against_onnxruntime(make_model(nodes, [1, c, 6, 5], inits, [1, c], opset=18))
    assert [n.op for n in g.nodes] == [Op.PAD, Op.BATCH_NORM, Op.RELU, Op.PAD, Op.AVG_POOL_2D, Op.IDENTITY, Op.MEAN,
                                       Op.RESHAPE]


def test_concat_and_residual_add():
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
        helper.make_node("Conv", ["c", "w3"], ["d"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["d", "x"], ["y"]),
    ]
    inits = {"w1": rand(3, 4, 1, 1), "w2": rand(8, 1, 3, 3), "b2": rand(8), "w3": rand(4, 11, 1, 1)}
    g = check_against_onnxruntime(make_model(nodes, [1, 4, 5, 6], inits, [1, 4, 5, 6], opset=13))
    assert g.nodes[1].op is Op.DEPTHWISE_CONV_2D and g.nodes[2].attrs.axis == 3


def test_activations_and_arithmetic_with_constants():
    """Exporters' forms: HardSigmoid with its own alpha / beta, Max / Min of three operands, constants on either side
    of Sub / Mul / Add, Div and Neg (all per-channel or scalar: BATCH_NORM), a (1, C, 1, 1) Mul broadcast."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("HardSigmoid", ["c"], ["hs"], alpha=0.3, beta=0.4),
        helper.make_node("HardSwish", ["c"], ["hw"]),
        helper.make_node("LeakyRelu", ["c"], ["lr"], alpha=-0.5),
        helper.make_node("Sigmoid", ["c"], ["sg"]),
        helper.make_node("Max", ["hs", "hw", "lr"], ["mx"]),
        helper.make_node("Min", ["mx", "sg"], ["mn"]),
        helper.make_node("Sub", ["k", "mn"], ["s1"]),  # constant - activation
        helper.make_node("Mul", ["s1", "scale"], ["s2"]),  # per-channel (C, 1, 1) scale
        helper.make_node("Div", ["s2", "four"], ["s3"]),
        helper.make_node("Neg", ["s3"], ["s4"]),
        helper.make_node("Add", ["bias", "s4"], ["s5"]),
        helper.make_node("GlobalAveragePool", ["s5"], ["g"]),
        helper.make_node("Mul", ["s5", "g"], ["se"]),  # squeeze-excite broadcast
        helper.make_node("Sub", ["se", "c"], ["d"]),
        helper.make_node("LogSoftmax", ["d"], ["y"], axis=1),
    ]
    inits = {"w": rand(5, 3, 1, 1), "k": np.float32(0.5), "scale": rand(5, 1, 1), "four": np.float32(4),
             "bias": rand(1, 5, 1, 1)}
    g = check_against_onnxruntime(make_model(nodes, [1, 3, 4, 6], inits, [1, 5, 4, 6], opset=14))
    used = [n.op for n in g.nodes]
    assert used.count(Op.MAXIMUM) == 2 and Op.MINIMUM in used and used[-1] is Op.LOG_SOFTMAX
    assert next(n for n in g.nodes if n.op is Op.LEAKY_RELU).attrs.alpha == -0.5


@pytest.mark.parametrize("opset", [11, 13])
def test_one_dimensional_nodes_squeeze_unsqueeze_and_unit_transpose(opset):
    """(1, C, L) tensors: 1-D Conv (SAME_UPPER, dilation), BatchNormalization, pools, GlobalMaxPool; Squeeze /
    Unsqueeze with axes as an attribute (opset 11) or an input (13); a Transpose that only moves a unit axis."""
    axes = (lambda name, values: {"axes": values}) if opset < 13 else (lambda name, values: {})
    axes_in = (lambda name: []) if opset < 13 else (lambda name: [name])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3], auto_pad="SAME_UPPER", strides=[2]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b"]),
        helper.make_node("Conv", ["b", "dw"], ["d"], kernel_shape=[3], pads=[2, 1], dilations=[2], group=6),
        helper.make_node("AveragePool", ["d"], ["a"], kernel_shape=[3], pads=[1, 1], count_include_pad=1),
        helper.make_node("MaxPool", ["a"], ["m"], kernel_shape=[2], strides=[2]),
        helper.make_node("GlobalMaxPool", ["m"], ["gm"]),  # (1, 6, 1)
        helper.make_node("Unsqueeze", ["gm", *axes_in("ax3")], ["u"], **axes("u", [3])),  # (1, 6, 1, 1)
        helper.make_node("Transpose", ["u"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("Squeeze", ["t", *axes_in("ax23")], ["y"], **axes("y", [2, 3])),  # (1, 6)
    ]
    c = 6
    inits = {"w": rand(c, 4, 3), "dw": rand(c, 1, 3), "gamma": rand(c) + 2, "beta": rand(c), "mean": rand(c),
             "var": np.abs(rand(c)) + 0.5}
    if opset >= 13:
        inits |= {"ax3": np.array([3], np.int64), "ax23": np.array([2, 3], np.int64)}
    g = check_against_onnxruntime(make_model(nodes, [1, 4, 19], inits, [1, c], opset=opset))
    assert g.tensors["input"].shape == (1, 1, 19, 4)
    assert [n.op for n in g.nodes] == [Op.CONV_2D, Op.BATCH_NORM, Op.DEPTHWISE_CONV_2D, Op.PAD, Op.AVG_POOL_2D,
                                       Op.MAX_POOL_2D, Op.MAX_POOL_2D, Op.RESHAPE]
    assert g.nodes[0].attrs.padding == (0, 0, 1, 1) and g.nodes[2].attrs.dilation == (1, 2)


@pytest.mark.parametrize("op,inits,needle", [
    ("Erf", {}, "needs GELU"),
    ("Tile", {"repeats": np.array([1, 1, 2, 1], np.int64)}, "needs TILE"),
    ("Slice", {"starts": np.array([1], np.int64), "ends": np.array([3], np.int64)}, "needs STRIDED_SLICE"),
])
def test_nodes_the_ir_lacks_name_what_they_need(op, inits, needle):
    model = make_model([helper.make_node(op, ["x", *inits], ["y"])], [1, 3, 4, 4], inits, [1])
    with pytest.raises(UnsupportedOpError) as e:
        from_onnx(model)
    assert f"node 'y' (ONNX {op}): {needle}" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("node,inits,needle", [
    (helper.make_node("Add", ["x", "k"], ["y"]), {"k": rand(2, 4, 4)},
     "(ONNX Add): constant operand of shape (2, 4, 4) does not broadcast"),
    (helper.make_node("Conv", ["x", "w"], ["y"], group=3), {"w": rand(6, 1, 3, 3)}, "(ONNX Conv): grouped"),
    (helper.make_node("Conv", ["x", "w"], ["y"], group=1), {"w": rand(6, 1, 3, 3)}, "(ONNX Conv): conv input"),
    (helper.make_node("ReduceMean", ["x"], ["y"], axes=[1]), {}, "only the spatial axes"),
    (helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), {"lo": np.float32(-1), "hi": np.float32(2)}, "clip to"),
    (helper.make_node("Max", ["x", "k"], ["y"]), {"k": np.float32(0)}, "maximum with a constant operand"),
    (helper.make_node("Div", ["k", "x"], ["y"]), {"k": np.float32(1)}, "only division by a constant"),
    (helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1]), {}, "the IR has no TRANSPOSE"),
])
def test_unsupported_onnx_forms(node, inits, needle):
    model = make_model([node], [1, 3, 4, 4] if node.op_type != "Conv" else [1, 6, 4, 4], inits, [1], opset=13)
    with pytest.raises(UnsupportedOpError) as e:
        from_onnx(model)
    assert needle in str(e.value) and "\n" not in str(e.value)


# -- assert_graphs_equivalent names the first difference --------------------------------------------------------------
def test_equivalence_reports_the_first_difference(random_net):
    module, shape = random_net(5)
    a = from_torch(module, shape)
    assert_graphs_equivalent(a, from_torch(module, shape))
    conv = a.nodes[0]
    w = a.tensors[conv.inputs[1]]
    nudged = dataclasses.replace(w, data=w.data + np.float32(1e-3))
    with pytest.raises(AssertionError, match=r"node 0 \('conv_2d_0' vs 'conv_2d_0'\) CONV_2D input 1.*values differ"):
        assert_graphs_equivalent(a, a.replace(tensors={**a.tensors, w.name: nudged}))
    restrided = dataclasses.replace(conv, attrs=dataclasses.replace(conv.attrs, dilation=(2, 2)))
    with pytest.raises(AssertionError, match="dilation"):
        assert_graphs_equivalent(a, a.replace(nodes=(restrided,) + a.nodes[1:]))


def _resize(mode: str, coords: str, size=None, scales=None, **extra):
    inits = {"roi": np.zeros(0, np.float32)}
    inputs = ["x", "roi"]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        inputs.append("scales")
    else:
        inits |= {"scales": np.zeros(0, np.float32), "sizes": np.array(size, np.int64)}
        inputs += ["scales", "sizes"]
    return helper.make_node("Resize", inputs, ["y"], mode=mode, coordinate_transformation_mode=coords, **extra), inits


@pytest.mark.parametrize("mode,coords,size,scales,extra", [
    ("nearest", "asymmetric", None, [1, 1, 2, 2], {"nearest_mode": "floor"}),  # PyTorch's nearest
    ("nearest", "asymmetric", [1, 3, 7, 5], None, {"nearest_mode": "floor"}),
    ("nearest", "half_pixel", [1, 3, 9, 6], None, {"nearest_mode": "round_prefer_ceil"}),  # nearest-exact
    ("nearest", "tf_half_pixel_for_nn", [1, 3, 9, 6], None, {"nearest_mode": "floor"}),
    ("nearest", "align_corners", [1, 3, 7, 7], None, {"nearest_mode": "round_prefer_ceil"}),
    ("linear", "pytorch_half_pixel", None, [1, 1, 2, 2], {}),  # PyTorch's bilinear, align_corners=False
    ("linear", "half_pixel", [1, 3, 7, 9], None, {}),
    ("linear", "align_corners", [1, 3, 9, 7], None, {}),
    ("linear", "asymmetric", [1, 3, 6, 10], None, {}),
])
def test_resize_matches_onnxruntime(mode, coords, size, scales, extra):
    node, inits = _resize(mode, coords, size, scales, **extra)
    out = size or [1, 3, 8, 10]
    g = check_against_onnxruntime(make_model([node], [1, 3, 4, 5], inits, out, opset=13), atol=1e-5)
    assert [n.op for n in g.nodes] == [Op.RESIZE_NEAREST_NEIGHBOR if mode == "nearest" else Op.RESIZE_BILINEAR]


@pytest.mark.parametrize("op,opset,mode", [("Upsample", 9, "nearest"), ("Upsample", 9, "linear"),
                                           ("Resize", 10, "nearest"), ("Resize", 10, "linear")])
def test_opset_9_upsample_and_opset_10_resize_match_onnxruntime(op, opset, mode):
    """The older forms: (X, scales) inputs, asymmetric coordinates, floor rounding, no nearest_mode attribute."""
    node = helper.make_node(op, ["x", "scales"], ["y"], mode=mode)
    inits = {"scales": np.array([1, 1, 2, 3], np.float32)}
    g = check_against_onnxruntime(make_model([node], [1, 3, 4, 5], inits, [1, 3, 8, 15], opset=opset), atol=1e-5)
    assert [n.op for n in g.nodes] == [Op.RESIZE_NEAREST_NEIGHBOR if mode == "nearest" else Op.RESIZE_BILINEAR]


@pytest.mark.parametrize("kernel,strides,pads,output_padding", [
    (2, [2, 2], [0, 0, 0, 0], [0, 0]), (3, [2, 2], [1, 1, 1, 1], [1, 1]), (3, [1, 2], [1, 0, 1, 2], [0, 1]),
    (4, [3, 3], [0, 1, 2, 0], [2, 0])])
def test_conv_transpose_matches_onnxruntime(kernel, strides, pads, output_padding):
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[kernel] * 2, strides=strides,
                            pads=pads, output_padding=output_padding)
    h, w = 4, 5
    out = [1, 6] + [(d - 1) * s + kernel - pads[i] - pads[i + 2] + output_padding[i]
                    for i, (d, s) in enumerate(zip((h, w), strides))]
    g = check_against_onnxruntime(make_model([node], [1, 3, h, w], {"w": rand(3, 6, kernel, kernel), "b": rand(6)},
                                             out))
    assert [n.op for n in g.nodes] == [Op.TRANSPOSE_CONV]


def test_gelu_reduce_max_and_1d_conv_transpose_match_onnxruntime():
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["t"], kernel_shape=[3], strides=[2], pads=[1, 0]),
             helper.make_node("Gelu", ["t"], ["g"], approximate="tanh"),
             helper.make_node("ReduceMax", ["g", "axes"], ["y"], keepdims=1)]
    inits = {"w": rand(4, 5, 3), "axes": np.array([1], np.int64)}
    g = check_against_onnxruntime(make_model(nodes, [1, 4, 9], inits, [1, 1, 18], opset=20))
    assert [n.op for n in g.nodes][:3] == [Op.TRANSPOSE_CONV, Op.GELU, Op.REDUCE_MAX]


def _gelu_chain(approximate: bool, cube: str, x_first: bool, const_first: bool):
    """An exporter GELU chain on x, ending in "y": exact (x / sqrt 2 -> Erf) or tanh (x^3 as Mul(x, Mul(x, x)) or
    Pow), then + 1, and * x, * 0.5 in either order; `const_first` puts every constant on a binary op's left."""
    def mul(a, k, out):
        return helper.make_node("Mul", [k, a] if const_first else [a, k], [out])

    if approximate:
        cubed = [helper.make_node("Pow", ["x", "three"], ["x3"])] if cube == "pow" else [
            helper.make_node("Mul", ["x", "x"], ["x2"]), helper.make_node("Mul", ["x", "x2"], ["x3"])]
        head = [*cubed, mul("x3", "kappa", "kx3"), helper.make_node("Add", ["x", "kx3"], ["inner"]),
                mul("inner", "beta", "u"), helper.make_node("Tanh", ["u"], ["f"])]
    else:
        head = [helper.make_node("Div", ["x", "sqrt2"], ["u"]) if cube == "div" else mul("x", "rsqrt2", "u"),
                helper.make_node("Erf", ["u"], ["f"])]
    first, second = ("x", "half") if x_first else ("half", "x")
    tail = [helper.make_node("Add", ["one", "f"] if const_first else ["f", "one"], ["p"]),
            helper.make_node("Mul", [first, "p"], ["q"]), helper.make_node("Mul", ["q", second], ["y"])]
    inits = {"sqrt2": np.float32(np.sqrt(2)), "rsqrt2": np.float32(np.sqrt(0.5)), "one": np.float32(1),
             "half": np.float32(0.5), "three": np.float32(3), "kappa": np.float32(0.044715),
             "beta": np.float32(np.sqrt(2 / np.pi))}
    used = {i for n in head + tail for i in n.input}
    return head + tail, {k: v for k, v in inits.items() if k in used}


GELU_CHAINS = [(a, c, x, k) for a, cubes in ((False, ("div", "mul")), (True, ("mul", "pow"))) for c in cubes
               for x in (True, False) for k in (True, False)]


@pytest.mark.parametrize("approximate,cube,x_first,const_first", GELU_CHAINS)
def test_exporter_gelu_chains_become_one_gelu(approximate, cube, x_first, const_first):
    nodes, inits = _gelu_chain(approximate, cube, x_first, const_first)
    g = check_against_onnxruntime(make_model(nodes, [1, 3, 4, 5], inits, [1, 3, 4, 5], opset=13), atol=1e-5)
    assert [n.op for n in g.nodes] == [Op.GELU] and g.nodes[0].attrs.approximate == approximate


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_chain_with_a_value_read_elsewhere_is_not_fused(approximate):
    """The chain's Erf / Tanh input is also a graph output: the chain is not a GELU. Its Tanh lowers node by node
    (TANH is an IR op) and computes what ONNX Runtime computes; its Erf (which the IR lacks) is a one-line error."""
    nodes, inits = _gelu_chain(approximate, "mul", True, False)
    model = make_model(nodes, [1, 3, 4, 5], inits, [1, 3, 4, 5], opset=13)
    model.graph.output.append(helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 3, 4, 5]))
    if approximate:
        ops = [n.op for n in check_against_onnxruntime(model).nodes]
        assert Op.TANH in ops and Op.GELU not in ops
        return
    with pytest.raises(UnsupportedOpError) as e:
        from_onnx(model)
    assert "node 'f' (ONNX Erf): needs GELU" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("opset,dynamo", [(13, False), (17, False), (18, True), (20, False)])
def test_exported_nn_gelu_is_one_gelu_at_every_opset(approximate, opset, dynamo, export_onnx):
    """nn.GELU as both exporters write it: the Erf / Tanh chains below opset 20, the Gelu operator from it."""
    module = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GELU(approximate=approximate))
    g = check_against_onnxruntime(export_onnx(module, (1, 3, 8, 7), opset=opset, dynamo=dynamo), atol=1e-5)
    assert [n.op for n in g.nodes] == [Op.CONV_2D, Op.GELU]
    assert g.nodes[1].attrs.approximate == (approximate == "tanh")


@pytest.mark.parametrize("node,inits,needle", [
    (helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="cubic"),
     {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}, "Resize mode='cubic'"),
    (helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest"),
     {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)},
     "nearest_mode='round_prefer_floor'; TFLite's rounding is 'round_prefer_ceil'"),
    (helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[2, 2], output_shape=[8, 8]),
     {"w": rand(3, 2, 2, 2)}, "output_shape"),
    (helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[2, 2], group=3),
     {"w": rand(3, 1, 2, 2)}, "groups=3"),
])
def test_upsampling_it_cannot_express_is_a_one_line_error(node, inits, needle):
    with pytest.raises(UnsupportedOpError) as e:
        from_onnx(make_model([node], [1, 3, 4, 4], inits, [1], opset=13))
    assert needle in str(e.value) and "node 'y'" in str(e.value) and "\n" not in str(e.value)


def test_tanh_elu_exp_log_and_unit_clip_match_onnxruntime():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Tanh", ["c"], ["t"]),
             helper.make_node("Elu", ["c"], ["e"]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["u"]),
             helper.make_node("Exp", ["u"], ["x1"]),
             helper.make_node("Log", ["x1"], ["l"]),  # log(exp(u)) of u in [-1, 1]: finite
             helper.make_node("Add", ["t", "e"], ["s"]),
             helper.make_node("Add", ["s", "l"], ["y"])]
    inits = {"w": rand(5, 3, 1, 1), "lo": np.float32(-1), "hi": np.float32(1)}
    g = check_against_onnxruntime(make_model(nodes, [1, 3, 4, 6], inits, [1, 5, 4, 6], opset=13))
    assert [n.op for n in g.nodes][1:6] == [Op.TANH, Op.ELU, Op.RELU_N1_TO_1, Op.EXP, Op.LOG]


def test_elu_with_another_alpha_is_refused():
    model = make_model([helper.make_node("Elu", ["x"], ["y"], alpha=0.5)], [1, 3, 4, 4], {}, [1, 3, 4, 4])
    with pytest.raises(UnsupportedOpError, match="alpha=0.5; TFLite's ELU has alpha 1 only"):
        from_onnx(model)


def test_prelu_per_channel_and_single_match_onnxruntime():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("PRelu", ["c", "slope"], ["p"]),
             helper.make_node("PRelu", ["p", "one"], ["y"])]
    inits = {"w": rand(5, 3, 1, 1), "slope": np.linspace(-0.5, 1.5, 5, dtype=np.float32).reshape(5, 1, 1),
             "one": np.float32([0.25])}
    g = check_against_onnxruntime(make_model(nodes, [1, 3, 4, 6], inits, [1, 5, 4, 6], opset=13))
    prelus = [n for n in g.nodes if n.op is Op.PRELU]
    assert [g.tensors[n.inputs[1]].shape for n in prelus] == [(5,), (1,)]
