"""The Cortex-M55 Helium (MVE) kernel set, "mve" (runtime/c/mve/ over the DSP set): bit-exact under QEMU mps3-an547.

Work in progress for issue 30 (step 2): so far fully connected, conv and ADD / SUB. The calls of test_dsp_kernels.py's
FC and conv harnesses (random shapes, windows, strides, padding, dilation, channel slices, row pitch, per-tensor and
per-channel, big biases, with and without scratch) run on the M55 with the mve and the dsp sets; both must leave
every call's bytes as numpy says. Whole zoo models (residual ADDs, convs of every kind) compiled for the mve set
must equal the int8 interpreter. On CI (env CI set) nothing here is skipped.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_dsp_kernels import _check_calls, conv_calls, depthwise_calls, fc_calls, word_aligned, write_call_model

from kilobyte.errors import KilobyteError
from kilobyte.targets.cortexm import build_firmware, have_tools, run_qemu
from kilobyte.targets.cortexm.firmware import select_sources

pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not have_tools(),
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) missing")


def test_mve_fully_connected_calls_bit_exact_on_the_m55(tmp_path):
    calls = [word_aligned(c) for c in fc_calls(np.random.default_rng(5))]
    model_dir, x = write_call_model(tmp_path / "calls", calls)
    counts = {}
    for kernels in ("mve", "dsp"):
        build = build_firmware(model_dir, "cortex-m55", kernels=kernels, out_dir=tmp_path / kernels)
        run = run_qemu(build, x, timeout=120, count=True)
        _check_calls(calls, run.output, f"{kernels} kernels on cortex-m55")
        counts[kernels] = run.instructions
    src = {p.parent.name + "/" + p.name for p in select_sources(model_dir / "src", "mve")}
    assert "mve/kb_fc.c" in src and "arm/kb_arm_fc4.S" not in src  # the Helium file replaces the DSP one
    assert counts["mve"] < counts["dsp"], counts


@pytest.mark.parametrize("harness", ("conv", "depthwise"))
def test_mve_conv_calls_bit_exact_on_the_m55(tmp_path, harness):
    """test_dsp_kernels.py's conv and depthwise calls (random windows, strides, padding, dilation, channel slices,
    row pitch, with and without scratch, in place and out of place) through the Helium kernels: every call's bytes as
    numpy says."""
    make = conv_calls if harness == "conv" else depthwise_calls
    calls = [word_aligned(c) for c in make(np.random.default_rng(30))]
    for part, chunk in enumerate(_chunks(calls)):  # the calls' shapes are small and odd: no speed claim here
        model_dir, x = write_call_model(tmp_path / f"calls{part}", chunk)
        for kernels in ("mve", "dsp"):
            build = build_firmware(model_dir, "cortex-m55", kernels=kernels, out_dir=tmp_path / f"{kernels}{part}")
            _check_calls(chunk, run_qemu(build, x, timeout=300).output, f"{kernels} kernels on cortex-m55, part {part}")
    assert f"mve/kb_{harness}.c" in {p.parent.name + "/" + p.name for p in select_sources(model_dir / "src", "mve")}


def _chunks(calls, arena_bytes: int = 120_000):
    """The calls in runs whose regions fit the M55 board's 512 KB of RAM (the arena, the input and the output each
    hold all of a run's regions)."""
    chunk, size = [], 0
    for call in calls:
        if chunk and size + call.before.size > arena_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append(call)
        size += call.before.size
    if chunk:
        yield chunk


def test_mve_needs_the_cortex_m55(tmp_path):
    model_dir, _ = write_call_model(tmp_path / "calls", [word_aligned(fc_calls(np.random.default_rng(1))[0])])
    with pytest.raises(KilobyteError, match="need cortex-m55"):
        build_firmware(model_dir, "cortex-m4", kernels="mve")


@pytest.mark.parametrize("name,width,res", (("resnet-small", 0.5, 32), ("mobilenetv2", 0.25, 32),
                                            ("mnist-cnn", 0.5, 28)))
def test_mve_zoo_models_equal_the_interpreter(tmp_path, name, width, res):
    """Every Helium kernel a real model calls (convs 1x1 and 3x3 with and without padding, few and many channels,
    the residual ADDs, the FC head) against run_int8, and the beat model's cycles below the DSP set's."""
    from kilobyte.api import load
    from kilobyte.codegen import compile_graph
    from kilobyte.interp import run_int8
    from kilobyte.quant import quantize
    from kilobyte.schedule.plan_types import PlanOptions

    graph = load(name, width=width, resolution=res, num_classes=10).graph
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(3)
    q = quantize(graph, [rng.normal(0.2, 1.0, shape).astype(np.float32) for _ in range(3)])
    x = rng.integers(-128, 128, shape).astype(np.int8)
    want = run_int8(q, x)[q.outputs[0]].reshape(-1)
    cycles = {}
    for kernels in ("mve", "dsp"):
        result = compile_graph(q, tmp_path / kernels, PlanOptions(kernels=kernels))
        build = build_firmware(result.out_dir, "cortex-m55", kernels=kernels, out_dir=tmp_path / f"fw-{kernels}")
        run = run_qemu(build, x, timeout=300, count=True)
        assert np.array_equal(run.output, want), kernels
        cycles[kernels] = run.cycles
    assert cycles["mve"] < cycles["dsp"], cycles
