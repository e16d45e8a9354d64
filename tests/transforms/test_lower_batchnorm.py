"""lower_batchnorm: golden IR, the exact constants, parts left out when they do nothing, outputs unchanged."""

import numpy as np
import pytest

from kilobyte.ir import BatchNormAttrs, GraphBuilder, Op
from kilobyte.transforms import lower_batchnorm, prepare_for_inference

from .random_graphs import assert_same_outputs, bn_params, random_graph

RNG = np.random.default_rng(0)


def _add_bn():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 3))
    y = b.node(Op.ADD, [x, x])
    return b.build([b.node(Op.BATCH_NORM, [y], params=bn_params(RNG, 3))])


def test_golden_bn_after_add():
    g = _add_bn()
    before = str(g)
    out = lower_batchnorm(g)
    assert str(out) == "\n".join([
        "graph model(%input:float32[1x4x4x3])",
        "  %add_0:float32[1x4x4x3] = ADD(%input:float32[1x4x4x3], %input:float32[1x4x4x3])  # add_0",
        "  %batch_norm_0_scale:float32[1x4x4x3] = MUL(%add_0:float32[1x4x4x3], %batch_norm_0.scale)"
        "  # batch_norm_0_scale",
        "  %batch_norm_0:float32[1x4x4x3] = SUB(%batch_norm_0_scale:float32[1x4x4x3], %batch_norm_0.shift)"
        "  # batch_norm_0",
        "  return batch_norm_0",
    ])
    gamma, beta, mean, var = (g.tensors[t].data.astype(np.float64) for t in g.nodes[1].inputs[1:])
    scale = gamma / np.sqrt(var + 1e-5)
    np.testing.assert_array_equal(out.tensors["batch_norm_0.scale"].data, scale.astype(np.float32).reshape(1, 1, 1, 3))
    np.testing.assert_array_equal(out.tensors["batch_norm_0.shift"].data,
                                  (mean * scale - beta).astype(np.float32).reshape(1, 1, 1, 3))
    assert str(g) == before
    assert_same_outputs(g, out)


@pytest.mark.parametrize("gamma,beta,ops", [(2.0, 0.0, [Op.MUL]), (1.0, 3.0, [Op.SUB]), (1.0, 0.0, [])])
def test_parts_that_do_nothing_are_left_out(gamma, beta, ops):
    """A scale only (x / 6 of a hard sigmoid), a shift only, or nothing (the BN is bypassed); rank-2 tensors too."""
    b = GraphBuilder()
    x = b.input((1, 5))
    c = np.ones(5, np.float32)
    y = b.node(Op.BATCH_NORM, [b.node(Op.RELU, [x])], BatchNormAttrs(eps=0.0),
               params={"gamma": gamma * c, "beta": beta * c, "mean": 0 * c, "var": c})
    g = b.build([y])
    out = lower_batchnorm(g)
    assert [n.op for n in out.nodes] == [Op.RELU, *ops]
    assert all(out.tensors[t].shape == (1, 5) for n in out.nodes[1:] for t in n.inputs[1:])
    assert_same_outputs(g, out)


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs_keep_their_outputs(seed):
    g = prepare_for_inference(random_graph(seed))  # the BNs left are the unfoldable ones
    out = lower_batchnorm(g)
    assert not any(n.op is Op.BATCH_NORM for n in out.nodes)
    assert_same_outputs(g, out, seed)
