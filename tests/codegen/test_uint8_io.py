"""uint8 models (STM32 and OpenMV write them so): uint8 input -> QUANTIZE -> int8 core -> QUANTIZE -> uint8 output.
The two QUANTIZEs run in C (TFLite Micro's Requantize) and `kb_invoke` takes and gives uint8.

Oracles: TensorFlow Lite Micro on the file and the numpy reference (`verify_project`, host and sanitizer builds),
the reference on QEMU Cortex-M4.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from random_nets import quantized

from kilobyte.api import compile_model, load
from kilobyte.codegen import HostModel
from kilobyte.driver.verify import verify_project
from kilobyte.export.tflite import to_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import Node, Op, QParams, Tensor
from kilobyte.targets.tflm import run_tflm


def _uint8_edges(q, in_scale_ratio: float = 1.0):
    """`q` behind a uint8 input QUANTIZE and before a uint8 output QUANTIZE (zero points +128, the input's scale
    optionally different so the general requantisation path runs too)."""
    x, y = q.inputs[0], q.outputs[0]
    qx, qy = q.tensors[x].qparams, q.tensors[y].qparams
    u8 = lambda p, ratio=1.0: QParams((p.scale * ratio).astype(np.float32), p.zero_point + 128)  # noqa: E731
    tensors = {**q.tensors, "x_u8": Tensor("x_u8", q.tensors[x].shape, "uint8", None, u8(qx, in_scale_ratio)),
               "y_u8": Tensor("y_u8", q.tensors[y].shape, "uint8", None, u8(qy))}
    nodes = (Node(x, Op.QUANTIZE, ("x_u8",), (x,), None), *q.nodes, Node("y_u8", Op.QUANTIZE, (y,), ("y_u8",), None))
    return dataclasses.replace(q, tensors=tensors, nodes=nodes, inputs=("x_u8",), outputs=("y_u8",)).verify()


@pytest.mark.parametrize("ratio", [1.0, 1.37])
def test_uint8_model_compiles_and_matches_tflm(tmp_path, ratio):
    q, _ = quantized(load("ic-resnet8").graph, seed=8, n=4)
    data = to_tflite(_uint8_edges(q, ratio))
    path = tmp_path / "u8.tflite"
    path.write_bytes(data)
    result = compile_model(load(str(path)), tmp_path / "c")
    header = (result.out_dir / "src" / "model.h").read_text()
    assert "void kb_invoke(const uint8_t *input, uint8_t *output);" in header
    report = verify_project(result.out_dir, n_random=4, sanitize=True)
    assert report.ok and "tflm" in report.engines and report.sanitizer_runs, report.mismatches
    host = HostModel(result.out_dir)
    rng = np.random.default_rng(1)
    for _ in range(2):
        x = rng.integers(0, 256, result.manifest["input"]["shape"]).astype(np.uint8)
        want = next(iter(run_tflm(data, x, preserve_all=False).outputs.values()))
        got = host(x)
        assert got.dtype == np.uint8 and np.array_equal(got.reshape(want.shape), want)

    from kilobyte.targets.cortexm import build_firmware, run_qemu

    build = build_firmware(result.out_dir, "cortex-m4", out_dir=tmp_path / "fw")
    want = run_int8(result.graph, x)[result.graph.outputs[0]].reshape(-1)
    assert np.array_equal(run_qemu(build, x).output.view(np.uint8), want)
