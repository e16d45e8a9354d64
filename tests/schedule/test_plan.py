"""Tests for schedule/plan.py (and report/plan_plot.py).

Oracles: an independent byte-level check (every byte a live tensor touches, strided slices included, is claimed by
one tensor only unless the two are aliases the plan declares); the bytes the placements hold at each step, counted
here, against the plan's live_bytes; the plan executor, which runs the int8 graph inside one simulated arena at the
planned offsets and must match the numpy reference bit for bit; the MobileNetV2 figure. (lower bound <= peak <= arena
is not restated here: verify_plan raises inside make_plan unless it holds.)
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_liveness import OPTION_SETS, dags

from kilobyte.errors import KilobyteError
from kilobyte.interp.int8_ref import run_int8
from kilobyte.ir import ConvAttrs, DepthwiseAttrs, GraphBuilder, Op
from kilobyte.quant import quantize, quantize_input
from kilobyte.schedule.execute import execute_plan
from kilobyte.schedule.liveness import check_order
from kilobyte.schedule.plan import make_plan, plan_to_dict
from kilobyte.schedule.plan_types import PlanOptions

ARENA_OPTIONS = st.sampled_from([PlanOptions(arena_strategy=s, alignment=a)
                                 for s in ("auto", "greedy", "exact") for a in (1, 4, 16)])


# -- the independent checker -----------------------------------------------------------------------------------
class Footprint:
    """The bytes a placed tensor touches: an interval when contiguous, else (concat slices) an explicit set."""

    def __init__(self, graph, t, p):
        c = graph.tensors[t].shape[-1]
        rows = graph.tensors[t].numel // c
        self.lo, self.hi = p.offset, p.offset + (rows - 1) * p.channel_stride + c
        self.contiguous = p.channel_stride == c
        self._set = None
        self._args = (p.offset, rows, p.channel_stride, c)

    def bytes(self) -> set[int]:
        if self._set is None:
            o, rows, stride, c = self._args
            self._set = set((o + np.arange(rows)[:, None] * stride + np.arange(c)[None, :]).ravel().tolist())
        return self._set

    def meets(self, other) -> bool:
        if self.hi <= other.lo or other.hi <= self.lo:
            return False
        return (self.contiguous and other.contiguous) or bool(self.bytes() & other.bytes())

    def within(self, other) -> bool:
        if self.contiguous and other.contiguous:
            return other.lo <= self.lo and self.hi <= other.hi
        return self.bytes() <= other.bytes()


def _lifetimes(graph, plan) -> dict[str, tuple[int, int]]:
    pos = {name: i for i, name in enumerate(plan.order)}
    n_stage = plan.patch.n_nodes if plan.patch else 0
    life = {n.outputs[0]: [0 if pos[n.name] < n_stage else pos[n.name], pos[n.name]] for n in graph.nodes}
    for n in graph.nodes:
        for t in n.inputs:
            if t in life:
                life[t][1] = max(life[t][1], pos[n.name])
    for t in graph.outputs:
        life[t][1] = len(plan.order) - 1
    return life


def _alias_classes(graph) -> dict[str, str]:
    """Tensors that may legitimately share bytes: RESHAPE in/out and CONCAT inputs/output (transitively)."""
    parent = {t: t for t in graph.tensors}

    def find(t):
        while parent[t] != t:
            t = parent[t]
        return t

    for n in graph.nodes:
        if n.op in (Op.RESHAPE, Op.CONCAT):
            for x in n.inputs:
                parent[find(x)] = find(n.outputs[0])
    return {t: find(t) for t in graph.tensors}


def _declared(graph, plan, classes, a: str, b: str, step: int, fa, fb) -> bool:
    """Overlap between live tensors a and b is declared: an in-place pair at its step, or one tensor lying inside
    a related one (a RESHAPE alias, a concat input in its slice of the output; exactness is checked apart)."""
    node = graph.node(plan.order[step])
    if node.name in plan.inplace and node.outputs[0] in (a, b):  # the output and (an alias of) its dying input
        other = b if a == node.outputs[0] else a
        if classes[other] == classes[plan.inplace[node.name]] and other in node.inputs:
            return True
    return classes[a] == classes[b] and (fa.within(fb) or fb.within(fa))


def _check_aliases_exact(graph, plan, feet) -> None:
    """A RESHAPE at its input's offset covers the same bytes; a concat input at its slice is inside the output."""
    for t, p in plan.placements.items():
        node = graph.producer(t)
        if node.op is Op.RESHAPE and node.inputs[0] in plan.placements:
            if plan.placements[node.inputs[0]].offset == p.offset:
                assert feet[t].within(feet[node.inputs[0]]) and feet[node.inputs[0]].within(feet[t])
        if node.op is Op.CONCAT:
            channel = 0
            for x in node.inputs:
                q = plan.placements.get(x)
                if q is not None and q.channel_stride == p.channel_stride and feet[x].meets(feet[t]):
                    assert q.offset == p.offset + channel and feet[x].within(feet[t]), (t, x)
                channel += graph.tensors[x].shape[-1]


