"""Tests for schedule/estimate.py: `estimate_resources` gives exactly `make_plan`'s and the compiled project's figures.

Oracles: `make_plan` (which verifies its plan), and the generated C project: the manifest's kernel families and
arena, the constant arrays declared in `model.c`, and the rest of its Flash as the Flash model counts it from the
text (`model_c_code.project_code`: the functions it calls, its layer functions, patch loop, structs and tables).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from model_c_code import project_code
from random_nets import quantized, random_graph

from kilobyte.codegen import compile_graph
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.flash import code_bytes
from kilobyte.schedule.plan import make_plan
from kilobyte.schedule.plan_types import PlanOptions

N_RANDOM = 300
ARRAY = re.compile(r"^(?:static )?const (int8_t|int32_t) kb_(?:w|b|mult|shift|lut|k)_\w+\[(\d+)\]", re.M)


def _options(rng) -> PlanOptions:
    patch = [None, None, "auto"][rng.integers(3)]
    return PlanOptions(kernels=("portable", "dsp")[rng.integers(2)], patch=patch,
                       im2col=("per-layer", "model-adaptive")[rng.integers(2)],
                       conv_columns=("free", "free", "wide")[rng.integers(3)])


def _c_constant_bytes(project) -> int:
    text = (project / "src" / "model.c").read_text()
    return sum(int(n) * (1 if t == "int8_t" else 4) for t, n in ARRAY.findall(text))


def _check(graph, options, out_dir, core: str | None = None) -> None:
    result = compile_graph(graph, out_dir, options)
    est = estimate_resources(result.graph, options, core=core)
    plan, m = result.plan, result.manifest
    assert (est.peak_bytes, est.arena_bytes, est.scratch_bytes, est.input_bytes, est.macs) == (
        plan.peak_bytes, plan.arena_bytes, plan.scratch_bytes, plan.input_bytes, plan.macs)
    assert (est.arena_bytes, est.peak_bytes, est.macs) == (m["arena_bytes"], m["peak_bytes"], m["macs"])
    assert list(est.families) == m["kernels"]
    assert est.weight_bytes == _c_constant_bytes(result.out_dir)
    code = project_code((result.out_dir / "src" / "model.c").read_text(), len(m["outputs"]))
    assert est.functions == tuple(sorted(code.functions))
    assert est.flash_bytes == est.weight_bytes + code_bytes(code, options.kernels, core)


def test_estimate_equals_plan_and_project_on_random_graphs(tmp_path):
    rng = np.random.default_rng(12)
    for seed in range(N_RANDOM):
        qgraph, _ = quantized(random_graph(seed), seed)
        _check(qgraph, _options(rng), tmp_path / f"m{seed}")


@pytest.mark.parametrize("name,width,res", [("mnist-cnn", 1.0, 28), ("resnet-small", 1.0, 32),
                                            ("vgg-small", 1.0, 32), ("mobilenetv2", 0.35, 64),
                                            ("mbv2-rd", 0.35, 64), ("mnasnet", 0.35, 64)])
@pytest.mark.parametrize("options", [PlanOptions(), PlanOptions(kernels="dsp"),
                                     PlanOptions(kernels="dsp", patch="auto")], ids=["portable", "dsp", "dsp-patch"])
def test_estimate_equals_plan_and_project_on_the_zoo(tmp_path, name, width, res, options):
    from kilobyte.api import load

    graph = load(name, width=width, resolution=res).graph
    qgraph, _ = quantized(graph, 0)
    _check(qgraph, options, tmp_path / "m", core="cortex-m7")


def test_estimate_of_a_float_graph_equals_its_plan():
    """Float graphs (search candidates before training) are planned as int8, one byte per element."""
    from kilobyte.api import load

    graph = load("mobilenetv2", width=0.35, resolution=96).graph
    for options in (PlanOptions(), PlanOptions(patch="auto", kernels="dsp")):
        est, plan = estimate_resources(graph, options), make_plan(graph, options)
        assert (est.peak_bytes, est.arena_bytes, est.scratch_bytes, est.macs) == (
            plan.peak_bytes, plan.arena_bytes, plan.scratch_bytes, plan.macs)


@pytest.mark.parametrize("name", ["mnist-cnn", "vgg-small"])
def test_estimate_of_a_float_graph_names_the_compiled_families(tmp_path, name):
    """A float MEAN is counted as the int8 MEAN quantize() keeps (kb_mean; vgg-small also has max pooling), so the
    float graph's Flash estimate is the compiled model's."""
    from kilobyte.api import load

    graph = load(name, resolution=28 if name == "mnist-cnn" else 32).graph
    assert any(n.op.value == "MEAN" for n in graph.nodes)
    qgraph, _ = quantized(graph, 0)
    m = compile_graph(qgraph, tmp_path / "m").manifest
    assert "mean" in m["kernels"]
    est = estimate_resources(graph)
    assert list(est.families) == m["kernels"]
    assert "kb_mean" in est.functions  # its runtime function and layer struct too: the Flash is the compiled one's
    q = estimate_resources(qgraph)
    assert (est.functions, est.flash_bytes, est.weight_bytes) == (q.functions, q.flash_bytes, q.weight_bytes)
