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
from test_dsp_kernels import _check_calls, fc_calls, word_aligned, write_call_model

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


def test_mve_needs_the_cortex_m55(tmp_path):
    model_dir, _ = write_call_model(tmp_path / "calls", [word_aligned(fc_calls(np.random.default_rng(1))[0])])
    with pytest.raises(KilobyteError, match="need cortex-m55"):
        build_firmware(model_dir, "cortex-m4", kernels="mve")