def check_no_overlap(graph, plan) -> None:
    """No byte is held by two tensors at one step unless declared; scratch overlaps nothing live; in the arena."""
    life = _lifetimes(graph, plan)
    classes = _alias_classes(graph)
    feet = {t: Footprint(graph, t, p) for t, p in plan.placements.items()}
    assert all(0 <= f.lo and f.hi <= plan.arena_bytes for f in feet.values())
    _check_aliases_exact(graph, plan, feet)
    region = None
    if plan.patch is not None:
        region = (plan.patch.working_offset, plan.patch.working_offset + plan.patch.working_bytes)
    for i, name in enumerate(plan.order):
        live = [t for t in plan.placements if life[t][0] <= i <= life[t][1]]
        for k, a in enumerate(live):
            for b in live[k + 1:]:
                if feet[a].meets(feet[b]):
                    assert _declared(graph, plan, classes, a, b, i, feet[a], feet[b]), (name, a, b)
        busy = [plan.scratch[name]] if name in plan.scratch else []
        if region and i < plan.patch.n_nodes:
            busy.append((region[0], region[1] - region[0]))
        for o, size in busy:
            assert o + size <= plan.arena_bytes
            for t in live:
                assert feet[t].hi <= o or o + size <= feet[t].lo, (name, t)


def held_bytes(graph, plan) -> list[int]:
    """Per step, how many distinct arena bytes the placed tensors alive then and the step's scratch touch (the
    patch working region not included), counted from the placements alone."""
    life = _lifetimes(graph, plan)
    feet = {t: Footprint(graph, t, p) for t, p in plan.placements.items()}
    held = []
    for i, name in enumerate(plan.order):
        used = np.zeros(plan.arena_bytes, dtype=bool)
        for t, f in feet.items():
            if life[t][0] <= i <= life[t][1]:
                used[sorted(f.bytes())] = True
        if name in plan.scratch:
            o, size = plan.scratch[name]
            used[o:o + size] = True
        held.append(int(used.sum()))
    return held


def _int8(graph, seed=0):
    rng = np.random.default_rng(seed)
    shape = graph.tensors[graph.inputs[0]].shape
    q = quantize(graph, rng.normal(size=(4, *shape[1:])).astype(np.float32))
    return q, quantize_input(q, rng.normal(size=shape).astype(np.float32))


def assert_executes(graph, plan, x) -> None:
    want = run_int8(graph, x)
    got = execute_plan(graph, plan, x)
    for name in graph.outputs:
        np.testing.assert_array_equal(got[name], want[name])


# -- properties ------------------------------------------------------------------------------------------------
@settings(max_examples=60)
@given(dags(max_nodes=10), st.sampled_from(OPTION_SETS), ARENA_OPTIONS, st.booleans())
def test_random_plans_never_overlap_and_hold_their_peak(graph, rules, arena, reorder):
    import dataclasses

    options = dataclasses.replace(rules, arena_strategy=arena.arena_strategy, alignment=arena.alignment,
                                  reorder=reorder)
    plan = make_plan(graph, options)
    check_order(graph, plan.order)
    assert reorder or plan.order == tuple(n.name for n in graph.nodes)
    check_no_overlap(graph, plan)
    # The reported bytes per step against the bytes the placements really hold: never fewer; exactly those unless a
    # concat output is held whole from its first slice on (then its unwritten channels count before they exist).
    held = held_bytes(graph, plan)
    assert all(h <= live for h, live in zip(held, plan.live_bytes)), (held, plan.live_bytes)
    if not (options.concat_in_place and any(n.op is Op.CONCAT for n in graph.nodes)):
        assert held == list(plan.live_bytes)
    fused_outputs = {graph.node(conv).outputs[0] for conv in plan.fused}
    assert set(plan.placements) == {n.outputs[0] for n in graph.nodes} - fused_outputs
    assert options.fuse_add or not plan.fused
    assert plan.scratch_bytes == max([b for _, b in plan.scratch.values()], default=0)
    assert all(p.offset % options.alignment == 0 for t, p in plan.placements.items()
               if p.channel_stride == graph.tensors[t].shape[-1])


