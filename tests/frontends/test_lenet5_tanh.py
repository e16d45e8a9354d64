"""A classic LeNet-5 with tanh (tests/frontends/breadth_models.py's `lenet5_tanh`) as a new user takes it: the
PyTorch module and its ONNX export, each loaded, quantised with the bundled digits (`kilobyte.api.quantize`),
compiled, built on the host with -Werror and verified bit for bit against TFLite Micro (`verify_project`), then both
run on a Cortex-M7 under QEMU (`verify_on_target`: QEMU == host C == reference) on real digits.
"""

from __future__ import annotations

import importlib.util
import os
import warnings

import pytest
import torch
from breadth_models import CASES, build

from kilobyte import api
from kilobyte.driver.verify import verify_project
from kilobyte.ir import Op
from kilobyte.targets.cortexm import have_tools

SHAPE = CASES["lenet5_tanh"].shape
_HAVE_ARM = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))


def _loaded(kind: str, tmp_path):
    """The float model as `kilobyte compile` loads it: the module by its `module:attr` name (seeded weights), or the
    .onnx file torch exports of the case's module."""
    if kind == "pytorch":
        torch.manual_seed(0)
        return api.load("breadth_models:LeNet5Tanh", resolution=SHAPE[2], channels=SHAPE[1])
    module = build("lenet5_tanh")
    path = tmp_path / "lenet5_tanh.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(module, (torch.randn(SHAPE),), str(path), opset_version=17, dynamo=False)
    return api.load(str(path))


@pytest.fixture(name="projects", scope="module")
def projects_fixture(tmp_path_factory):
    """Both frontends' LeNet-5, compiled: {"pytorch": out_dir, "onnx": out_dir}."""
    out = {}
    for kind in ("pytorch", "onnx"):
        tmp = tmp_path_factory.mktemp(kind)
        model = _loaded(kind, tmp)
        graph = api.quantize(model, "digits", samples=32)
        tanh = [n for n in graph.nodes if n.op is Op.TANH]
        assert len(tanh) == 4, [n.op for n in graph.nodes]
        for n in tanh:  # TFLite's fixed TANH output
            q = graph.tensors[n.outputs[0]].qparams
            assert (float(q.scale[0]), int(q.zero_point[0])) == (1 / 128, 0)
        out[kind] = api.compile_model(model, tmp / "project", data="digits", samples=32).out_dir
    return out


@pytest.mark.parametrize("kind", ["pytorch", "onnx"])
def test_lenet5_tanh_builds_with_werror_and_equals_tflm(projects, kind):
    report = verify_project(projects[kind], n_random=4, data="digits")
    assert report.ok and report.engines == ("c-host", "reference", "tflm"), report.mismatches


@pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ARM,  # never skipped on CI: fail there
                    reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) or kilobyte[arm] missing")
@pytest.mark.parametrize("kind", ["pytorch", "onnx"])
def test_lenet5_tanh_on_cortex_m7(projects, kind):
    from kilobyte.driver import verify_on_target

    report = verify_on_target(projects[kind], "cortex-m7", n_random=2, data="digits")
    assert report.ok and report.inputs >= 2, report.mismatches
