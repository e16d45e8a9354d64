"""analysis.profile: totals and per-layer rows by hand, JSON shape, float == int8 figures, no mutation."""

import json

import numpy as np

from kilobyte.analysis import profile
from kilobyte.ir import ConvAttrs, GraphBuilder, Op, QParams, ReshapeAttrs
from kilobyte.transforms import prepare_for_inference

from .test_blocks import mini_mobilenet

LAYER_KEYS = {"name", "op", "macs", "params", "in_bytes", "out_bytes", "live_bytes", "receptive_field"}


def _conv_relu_fc():
    b = GraphBuilder("tiny")
    x = b.input((1, 8, 8, 3))  # 192 B at int8
    y = b.node(Op.CONV_2D, [x], ConvAttrs((2, 2), (1, 1, 1, 1)),
               params={"weight": np.zeros((4, 3, 3, 3)), "bias": np.zeros(4)})  # 4x4x4 = 64 B
    y = b.node(Op.RELU, [y])  # 64 B
    y = b.node(Op.RESHAPE, [y], ReshapeAttrs((1, 64)))
    return b.build([b.node(Op.FULLY_CONNECTED, [y], params={"weight": np.zeros((10, 64))})])


def test_tiny_profile_by_hand():
    g = _conv_relu_fc()
    before = str(g)
    p = profile(g)
    assert str(g) == before
    conv, relu, reshape, fc = p.layers
    assert (conv.macs, conv.params, conv.flash_bytes, conv.in_bytes, conv.out_bytes, conv.live_bytes) == (
        3 * 3 * 3 * 4 * 4 * 4, 108 + 4, 108 + 4 * 4, 192, 64, 192 + 64)
    assert (relu.ops, relu.live_bytes) == (64, 128)
    assert (fc.macs, fc.params, fc.flash_bytes, fc.live_bytes, fc.out_shape) == (640, 640, 640, 64 + 10, (1, 10))
    # RF: conv3 s2 -> 3; after flattening the 4x4 map every element sees (4-1)*2+3 = 9 input pixels
    assert [l.receptive_field for l in p.layers] == [3, 3, 9, 9]
    assert (p.macs, p.params, p.flash_bytes, p.peak_bytes, p.peak_layer) == (
        1728 + 640, 112 + 640, 124 + 640, 256, "conv_2d_0")
    assert p.input_shape == (1, 8, 8, 3) and p.ops == 64 and p.name == "tiny"


def test_to_dict_is_json_ready():
    p = profile(prepare_for_inference(mini_mobilenet()))
    d = json.loads(json.dumps(p.to_dict()))
    assert {"macs", "params", "flash_bytes", "peak_bytes", "input_shape", "layers"} <= set(d)
    assert d["input_shape"] == [1, 16, 16, 3]
    assert [layer["name"] for layer in d["layers"]] == [n.name for n in mini_mobilenet().nodes]
    assert all(LAYER_KEYS <= set(layer) for layer in d["layers"])
    assert d["macs"] == sum(layer["macs"] for layer in d["layers"])
    assert d["peak_bytes"] == max(layer["live_bytes"] for layer in d["layers"])
    assert [len(block["layers"]) for block in d["blocks"]] == [1, 2, 3, 4, 3]


def test_shared_constant_counted_once():
    b = GraphBuilder()
    w = b.const("shared.weight", np.zeros((2, 2), np.float32))
    x = b.input((1, 2))
    y = b.node(Op.FULLY_CONNECTED, [x, w])
    g = b.build([b.node(Op.FULLY_CONNECTED, [y, w])])
    p = profile(g)
    assert [l.params for l in p.layers] == [4, 4] and p.params == 4 and p.flash_bytes == 4


def _int8_twin():
    """The int8 version of a conv with bias: int8 activations and weights, int32 bias, per-channel scales."""
    b = GraphBuilder()
    q = QParams.per_tensor(0.1, 0)
    x = b.input((1, 8, 8, 3), "int8", qparams=q)
    w = b.const("conv_2d_0.weight", np.zeros((4, 3, 3, 3), np.int8),
                QParams(np.full(4, 0.01, np.float32), np.zeros(4, np.int64), axis=0))
    bias = b.const("conv_2d_0.bias", np.zeros(4, np.int32),
                   QParams(np.full(4, 0.001, np.float32), np.zeros(4, np.int64), axis=0))
    y = b.node(Op.CONV_2D, [x, w, bias], ConvAttrs((2, 2), (1, 1, 1, 1)), qparams=q)
    return b.build([y])


def test_int8_graph_gives_the_same_figures():
    b = GraphBuilder()
    y = b.node(Op.CONV_2D, [b.input((1, 8, 8, 3))], ConvAttrs((2, 2), (1, 1, 1, 1)),
               params={"weight": np.zeros((4, 3, 3, 3)), "bias": np.zeros(4)})
    assert profile(_int8_twin()).to_dict() == profile(b.build([y])).to_dict()
