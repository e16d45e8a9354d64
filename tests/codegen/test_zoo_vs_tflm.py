"""Acceptance (code generator): every zoo model at a small resolution, compiled per layer and with an automatic patch
stage, gives the same bytes in the generated C (host build), the numpy reference and TFLite Micro.

The check is `verify_project` itself (what `kilobyte verify DIR` runs): the project's model.tflite is read back, run
by `run_int8` and by the `tflite-micro` wheel, and compared with the ctypes host build on random int8 inputs and on
digits images quantised with the model's input qparams. Mobile nets run at width 0.35, 64 px, 10 classes; the small
CNNs at their own size. Calibration: 4 random images, so the int8 model is the one the pipeline really makes.
"""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.schedule.plan_types import PlanOptions

SMALL_CNNS = {"mnist-cnn": 28, "resnet-small": 32, "vgg-small": 32}


def _zoo_names() -> list[str]:
    from kilobyte import zoo

    return zoo.names("image")


@pytest.mark.parametrize("patch", ["off", "auto"])
@pytest.mark.parametrize("name", _zoo_names())
def test_zoo_model_c_equals_reference_equals_tflm(name, patch, tmp_path):
    pytest.importorskip("torch")
    from kilobyte.api import load
    from kilobyte.quant import quantize

    if name in SMALL_CNNS:
        graph = load(name, resolution=SMALL_CNNS[name]).graph
    else:
        graph = load(name, width=0.35, resolution=64, num_classes=10).graph
    rng = np.random.default_rng(len(name))
    shape = graph.tensors[graph.inputs[0]].shape
    qgraph = quantize(graph, [rng.normal(0, 1, shape).astype(np.float32) for _ in range(4)])
    result = compile_graph(qgraph, tmp_path / name, PlanOptions(patch=patch, max_mac_overhead=0.3))
    if patch == "auto" and name != "mnist-cnn":  # mnist-cnn's 28² input leaves no stage worth patching
        assert result.plan.patch is not None, f"{name}: auto chose no patch stage"
    report = verify_project(result.out_dir, n_random=2, data="digits", sanitize=False)
    assert report.engines == ("c-host", "reference", "tflm") and report.inputs >= 6
    assert report.ok, "; ".join(report.mismatches)
