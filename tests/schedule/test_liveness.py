"""Tests for schedule/liveness.py (and the shared random-DAG strategy the other schedule tests import).

Oracle: hand-computed live bytes on small graphs, and the reorder search's incremental cost model, which must give
the same peak as the interval model for any order.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.ir import Activation, ConcatAttrs, ConvAttrs, DepthwiseAttrs, GraphBuilder, Op, PoolAttrs, ReshapeAttrs
from kilobyte.schedule.liveness import analyze, check_order
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.schedule.reorder import _Model, _start, order_peak

OPS = ("conv1", "conv3", "dw", "add", "concat", "reshape", "pool", "proj")
OPTION_SETS = [
    PlanOptions(),
    PlanOptions(inplace_depthwise=False, inplace_add=False, alias_reshape=False, concat_in_place=False,
                fuse_add=False),
    PlanOptions(inplace_depthwise=False),
    PlanOptions(inplace_add=False),
    PlanOptions(alias_reshape=False),
    PlanOptions(concat_in_place=False),
    PlanOptions(fuse_add=False),
    PlanOptions(inplace_add=False, inplace_depthwise=False, concat_in_place=False),  # fusion alone
]


# -- random DAGs (shared with test_reorder / test_plan) --------------------------------------------------------
def _add_node(b: GraphBuilder, kind: str, picks: list[str], channels: int, rng) -> str:
    x = picks[0]
    c = b.shape(x)[3]
    act = Activation.RELU if rng.random() < 0.5 else Activation.NONE
    bias = rng.normal(size=channels).astype(np.float32)
    if kind in ("conv1", "conv3"):
        k = 1 if kind == "conv1" else 3
        w = rng.normal(size=(channels, k, k, c)).astype(np.float32) / np.sqrt(k * k * c)
        return b.node(Op.CONV_2D, [x], ConvAttrs(padding=(k // 2,) * 4, activation=act),
                      params={"weight": w, "bias": bias})
    if kind == "dw":
        w = rng.normal(size=(1, 3, 3, c)).astype(np.float32) / 3
        return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs(padding=(1, 1, 1, 1), activation=act),
                      params={"weight": w, "bias": rng.normal(size=c).astype(np.float32)})
    if kind == "proj":  # a 1x1 projection to picks[1]'s channels added to it: a pair that may fuse
        y = _add_node(b, "conv1", picks[:1], b.shape(picks[1])[3], rng)
        return b.node(Op.ADD, [picks[1], y] if rng.random() < 0.5 else [y, picks[1]])
    if kind == "add":
        same = [t for t in picks[1:] if b.shape(t) == b.shape(x)]
        return b.node(Op.ADD, [x, same[0] if same else x])
    if kind == "concat":
        return b.node(Op.CONCAT, list(dict.fromkeys(picks)), ConcatAttrs(axis=3))
    if kind == "reshape":
        n, h, w, c = b.shape(x)
        return b.node(Op.RESHAPE, [x], ReshapeAttrs((n, w, h, c)))
    return b.node(Op.MAX_POOL_2D, [x], PoolAttrs((3, 3), (1, 1), (1, 1, 1, 1)))


@st.composite
def dags(draw, max_nodes: int = 9, min_nodes: int = 1, ops=OPS):
    """A random float DAG of activations on 4x4 maps with 1-8 channels and random weights. Outputs: the sinks
    and, sometimes, one inner tensor (which then never dies)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    b = GraphBuilder("dag")
    tensors = [b.input((1, 4, 4, draw(st.integers(1, 8))))]
    for _ in range(draw(st.integers(min_nodes, max_nodes))):
        kind = draw(st.sampled_from(ops))
        picks = [draw(st.sampled_from(tensors)) for _ in range(3)]
        tensors.append(_add_node(b, kind, picks, draw(st.integers(1, 8)), rng))
    consumed = {t for n in b.nodes for t in n.inputs}
    outs = [t for t in tensors[1:] if t not in consumed]
    if draw(st.booleans()):
        outs.append(draw(st.sampled_from(tensors[1:])))
    return b.build(list(dict.fromkeys(outs)))


