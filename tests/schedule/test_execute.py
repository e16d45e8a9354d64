"""Tests for schedule/execute.py: running int8 graphs inside one simulated arena exactly as planned.

Oracle: `run_int8` (the numpy reference) — every tensor the executor returns must be bit-identical, for every zoo
model and for random graphs, with and without in-place rules and patch stages. Broken plans must be caught: tensors
overwritten while live, scratch over live data, in-place forms the C kernels cannot run, overlapping tile buffers.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.interp import run_int8
from kilobyte.ir import (
    Activation,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    GraphBuilder,
    MeanAttrs,
    Op,
    PadAttrs,
    PoolAttrs,
    ReshapeAttrs,
)
from kilobyte.quant import quantize, quantize_input
from kilobyte.schedule.execute import PlanExecutionError, execute_plan
from kilobyte.schedule.patch import PatchStageError, candidate_cuts, stage_nodes
from kilobyte.schedule.plan import make_plan
from kilobyte.schedule.plan_types import PlanOptions, TensorPlacement

NO_RULES = PlanOptions(inplace_depthwise=False, inplace_add=False, alias_reshape=False, concat_in_place=False,
                       fuse_add=False)
RELU6 = Activation.RELU6


def _int8(graph, seed=0, samples=3):
    """Quantise a float graph on random calibration data; return (int8 graph, one int8 input)."""
    rng = np.random.default_rng(seed)
    shape = graph.tensors[graph.inputs[0]].shape
    x = rng.normal(0, 1, (samples,) + shape[1:]).astype(np.float32)
    q = quantize(graph, x)
    return q, quantize_input(q, x[:1])


def _assert_bit_exact(q, plan, x):
    want = run_int8(q, x, keep_all=True)
    got = execute_plan(q, plan, x, keep_all=True)
    stage_inner = set(plan.patch.nodes) - set(plan.patch.outputs) if plan.patch else set()
    assert set(want) - set(got) <= stage_inner  # only uncovered stage intermediates may be missing
    for t in got:
        assert got[t].dtype == want[t].dtype and np.array_equal(got[t], want[t]), t
    outs = execute_plan(q, plan, x)
    assert list(outs) == list(q.outputs)


# -- zoo models ---------------------------------------------------------------------------------------------------
def _zoo_names():
    from kilobyte import zoo

    return zoo.names("image")  # cheap: torch is imported only to build a model


@pytest.fixture(scope="module")
def zoo_int8():
    cache = {}

    def get(name):
        if name not in cache:
            pytest.importorskip("torch")
            from kilobyte import zoo
            from kilobyte.frontends import from_torch
            from kilobyte.transforms import prepare_for_inference

            module, shape = zoo.create(name, width=0.35, resolution=48)
            cache[name] = _int8(prepare_for_inference(from_torch(module, shape)))
        return cache[name]

    return get


@pytest.mark.parametrize("name", _zoo_names())
def test_zoo_models_bit_exact(name, zoo_int8):
    """Per layer (all rules / none), patch auto, and a fixed patch stage at a third of the cuts, 2x2 and 3x3."""
    q, x = zoo_int8(name)
    order = [n.name for n in q.nodes]
    cuts = [n for n in candidate_cuts(q, order) if min(q.tensors[q.nodes[n - 1].outputs[0]].shape[1:3]) >= 3]
    configs = [PlanOptions(), NO_RULES, PlanOptions(patch="auto")]
    if cuts:
        n = cuts[len(cuts) // 3]
        configs += [PlanOptions(patch=(n, 2)), dataclasses.replace(NO_RULES, patch=(n, 3))]
    for options in configs:
        _assert_bit_exact(q, make_plan(q, options), x)


# -- random graphs ------------------------------------------------------------------------------------------------
@st.composite
def int8_graphs(draw):
    """Random quantisable graphs: conv / depthwise (stride 1-2, odd padding) / pool / pad / residual add / concat,
    then optionally a global-pool + FC head."""
    b = GraphBuilder("random")
    x = b.input((1, draw(st.integers(5, 12)), draw(st.integers(5, 12)), draw(st.integers(1, 4))))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    for _ in range(draw(st.integers(1, 6))):
        x = _unit(b, x, draw(st.sampled_from(UNITS)), draw, rng)
    if draw(st.booleans()):
        c = b.shape(x)[3]
        x = b.node(Op.FULLY_CONNECTED, [b.node(Op.MEAN, [x], MeanAttrs((1, 2)))],
                   params={"weight": rng.normal(0, 0.5, (3, c)), "bias": rng.normal(0, 0.1, 3)})
    return b.build([x])


UNITS = ("conv", "dw", "pool", "pad", "residual", "concat", "block")


def _unit(b, x, kind, draw, rng):
    _, h, w, c = b.shape(x)
    small = min(h, w) < 5
    stride = 1 if small else draw(st.sampled_from([1, 2]))
    pad = (1, 1, 1, 1) if small else tuple(draw(st.integers(0, 1)) for _ in range(4))
    act = draw(st.sampled_from([Activation.NONE, Activation.RELU, RELU6]))
    if kind == "conv":
        k, cout = draw(st.sampled_from([1, 3])), draw(st.integers(1, 6))
        return b.node(Op.CONV_2D, [x], ConvAttrs((stride, stride), pad, activation=act),
                      params={"weight": rng.normal(0, 0.5, (cout, k, k, c)), "bias": rng.normal(0, 0.1, cout)})
    if kind == "dw":
        m = draw(st.sampled_from([1, 1, 2]))
        return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs((stride, stride), pad, depth_multiplier=m,
                                                                activation=act),
                      params={"weight": rng.normal(0, 0.5, (1, 3, 3, c * m)), "bias": rng.normal(0, 0.1, c * m)})
    if kind == "pool":
        op = draw(st.sampled_from([Op.MAX_POOL_2D, Op.AVG_POOL_2D]))
        k = draw(st.sampled_from([2, 3]))
        return b.node(op, [x], PoolAttrs((k, k), (stride, stride), tuple(min(p, k - 1) for p in pad)))
    if kind == "pad":
        return b.node(Op.PAD, [x], PadAttrs(((0, 0), pad[:2], pad[2:], (0, 0))))
    if kind == "block":  # inverted residual: the projection may run fused with the ADD
        return _block(b, x, act, rng, swap=draw(st.booleans()))
    y = b.node(Op.CONV_2D, [x], ConvAttrs(activation=act),
               params={"weight": rng.normal(0, 0.5, (c, 1, 1, c)), "bias": rng.normal(0, 0.1, c)})
    if kind == "residual":
        return b.node(Op.ADD, [x, y])
    return b.node(Op.CONCAT, [y, x], ConcatAttrs(axis=3))


def _block(b, x, act, rng, swap=False):
    """1x1 expand (x3) -> 3x3 depthwise -> 1x1 projection -> ADD with the block input (operands swapped or not)."""
    c = b.shape(x)[3]
    e = b.node(Op.CONV_2D, [x], ConvAttrs(activation=act),
               params={"weight": rng.normal(0, 0.5, (3 * c, 1, 1, c)), "bias": rng.normal(0, 0.1, 3 * c)})
    d = b.node(Op.DEPTHWISE_CONV_2D, [e], DepthwiseAttrs(padding=(1, 1, 1, 1), activation=act),
               params={"weight": rng.normal(0, 0.5, (1, 3, 3, 3 * c)), "bias": rng.normal(0, 0.1, 3 * c)})
    y = b.node(Op.CONV_2D, [d], params={"weight": rng.normal(0, 0.5, (c, 1, 1, 3 * c)), "bias": rng.normal(0, 0.1, c)})
    return b.node(Op.ADD, [y, x] if swap else [x, y])


def _stage_cuts(q) -> list[int]:
    order = [n.name for n in q.nodes]
    cuts = []
    for n in range(1, len(order) + 1):
        try:
            stage_nodes(q, order, n)
        except PatchStageError:
            continue
        cuts.append(n)
    return cuts


@settings(max_examples=int(os.environ.get("KB_EXAMPLES", 150)), deadline=None)
@given(int8_graphs(), st.booleans(), st.booleans(), st.data())
def test_random_graphs_bit_exact(g, inplace, patch, data):
    q, x = _int8(g)
    options = PlanOptions() if inplace else NO_RULES
    cuts = _stage_cuts(q)
    if patch and cuts:
        n = data.draw(st.sampled_from(cuts))
        _, h, w, _ = q.tensors[stage_nodes(q, [m.name for m in q.nodes], n)[1][0]].shape
        options = dataclasses.replace(options, patch=(n, data.draw(st.integers(1, min(h, w, 4)))))
    _assert_bit_exact(q, make_plan(q, options), x)


# -- broken plans are caught --------------------------------------------------------------------------------------
def _two_branches():
    """x -> a (conv), x -> c (conv), add(a, c): a must survive c's write."""
    b = GraphBuilder()
    x = b.input((1, 6, 6, 2))
    rng = np.random.default_rng(1)
    a, c = (b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)),
                   params={"weight": rng.normal(0, 0.5, (3, 3, 3, 2))}) for _ in range(2))
    y = b.node(Op.DEPTHWISE_CONV_2D, [b.node(Op.ADD, [a, c])], DepthwiseAttrs(padding=(1, 1, 1, 1)),
               params={"weight": rng.normal(0, 0.5, (1, 3, 3, 3))})
    return _int8(b.build([y]))


