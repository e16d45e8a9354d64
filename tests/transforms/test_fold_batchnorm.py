"""fold_batchnorm: golden IR, exact folded numbers, non-foldable cases, outputs unchanged, input untouched."""

import numpy as np
import pytest

from kilobyte.ir import Activation, BatchNormAttrs, ConvAttrs, GraphBuilder, Op
from kilobyte.transforms import fold_batchnorm

from .random_graphs import assert_same_outputs, bn_params, random_graph

RNG = np.random.default_rng(0)


def _conv_bn_relu6_add_bn():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 2))
    y = b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": RNG.normal(size=(3, 3, 3, 2))})
    y = b.node(Op.RELU6, [b.node(Op.BATCH_NORM, [y], params=bn_params(RNG, 3))])
    y = b.node(Op.ADD, [y, y])
    return b.build([b.node(Op.BATCH_NORM, [y], params=bn_params(RNG, 3))])  # BN after ADD: stays


def test_golden_conv_bn_and_bn_after_add():
    g = _conv_bn_relu6_add_bn()
    before = str(g)
    out = fold_batchnorm(g)
    assert str(out) == "\n".join([
        "graph model(%input:float32[1x4x4x2])",
        "  %conv_2d_0:float32[1x4x4x3] = CONV_2D(%input:float32[1x4x4x2], %conv_2d_0.weight, %conv_2d_0.bias)"
        " {padding=(1, 1, 1, 1)}  # conv_2d_0",
        "  %relu6_0:float32[1x4x4x3] = RELU6(%conv_2d_0:float32[1x4x4x3])  # relu6_0",
        "  %add_0:float32[1x4x4x3] = ADD(%relu6_0:float32[1x4x4x3], %relu6_0:float32[1x4x4x3])  # add_0",
        "  %batch_norm_1:float32[1x4x4x3] = BATCH_NORM(%add_0:float32[1x4x4x3], %batch_norm_1.gamma,"
        " %batch_norm_1.beta, %batch_norm_1.mean, %batch_norm_1.var)  # batch_norm_1",
        "  return batch_norm_1",
    ])
    assert not any(k.startswith("batch_norm_0") for k in out.tensors)  # folded BN's constants dropped
    assert str(g) == before
    assert_same_outputs(g, out)


def test_folded_numbers_by_hand():
    # y = 2x; BN: scale = 3 / sqrt(3 + 1) = 1.5, shift = 1 - 0.5 * 1.5 = 0.25  ->  w = 3, b = 0.25 (+ 1.5 * old bias)
    b = GraphBuilder()
    y = b.node(Op.FULLY_CONNECTED, [b.input((1, 1))], params={"weight": np.array([[2.0]]), "bias": np.array([4.0])})
    params = {"gamma": np.array([3.0]), "beta": np.array([1.0]), "mean": np.array([0.5]), "var": np.array([3.0])}
    g = b.build([b.node(Op.BATCH_NORM, [y], BatchNormAttrs(eps=1.0), params=params)])
    out = fold_batchnorm(g)
    assert out.tensors["fully_connected_0.weight"].data.tolist() == [[3.0]]
    assert out.tensors["fully_connected_0.bias"].data.tolist() == [6.25]
    assert g.tensors["fully_connected_0.weight"].data.tolist() == [[2.0]]  # the input graph keeps its weights
    assert not out.tensors["fully_connected_0.bias"].data.flags.writeable


def test_depthwise_scales_last_axis_and_creates_bias():
    b = GraphBuilder()
    y = b.node(Op.DEPTHWISE_CONV_2D, [b.input((1, 3, 3, 2))], params={"weight": np.ones((1, 3, 3, 2))})
    params = {"gamma": np.array([1.0, 2.0]), "beta": np.array([0.0, 1.0]), "mean": np.zeros(2), "var": np.ones(2)}
    g = b.build([b.node(Op.BATCH_NORM, [y], BatchNormAttrs(eps=0.0), params=params)])
    out = fold_batchnorm(g)
    w = out.tensors["depthwise_conv_2d_0.weight"].data
    assert w[0, :, :, 0].tolist() == [[1.0] * 3] * 3 and w[0, :, :, 1].tolist() == [[2.0] * 3] * 3
    assert out.tensors["depthwise_conv_2d_0.bias"].data.tolist() == [0.0, 1.0]
    assert out.node("depthwise_conv_2d_0").inputs[2] == "depthwise_conv_2d_0.bias"
    assert_same_outputs(g, out)


def _not_folded(g):
    out = fold_batchnorm(g)
    assert str(out) == str(g)
    assert_same_outputs(g, out)


def test_conv_output_with_two_readers_not_folded():
    b = GraphBuilder()
    c = b.node(Op.CONV_2D, [b.input((1, 2, 2, 2))], params={"weight": RNG.normal(size=(2, 1, 1, 2))})
    _not_folded(b.build([b.node(Op.ADD, [c, b.node(Op.BATCH_NORM, [c], params=bn_params(RNG, 2))])]))


def test_conv_with_fused_activation_not_folded():
    b = GraphBuilder()
    c = b.node(Op.CONV_2D, [b.input((1, 2, 2, 2))], ConvAttrs(activation=Activation.RELU),
               params={"weight": RNG.normal(size=(2, 1, 1, 2))})
    _not_folded(b.build([b.node(Op.BATCH_NORM, [c], params=bn_params(RNG, 2))]))


def test_conv_output_that_is_graph_output_not_folded():
    b = GraphBuilder()
    c = b.node(Op.CONV_2D, [b.input((1, 2, 2, 2))], params={"weight": RNG.normal(size=(2, 1, 1, 2))})
    _not_folded(b.build([b.node(Op.BATCH_NORM, [c], params=bn_params(RNG, 2)), c]))


def test_bn_chain_folds_twice():
    b = GraphBuilder()
    y = b.node(Op.CONV_2D, [b.input((1, 2, 2, 2))], params={"weight": RNG.normal(size=(2, 1, 1, 2))})
    y = b.node(Op.BATCH_NORM, [b.node(Op.BATCH_NORM, [y], params=bn_params(RNG, 2))], params=bn_params(RNG, 2))
    g = b.build([y])
    out = fold_batchnorm(g)
    assert [n.op for n in out.nodes] == [Op.CONV_2D] and out.outputs == ("conv_2d_0",)
    assert_same_outputs(g, out)


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs(seed):
    g = random_graph(seed)
    before = str(g)
    out = fold_batchnorm(g).verify()
    assert str(g) == before
    for n in out.nodes:
        if n.op is Op.BATCH_NORM:  # any BN left must be one the rule refuses
            p = out.producer(n.inputs[0])
            assert p is None or p.op not in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED) \
                or len(out.consumers(n.inputs[0])) > 1 or n.inputs[0] in out.outputs \
                or p.attrs.activation is not Activation.NONE
    assert_same_outputs(g, out, seed)