@st.composite
def orders(draw, graph):
    """One random topological order of `graph`."""
    preds = {n.name: {graph.producer(t).name for t in n.inputs if graph.producer(t)} for n in graph.nodes}
    done: list[str] = []
    while len(done) < len(graph.nodes):
        ready = [v for v in preds if v not in done and preds[v] <= set(done)]
        done.append(draw(st.sampled_from(ready)))
    return tuple(done)


def topological_orders(graph):
    """Every topological order of the graph's nodes (brute force; small graphs only)."""
    names = [n.name for n in graph.nodes]
    preds = {n.name: {graph.producer(t).name for t in n.inputs if graph.producer(t)} for n in graph.nodes}

    def extend(prefix: list[str], done: set[str]):
        if len(prefix) == len(names):
            yield tuple(prefix)
            return
        for v in names:
            if v not in done and preds[v] <= done:
                done.add(v)
                prefix.append(v)
                yield from extend(prefix, done)
                prefix.pop()
                done.remove(v)

    yield from extend([], set())


# -- hand-computed cases ---------------------------------------------------------------------------------------
def _dw(b, x, stride=1):
    c = b.shape(x)[3]
    return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs(stride=(stride, stride), padding=(1, 1, 1, 1)),
                  params={"weight": np.ones((1, 3, 3, c), np.float32)})


def _pw(b, x, cout):
    return b.node(Op.CONV_2D, [x], params={"weight": np.ones((cout, 1, 1, b.shape(x)[3]), np.float32)})


def test_chain_counts_inputs_and_outputs_not_the_graph_input():
    b = GraphBuilder()
    x = b.input((1, 8, 8, 4))  # 256 B, caller-owned
    y = _pw(b, x, 8)  # 512
    z = _pw(b, y, 2)  # 128
    g = b.build([z])
    live = analyze(g, [n.name for n in g.nodes])
    assert live.live_bytes == (512, 640)
    assert live.peak == 640


def test_inplace_depthwise_shares_bytes_and_adds_one_padded_channel():
    b = GraphBuilder()
    y = _pw(b, b.input((1, 8, 8, 4)), 16)  # 1024 B
    z = _dw(b, y, stride=2)  # 256 B, written over y; scratch (8+2)^2 = 100
    g = b.build([_pw(b, z, 4)])
    order = [n.name for n in g.nodes]
    on = analyze(g, order)
    assert on.inplace == {"depthwise_conv_2d_0": y}
    assert on.live_bytes[1] == 1024 + 100
    assert on.group[z] == on.group[y]
    off = analyze(g, order, PlanOptions(inplace_depthwise=False))
    assert off.live_bytes[1] == 1024 + 256 and off.inplace == {}


def test_depthwise_whose_input_lives_on_is_not_in_place():
    b = GraphBuilder()
    y = _pw(b, b.input((1, 8, 8, 4)), 16)
    z = _dw(b, y)
    g = b.build([b.node(Op.ADD, [y, z])])
    live = analyze(g, [n.name for n in g.nodes])
    assert "depthwise_conv_2d_0" not in live.inplace
    assert live.inplace == {"add_0": y}  # y dies at the add: the add accumulates into it
    assert live.live_bytes == (1024, 2048, 2048)


def _residual_block(b, x, expand=6):
    """MobileNetV2's inverted residual: 1x1 expand -> 3x3 DW -> 1x1 project -> ADD(block input, projection)."""
    c = b.shape(x)[3]
    return b.node(Op.ADD, [x, _pw(b, _dw(b, _pw(b, x, c * expand)), c)])


def test_projection_fused_with_the_residual_add():
    """The projection's output never exists: block input (held) + DW output, then the ADD output at the block
    input's bytes. Unfused, the projection's output sits beside them (MCUNetV2's 172 kB assumes fusion)."""
    b = GraphBuilder()
    x = _pw(b, b.input((1, 8, 8, 2)), 4)  # 256 B: the residual
    y = _residual_block(b, x)  # expand 1536 B, DW in place (+100 B scratch), project 256 B, add 256 B
    g = b.build([_pw(b, y, 2)])
    order = [n.name for n in g.nodes]
    on = analyze(g, order)
    assert on.fused == {"conv_2d_2": "add_0"} and on.inplace["add_0"] == x
    assert on.live_bytes[3:5] == (256 + 1536, 256)  # the fused conv step, then the ADD's step over the residual
    assert "conv_2d_2" not in on.first  # the projection's output has no storage unit
    off = analyze(g, order, PlanOptions(fuse_add=False))
    assert off.fused == {} and off.live_bytes[3:5] == (256 + 1536 + 256, 256 + 256)
    assert on.peak < off.peak


