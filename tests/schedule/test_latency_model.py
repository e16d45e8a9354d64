"""Schedule tests: the instruction-count model (kilobyte/schedule/latency.py) — features against hand counts and
brute force, the patch stage's tiles against the planner's own MAC count, the fit, its speed, its errors, and the
shipped Cortex-M7 constants against fresh measurements (within the held-out error the shipped file reports)."""

from __future__ import annotations

import importlib.util
import json
import os
import time

import numpy as np
import pytest

from kilobyte.ir import ConvAttrs, DepthwiseAttrs, GraphBuilder, MeanAttrs, Op, ReshapeAttrs
from kilobyte.schedule import PlanOptions
from kilobyte.schedule.latency import (
    INVOKE,
    SHIPPED,
    LatencyModel,
    LatencyModelError,
    Sample,
    edge_pixels,
    estimate_instructions,
    fit_model,
    per_layer_features,
    shipped_model,
)
from kilobyte.schedule.plan import plan_steps


def brute_edge(oh, ow, ih, iw, k, s, pad) -> int:
    """Output pixels whose window reads a position outside the input, by walking every pixel and tap."""
    n = 0
    for oy in range(oh):
        for ox in range(ow):
            ys = [oy * s[0] - pad[0] + i for i in range(k[0])]
            xs = [ox * s[1] - pad[2] + j for j in range(k[1])]
            n += any(y < 0 or y >= ih for y in ys) or any(x < 0 or x >= iw for x in xs)
    return n


@pytest.mark.parametrize("geom", [
    (8, 8, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1)), (4, 4, 8, 8, (3, 3), (2, 2), (0, 1, 0, 1)),
    (5, 3, 9, 6, (5, 5), (2, 2), (2, 2, 2, 1)), (6, 6, 6, 6, (1, 1), (1, 1), (0,) * 4),
    (7, 7, 7, 7, (7, 7), (1, 1), (3, 3, 3, 3)), (3, 4, 5, 8, (3, 3), (1, 2), (1, 0, 0, 0))])
def test_edge_pixels_equal_brute_force(geom):
    oh, ow, ih, iw, k, s, pad = geom
    assert edge_pixels(oh, ow, ih, iw, k, s, pad) == brute_edge(oh, ow, ih, iw, k, s, pad)


def small_net():
    """conv 3x3 (8x8x4 -> 8x8x16) -> depthwise 3x3 s2 -> 1x1 conv to 8 -> MEAN -> RESHAPE -> FC (10)."""
    b = GraphBuilder("small")
    x = b.input((1, 8, 8, 4))
    y = b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": np.zeros((16, 3, 3, 4))})
    y = b.node(Op.DEPTHWISE_CONV_2D, [y], DepthwiseAttrs((2, 2), (0, 1, 0, 1)),
               params={"weight": np.zeros((1, 3, 3, 16))})
    y = b.node(Op.CONV_2D, [y], ConvAttrs(), params={"weight": np.zeros((8, 1, 1, 16))})
    y = b.node(Op.MEAN, [y], MeanAttrs((1, 2), keepdims=True))
    y = b.node(Op.RESHAPE, [y], ReshapeAttrs((1, 8)))
    y = b.node(Op.FULLY_CONNECTED, [y], params={"weight": np.zeros((10, 8))})
    return b.build([y])


def test_layer_features_by_hand():
    g = small_net()
    f = per_layer_features(g, plan_steps(g, PlanOptions()))
    conv, dw, pw, mean, fc = (f[n.name] for n in g.nodes if n.op is not Op.RESHAPE)
    assert conv == {"kb_conv_3x3.call": 1, "kb_conv_3x3.channel": 16, "kb_conv_3x3.pixel": 64,
                    "kb_conv_3x3.input": 256, "kb_conv_3x3.output": 1024, "kb_conv_3x3.mac": 64 * 16 * 36,
                    "kb_conv_3x3.window": 64 * 36, "kb_conv_3x3.edge": 28 * 36}  # 64 - 6x6 interior pixels
    # 4x4 outputs of stride 2 with padding only at the bottom / right: the last row and column meet it
    assert dw == {"kb_depthwise_inplace_3x3.call": 1, "kb_depthwise_inplace_3x3.channel": 16,
                  "kb_depthwise_inplace_3x3.pixel": 16, "kb_depthwise_inplace_3x3.input": 1024,
                  "kb_depthwise_inplace_3x3.output": 256, "kb_depthwise_inplace_3x3.mac": 256 * 9,
                  "kb_depthwise_inplace_3x3.edge": 7 * 16}
    assert pw["kb_conv_1x1.mac"] == 16 * 16 * 8 and "kb_conv_1x1.edge" not in pw
    assert mean == {"kb_mean.call": 1, "kb_mean.channel": 8, "kb_mean.input": 128}
    assert fc == {"kb_fully_connected.call": 1, "kb_fully_connected.channel": 10, "kb_fully_connected.mac": 80}
    assert f[INVOKE] == {"invoke.call": 1, "invoke.layer": 5, "invoke.output": 10}  # the RESHAPE aliases: no layer
    assert len(f) == 6


