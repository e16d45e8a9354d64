"""Tests for schedule/patch.py: tile geometry (exact halos), per-patch memory, MACs, the auto choice, paper figures.

Oracles: hand-computed boxes; the receptive-field analysis (thesis Eq. 4.1) for interior patches; hypothesis
properties of the tiles of random stages; and the MCUNetV2 / thesis numbers for MobileNetV2 and MbV2-RD at 224².
Bit-exactness of running the tiles is tested with the plan executor (test_execute.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.analysis.macs import node_macs
from kilobyte.analysis.receptive_field import input_region
from kilobyte.ir import ConcatAttrs, ConvAttrs, DepthwiseAttrs, GraphBuilder, MeanAttrs, Op, PoolAttrs, conv_out_size
from kilobyte.schedule.liveness import analyze
from kilobyte.schedule.patch import (
    PatchStageError,
    candidate_cuts,
    choose_patch,
    place_stage,
    plan_patch_stage,
    split,
    stage_nodes,
    stage_peak,
)
from kilobyte.schedule.plan import make_plan
from kilobyte.schedule.plan_types import PlanOptions

KIB = 1024  # the papers' kB (see test_mbv2_paper_convention)
NO_INPLACE = PlanOptions(inplace_depthwise=False, inplace_add=False)
UNFUSED = PlanOptions(fuse_add=False)
BLOCK5_DW = 192 * 28 ** 2 + 32 * 28 ** 2 + 30 ** 2  # MbV2 block 5's in-place DW: + residual + one padded channel


def _conv(b, x, cout, k=3, stride=1, pad=None):
    cin = b.shape(x)[3]
    pad = (k // 2,) * 4 if pad is None else pad
    return b.node(Op.CONV_2D, [x], ConvAttrs((stride, stride), pad), params={"weight": np.zeros((cout, k, k, cin))})


def _dw(b, x, stride=1, k=3):
    c = b.shape(x)[3]
    return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs((stride, stride), (k // 2,) * 4),
                  params={"weight": np.zeros((1, k, k, c))})


def _names(graph):
    return [n.name for n in graph.nodes]


# -- geometry -----------------------------------------------------------------------------------------------------
def test_split_even_with_remainder_last():
    assert split(28, 4) == [(0, 7), (7, 14), (14, 21), (21, 28)]
    assert split(7, 2) == [(0, 3), (3, 7)]


def test_tiles_of_a_two_layer_stage_by_hand():
    b = GraphBuilder()
    x = b.input((1, 16, 16, 3))
    y = _conv(b, _conv(b, x, 4, stride=2), 5)  # 16 -> 8 -> 8
    g = b.build([b.node(Op.MEAN, [y])])
    stage = plan_patch_stage(g, _names(g), 2, 2)
    assert stage.outputs == ("conv_2d_1",)
    first, second = stage.tiles[0], stage.tiles[3]  # top-left and bottom-right patches
    # conv_2d_1 (3x3 s1 pad 1): output rows 0-3 need conv_2d_0 rows -1..4 -> clipped to 0..4, 1 row of top padding
    assert first[1].out_box == (0, 4, 0, 4) and first[1].in_box == (0, 5, 0, 5)
    assert first[1].padding == (1, 0, 1, 0)
    # conv_2d_0 (3x3 s2 pad 1): output rows 0-4 need input rows -1..9
    assert first[0].out_box == (0, 5, 0, 5) and first[0].in_box == (0, 10, 0, 10)
    assert first[0].padding == (1, 0, 1, 0)
    assert second[1].in_box == (3, 8, 3, 8) and second[1].padding == (0, 1, 0, 1)
    assert second[0].out_box == (3, 8, 3, 8) and second[0].in_box == (5, 16, 5, 16)
    assert second[0].padding == (0, 0, 0, 0)  # row 16 would be padding, but stride 2 never reads it
    assert stage.input_patch == 11


def test_padding_only_where_the_layer_pads():
    b = GraphBuilder()
    x = b.input((1, 12, 12, 2))
    y = _conv(b, x, 2, pad=(0, 2, 1, 0))  # asymmetric explicit padding
    g = b.build([b.node(Op.MEAN, [y])])
    for patch in plan_patch_stage(g, _names(g), 1, 3).tiles:
        (t, bottom, left, r), box = patch[0].padding, patch[0].in_box
        assert t == 0 and r == 0  # the layer never pads top or right
        assert bottom <= 2 and left <= 1
        assert (bottom > 0) == (box[1] == 12) and (left > 0) == (box[2] == 0)


def test_interior_patch_matches_receptive_field():
    b = GraphBuilder()
    x = b.input((1, 64, 64, 3))
    y = _dw(b, _conv(b, x, 8, stride=2))
    y = _conv(b, _dw(b, _conv(b, y, 16, k=1), stride=2), 8, k=1)  # 16x16 output
    g = b.build([b.node(Op.MEAN, [y])])
    stage = plan_patch_stage(g, _names(g), 5, 4)
    interior = stage.tiles[5]
    # Eq. 4.1 from OP = 4: 1x1 -> 4, dw s2 -> 9, 1x1 -> 9, dw s1 -> 11, conv s2 -> 23
    assert stage.input_patch == input_region(g, g.nodes[4], 4) == 23
    box = interior[0].in_box
    assert (box[1] - box[0], box[3] - box[2]) == (stage.input_patch, stage.input_patch)


# -- properties of random stages ----------------------------------------------------------------------------------
@st.composite
def local_graphs(draw):
    """A random chain of spatially local units (conv, dw, pool, residual add, concat), then a global mean."""
    b = GraphBuilder("stage")
    x = b.input((1, draw(st.integers(6, 14)), draw(st.integers(6, 14)), draw(st.integers(1, 3))))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["conv", "dw", "pool", "residual", "concat"]))
        small = min(b.shape(x)[1:3]) < 5
        stride = 1 if small else draw(st.sampled_from([1, 2]))
        pad = (1, 1, 1, 1) if small else tuple(draw(st.integers(0, 1)) for _ in range(4))
        if kind == "conv":
            x = _conv(b, x, draw(st.integers(1, 4)), draw(st.sampled_from([1, 3])), stride, pad)
        elif kind == "dw":
            x = _dw(b, x, stride)
        elif kind == "pool":
            op = draw(st.sampled_from([Op.MAX_POOL_2D, Op.AVG_POOL_2D]))
            x = b.node(op, [x], PoolAttrs((2, 2), (stride, stride), pad))
        elif kind == "residual":
            x = b.node(Op.ADD, [x, _conv(b, x, b.shape(x)[3], 1)])
        else:
            x = b.node(Op.CONCAT, [x, _conv(b, x, 2)], ConcatAttrs(axis=3))
    return b.build([b.node(Op.MEAN, [x], MeanAttrs((1, 2)))])


def _check_tiles(g, stage):
    nodes = {n.name: n for n in g.nodes}
    out = g.tensors[stage.outputs[0]].shape
    covered = np.zeros(out[1:3], int)
    for patch in stage.tiles:
        boxes = {t.node: t for t in patch}
        for tile in patch:
            node = nodes[tile.node]
            src = g.tensors[g.activation_inputs(node)[0]].shape
            (y0, y1, x0, x1), (t, bot, left, r) = tile.in_box, tile.padding
            assert 0 <= y0 <= y1 <= src[1] and 0 <= x0 <= x1 <= src[2]
            if tile.out_box[0] == tile.out_box[1] or tile.out_box[2] == tile.out_box[3]:
                continue  # this patch needs nothing of the node (a strided 1x1 reading only padding)
            if node.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.MAX_POOL_2D, Op.AVG_POOL_2D):
                k = g.tensors[node.inputs[1]].shape[1] if node.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D) \
                    else node.attrs.kernel[0]
                pt, pb, pl, pr = node.attrs.padding
                assert t <= pt and bot <= pb and left <= pl and r <= pr
                s = node.attrs.stride[0]
                assert conv_out_size(y1 - y0, k, s, t, bot) == tile.out_box[1] - tile.out_box[0]
                assert conv_out_size(x1 - x0, k, s, left, r) == tile.out_box[3] - tile.out_box[2]
            for inp in g.activation_inputs(node):  # a producer's tile covers what every reader needs
                prod = g.producer(inp)
                if prod is not None:
                    p = boxes[prod.name].out_box
                    assert p[0] <= y0 and y1 <= p[1] and p[2] <= x0 and x1 <= p[3]
        last = boxes[g.producer(stage.outputs[0]).name].out_box
        covered[last[0]:last[1], last[2]:last[3]] += 1
    assert (covered >= 1).all()


@settings(max_examples=60, deadline=None)
@given(local_graphs(), st.integers(1, 4), st.data())
def test_random_stage_tiles_are_exact(g, grid, data):
    n = data.draw(st.sampled_from(_valid_cuts(g)))
    out = g.tensors[g.nodes[n - 1].outputs[0]].shape
    grid = min(grid, out[1], out[2])
    for options in (PlanOptions(), NO_INPLACE):
        stage = plan_patch_stage(g, _names(g), n, grid, options)
        _check_tiles(g, stage)
        assert stage.working_bytes >= stage.working_peak >= 0
        assert stage.base_macs == sum(node_macs(g, x) for x in g.nodes[:n])
        assert set(stage.tile_offsets) <= set(stage.nodes)
        if grid == 1:  # one patch recomputes nothing (and skips what a strided reader never reads)
            assert stage.macs <= stage.base_macs


def _box_walk_figures(g, n: int, grid: int, options: PlanOptions) -> tuple[int, int]:
    """(working peak, MACs) of a stage by the box walk (`plan_patch_stage`: p^2 tiles, `working_memory`)."""
    stage = plan_patch_stage(g, _names(g), n, grid, options)
    return stage.working_peak, stage.macs


def _check_evaluator(g, options: PlanOptions, cuts) -> int:
    """The separable evaluator equals the box walk on every cut and grid where it answers; returns how often it
    answered."""
    from kilobyte.schedule.patch_eval import StageEvaluator

    ev, answered = StageEvaluator(g, _names(g), options), 0
    for n in cuts:
        _, outputs = stage_nodes(g, _names(g), n)
        _, h, w, _ = g.tensors[outputs[0]].shape
        for grid in range(1, min(h, w, 5) + 1):
            fast = ev.evaluate(n, outputs, split(h, grid), split(w, grid))
            if fast is not None:
                answered += 1
                assert fast == _box_walk_figures(g, n, grid, options), (n, grid)
                assert ev.base_macs(n) == sum(node_macs(g, x) for x in g.nodes[:n])
    return answered


@settings(max_examples=60, deadline=None)
@given(local_graphs())
def test_separable_evaluator_equals_the_box_walk(g):
    for options in (PlanOptions(), NO_INPLACE, PlanOptions(kernels="dsp")):
        _check_evaluator(g, options, _valid_cuts(g))


def test_separable_evaluator_equals_the_box_walk_on_random_nets_and_mbv2(mbv2):
    from random_nets import random_graph, valid_cuts

    answered = 0
    for seed in range(40):
        g = random_graph(seed)
        answered += _check_evaluator(g, PlanOptions(kernels=("portable", "dsp")[seed % 2]),
                                     [n for n, _ in valid_cuts(g)])
    assert answered > 100
    assert _check_evaluator(mbv2, PlanOptions(), candidate_cuts(mbv2, _names(mbv2))[:6]) > 0


def test_evaluator_declines_a_tile_that_reads_only_padding():
    """A strided 1x1 conv after a PAD: a patch of its output can read only padding, a zero-length range. The box
    walk drops such a box on both axes, so the evaluator must say None (choose_patch then walks the boxes)."""
    from kilobyte.ir import PadAttrs
    from kilobyte.schedule.patch_eval import StageEvaluator

    b = GraphBuilder()
    x = b.node(Op.PAD, [b.input((1, 4, 4, 2))], PadAttrs(((0, 0), (4, 0), (4, 0), (0, 0))))  # 8x8, top-left pad
    y = _conv(b, x, 4, k=1, stride=2, pad=(0, 0, 0, 0))  # 4x4: its top-left 2x2 reads only the padding
    g = b.build([_conv(b, y, 4, k=3, stride=2)])
    n = 2
    _, outputs = stage_nodes(g, _names(g), n)
    assert StageEvaluator(g, _names(g), PlanOptions()).evaluate(n, outputs, split(4, 2), split(4, 2)) is None
    stage = plan_patch_stage(g, _names(g), n, 2, PlanOptions())
    assert any(t.out_box[0] == t.out_box[1] or t.in_box[0] == t.in_box[1] for p in stage.tiles for t in p)


def _valid_cuts(g) -> list[int]:
    cuts = []
    for n in range(1, len(g.nodes)):
        try:
            stage_nodes(g, _names(g), n)
        except PatchStageError:
            continue
        cuts.append(n)
    return cuts


# -- errors -------------------------------------------------------------------------------------------------------
def _small_graph():
    b = GraphBuilder()
    x = b.input((1, 8, 8, 2))
    a = _conv(b, x, 4, stride=2)
    c = _conv(b, x, 4, stride=2)
    y = b.node(Op.ADD, [a, c])
    return b.build([b.node(Op.MEAN, [y])])


def test_stage_must_be_closed_under_inputs():
    g = _small_graph()
    with pytest.raises(PatchStageError, match="add_0.*conv_2d_1.*prefix"):
        plan_patch_stage(g, ["conv_2d_0", "add_0", "conv_2d_1", "mean_0"], 2, 2)


def test_stage_must_be_spatially_local_and_fit_the_grid():
    g = _small_graph()
    with pytest.raises(PatchStageError, match="mean_0.*not spatially local"):
        plan_patch_stage(g, _names(g), 4, 2)
    with pytest.raises(PatchStageError, match="grid 5x5"):
        plan_patch_stage(g, _names(g), 3, 5)


@pytest.mark.parametrize("shape", [(4,), (1,), (1, 4, 1, 1)])
def test_an_add_of_a_constant_ends_the_stage(shape):
    """An ADD of a constant (any broadcast shape; kb_add_const) is no tile-by-tile sum: it ends a stage (the ADD of
    two equal maps in `_small_graph` is inside the stages above)."""
    b = GraphBuilder()
    a = _conv(b, b.input((1, 8, 8, 2)), 4, stride=2)
    y = b.node(Op.ADD, [a, b.const("k", np.ones(shape, np.float32))])
    g = b.build([_conv(b, y, 4)])
    add = next(n.name for n in g.nodes if n.op is Op.ADD)
    with pytest.raises(PatchStageError, match=f"{add}.*not spatially local"):
        stage_nodes(g, _names(g), len(g.nodes))
    assert all(g.nodes[n - 1].op is not Op.ADD for n in candidate_cuts(g, _names(g)))


def test_outputs_of_different_sizes_are_refused():
    b = GraphBuilder()
    x = b.input((1, 8, 8, 2))
    small, big = _conv(b, x, 2, stride=2), _conv(b, x, 2)
    means = [b.node(Op.MEAN, [t], MeanAttrs((1, 2), True)) for t in (small, big)]
    g = b.build([b.node(Op.CONCAT, means)])
    with pytest.raises(PatchStageError, match="differ in height/width"):
        plan_patch_stage(g, _names(g), 2, 2)


def test_place_stage_shifts_offsets():
    g = _small_graph()
    stage = plan_patch_stage(g, _names(g), 3, 2)
    moved = place_stage(stage, 1000)
    assert moved.working_offset == 1000
    assert all(moved.tile_offsets[k] == v + 1000 for k, v in stage.tile_offsets.items())
    assert place_stage(moved, 0) == stage


# -- MobileNetV2 and MbV2-RD at 224² (MCUNetV2 Table 1, thesis 4.1.3) ------------------------------------------
@pytest.fixture(scope="module")
def mbv2():
    return _zoo_graph("mobilenetv2")


@pytest.fixture(scope="module")
def mbv2_rd():
    return _zoo_graph("mbv2-rd")


def _zoo_graph(name):
    pytest.importorskip("torch")
    from kilobyte import zoo
    from kilobyte.frontends import from_torch
    from kilobyte.transforms import prepare_for_inference

    module, shape = zoo.create(name)
    return prepare_for_inference(from_torch(module, shape))


def _first_28(graph) -> int:
    """Nodes up to the first block output at 28x28 (MbV2: stem + 4 blocks; MbV2-RD: stem + 2 blocks)."""
    return 1 + next(i for i, n in enumerate(graph.nodes)
                    if n.op is Op.CONV_2D and graph.tensors[n.outputs[0]].shape[1] == 28)


def _network_macs(graph) -> int:
    return sum(node_macs(graph, n) for n in graph.nodes)


def _rest_peak(graph, n, options):
    return max(analyze(graph, _names(graph), options).live_bytes[n:])


def test_mbv2_patch_stage(mbv2):
    """MbV2, first conv + 4 blocks (13 nodes, output 28x28x32), 4x4 patches: input patch 75² (paper: 75²).

    Per patch (interior, output 7x7): block 2's expansion runs on a 35² tile. Without in-place rules the worst
    step is block 2's depthwise: 96·35² + 96·17² = 145,344 B working, + 28²·32 = 25,088 B of stage output =
    170,432 B. With in-place depthwise the worst step is the expansion: 16·35² + 96·35² = 137,200 B working +
    25,088 = 162,288 B (a 1x1 conv needs no scratch).

    MACs: we count each patch on its exact box, clipped at the image border: 119.2 M for the stage (91.3 M per
    layer, +30.6 %), +9.28 % of the 300.8 M network — inside the papers' +10 % (MCUNetV2) .. +13 % (thesis). Counting
    every patch at the interior size instead (border patches zero-padded to 75²) gives 129.5 M (+41.9 %, the
    paper's "130M, +42 %") and +12.7 % overall (the thesis's 339 M vs 300 M).
    """
    n = _first_28(mbv2)
    assert n == 13
    total = _network_macs(mbv2)
    ours = plan_patch_stage(mbv2, _names(mbv2), n, 4)
    paper = plan_patch_stage(mbv2, _names(mbv2), n, 4, NO_INPLACE)
    assert ours.outputs == paper.outputs == ("conv_2d_7",)
    assert ours.input_patch == paper.input_patch == 75
    assert paper.working_peak == 96 * 35 ** 2 + 96 * 17 ** 2 == 145_344
    assert stage_peak(paper) == 170_432
    assert ours.working_peak == 16 * 35 ** 2 + 96 * 35 ** 2 == 137_200
    assert stage_peak(ours) == 162_288
    assert ours.working_bytes == ours.working_peak  # the arena planner packs the region without a gap
    assert ours.base_macs == 91_282_688 and ours.macs == 119_202_032
    assert 0.08 <= (ours.macs - ours.base_macs) / total <= 0.14
    interior = ours.tiles[5]
    padded_all = 16 * sum(_weights(mbv2, t.node) * (t.out_box[1] - t.out_box[0]) ** 2 for t in interior)
    assert abs(padded_all / 130e6 - 1) < 0.01 and abs((padded_all - ours.base_macs) / total - 0.127) < 0.001


def _weights(graph, name) -> int:
    node = graph.node(name)
    return graph.tensors[node.inputs[1]].numel if node.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D) else 0


def test_mbv2_rd_patch_stage(mbv2_rd):
    """MbV2-RD (our reconstruction of MCUNetV2 Fig. 4): stem + 2 stride-2 blocks, 4x4 patches: input patch 63²
    (paper: 63²), +1.1 % MACs overall (paper: +3 %; ≤ 5 % required). make_plan: 176,640 B (172.5 KiB) with the
    projections fused into their residual ADDs, 200,704 B without."""
    n = _first_28(mbv2_rd)
    assert n == 6
    stage = plan_patch_stage(mbv2_rd, _names(mbv2_rd), n, 4)
    assert stage.input_patch == 63
    assert (stage.macs - stage.base_macs) / _network_macs(mbv2_rd) <= 0.05
    plan = make_plan(mbv2_rd, PlanOptions(patch=(n, 4)))
    assert plan.patch.input_patch == 63 and plan.mac_overhead <= 0.05
    assert abs(plan.peak_bytes / (172 * KIB) - 1) <= 0.01
    assert make_plan(mbv2_rd, dataclasses.replace(UNFUSED, patch=(n, 4))).peak_bytes == 200_704


def test_mbv2_paper_convention(mbv2):
    """Which count reproduces MCUNetV2's "1372 kB per layer -> 172 kB per patch": kB = 1024 B, depthwise in place.

    - kB is KiB: 1372 kB = block 2's expansion 16·112² + 96·112² = 1,404,928 B = 1372.0 KiB exactly (1405 kB if
      kB were 1000 B); likewise the first conv's 3·224² + 32·112² = 551,936 B = 539.0 KiB, and the thesis writes
      (3·117² + 16·117²)/1024 = 254 kB.
    - The per-layer count has depthwise in place (TinyEngine): otherwise block 2's depthwise, 96·112² + 96·56² =
      1,505,280 B (1470 KiB), would be the peak, not the expansion.
    - 172 kB is not the patch stage at all: the stage needs 170,432 B = 166.4 KiB (in-place off; 162,288 B =
      158.5 KiB with it). It is the rest of the network (thesis: "for OP <= 7 the peak is dominated by the rest"):
      block 5's expansion, 32·28² + 192·28² = 175,616 B = 171.5 KiB -> "172kB" (and its in-place depthwise the same
      175,616 B without scratch) — with the block's residual input NOT held beside the projection's output.
    Unfused, our planner holds the residual (28²·32 B) while block 5's projection writes its own 28²·32 B output:
    150,528 + 25,088 + 25,088 = 200,704 B = 196 KiB. Fusing the ADD into the projection conv (accumulating into the
    dead residual buffer, DESIGN.md "may be fused into the projection conv", `PlanOptions.fuse_add`, on by default)
    is what the paper's figure assumes: the rest then peaks at block 5's in-place depthwise, 150,528 + 25,088 + one
    padded 30² channel = 176,516 B = 172.4 KiB (the paper's per-layer count has no scratch).
    """
    per_layer = 16 * 112 ** 2 + 96 * 112 ** 2
    assert per_layer / KIB == 1372 and round(per_layer / 1000) != 1372
    assert max(analyze(mbv2, _names(mbv2)).live_bytes) == per_layer  # our planner, in place, agrees
    n = _first_28(mbv2)
    paper_rest = max(_in_plus_out_inplace_dw(mbv2, node) for node in mbv2.nodes[n:])
    assert paper_rest == 32 * 28 ** 2 + 192 * 28 ** 2 == 175_616
    stage = plan_patch_stage(mbv2, _names(mbv2), n, 4, NO_INPLACE)
    paper_total = max(stage_peak(stage), paper_rest)
    assert abs(paper_total / (172 * KIB) - 1) <= 0.01
    assert abs(paper_total / 172_000 - 1) > 0.01  # with kB = 1000 B it is 2 % off
    assert _rest_peak(mbv2, n, UNFUSED) == 150_528 + 25_088 + 25_088  # unfused: block 5's projection
    assert _rest_peak(mbv2, n, PlanOptions()) == BLOCK5_DW == 176_516  # fused: block 5's depthwise


def _in_plus_out_inplace_dw(graph, node) -> int:
    """The papers' per-layer count: inputs + output, a depthwise conv overwriting its input (no scratch)."""
    ins = sum(graph.tensors[t].numel for t in dict.fromkeys(graph.activation_inputs(node)))
    out = graph.tensors[node.outputs[0]].numel
    return max(ins, out) if node.op is Op.DEPTHWISE_CONV_2D else ins + out


def test_mbv2_planned_total(mbv2):
    """Our total planned peak with the MbV2 stage (13 nodes, 4x4) = max(stage, rest): the rest of the network bounds
    it (see test_mbv2_paper_convention) — 176,516 B with the projections fused into their residual ADDs, 200,704 B
    (196 KiB) without; the stage itself is 162,288 B."""
    n = _first_28(mbv2)
    stage = plan_patch_stage(mbv2, _names(mbv2), n, 4)
    assert max(stage_peak(stage), _rest_peak(mbv2, n, PlanOptions())) == BLOCK5_DW
    assert max(stage_peak(stage), _rest_peak(mbv2, n, UNFUSED)) == 200_704
    plan = make_plan(mbv2, PlanOptions(patch=(n, 4)))
    assert plan.peak_bytes == plan.arena_bytes == BLOCK5_DW
    assert plan.patch.input_patch == 75
    assert 0.08 <= plan.mac_overhead <= 0.14
    assert len(plan.fused) == 9  # the residual blocks after the stage (block 3's ADD runs inside it, unfused)
    assert make_plan(mbv2, dataclasses.replace(UNFUSED, patch=(n, 4))).peak_bytes == 200_704


def test_mbv2_total_within_1pc_of_172kB(mbv2):
    """The issue's acceptance: `--patch 5-blocks,4x4` within 1 % of 172 kB (KiB) at +8..14 % MACs."""
    n = _first_28(mbv2)
    stage = plan_patch_stage(mbv2, _names(mbv2), n, 4)
    total = max(stage_peak(stage), _rest_peak(mbv2, n, PlanOptions()))
    assert abs(total / (172 * KIB) - 1) <= 0.01
    plan = make_plan(mbv2, PlanOptions(patch=(n, 4)))
    assert abs(plan.peak_bytes / (172 * KIB) - 1) <= 0.01 and 0.08 <= plan.mac_overhead <= 0.14


def test_mbv2_auto(mbv2):
    """auto minimises the total peak, ties broken by fewer MACs: with fused residual ADDs the rest of the network
    (block 5's depthwise, 176,516 B) is the floor, and the paper's stage (13 nodes, 4x4, 75² input patches, +9.3 %
    MACs) is the cheapest one that reaches it — 8.0x below per layer, as MCUNetV2 reports. A +15 % MAC budget
    changes nothing; unfused, auto needs 21 nodes and 7x7 patches (+117 % MACs) for 195,440 B."""
    per_layer = max(analyze(mbv2, _names(mbv2)).live_bytes)
    auto = choose_patch(mbv2, _names(mbv2))
    total = max(stage_peak(auto), _rest_peak(mbv2, auto.n_nodes, PlanOptions()))
    assert (auto.n_nodes, auto.grid, auto.input_patch, total) == (13, 4, 75, BLOCK5_DW)
    assert round(per_layer / total, 1) == 8.0
    budget = choose_patch(mbv2, _names(mbv2), PlanOptions(max_mac_overhead=0.15))
    assert (budget.n_nodes, budget.grid, budget.input_patch) == (13, 4, 75)
    assert budget.tile_offsets  # the returned stage is laid out
    unlimited = dataclasses.replace(UNFUSED, max_mac_overhead=None)
    unfused = choose_patch(mbv2, _names(mbv2), unlimited)
    assert (unfused.n_nodes, unfused.grid) == (21, 7)
    assert max(stage_peak(unfused), _rest_peak(mbv2, 21, UNFUSED)) == 195_440
    notes = []  # the default +20 % limit rules that stage out, and says what it would have saved
    limited = choose_patch(mbv2, _names(mbv2), UNFUSED, notes=notes)
    assert limited is None or limited.macs - limited.base_macs <= 0.2 * sum(node_macs(mbv2, x) for x in mbv2.nodes)
    assert len(notes) == 1 and "195440 B" in notes[0] and "+117 % MACs" in notes[0]
    plan = make_plan(mbv2, PlanOptions(patch="auto"))
    assert plan.peak_bytes == total and 0.08 <= plan.mac_overhead <= 0.14
    assert make_plan(mbv2, PlanOptions(patch="auto", max_mac_overhead=0.15)).peak_bytes == total
    tight = make_plan(mbv2, PlanOptions(patch="auto", max_mac_overhead=0.05))
    assert tight.mac_overhead <= 0.05 and tight.peak_bytes > total
    assert any(f"to {total} B" in note for note in tight.notes)


def test_mbv2_auto_reaches_172kB(mbv2):
    """The paper's precision: 172 kB means round(peak / 1024) <= 172."""
    auto = choose_patch(mbv2, _names(mbv2))
    assert round(max(stage_peak(auto), _rest_peak(mbv2, auto.n_nodes, PlanOptions())) / KIB) <= 172
    assert round(make_plan(mbv2, PlanOptions(patch="auto")).peak_bytes / KIB) <= 172


def test_auto_returns_none_when_nothing_helps():
    b = GraphBuilder()
    x = b.input((1, 8, 8, 4))
    y = _conv(b, x, 2, k=1)  # shrinks channels, never space: no cut down-samples
    g = b.build([b.node(Op.MEAN, [y])])
    assert candidate_cuts(g, _names(g)) == []
    assert choose_patch(g, _names(g)) is None