@settings(max_examples=40)
@given(dags(max_nodes=10), st.sampled_from(OPTION_SETS), st.integers(0, 1000))
def test_random_int8_plans_execute_bit_exactly_in_one_arena(graph, options, seed):
    q, x = _int8(graph, seed)
    plan = make_plan(q, options)
    assert_executes(q, plan, x)
    assert make_plan(graph, options).peak_bytes == plan.peak_bytes  # float graphs plan at 1 B per element


# -- examples --------------------------------------------------------------------------------------------------
def small_cnn():
    """16x16x3 -> conv3x3/s2 (8) -> DW3x3 -> conv1x1 (16) -> DW3x3/s2 -> conv1x1 (8) -> residual block -> conv."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("cnn")

    def conv(x, cout, k=1, s=1):
        w = rng.normal(size=(cout, k, k, b.shape(x)[3])).astype(np.float32) / k
        return b.node(Op.CONV_2D, [x], ConvAttrs((s, s), (k // 2,) * 4), params={"weight": w})

    def dw(x, s=1):
        w = rng.normal(size=(1, 3, 3, b.shape(x)[3])).astype(np.float32) / 3
        return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs((s, s), (1, 1, 1, 1)), params={"weight": w})

    y = conv(b.input((1, 16, 16, 3)), 8, 3, 2)
    y = conv(dw(y), 16)
    y = conv(dw(y, 2), 8)
    y = b.node(Op.ADD, [y, conv(dw(conv(y, 24)), 8)])
    return b.build([conv(y, 4)])


def test_patch_plan_runs_its_stage_first_and_executes():
    q, x = _int8(small_cnn())
    plan = make_plan(q, PlanOptions(patch=(5, 2)))
    assert plan.patch is not None and plan.order[:5] == plan.patch.nodes
    assert plan.mac_overhead > 0 and plan.macs > plan.patch.base_macs
    stage_step = plan.patch.working_peak + plan.patch.stage_output_bytes
    assert plan.live_bytes[:5] == (stage_step,) * 5
    check_no_overlap(q, plan)
    assert_executes(q, plan, x)
    d = plan_to_dict(plan)
    assert d["patch"]["n_nodes"] == 5 and d["patch"]["grid"] == 2
    assert d["patch"]["stage_output_bytes"] == plan.patch.stage_output_bytes


def _reads_columns(q, node) -> bool:
    """The DSP conv widens im2col columns only with >= KB_COLS_MIN_OUT_C (16) output channels (runtime/c/arm)."""
    return node.op is Op.CONV_2D and q.tensors[node.outputs[0]].shape[-1] >= 16


def test_model_adaptive_im2col_grows_buffers_without_raising_the_peak():
    q, x = _int8(small_cnn())
    dsp = PlanOptions(kernels="dsp")
    base = make_plan(q, dsp)
    adaptive = make_plan(q, dataclasses.replace(dsp, im2col="model-adaptive"))
    assert adaptive.peak_bytes == base.peak_bytes
    for n in q.nodes:
        if not _reads_columns(q, n) or q.tensors[n.inputs[1]].shape[1:3] == (1, 1):
            continue
        col = 2 * int(np.prod(q.tensors[n.inputs[1]].shape[1:]))
        got = adaptive.scratch[n.name][1]
        assert got % col == 0 and base.scratch[n.name][1] <= got <= 6 * col  # the kernel reads at most 6 columns
    assert_executes(q, adaptive, x)


def test_convs_get_more_columns_only_from_free_bytes(monkeypatch):
    """With the DSP kernels, unfused convs that read columns get six int16 columns of kh*kw*Cin (the DSP kernels' 1
    channel x 6 pixel blocks), or 1x1 convs two, where their step has room under the peak; peak and arena stay what
    they are without them. Convs with fewer than 16 output channels and every portable conv get none."""
    import kilobyte.schedule.scratch as scratch_module

    q, x = _int8(small_cnn())
    dsp = PlanOptions(kernels="dsp")
    with_cols = make_plan(q, dsp)
    monkeypatch.setattr(scratch_module, "free_conv_columns", lambda *a: {})
    import kilobyte.schedule.plan as plan_module

    monkeypatch.setattr(plan_module, "free_conv_columns", lambda *a: {})
    without = make_plan(q, dsp)
    assert (with_cols.peak_bytes, with_cols.arena_bytes) == (without.peak_bytes, without.arena_bytes)
    column = {n.name: int(np.prod(q.tensors[n.inputs[1]].shape[1:])) for n in q.nodes if _reads_columns(q, n)
              and n.name not in with_cols.fused}  # kh*kw*Cin
    pointwise = {n.name for n in q.nodes if n.name in column and q.tensors[n.inputs[1]].shape[1:3] == (1, 1)}
    got = {name: with_cols.scratch[name][1] for name in column if name in with_cols.scratch}
    assert all(size in (4 * column[name], 12 * column[name]) for name, size in got.items()), got
    assert any(size == 12 * column[name] for name, size in got.items())
    assert any(name in pointwise for name in got)
    assert not any(name in without.scratch for name in pointwise)
    assert all(without.scratch[name][1] == 4 * column[name] for name in column if name not in pointwise)
    narrow = [n.name for n in q.nodes if n.op is Op.CONV_2D and not _reads_columns(q, n)]
    assert narrow and not any(name in with_cols.scratch for name in narrow)
    portable = make_plan(q)
    assert not any(portable.scratch.get(n.name) for n in q.nodes if n.op is Op.CONV_2D)
    assert_executes(q, with_cols, x)


def test_wide_conv_columns_trade_sram_for_six_columns_everywhere():
    """conv_columns="wide" (DSP kernels): every unfused conv that reads columns and has >= 3 output pixels gets six
    columns, where needed above the default peak; the plan still executes exactly."""
    q, x = _int8(small_cnn())
    dsp = PlanOptions(kernels="dsp")
    free, wide = make_plan(q, dsp), make_plan(q, dataclasses.replace(dsp, conv_columns="wide"))
    convs = {n.name: int(np.prod(q.tensors[n.inputs[1]].shape[1:])) for n in q.nodes if _reads_columns(q, n)
             and n.name not in wide.fused and np.prod(q.tensors[n.outputs[0]].shape[1:3]) >= 3}
    assert convs and all(wide.scratch[name][1] == 12 * k for name, k in convs.items())
    assert wide.peak_bytes >= free.peak_bytes
    assert_executes(q, wide, x)
    with pytest.raises(KilobyteError, match="conv_columns must be one of"):
        make_plan(q, PlanOptions(conv_columns="fast"))
    with pytest.raises(KilobyteError, match="kernels must be one of"):
        make_plan(q, PlanOptions(kernels="helium"))


def test_plan_to_dict_is_json_with_the_agreed_keys():
    plan = make_plan(small_cnn())
    d = json.loads(json.dumps(plan_to_dict(plan)))
    for key in ("peak_bytes", "arena_bytes", "scratch_bytes", "macs", "input_bytes", "mac_overhead", "optimal",
                "order", "patch", "lower_bound", "live_bytes", "notes"):
        assert key in d
    assert d["patch"] is None and d["input_bytes"] == 16 * 16 * 3 and d["mac_overhead"] == 0.0


def test_bad_options_are_one_line_errors():
    g = small_cnn()
    for bad in (PlanOptions(patch="sometimes"), PlanOptions(im2col="huge"), PlanOptions(arena_strategy="best"),
                PlanOptions(alignment=0), PlanOptions(patch=(99, 2))):
        with pytest.raises(KilobyteError):
            make_plan(g, bad)


def test_plot_plan_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from kilobyte.report.plan_plot import analytic_bytes, plot_plan

    g = small_cnn()
    plan = make_plan(g, PlanOptions(patch=(5, 2)))
    path = plot_plan(g, plan, tmp_path / "plan.png", sram_bytes=4096)
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("plan.png")
    assert [p.name for p in tmp_path.iterdir()] == ["plan.png"]  # no temporary file left behind
    assert analytic_bytes(g, plan.order)[0] == 16 * 16 * 3 + 8 * 8 * 8


def test_both_checkers_catch_a_corrupted_plan():
    import dataclasses

    from kilobyte.schedule.inplace import find_aliases
    from kilobyte.schedule.plan import PlanError, verify_plan

    g = small_cnn()
    plan = make_plan(g, PlanOptions(inplace_depthwise=False, inplace_add=False))
    a, b = g.nodes[1].outputs[0], g.nodes[2].outputs[0]  # a DW output and the conv reading it: live together
    moved = dict(plan.placements)
    moved[a] = dataclasses.replace(moved[a], offset=moved[b].offset)  # a (512 B) inside b (1024 B)
    bad = dataclasses.replace(plan, placements=moved)
    with pytest.raises(PlanError, match="overlaps"):
        verify_plan(g, bad, find_aliases(g, plan.options))
    with pytest.raises(AssertionError):
        check_no_overlap(g, bad)


def test_consumed_conv_inputs_are_exactly_those_nothing_reads_later():
    """Plan.consumed (convs whose kernel may overwrite the input rows it has read) against a hand-made graph: the
    caller's input and a tensor two convs read are never consumed, except by the last reader; verify_plan rejects
    a plan that claims more."""
    import dataclasses

    from kilobyte.schedule.inplace import find_aliases
    from kilobyte.schedule.plan import PlanError, verify_plan

    b = GraphBuilder()
    x = b.input((1, 8, 8, 4))
    w = {"weight": np.ones((4, 3, 3, 4))}
    y = b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)), params=w)
    u = b.node(Op.CONV_2D, [y], ConvAttrs(padding=(1, 1, 1, 1)), params=w)
    v = b.node(Op.CONV_2D, [y], ConvAttrs(padding=(1, 1, 1, 1)), params=w)
    z = b.node(Op.CONV_2D, [b.node(Op.ADD, [u, v])], ConvAttrs(), params={"weight": np.ones((2, 1, 1, 4))})
    g = b.build([z])
    plan = make_plan(g)
    pos = {n: i for i, n in enumerate(plan.order)}
    readers = [n.name for n in g.nodes if n.inputs[0] == y]
    last = max(readers, key=pos.get)
    add = next(n for n in g.nodes if n.op is Op.ADD)
    assert plan.consumed == {last: y, g.nodes[-1].name: add.outputs[0]}
    assert plan_to_dict(plan)["consumed"] == plan.consumed
    aliases = find_aliases(g, plan.options)
    for claim in ({min(readers, key=pos.get): y}, {g.nodes[0].name: x}):
        with pytest.raises(PlanError, match="may overwrite its input"):
            verify_plan(g, dataclasses.replace(plan, consumed=claim), aliases)


# -- the paper figure (last: it builds MobileNetV2 through the torch frontend) ---------------------------------
def test_mobilenetv2_peak_is_the_block2_expansion():
    pytest.importorskip("torch")
    from kilobyte import zoo
    from kilobyte.frontends import from_torch
    from kilobyte.transforms import prepare_for_inference

    module, shape = zoo.create("mobilenetv2")
    graph = prepare_for_inference(from_torch(module, shape))
    plan = make_plan(graph)
    expansion = 16 * 112 * 112 + 96 * 112 * 112  # 1,404,928 B: block 2's 1x1 expansion reads 16 and writes 96 ch
    step = plan.live_bytes.index(plan.peak_bytes)
    at_peak = plan.scratch.get(plan.order[step], (0, 0))[1]
    assert expansion <= plan.peak_bytes <= expansion + at_peak
    assert plan.peak_bytes == 1_404_928 and plan.optimal and plan.input_bytes == 3 * 224 * 224
    assert plan.arena_bytes == plan.peak_bytes
    assert round(plan.macs / 1e6, 1) == 300.8
    check_no_overlap(graph, plan)
