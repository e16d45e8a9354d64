"""Accuracy helpers: `int8_accuracy` is the int8 reference interpreter's top-1 over any chunking, and
`float_accuracy` sees images at the resolution it is asked for."""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.interp import run_int8
from kilobyte.quant import quantize, quantize_input
from kilobyte.train import float_accuracy, int8_accuracy

torch = pytest.importorskip("torch")
nn = torch.nn


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 3)).eval()


def test_int8_accuracy_is_the_reference_interpreters_top1():
    from kilobyte.frontends import from_torch
    from kilobyte.transforms import prepare_for_inference

    rng = np.random.default_rng(0)
    x = rng.random((23, 8, 8, 1), dtype=np.float32)
    graph = quantize(prepare_for_inference(from_torch(_net(), (1, 1, 8, 8))), x[:8])
    pred = run_int8(graph, quantize_input(graph, x))[graph.outputs[0]].argmax(-1)  # (23,)
    y = np.where(rng.random(23) < 0.6, pred, (pred + 1) % 3)  # about 60 % right
    expected = float(np.mean(pred == y))
    assert 0 < expected < 1
    assert int8_accuracy(graph, x, y) == expected
    assert int8_accuracy(graph, x, y, batch_size=5) == expected  # chunks that do not divide 23


def test_float_accuracy_resizes_to_the_resolution():
    seen = []
    net = _net()
    net[0].register_forward_pre_hook(lambda m, a: seen.append(tuple(a[0].shape[1:])))
    x, y = np.zeros((10, 8, 8, 1), np.float32), np.zeros(10, np.int64)
    float_accuracy(net, x, y, batch_size=4, resolution=12)
    assert seen == [(1, 12, 12)] * 3