def chain_net():
    """conv 3x3 s2 -> depthwise 3x3 -> 1x1 -> depthwise 3x3 s2 -> 1x1 on 16x16x3: a patch stage candidate."""
    b = GraphBuilder("chain")
    y = b.input((1, 16, 16, 3))
    y = b.node(Op.CONV_2D, [y], ConvAttrs((2, 2), (0, 1, 0, 1)), params={"weight": np.zeros((8, 3, 3, 3))})
    y = b.node(Op.DEPTHWISE_CONV_2D, [y], DepthwiseAttrs(padding=(1, 1, 1, 1)),
               params={"weight": np.zeros((1, 3, 3, 8))})
    y = b.node(Op.CONV_2D, [y], ConvAttrs(), params={"weight": np.zeros((12, 1, 1, 8))})
    y = b.node(Op.DEPTHWISE_CONV_2D, [y], DepthwiseAttrs((2, 2), (0, 1, 0, 1)),
               params={"weight": np.zeros((1, 3, 3, 12))})
    y = b.node(Op.CONV_2D, [y], ConvAttrs(), params={"weight": np.zeros((6, 1, 1, 12))})
    return b.build([y])


@pytest.mark.parametrize("grid", [2, 3])
def test_stage_tiles_sum_to_the_planners_macs(grid):
    g = chain_net()
    steps = plan_steps(g, PlanOptions(patch=(4, grid)))
    stage = steps.draft.stage
    assert stage is not None and len(stage.tiles) == grid * grid
    f = per_layer_features(g, steps)
    macs = sum(v for name in stage.nodes for k, v in f[name].items() if k.endswith(".mac"))
    assert macs == stage.macs > stage.base_macs  # the planner's count of the repeated (halo) work
    assert all(f[name]["stage.block"] == grid * grid for name in stage.nodes)
    assert sum(f[name][k] for name in stage.nodes for k in f[name] if k.endswith(".call")) == 4 * grid * grid


def test_fit_recovers_constants():
    rng = np.random.default_rng(0)
    truth = {"a.call": 120.0, "a.mac": 0.8, "a.output": 9.0, "b.call": 60.0, "b.input": 2.5}
    samples = []
    for _ in range(12):
        f = {"a.call": 1.0, "a.mac": float(rng.integers(100, 10 ** 6)), "a.output": float(rng.integers(10, 10 ** 4))}
        samples.append(Sample(f, sum(truth[k] * v for k, v in f.items())))
        f = {"b.call": float(rng.integers(1, 9)), "b.input": float(rng.integers(10, 10 ** 5))}
        samples.append(Sample(f, sum(truth[k] * v for k, v in f.items())))
    model = fit_model(samples, "c", "k")
    assert model.constants.keys() == truth.keys()
    assert all(model.constants[k] == pytest.approx(v, rel=1e-9) for k, v in truth.items())


def test_bad_names_are_one_line_errors():
    g = small_net()
    with pytest.raises(LatencyModelError, match=r"no fitted latency model for core 'cortex-m0' with kernel set "
                                                r"'dsp'; fitted: .*cortex-m7/dsp") as e:
        estimate_instructions(g, PlanOptions(kernels="dsp"), core="cortex-m0")
    assert "\n" not in str(e.value)
    with pytest.raises(LatencyModelError, match="kernel set 'helium'"):
        shipped_model("cortex-m7", "helium")
    with pytest.raises(LatencyModelError, match=r"node 'conv_2d_0': the c / k latency model has no constant "
                                                r"'kb_conv_3x3.call'"):
        estimate_instructions(g, model=LatencyModel("c", "k", {}))


def test_cost_per_layer_well_under_a_millisecond():
    from kilobyte.nas.build import build_graph
    from kilobyte.nas.space import MBSpace

    space = MBSpace(num_classes=10)
    g = build_graph(space, space.largest(0.5, 96))
    options = PlanOptions(kernels="dsp", patch=(10, 4))
    steps = plan_steps(g, options)
    layers = len(per_layer_features(g, steps))
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        est = estimate_instructions(g, options, steps=steps)
        best = min(best, time.perf_counter() - t)
    assert est.total == pytest.approx(sum(est.per_layer.values())) and est.total > 0
    assert best / layers < 2e-4, (best, layers)  # measured: 51 µs per layer (71 layers, 4x4 patches)


_HAVE_ALL = all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
if _HAVE_ALL:
    from kilobyte.targets.cortexm import have_tools
    _HAVE_ALL = have_tools()


@pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,
                    reason="Cortex-M tools (arm-none-eabi-gcc) or kilobyte[arm] missing")
@pytest.mark.parametrize("seed", [1000, 1001])  # seeds the fit never saw (it uses 0 ... 43); 1001: a patch stage
def test_shipped_model_predicts_fresh_networks(tmp_path, seed):
    from latency_nets import candidate

    from kilobyte.codegen import compile_graph
    from kilobyte.targets.cortexm import build_firmware, count_instructions

    c = candidate(seed, patch=seed % 2 == 1)
    assert (c.patch is not None) == (seed % 2 == 1)
    options = PlanOptions(kernels="dsp", patch=c.patch)
    r = compile_graph(c.graph, tmp_path / "m", options)
    measured = count_instructions(build_firmware(r.out_dir, "cortex-m7", kernels="dsp"), c.input).total
    est = estimate_instructions(c.graph, options, core="cortex-m7")
    held_out = json.loads(SHIPPED["cortex-m7", "dsp"].read_text())["held_out"]
    bound = held_out["networks_patch" if c.patch else "networks_per_layer"]["max_relative"]
    # measured (constants re-fitted after issue 29's depthwise group path): 1000 -1.3 % (bound 1.7 %), 1001 (10, 4)
    # -3.8 % (bound 9.8 %)
    assert abs(est.total / measured - 1) <= bound, (est.total, measured, bound)
