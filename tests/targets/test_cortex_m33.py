"""Cortex-M33 (issue 31, step 2): QEMU mps2-an505 runs the portable and the DSP kernels bit-exact, and Kilobyte's
QEMU plugin counts what unicorn's Cortex-M33 counts; `bench --target cortex-m33` reports instructions (no cycle model
for the core yet). On CI (env CI set) nothing here is skipped."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

from kilobyte.codegen import compile_graph
from kilobyte.interp import run_int8
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.targets.cortexm import build_firmware, count_instructions, have_tools, run_qemu
from kilobyte.targets.devices import get_device

_HAVE_ALL = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) or kilobyte[arm] missing")


def _mnist():
    from kilobyte.api import load
    from kilobyte.quant import quantize

    graph = load("mnist-cnn", width=0.5, resolution=28, num_classes=10).graph
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(33)
    q = quantize(graph, [rng.normal(0.2, 1.0, shape).astype(np.float32) for _ in range(3)])
    return q, rng.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize("kernels", ("portable", "dsp"))
def test_m33_bit_exact_and_counted_alike_by_qemu_and_unicorn(tmp_path, kernels):
    graph, x = _mnist()
    result = compile_graph(graph, tmp_path / "m", PlanOptions(kernels=kernels))
    build = build_firmware(result.out_dir, "cortex-m33", kernels=kernels, out_dir=tmp_path / "fw")
    want = run_int8(result.graph, x)[result.graph.outputs[0]].reshape(-1)
    run = run_qemu(build, x, count=True, timeout=120)
    counted = count_instructions(build, x, timeout=600)
    assert np.array_equal(run.output, want) and np.array_equal(counted.output, want)
    assert run.instructions == counted.total > 0 and run.per_layer == counted.per_layer
    assert run.cycles is None  # no cycle model for the M33 yet: instructions only


def test_m33_devices_and_bench(tmp_path, capsys):
    from kilobyte.cli import main

    assert get_device("nrf5340").core == get_device("u585").core == "cortex-m33"
    graph, _ = _mnist()
    result = compile_graph(graph, tmp_path / "m", PlanOptions(kernels="dsp"))
    assert main(["bench", str(result.out_dir), "--target", "cortex-m33", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert b["target"] == "cortex-m33" and b["machine"] == "mps2-an505" and b["instructions"] > b["macs"]
    assert b["cycles"] is None and b["per_layer_cycles"] is None and b["stack_bytes"] > 0
    assert main(["bench", str(result.out_dir), "--target", "cortex-m33"]) == 0
    assert "cycles        n/a (no cycle model for cortex-m33" in capsys.readouterr().out