def test_fusion_needs_adjacency_and_a_dying_residual():
    b = GraphBuilder()
    x = _pw(b, b.input((1, 4, 4, 2)), 3)
    p = _pw(b, _dw(b, x), 3)
    side = _pw(b, x, 1)  # reads the residual too
    g = b.build([b.node(Op.ADD, [p, x]), side])
    names = {n.name: n for n in g.nodes}
    assert names["add_0"].inputs == (p, x)
    late = analyze(g, ["conv_2d_0", "depthwise_conv_2d_0", "conv_2d_1", "add_0", "conv_2d_2"])
    assert late.fused == {}  # the residual is read after the ADD: the ADD cannot overwrite it
    early = analyze(g, ["conv_2d_0", "depthwise_conv_2d_0", "conv_2d_2", "conv_2d_1", "add_0"])
    assert early.fused == {"conv_2d_1": "add_0"} and early.inplace["add_0"] == x
    apart = analyze(g, ["conv_2d_0", "depthwise_conv_2d_0", "conv_2d_1", "conv_2d_2", "add_0"])
    assert apart.fused == {}  # not adjacent


def test_reshape_alias_and_concat_slices_cost_nothing():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 2))
    p = _pw(b, x, 3)  # 48 B
    q = _pw(b, x, 5)  # 80 B
    c = b.node(Op.CONCAT, [p, q], ConcatAttrs(axis=3))  # 128 B, allocated when p is produced
    r = b.node(Op.RESHAPE, [c], ReshapeAttrs((1, 128)))
    g = b.build([r])
    live = analyze(g, [n.name for n in g.nodes])
    assert live.live_bytes == (128, 128, 128, 128)
    assert live.aliases.slice_of == {p: (c, 0), q: (c, 3)}
    plain = analyze(g, [n.name for n in g.nodes], PlanOptions(concat_in_place=False, alias_reshape=False))
    assert plain.live_bytes == (48, 128, 256, 256)


def test_graph_outputs_never_die_and_graph_inputs_are_read_only():
    b = GraphBuilder()
    x = b.input((1, 4, 4, 4))
    d = _dw(b, x)  # input is the caller's: not in place
    e = _dw(b, d)  # d is a graph output: not in place either
    g = b.build([d, e])
    live = analyze(g, [n.name for n in g.nodes])
    assert live.inplace == {}
    assert live.last[d] == 1


def test_check_order_rejects_non_topological_orders():
    b = GraphBuilder()
    y = _pw(b, b.input((1, 2, 2, 1)), 1)
    g = b.build([_pw(b, y, 1)])
    check_order(g, ["conv_2d_0", "conv_2d_1"])
    with pytest.raises(ValueError, match="before its input"):
        check_order(g, ["conv_2d_1", "conv_2d_0"])


# -- properties ------------------------------------------------------------------------------------------------
@settings(max_examples=150)
@given(st.data(), dags(max_nodes=12), st.sampled_from(OPTION_SETS))
def test_interval_model_equals_the_search_cost_model(data, graph, options):
    """liveness.analyze (intervals) and the reorder DP (incremental over node sets) agree on every order."""
    order = data.draw(orders(graph))
    model = _Model(graph, options)
    index = {name: i for i, name in enumerate(model.names)}
    assert analyze(graph, order, options).peak == order_peak(model, [index[v] for v in order], _start(model, ()))


@settings(max_examples=100)
@given(st.data(), dags(max_nodes=12), st.sampled_from(OPTION_SETS))
def test_in_place_rules_other_than_concat_never_add_bytes(data, graph, options):
    """Depthwise, ADD, fusion and RESHAPE rules only ever save bytes at a step. (The concat rule may not: it holds
    the whole output from the first slice on.)"""
    order = data.draw(orders(graph))
    plain = analyze(graph, order, dataclasses.replace(OPTION_SETS[1], concat_in_place=options.concat_in_place))
    live = analyze(graph, order, options)
    assert all(a <= b for a, b in zip(live.live_bytes, plain.live_bytes))
