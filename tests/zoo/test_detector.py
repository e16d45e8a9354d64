"""The zoo's YOLO-style detector (issue 28) goes through the pipeline as any model: traced with its heads as the
graph's outputs, finest first, in the runtime's NHWC head layout, quantised, compiled and bit-exact with TensorFlow
Lite Micro."""

from __future__ import annotations

import pytest
import torch

from kilobyte.codegen import compile_graph
from kilobyte.data.detect import make_digit_scenes
from kilobyte.driver import from_module, verify_project
from kilobyte.quant.quantize import quantize
from kilobyte.zoo.detector import YoloDetector

ANCHORS = (((10.0, 12.0), (20.0, 24.0)), ((40.0, 40.0), (30.0, 50.0), (50.0, 30.0)))


@pytest.mark.parametrize("one_scale", [False, True])
def test_detector_compiles_bit_exact_with_its_heads_as_outputs(tmp_path, one_scale):
    torch.manual_seed(0)
    anchors = ANCHORS[1:] if one_scale else ANCHORS
    model = YoloDetector(10, anchors, width=0.35).eval()
    graph = from_module("det", model, (1, 1, 64, 64)).graph
    scenes = make_digit_scenes(6, seed=0, size=64, digit_px=(14, 30))
    int8 = quantize(graph, [scenes.images[i:i + 1] for i in range(6)])
    result = compile_graph(int8, tmp_path / "p")
    shapes = [o["shape"] for o in result.manifest["outputs"]]
    strides = (16,) if one_scale else (8, 16)
    assert shapes == [[1, 64 // s, 64 // s, len(a) * 15] for a, s in zip(anchors, strides)]
    with torch.no_grad():  # NCHW heads of PyTorch = the graph's NHWC outputs, transposed
        want = [o.numpy().transpose(0, 2, 3, 1).shape for o in model(torch.zeros(1, 1, 64, 64))]
    assert [list(s) for s in want] == shapes
    report = verify_project(result.out_dir, n_random=3)
    assert report.ok and {"c-host", "reference", "tflm"} <= set(report.to_json()["engines"])
