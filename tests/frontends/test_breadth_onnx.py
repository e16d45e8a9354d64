"""Breadth (ONNX): the six modules of tests/frontends/breadth_models.py exported with `torch.onnx.export`, from `.onnx`
to C verified against TFLite Micro.

Both exporters run offline: the TorchScript one (`dynamo=False`, opset 17) and the torch.export one (`dynamo=True`,
opset 18, via onnxscript), which writes some layers differently (AdaptiveAvgPool1d as Unsqueeze + ReduceMean with
axes as an input + Squeeze, a global max pool as ReduceMax). Each export is imported with `from_onnx` and taken
through `check_pipeline`: float IR == ONNX Runtime, quantised, compiled, the C == numpy reference == TFLite Micro
byte for byte, and the int8 output within a few quantisation steps of ONNX Runtime's. The modules that need an op the
IR does not have yet (Resize, ConvTranspose, GELU written as Erf, ReduceMax) are strict xfails.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from breadth_models import CASES, build, check_pipeline

from kilobyte.errors import KilobyteError
from kilobyte.frontends import from_onnx

EXPORTERS = {"torchscript": dict(opset=17), "dynamo": dict(opset=18, dynamo=True)}


def _params():
    for exporter in EXPORTERS:
        for name, case in CASES.items():
            needs = case.needs if not (exporter == "dynamo" and name == "gelu_head") else "GELU, REDUCE_MAX"
            marks = [pytest.mark.xfail(strict=True, raises=KilobyteError, reason=f"needs {needs}")] \
                if case.needs else []
            yield pytest.param(exporter, name, marks=marks, id=f"{exporter}-{name}")


@pytest.mark.parametrize("exporter,name", _params())
def test_exported_module_imports_quantises_and_runs_bit_exact(exporter, name, tmp_path, export_onnx):
    data = export_onnx(build(name), CASES[name].shape, **EXPORTERS[exporter])
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0].name

    def reference(x):
        return np.concatenate([session.run(None, {feed: x[i:i + 1]})[0] for i in range(len(x))])

    check_pipeline(name, from_onnx(onnx.load_from_string(data)), reference, tmp_path / name)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.needs])
def test_exports_waiting_for_an_op_name_node_and_op(name, export_onnx):
    """Until its op lands, each export fails on the first node that needs it, in one line naming the node."""
    with pytest.raises(KilobyteError) as e:
        from_onnx(onnx.load_from_string(export_onnx(build(name), CASES[name].shape)))
    msg = str(e.value)
    assert "\n" not in msg and "node '" in msg and "which the IR does not have yet" in msg
    assert CASES[name].needs.split("_")[0] in msg