def _moved(plan, tensor, offset=None, **changes):
    pl = plan.placements[tensor]
    new = dataclasses.replace(pl, offset=pl.offset if offset is None else offset, **changes)
    return dataclasses.replace(plan, placements={**plan.placements, tensor: new})


def test_clobbered_live_tensor_is_caught():
    q, x = _two_branches()
    plan = make_plan(q, NO_RULES)
    _assert_bit_exact(q, plan, x)
    first, second = [n for n in plan.order if n.startswith("conv_2d")]
    bad = _moved(plan, second, plan.placements[first].offset)
    with pytest.raises(PlanExecutionError, match=f"'{first}' was overwritten before node 'add_0' read it"):
        execute_plan(q, bad, x)


def test_scratch_over_live_data_is_caught():
    q, x = _two_branches()
    plan = make_plan(q, NO_RULES)
    first, second = [n for n in plan.order if n.startswith("conv_2d")]
    bad = dataclasses.replace(plan, scratch={**plan.scratch, second: (plan.placements[first].offset, 8)})
    with pytest.raises(PlanExecutionError, match=f"'{first}' was overwritten"):
        execute_plan(q, bad, x)


def test_in_place_depthwise_runs_channel_by_channel():
    q, x = _two_branches()
    plan = make_plan(q, PlanOptions())
    src, out = plan.placements["add_0"], plan.placements["depthwise_conv_2d_0"]
    assert out.offset == src.offset and "depthwise_conv_2d_0" in plan.scratch  # planned in place
    _assert_bit_exact(q, plan, x)
    shifted = _moved(plan, "depthwise_conv_2d_0", src.offset + 1)  # output one byte late: channel c hits c + 1
    with pytest.raises(PlanExecutionError, match="cannot run in place"):
        execute_plan(q, shifted, x)
    small = dataclasses.replace(plan, scratch={**plan.scratch, "depthwise_conv_2d_0": (0, 10)})
    with pytest.raises(PlanExecutionError, match="cannot hold a 8x8 padded channel"):
        execute_plan(q, small, x)


