"""Breadth (ONNX): the ten modules of tests/frontends/breadth_models.py exported with `torch.onnx.export`, from
`.onnx` to C verified against TFLite Micro.

Both exporters run offline: the TorchScript one (`dynamo=False`, opset 17) and the torch.export one (`dynamo=True`,
opset 18, via onnxscript), which writes some layers differently (AdaptiveAvgPool1d as Unsqueeze + ReduceMean with
axes as an input + Squeeze, a global max pool as ReduceMax). Each export is imported with `from_onnx` and taken
through `check_pipeline`: float IR == ONNX Runtime, quantised, compiled, the C == numpy reference == TFLite Micro
byte for byte (TFLite's own interpreter for GELU, which TFLite Micro lacks), and the int8 output within a few
quantisation steps of ONNX Runtime's. The exports exercise Resize (nearest, asymmetric / floor; linear with
PyTorch's half-pixel and with align_corners), ConvTranspose (with PyTorch's padding and output_padding), the
exporters' Erf and tanh chains for GELU below opset 20 and, from the torch.export exporter, ReduceMax.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from breadth_models import CASES, build, check_pipeline

from kilobyte.frontends import from_onnx

EXPORTERS = {"torchscript": dict(opset=17), "dynamo": dict(opset=18, dynamo=True)}


@pytest.mark.parametrize("exporter,name", [pytest.param(e, n, id=f"{e}-{n}") for e in EXPORTERS for n in CASES])
def test_exported_module_imports_quantises_and_runs_bit_exact(exporter, name, tmp_path, export_onnx):
    data = export_onnx(build(name), CASES[name].shape, **EXPORTERS[exporter])
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0].name

    def reference(x):
        return np.concatenate([session.run(None, {feed: x[i:i + 1]})[0] for i in range(len(x))])

    check_pipeline(name, from_onnx(onnx.load_from_string(data)), reference, tmp_path / name)
