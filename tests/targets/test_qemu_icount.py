"""Kilobyte's QEMU instruction-count plugin (kilobyte/targets/qemu/kb_icount.c) against the unicorn counter.

The plugin counts the invoke call under QEMU, from the invoke function's first instruction to the one after main's
call of it, split by kb_layer_* function; unicorn runs the invoke function alone. Both count every instruction of
every block that ran, so on the cores both emulate (Cortex-M4, M7) the counts must be equal, in total and per
layer — on several models, kernel sets and cores, whatever the block boundaries of the two emulators. On the
Cortex-M55, which unicorn cannot run, the plugin's count is checked by its invariants only. On CI (env CI set)
nothing here is skipped.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess

import numpy as np
import pytest

from kilobyte.codegen import compile_graph
from kilobyte.errors import KilobyteError
from kilobyte.interp import run_int8
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.targets.cortexm import build_firmware, count_instructions, have_tools, run_qemu
from kilobyte.targets.cortexm.measure import elf_symbols
from kilobyte.targets.cortexm.qemu import as_input_bytes, invoke_marks, qemu_command
from kilobyte.targets.qemu import plugin_args, read_counts

_HAVE_ALL = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,  # never skipped on CI: fail there
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) or kilobyte[arm] missing")


def _zoo(name: str, width: float, resolution: int):
    from kilobyte.api import load
    from kilobyte.quant import quantize

    graph = load(name, width=width, resolution=resolution, num_classes=10).graph
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(len(name))
    q = quantize(graph, [rng.normal(0.2, 1.0, shape).astype(np.float32) for _ in range(3)])
    return q, rng.integers(-128, 128, shape).astype(np.int8)


# (model, width, resolution, core, kernel set): three kernel builds of two models on both cores unicorn runs
IMAGES = (("mnist-cnn", 0.5, 28, "cortex-m4", "portable"), ("mnist-cnn", 0.5, 28, "cortex-m4", "dsp"),
          ("mobilenetv2", 0.35, 48, "cortex-m7", "dsp"), ("resnet-small", 0.25, 32, "cortex-m7", "portable"))


@pytest.mark.parametrize("name,width,res,target,kernels", IMAGES)
def test_plugin_count_equals_unicorn(tmp_path, name, width, res, target, kernels):
    graph, x = _zoo(name, width, res)
    result = compile_graph(graph, tmp_path / "m", PlanOptions(kernels=kernels))
    build = build_firmware(result.out_dir, target, kernels=kernels, out_dir=tmp_path / "fw")
    under_qemu = run_qemu(build, x, count=True, timeout=120)
    counted = count_instructions(build, x, timeout=600)
    assert under_qemu.instructions == counted.total > 0
    assert under_qemu.per_layer == counted.per_layer and len(counted.per_layer) > 3
    # the same cycle model prices the plugin's blocks: QEMU's translation blocks split where unicorn's do not (guest
    # pages); a block that falls through is priced with the ones it runs into (qemu.profile_totals), so the two agree
    # to a few cycles in ten thousand, not exactly (an M7 pair or a pipelined load at a split the chain does not span)
    assert under_qemu.cycles == pytest.approx(counted.cycles, rel=0.001)
    for layer, cycles in counted.per_layer_cycles.items():
        assert under_qemu.per_layer_cycles[layer] == pytest.approx(cycles, rel=0.01, abs=50), layer
    want = run_int8(result.graph, x)[result.graph.outputs[0]].reshape(-1)
    assert np.array_equal(under_qemu.output, want) and np.array_equal(counted.output, want)


def test_plugin_counts_the_cortex_m55_that_unicorn_cannot_run(tmp_path):
    """The same library on M55 and M4, DSP kernels: both counted by the plugin, outputs bit-exact. The two builds
    differ in GCC's instruction choice (v8.1-M low-overhead loops on M55), so the counts are close, not equal."""
    graph, x = _zoo("mnist-cnn", 0.5, 28)
    result = compile_graph(graph, tmp_path / "m", PlanOptions(kernels="dsp"))
    want = run_int8(result.graph, x)[result.graph.outputs[0]].reshape(-1)
    counts = {}
    for target in ("cortex-m55", "cortex-m4"):
        run = run_qemu(build_firmware(result.out_dir, target, out_dir=tmp_path / target), x, count=True, timeout=120)
        assert np.array_equal(run.output, want), target
        counts[target] = run.instructions
    with pytest.raises(KilobyteError, match="not available for cortex-m55"):
        count_instructions(build_firmware(result.out_dir, "cortex-m55", out_dir=tmp_path / "cortex-m55"), x)
    assert 0.9 < counts["cortex-m55"] / counts["cortex-m4"] < 1.1, counts


def test_plugin_reports_a_call_that_never_returns(tmp_path):
    """A stop address the guest never executes (the fault handler's report, on a run without a fault): the plugin
    writes "-1" at exit, and read_count makes that a one-line error."""
    graph, x = _zoo("mnist-cnn", 0.35, 28)
    result = compile_graph(graph, tmp_path / "m", PlanOptions())
    build = build_firmware(result.out_dir, "cortex-m4", out_dir=tmp_path / "fw")
    marks, _ = invoke_marks(build)
    start = next(a for a, b in marks.items() if b == 1 and a not in marks.values())
    (tmp_path / "input.bin").write_bytes(as_input_bytes(build, x))
    never = next(sym.address for sym in elf_symbols(build.elf) if sym.name == "fw_fault_report")
    proc = subprocess.run(qemu_command(build, build.elf.resolve()) + plugin_args({start: 1, never: 0}, tmp_path),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(KilobyteError, match="without returning"):
        read_counts(tmp_path, "fw")