def test_arena_bounds_are_checked():
    q, x = _two_branches()
    plan = make_plan(q, NO_RULES)
    bad = _moved(plan, "add_0", plan.arena_bytes + 100)
    with pytest.raises(PlanExecutionError, match="leave the"):
        execute_plan(q, bad, x)
    assert TensorPlacement(0, 1, 1).channel_stride == 1


def test_overlapping_tile_buffers_are_caught():
    b = GraphBuilder()
    x = b.input((1, 12, 12, 2))
    rng = np.random.default_rng(2)
    for stride in (2, 1, 1):
        c = b.shape(x)[3]
        x = b.node(Op.CONV_2D, [x], ConvAttrs((stride, stride), (1, 1, 1, 1), activation=RELU6),
                   params={"weight": rng.normal(0, 0.5, (3, 3, 3, c))})
    q, xi = _int8(b.build([b.node(Op.AVG_POOL_2D, [x], PoolAttrs((6, 6), (6, 6)))]))
    plan = make_plan(q, PlanOptions(patch=(3, 2)))
    _assert_bit_exact(q, plan, xi)
    offsets = plan.patch.tile_offsets
    assert set(offsets) == {"conv_2d_0", "conv_2d_1"}
    clash = dataclasses.replace(plan.patch, tile_offsets={**offsets, "conv_2d_1": offsets["conv_2d_0"] + 1})
    with pytest.raises(PlanExecutionError, match="tile of 'conv_2d_1' overlaps its input 'conv_2d_0'"):
        execute_plan(q, dataclasses.replace(plan, patch=clash), xi)


def _flatten_head(softmax: bool):
    b = GraphBuilder()
    rng = np.random.default_rng(3)
    y = b.node(Op.CONV_2D, [b.input((1, 6, 6, 2))], ConvAttrs((2, 2), (1, 1, 1, 1), activation=Activation.RELU),
               params={"weight": rng.normal(0, 0.5, (3, 3, 3, 2))})
    y = b.node(Op.RESHAPE, [y], ReshapeAttrs((1, 27)))  # flatten: the last axis changes, the bytes do not
    y = b.node(Op.FULLY_CONNECTED, [y], params={"weight": rng.normal(0, 0.5, (4, 27))})
    return _int8(b.build([b.node(Op.SOFTMAX, [y]) if softmax else y]))


def test_flatten_reshape_alias_bit_exact():
    q, x = _flatten_head(softmax=False)
    plan = make_plan(q, PlanOptions())
    assert plan.placements["reshape_0"].offset == plan.placements["conv_2d_0"].offset  # aliased
    _assert_bit_exact(q, plan, x)
    _assert_bit_exact(q, make_plan(q, NO_RULES), x)


