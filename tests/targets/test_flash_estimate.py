"""Acceptance: the Flash estimate against the linked Cortex-M firmware, measured from its ELF.

For the held-out models of tests/flash_models.py (`acceptance_models`: zoo models at widths and resolutions the
calibration never saw, one with a patch stage, a searched-space network, random graphs of other seeds), both kernel
sets, and the Cortex-M4 and M7: `estimate_resources(graph, options, core=...)` is never below the firmware's Flash
(`measure`: every allocated section with contents) and at most 3 % — or 1 KB, whichever is larger — above it; with
no core, the estimate is the larger of the two. `python bench/calibrate_flash.py --acceptance` prints the table
(docs/benchmarks.md). On CI (env CI set) nothing here is skipped: a missing toolchain fails the tests.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
from flash_models import acceptance_models

from kilobyte.codegen import compile_graph
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.targets.cortexm import build_firmware, have_tools, measure

CORES = ("cortex-m4", "cortex-m7")
RELATIVE, ABSOLUTE = 0.03, 1024
MODELS = acceptance_models()
_HAVE = have_tools() and importlib.util.find_spec("elftools") is not None
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE,  # never skipped on CI: fail there
                                reason="arm-none-eabi-gcc or pyelftools missing")


def allowed_error(measured: int) -> float:
    return max(RELATIVE * measured, ABSOLUTE)


@pytest.mark.parametrize("kernels", ["portable", "dsp"])
@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_estimate_is_an_upper_bound_within_3_percent(tmp_path, model, kernels):
    options = PlanOptions(kernels=kernels, patch=model.patch)
    result = compile_graph(model.build(), tmp_path / "m", options)
    estimates = []
    for core in CORES:
        build = build_firmware(result.out_dir, core, kernels=kernels, out_dir=tmp_path / core)
        measured = measure(build)["flash_bytes"]
        estimate = estimate_resources(result.graph, options, core=core).flash_bytes
        assert measured <= estimate <= measured + allowed_error(measured), (core, measured, estimate)
        estimates.append(estimate)
    assert estimate_resources(result.graph, options).flash_bytes >= max(estimates)
