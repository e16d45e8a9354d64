"""The Cortex-M55 Helium (MVE) kernel set, "mve" (runtime/c/mve/ over the DSP set): bit-exact under QEMU mps3-an547.

Work in progress for issue 30 (step 2): so far the fully connected kernel. The calls of test_dsp_kernels.py's FC
harness (random shapes, per-tensor and per-channel, big biases, every third with the input offset folded into the
bias as generated code does) run on the M55 with the mve and the dsp sets; both must leave every call's bytes as
numpy says. On CI (env CI set) nothing here is skipped.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_dsp_kernels import _check_calls, conv_calls, fc_calls, word_aligned, write_call_model

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


def test_mve_conv_calls_bit_exact_on_the_m55(tmp_path):
    """test_dsp_kernels.py's conv calls (random windows, strides, padding, dilation, channel slices, row pitch, with
    and without scratch, dense and consumed layouts) through the Helium conv: every call's bytes as numpy says."""
    calls = [word_aligned(c) for c in conv_calls(np.random.default_rng(30))]
    counts = {"mve": 0, "dsp": 0}
    for part, chunk in enumerate(_chunks(calls)):
        model_dir, x = write_call_model(tmp_path / f"calls{part}", chunk)
        for kernels in counts:
            build = build_firmware(model_dir, "cortex-m55", kernels=kernels, out_dir=tmp_path / f"{kernels}{part}")
            run = run_qemu(build, x, timeout=300, count=True)
            _check_calls(chunk, run.output, f"{kernels} kernels on cortex-m55, part {part}")
            counts[kernels] += run.cycles
    assert "mve/kb_conv.c" in {p.parent.name + "/" + p.name for p in select_sources(model_dir / "src", "mve")}
    assert counts["mve"] < counts["dsp"], counts


def _chunks(calls, arena_bytes: int = 120_000):
    """The calls in runs whose regions fit the M55 board's 512 KB of RAM (the arena, the input and the output each hold all of a run's regions)."""
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