def test_float_softmax_tail_bit_exact():
    """The float32 DEQUANTIZE -> SOFTMAX tail of an int8 graph takes 4 B per element (a float graph plans at 1)."""
    q, x = _flatten_head(softmax=True)
    plan = make_plan(q, PlanOptions())
    floats = [t for t in plan.placements if q.tensors[t].dtype == "float32"]
    assert len(floats) == 2 and all(plan.placements[t].size == 4 * q.tensors[t].numel for t in floats)
    _assert_bit_exact(q, plan, x)


def _fused_block():
    b = GraphBuilder()
    rng = np.random.default_rng(5)
    x = b.node(Op.CONV_2D, [b.input((1, 6, 6, 2))], ConvAttrs(padding=(1, 1, 1, 1), activation=RELU6),
               params={"weight": rng.normal(0, 0.5, (4, 3, 3, 2)), "bias": rng.normal(0, 0.1, 4)})
    y = _block(b, x, RELU6, rng, swap=True)
    return _int8(b.build([b.node(Op.AVG_POOL_2D, [y], PoolAttrs((6, 6), (6, 6)))]))


def test_fused_conv_add_runs_over_the_residual():
    q, x = _fused_block()
    plan = make_plan(q, PlanOptions())
    assert plan.fused == {"conv_2d_2": "add_0"} and "conv_2d_2" not in plan.placements
    assert plan.placements["add_0"] == plan.placements["conv_2d_0"]  # the ADD's output over the residual
    assert make_plan(q, PlanOptions(fuse_add=False)).peak_bytes > plan.peak_bytes
    _assert_bit_exact(q, plan, x)
    split = dataclasses.replace(plan, fused={})  # run apart, the projection has nowhere to go
    with pytest.raises(PlanExecutionError, match="no placement"):
        execute_plan(q, split, x)
    moved = _moved(plan, "add_0", plan.placements["add_0"].offset + 4)
    with pytest.raises(PlanExecutionError, match="exactly over the residual"):
        execute_plan(q, moved, x)
    with pytest.raises(PlanExecutionError, match="must run right after"):
        execute_plan(q, dataclasses.replace(plan, fused={"conv_2d_1": "add_0"}), x)


def test_add_of_a_constant_runs_in_place():
    """conv -> ADD of a (C,) constant -> ADD of a (1, H, 1, 1) one: each ADD over its dying input (the constants take
    no placement), bit-exact; a (1, 1, 1, C) activation operand is never overwritten (it is smaller than the output)."""
    rng = np.random.default_rng(6)
    b = GraphBuilder()
    x = b.node(Op.CONV_2D, [b.input((1, 5, 4, 3))], ConvAttrs(padding=(1, 1, 1, 1)),
               params={"weight": rng.normal(0, 0.5, (6, 3, 3, 3))})
    y = b.node(Op.ADD, [x, b.const("bias", rng.normal(0, 1, 6).astype(np.float32))])
    y = b.node(Op.ADD, [b.const("rows", rng.normal(0, 1, (1, 5, 1, 1)).astype(np.float32)), y])
    m = b.node(Op.MEAN, [y], MeanAttrs((1, 2), keepdims=True))
    q, xq = _int8(b.build([b.node(Op.ADD, [m, y])]))
    plan = make_plan(q, PlanOptions())
    assert plan.inplace == {"add_0": "conv_2d_0", "add_1": "add_0", "add_2": "add_1"}
    assert not {"bias", "rows"} & set(plan.placements)
    _assert_bit_exact(q, plan, xq)
    _assert_bit_exact(q, make_plan(q, NO_RULES), xq)


def test_window_wholly_in_padding():
    """A strided 1x1 conv with padding: its first output row reads only padding, so that patch needs nothing of
    the layer before (an empty tile) and runs on zero-point padding alone."""
    b = GraphBuilder()
    rng = np.random.default_rng(4)
    a = b.node(Op.CONV_2D, [b.input((1, 8, 8, 2))], ConvAttrs(padding=(1, 1, 1, 1), activation=RELU6),
               params={"weight": rng.normal(0, 0.5, (3, 3, 3, 2)), "bias": rng.normal(0, 0.5, 3)})
    y = b.node(Op.CONV_2D, [a], ConvAttrs((2, 2), (1, 1, 1, 1)),
               params={"weight": rng.normal(0, 0.5, (2, 1, 1, 3)), "bias": rng.normal(0, 0.5, 2)})
    q, x = _int8(b.build([b.node(Op.MAX_POOL_2D, [y], PoolAttrs((5, 5), (5, 5)))]))
    plan = make_plan(q, PlanOptions(patch=(2, 5)))
    assert plan.patch.tiles[0][0].out_box == (0, 0, 0, 0)  # patch (0, 0) needs nothing of conv_2d_0
    _assert_bit_exact(q, plan, x)
