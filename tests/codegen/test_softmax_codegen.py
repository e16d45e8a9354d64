"""int8 SOFTMAX / LOG_SOFTMAX in generated C: classifiers that end the way TFLite's converter writes them.

A quantised MLPerf Tiny model (its int8 logits) gets an int8 SOFTMAX (or LOG_SOFTMAX) as its output, optionally
followed by a DEQUANTIZE (float output, left to the caller). Oracles: TFLite Micro and the numpy reference on the
project's model.tflite (`verify_project`), and the reference on QEMU Cortex-M7 with both kernel sets.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from random_nets import inputs_for, quantized
from softmax_cases import LOG_SOFTMAX_OUT, SOFTMAX_OUT

from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.interp import run_int8
from kilobyte.ir import Node, Op, SoftmaxAttrs, Tensor
from kilobyte.schedule.plan_types import PlanOptions


def _with_head(graph, op: Op, dequantize: bool = False):
    """`graph` (int8 logits) with an int8 `op` after its output, and a DEQUANTIZE after that if asked."""
    logits = graph.outputs[0]
    shape = graph.tensors[logits].shape
    y = f"{op.value.lower()}_out"
    tensors = {**graph.tensors, y: Tensor(y, shape, "int8", None, SOFTMAX_OUT if op is Op.SOFTMAX else LOG_SOFTMAX_OUT)}
    nodes = [*graph.nodes, Node(y, op, (logits,), (y,), SoftmaxAttrs(1.0) if op is Op.SOFTMAX else None)]
    out = y
    if dequantize:
        tensors["probs"] = Tensor("probs", shape, "float32", None, None)
        nodes.append(Node("probs", Op.DEQUANTIZE, (y,), ("probs",), None))
        out = "probs"
    return dataclasses.replace(graph, tensors=tensors, nodes=tuple(nodes), outputs=(out,)).verify()


@pytest.fixture(scope="module")
def kws():
    from kilobyte.api import load

    return quantized(load("kws-dscnn").graph, seed=3, n=4)


@pytest.mark.parametrize("op,dequantize", [(Op.SOFTMAX, False), (Op.SOFTMAX, True), (Op.LOG_SOFTMAX, False)])
def test_classifier_head_compiles_and_matches_tflm(tmp_path, kws, op, dequantize):
    qgraph, unseen = kws
    graph = _with_head(qgraph, op, dequantize)
    result = compile_graph(graph, tmp_path / "m", PlanOptions(kernels="dsp"))
    assert "softmax" in result.manifest["kernels"] and "kb_" + ("softmax" if op is Op.SOFTMAX else "log_softmax") \
        in (result.out_dir / "src" / "model.c").read_text()
    assert result.tail == (("DEQUANTIZE",) if dequantize else ())  # only the float tail is left to the caller
    report = verify_project(result.out_dir, n_random=4, sanitize=True)
    assert report.ok and "tflm" in report.engines, report.mismatches

    from kilobyte.targets.cortexm import build_firmware, run_qemu

    for kernels in ("portable", "dsp"):
        build = build_firmware(result.out_dir, "cortex-m7", kernels=kernels, out_dir=tmp_path / kernels)
        for x in inputs_for(result.graph, unseen, seed=1)[:2]:
            want = run_int8(result.graph, x)[result.graph.outputs[0]].reshape(-1)
            np.testing.assert_array_equal(run_qemu(build, x).output, want)
