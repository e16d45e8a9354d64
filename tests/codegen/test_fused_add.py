"""Tests for the fused conv + ADD layer of codegen (layers.emit_conv_add, model_c): a 1x1 projection and the
residual ADD reading it emitted as ONE `kb_conv_1x1_add` call writing over the residual (`Plan.fused`).

Oracle: `run_int8` (the numpy reference). Zoo models with residual blocks, at small sizes, quantised on random
images, compiled with `compile_graph` and run as a ctypes host build over a randomised arena must match the
reference bit for bit, fused (the default) and unfused; an ASan/UBSan build with arena guards runs one of them.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from kilobyte.codegen import HostModel, build_executable, compile_graph, run_executable
from kilobyte.interp import run_int8
from kilobyte.schedule.plan_types import PlanOptions

RESIDUAL_MODELS = ("mobilenetv2", "mnasnet", "proxyless-mobile", "mbv2-rd", "resnet-small")
UNFUSED = PlanOptions(fuse_add=False)


@pytest.fixture(scope="module")
def int8_model():
    """(name, resolution) -> the zoo model at width 0.35 (resnet-small as built), quantised on 3 random images."""
    cache = {}

    def get(name, resolution=48):
        if (name, resolution) not in cache:
            pytest.importorskip("torch")
            from kilobyte.api import load
            from kilobyte.quant import quantize

            width = None if name == "resnet-small" else 0.35
            graph = load(name, resolution=resolution if name != "resnet-small" else 32, width=width).graph
            rng = np.random.default_rng(0)
            shape = graph.tensors[graph.inputs[0]].shape
            cache[name, resolution] = quantize(graph, [rng.normal(0, 1, shape).astype(np.float32) for _ in range(3)])
        return cache[name, resolution]

    return get


def _check(result, n_inputs=2):
    """The ctypes host build equals the reference on random inputs, with the arena filled with random bytes first
    (nothing may be read before it is written); `kb_arena` is exactly the planned size."""
    host = HostModel(result.out_dir)
    assert host.arena_symbol_bytes() == result.plan.arena_bytes
    arena = (ctypes.c_int8 * result.plan.arena_bytes).in_dll(host.lib, "kb_arena")
    rng, out = np.random.default_rng(1), result.graph.outputs[0]
    shape = result.graph.tensors[result.graph.inputs[0]].shape
    for i in range(n_inputs):
        ctypes.memmove(arena, rng.integers(-128, 128, len(arena), dtype=np.int8).tobytes(), len(arena))
        x = rng.integers(-128, 128, shape, dtype=np.int64).astype(np.int8)
        got, want = host(x), run_int8(result.graph, x)[out]
        assert np.array_equal(got, want), f"input {i}: {int(np.sum(got != want))} values differ"


@pytest.mark.parametrize("name", RESIDUAL_MODELS)
def test_zoo_residual_models_bit_exact(name, int8_model, tmp_path):
    q = int8_model(name)
    fused = compile_graph(q, tmp_path / "fused")
    _check(fused)
    text = (fused.out_dir / "src" / "model.c").read_text()
    n_pairs = len(fused.plan.fused)
    if name == "resnet-small":  # 3x3 convs feed its ADDs: nothing to fuse
        assert n_pairs == 0 and "kb_conv_1x1_add" not in text
    else:
        assert n_pairs >= 1 and "conv_add" in fused.manifest["kernels"]
        assert text.count("kb_conv_1x1_add(&p") == n_pairs
        assert (fused.out_dir / "src" / "kb_conv_add.c").is_file()
        for conv, add in fused.plan.fused.items():
            assert f"_{conv}(" in text and f"_{add}(" not in text  # one layer function per pair, the conv's
    _check(compile_graph(q, tmp_path / "unfused", UNFUSED), n_inputs=1)


def test_mbv2_fused_arena_is_smaller(int8_model, tmp_path):
    """MobileNetV2 (64², width 0.35) with an automatic patch stage, so that the rest of the network sets the peak:
    fusing the projections into their residual ADDs shrinks the arena (7,800 B instead of 8,824 B: the projection's
    output never sits beside the held residual); the host build and an ASan/UBSan build with guard bytes agree
    with the reference."""
    q = int8_model("mobilenetv2", 64)
    fused = compile_graph(q, tmp_path / "fused", PlanOptions(patch="auto", max_mac_overhead=None))
    unfused = compile_graph(q, tmp_path / "unfused", PlanOptions(patch="auto", fuse_add=False, max_mac_overhead=None))
    assert fused.plan.fused and not unfused.plan.fused
    assert fused.plan.arena_bytes < unfused.plan.arena_bytes
    _check(fused, n_inputs=1)
    assert fused.manifest["arena_bytes"] == fused.plan.arena_bytes
    exe = build_executable(fused.out_dir, sanitize=True)
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, q.tensors[q.inputs[0]].shape, dtype=np.int64).astype(np.int8)
    out = fused.graph.outputs[0]
    assert np.array_equal(run_executable(exe, x, fused.graph.tensors[out].shape), run_int8(fused.graph, x)[out])


def test_mbv2_224_fused_arena_is_smaller():
    """At 224² (plan only): per layer the arena stays 1,404,928 B (block 2's expansion) either way; with the
    paper's 4x4 patch stage over the first 13 nodes fusion takes it from 200,704 B to 176,516 B."""
    pytest.importorskip("torch")
    from kilobyte.api import load
    from kilobyte.schedule import make_plan

    graph = load("mobilenetv2").graph
    assert make_plan(graph).arena_bytes == make_plan(graph, UNFUSED).arena_bytes == 1_404_928
    fused = make_plan(graph, PlanOptions(patch=(13, 4)))
    unfused = make_plan(graph, PlanOptions(patch=(13, 4), fuse_add=False))
    assert (fused.arena_bytes, unfused.arena_bytes) == (176_516, 200_704)
