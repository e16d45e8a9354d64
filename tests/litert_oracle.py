"""TensorFlow Lite's own interpreter (the `ai-edge-litert` wheel, reference kernels) as the oracle for ops TensorFlow
Lite Micro does not register (TILE). Without the wheel the calling test is skipped — except on CI, where the `dev`
extra installs it and a missing wheel is a failure."""

from __future__ import annotations

import os

import numpy as np
import pytest


def run_litert(model_bytes: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a `.tflite` model with TFLite's reference kernels; outputs by tensor name."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("TFLite's interpreter is not installed: pip install ai-edge-litert")
    interp = Interpreter(model_content=bytes(model_bytes), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], np.ascontiguousarray(inputs[d["name"]]))
    interp.invoke()
    return {d["name"]: np.array(interp.get_tensor(d["index"])) for d in interp.get_output_details()}


def assert_project_equals_litert(project, n: int = 3) -> None:
    """A compiled project's host C build equals TFLite's interpreter on the project's own model.tflite, on `n` of
    `verify_project`'s inputs."""
    import json

    from kilobyte.codegen import HostModel
    from kilobyte.driver.verify import verify_inputs

    model = (project / "model.tflite").read_bytes()
    host = HostModel(project)
    m = json.loads((project / "kilobyte.json").read_text())
    for x in verify_inputs(project, n, None):
        want = run_litert(model, {m["input"]["name"]: x})[m["output"]["name"]]
        np.testing.assert_array_equal(host(x).reshape(want.shape), want)
