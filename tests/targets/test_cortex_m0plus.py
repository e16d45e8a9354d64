"""Cortex-M0+ (issue 31, step 1, first part): the portable kernels build for ARMv6-M; QEMU's AN385 (a Cortex-M3: its
only M0 board has 16 KB of RAM) runs the ARMv6-M build, unicorn's Cortex-M0 counts it, the two agree bit for bit and
instruction for instruction; the DSP kernels are refused with a one-line error, and a project planned for them
builds portable by default. On CI (env CI set) nothing here is skipped."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from kilobyte.codegen import compile_graph
from kilobyte.errors import KilobyteError
from kilobyte.interp import run_int8
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.targets.cortexm import build_firmware, count_instructions, have_tools, run_qemu
from kilobyte.targets.devices import get_device

_HAVE_ALL = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) or kilobyte[arm] missing")


def _model(name: str, width: float, res: int):
    from kilobyte.api import load
    from kilobyte.quant import quantize

    graph = load(name, width=width, resolution=res, num_classes=10).graph
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(6)
    q = quantize(graph, [rng.normal(0.2, 1.0, shape).astype(np.float32) for _ in range(3)])
    return q, rng.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize("name,width,res", (("mnist-cnn", 0.5, 28), ("mobilenetv2", 0.25, 32)))
def test_m0plus_portable_bit_exact_and_counted(tmp_path, name, width, res):
    graph, x = _model(name, width, res)
    result = compile_graph(graph, tmp_path / "m", PlanOptions(kernels="dsp"))  # planned for DSP: built portable
    build = build_firmware(result.out_dir, "cortex-m0plus", out_dir=tmp_path / "fw")
    assert build.kernels == "portable"
    want = run_int8(result.graph, x)[result.graph.outputs[0]].reshape(-1)
    run = run_qemu(build, x, count=True, timeout=120)
    counted = count_instructions(build, x, timeout=600)
    assert np.array_equal(run.output, want) and np.array_equal(counted.output, want)
    assert run.instructions == counted.total > 0 and run.per_layer == counted.per_layer
    assert run.cycles is None


def test_m0plus_refuses_the_dsp_kernels_and_rp2040_maps_to_it(tmp_path):
    graph, _ = _model("mnist-cnn", 0.5, 28)
    result = compile_graph(graph, tmp_path / "m", PlanOptions(kernels="portable"))
    with pytest.raises(KilobyteError, match="dsp kernels need the DSP extension, which cortex-m0plus lacks"):
        build_firmware(result.out_dir, "cortex-m0plus", kernels="dsp", out_dir=tmp_path / "fw")
    assert get_device("rp2040").core == "cortex-m0plus"
    build = build_firmware(result.out_dir, "cortex-m0plus", device="rp2040", out_dir=tmp_path / "fw2")
    assert build.device.name == "RP2040" and build.board.machine == "mps2-an385"
