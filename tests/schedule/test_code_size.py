"""kilobyte/schedule/code_size.py is what bench/calibrate_flash.py derives from its stored measurements
(bench/results/flash_calibration.json), and those measurements still hold: the firmware harness and the closures of
a few runtime functions, re-measured on fresh probe firmware, equal the table's (the whole calibration takes half an
hour; this, seconds). On CI (env CI set) the re-measurement is never skipped: a missing toolchain fails it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from kilobyte.schedule import code_size

ROOT = Path(__file__).resolve().parents[2]
CORE = "cortex-m4"
FUNCTIONS = ["kb_conv_1x1", "kb_depthwise_inplace_3x3", "kb_avg_pool", "kb_copy_channels"]


def _script():
    spec = importlib.util.spec_from_file_location("calibrate_flash", ROOT / "bench" / "calibrate_flash.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _have_tools() -> bool:
    from kilobyte.targets.cortexm import have_tools

    return have_tools() and importlib.util.find_spec("elftools") is not None


def test_table_is_what_the_script_derives():
    script = _script()
    data = json.loads(script.RESULTS.read_text())
    assert (ROOT / "kilobyte" / "schedule" / "code_size.py").read_text() == script.table_source(script.derive(data)), \
        "regenerate: python bench/calibrate_flash.py --derive"


def test_every_measured_build_is_at_most_its_estimate():
    script = _script()
    data = json.loads(script.RESULTS.read_text())
    table = script.derive(data)
    assert all(script.estimate_of(rec, table) >= rec["flash"] for rec in data["models"])
    assert {(r["core"], r["kernels"]) for r in data["models"]} == set(code_size.RUNTIME_SYMBOLS)


@pytest.mark.skipif(not os.environ.get("CI") and not _have_tools(), reason="arm-none-eabi-gcc or pyelftools missing")
@pytest.mark.parametrize("kernels", ["portable", "dsp"])
def test_the_table_matches_a_fresh_measurement(tmp_path, kernels):
    from kilobyte.targets.cortexm.flash_parts import closures, harness

    script = _script()
    base, symbols = harness(CORE, kernels, tmp_path / "harness")
    assert base + script.ALIGN_ALLOWANCE == code_size.BASE_BYTES[CORE]
    found = closures(CORE, kernels, FUNCTIONS, tmp_path, base=symbols)
    table = code_size.RUNTIME_CLOSURES[(CORE, kernels)]
    sizes = code_size.RUNTIME_SYMBOLS[(CORE, kernels)]
    for function, linked in found.items():
        assert sorted(linked) == list(table[function]), function
        assert linked == {key: sizes[key] for key in linked}, function
