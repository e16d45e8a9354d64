"""Float tails: the float ops after an output's DEQUANTIZE (SOFTMAX, LOG_SOFTMAX, LOGISTIC, ADD / MUL by a constant,
RESHAPE) run in C in `kb_invoke_float` (runtime kb_float_tail.c), after the int8 core `kb_invoke`, which is unchanged.

Oracles: TensorFlow Lite Micro's float kernels on the model file (floats within 1 ulp, `verify_project` with the host
build at -Werror and the sanitizer build, and directly here); numpy's broadcasting for the constants' indexing. The
models: tests/edge_models.py; on QEMU Cortex-M7: tests/targets/test_qemu_edges.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from edge_models import TAIL_MODELS, file_input, tail_model
from random_nets import heads_graph, quantized

from kilobyte.codegen import HostModel, compile_graph
from kilobyte.codegen.float_tail import _broadcast
from kilobyte.driver.verify import ulp_distance, verify_project
from kilobyte.errors import KilobyteError
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import AddAttrs, Node, Op, Tensor
from kilobyte.targets.tflm import run_tflm

TAILS = {"log_softmax": [["DEQUANTIZE", "LOG_SOFTMAX"]],
         "chain": [["DEQUANTIZE", "ADD", "MUL", "LOGISTIC", "SOFTMAX", "RESHAPE"]],
         "detector": [["DEQUANTIZE", "LOGISTIC"], ["DEQUANTIZE", "MUL", "ADD"], []]}


@pytest.mark.parametrize("name", TAIL_MODELS)
def test_float_tail_runs_in_c_within_one_ulp_of_tflm(tmp_path, name):
    data = tail_model(name)
    result = compile_graph(from_tflite(data), tmp_path / "m")
    m = result.manifest
    assert [o["tail"] for o in m["outputs"]] == TAILS[name] and m["float_entry"]
    assert all(o["dtype"] in ("int8", "uint8") for o in m["outputs"])  # kb_invoke: the int8 core, as before
    report = verify_project(result.out_dir, n_random=3, sanitize=True)
    assert report.ok and "tflm" in report.engines and "tflm" in report.float_entry, report.mismatches
    host = HostModel(result.out_dir)
    rng = np.random.default_rng(2)
    inp = "uint8" if name == "detector" else "int8"
    worst = 0
    for _ in range(4):
        x = file_input(inp, m["input"]["shape"], rng)
        want = run_tflm(data, x, preserve_all=False).outputs
        got = host.float_outputs(x)
        assert list(got) == list(want)
        for k, (out, y) in enumerate(got.items()):
            assert y.shape == want[out].shape and y.dtype == want[out].dtype
            if m["outputs"][k]["tail"]:
                worst = max(worst, int(ulp_distance(y, want[out]).max()))
            else:
                np.testing.assert_array_equal(y, want[out])
        core = run_int8(result.graph, x)  # kb_invoke alone still gives the int8 core's bytes
        np.testing.assert_array_equal(host(x).reshape(-1).view(np.int8),
                                      np.concatenate([core[o].reshape(-1).view(np.int8) for o in result.graph.outputs]))
    assert worst <= 1


@pytest.mark.parametrize("c_shape,shape", [((1,), (1, 6, 6, 3)), ((3,), (1, 6, 6, 3)), ((6, 1, 3), (1, 6, 6, 3)),
                                           ((1, 6, 6, 1), (1, 6, 6, 3)), ((6, 1), (1, 6, 6, 3)), ((1, 6, 6, 3),) * 2])
def test_constant_indexing_is_numpy_broadcasting(c_shape, shape):
    """kb_*_const_f32 reads c[(i / inner) % len] for flat index i: that must be numpy's broadcast of c to shape."""
    c = np.arange(np.prod(c_shape), dtype=np.float32).reshape(c_shape) + 1
    values, inner = _broadcast(c, shape)
    i = np.arange(int(np.prod(shape)))
    np.testing.assert_array_equal(values[(i // inner) % values.size], np.broadcast_to(c, shape).reshape(-1))


def _float_after(op: Op):
    """A graph whose float output is `op` after the DEQUANTIZE: ADD of two float tensors, or a float RELU (TFLite
    has float kernels for both, but neither is a tail kb_float_tail.c runs)."""
    q, _ = quantized(heads_graph(1), seed=1, n=2)
    y = q.outputs[0]
    shape = q.tensors[y].shape
    tensors = {**q.tensors, "d": Tensor("d", shape, "float32"), "z": Tensor("z", shape, "float32")}
    nodes = [*q.nodes, Node("d", Op.DEQUANTIZE, (y,), ("d",))]
    nodes.append(Node("z", op, ("d", "d") if op is Op.ADD else ("d",), ("z",), AddAttrs() if op is Op.ADD else None))
    return dataclasses.replace(q, tensors=tensors, nodes=tuple(nodes), outputs=("z",)).verify()


@pytest.mark.parametrize("op,why", [(Op.ADD, "node 'z' (ADD): only a float ADD by one constant"),
                                    (Op.RELU, "output 'z' is float32 and its tail has RELU")])
def test_other_float_ops_are_refused_in_one_line(tmp_path, op, why):
    with pytest.raises(KilobyteError) as e:
        compile_graph(_float_after(op), tmp_path / "m")
    assert why in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "m").exists()  # nothing half-written


def test_pytorch_onnx_ptq_softmax_tail_runs_in_c(tmp_path):
    """A small LeNet with a softmax, exported from PyTorch to ONNX and post-training quantised by Kilobyte: its int8
    logits -> DEQUANTIZE -> SOFTMAX tail now runs in kb_invoke_float (verified against TFLM within 1 ulp), and the
    probabilities it gives are ONNX Runtime's on the model's own dequantised input to within int8 rounding."""
    import io

    import onnxruntime as ort
    import torch
    from torch import nn

    from kilobyte.api import compile_model, load

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(96, 10),
                        nn.Softmax(dim=1)).eval()
    buf = io.BytesIO()
    torch.onnx.export(net, (torch.randn(1, 1, 8, 8),), buf, opset_version=17, dynamo=False)
    path = tmp_path / "lenet.onnx"
    path.write_bytes(buf.getvalue())
    result = compile_model(load(str(path)), tmp_path / "c", data="digits", samples=32)
    assert result.tail == ("DEQUANTIZE", "SOFTMAX") and result.manifest["outputs"][0]["file_dtype"] == "float32"
    report = verify_project(result.out_dir, n_random=3, sanitize=False)
    assert report.ok and "tflm" in report.float_entry, report.mismatches
    x = np.random.default_rng(0).integers(-128, 128, result.manifest["input"]["shape"]).astype(np.int8)
    probs = HostModel(result.out_dir).invoke_float(x).reshape(-1)
    real = (x.astype(np.float32) - result.manifest["input"]["zero_point"]) * result.manifest["input"]["scale"]
    session = ort.InferenceSession(buf.getvalue())
    want = session.run(None, {session.get_inputs()[0].name: real.transpose(0, 3, 1, 2)})[0].reshape(-1)
    assert abs(float(probs.sum()) - 1) < 1e-5 and np.abs(probs - want).max() < 0.05


def test_ulp_distance_counts_representable_floats_between():
    """The 1-ulp tolerance of verify: neighbours (np.nextafter) are 1 apart, across zero too; +0 == -0."""
    a = np.array([1.0, -3.5, 1e-30, 0.0, np.float32(1e-45)], np.float32)
    up = np.nextafter(a, np.float32(np.inf))
    np.testing.assert_array_equal(ulp_distance(a, up), [1, 1, 1, 1, 1])
    np.testing.assert_array_equal(ulp_distance(np.nextafter(up, np.float32(np.inf)), a), [2] * 5)
    assert ulp_distance(np.float32([-0.0]), np.float32([0.0]))[0] == 0
    assert ulp_distance(np.float32([-1e-45]), np.float32([1e-45]))[0] == 2


def test_verify_says_when_the_float_entry_was_not_checked(tmp_path):
    result = compile_graph(from_tflite(tail_model("log_softmax")), tmp_path / "m")
    report = verify_project(result.out_dir, n_random=1, tflm=False, sanitize=False)
    assert report.ok and report.float_entry.startswith("kb_invoke_float: not checked") and "tflm" not in report.engines
