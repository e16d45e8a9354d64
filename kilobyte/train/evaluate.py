"""Training stage: accuracy of a float torch module and of a quantised graph, and the tensor plumbing both share.

Datasets are NHWC float32 numpy arrays (as `kilobyte.data` loads them); torch wants NCHW. `float_accuracy` runs the
module in eval mode; `int8_accuracy` runs Kilobyte's int8 reference interpreter — TFLite's exact arithmetic, so the
number is the one the generated C and TFLite Micro give. `quantise_module` makes that graph from a trained module
(search and pruning both measure their results this way).
"""

from __future__ import annotations

import numpy as np

from ..data.resize import resize_images
from ..frontends import from_torch
from ..interp import run_int8
from ..quant import quantize, quantize_input
from ..transforms import prepare_for_inference


def to_nchw_tensor(x: np.ndarray, resolution: int | None = None):
    """NHWC numpy images -> an NCHW torch tensor, resized to resolution×resolution (`data.resize_images`) if given."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(resize_images(x, resolution).transpose(0, 3, 1, 2)))


def float_accuracy(module, x: np.ndarray, y: np.ndarray, batch_size: int = 256, resolution: int | None = None) -> float:
    """Top-1 accuracy of a torch module on NHWC images (resized to `resolution` if given); leaves it in eval mode."""
    import torch

    module.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            logits = module(to_nchw_tensor(x[i:i + batch_size], resolution))
            correct += int((logits.argmax(1).numpy() == y[i:i + batch_size]).sum())
    return correct / len(x)


def int8_accuracy(graph, x: np.ndarray, y: np.ndarray, batch_size: int = 250) -> float:
    """Top-1 accuracy of a quantised graph on float NHWC images `x`, run by the int8 reference interpreter.

    The images are quantised with the graph input's parameters (TFLite QUANTIZE) and must already have its shape.
    """
    correct = 0
    for i in range(0, len(x), batch_size):
        logits = run_int8(graph, quantize_input(graph, x[i:i + batch_size]))[graph.outputs[0]]
        correct += int((logits.reshape(len(logits), -1).argmax(-1) == y[i:i + batch_size]).sum())
    return correct / len(x)


def quantise_module(module, input_shape_nchw: tuple[int, ...], calib_x: np.ndarray):
    """The int8 graph of a trained torch module: `from_torch` + `prepare_for_inference` + post-training quantisation
    calibrated on the NHWC images `calib_x`, one at a time (batch 1, as the graph runs)."""
    graph = prepare_for_inference(from_torch(module.eval(), tuple(input_shape_nchw)))
    calib = np.asarray(calib_x, np.float32)
    return quantize(graph, [calib[i:i + 1] for i in range(len(calib))])
