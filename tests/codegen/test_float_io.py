"""An "int8 model with float interface" (float input -> QUANTIZE -> int8 core -> DEQUANTIZE -> float output, as the
TFLite converter writes it) compiles as it is: the C core is int8, and `kb_invoke_float` takes and gives floats.

Oracles: TensorFlow Lite Micro on the file itself (float in, float out) and `verify_project` on the int8 core.
"""

from __future__ import annotations

import numpy as np
import pytest
from random_nets import float_edges, quantized

from kilobyte.api import compile_model, load
from kilobyte.codegen import HostModel
from kilobyte.driver.verify import verify_project
from kilobyte.export.tflite import to_tflite
from kilobyte.targets.tflm import run_tflm


@pytest.mark.parametrize("head,tail", [(True, True), (True, False), (False, True)])
def test_float_interface_compiles_as_it_is(tmp_path, head, tail):
    q, _ = quantized(load("kws-dscnn").graph, seed=4, n=4)
    data = to_tflite(float_edges(q, head, tail))
    path = tmp_path / "float_io.tflite"
    path.write_bytes(data)
    model = load(str(path))
    assert model.is_int8
    result = compile_model(model, tmp_path / "c")  # no --data: it is quantised already
    assert result.manifest["float_head"] == (["QUANTIZE"] if head else []) and result.manifest["float_entry"]
    header = (result.out_dir / "src" / "model.h").read_text()
    assert "kb_invoke_float(const " + ("float" if head else "int8_t") + " *input, " + \
        ("float" if tail else "int8_t") + " *output)" in header
    report = verify_project(result.out_dir, n_random=3, sanitize=False)
    assert report.ok and "tflm" in report.engines, report.mismatches
    host = HostModel(result.out_dir)
    rng = np.random.default_rng(0)
    shape = q.tensors[q.inputs[0]].shape
    for _ in range(3):
        x = rng.normal(0, 2, shape).astype(np.float32) if head else rng.integers(-128, 128, shape).astype(np.int8)
        want = next(iter(run_tflm(data, x, preserve_all=False).outputs.values()))
        got = host.invoke_float(x)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.reshape(want.shape), want)  # floats too: the same bits
