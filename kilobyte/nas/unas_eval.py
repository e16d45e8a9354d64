"""Search stage: the objectives of one μNAS candidate, measured on the real pipeline (issue #15 item 3).

`objectives(...)` trains the candidate's PyTorch module with the training recipe (`kilobyte.train.fit`, a short
budget), imports it (`from_torch` + `prepare_for_inference`), quantises it to int8 with calibration images and
scores the int8 graph on the validation split with the int8 reference interpreter — μNAS only ever measured float
accuracy; here the error is the deployed model's. Resources come from `UnasEvaluator` (the compiler's plan): peak SRAM
without the caller-owned input (μNAS's convention; `input_bytes` says how much it is), the linked firmware's Flash,
the int8 weight bytes (μNAS's "model size") and MACs.
"""

from __future__ import annotations

import time

import numpy as np

from .unas_build import UnasEvaluator, build_module, input_shape
from .unas_space import UArch, UnasSpace

OBJECTIVES = ("error", "peak_bytes", "weight_bytes", "macs")


def objectives(space: UnasSpace, arch: UArch, train, val, *, epochs: int = 3, seed: int = 0,
               evaluator: UnasEvaluator | None = None, calibration: int = 64) -> dict:
    """int8 and float validation error, resources and seconds of `arch` trained on `train` ((x, y) NHWC / labels),
    scored on `val`."""
    import torch

    from ..frontends import from_torch
    from ..quant import quantize
    from ..train import TrainConfig, fit, float_accuracy, int8_accuracy
    from ..transforms import prepare_for_inference

    start = time.perf_counter()
    torch.manual_seed(seed)
    module = build_module(space, arch)
    cfg = TrainConfig(epochs=epochs, seed=seed, patience=None, lr=0.1, warmup_fraction=0.1)
    fit(module, train[0], train[1], cfg, val=val)
    graph = prepare_for_inference(from_torch(module.eval(), input_shape(space)))
    calib = np.asarray(train[0][:calibration], np.float32)
    int8 = quantize(graph, [calib[i:i + 1] for i in range(len(calib))])
    res = (evaluator or UnasEvaluator(space)).evaluate(arch)
    return {"error": 1.0 - int8_accuracy(int8, val[0], val[1]),
            "float_error": 1.0 - float_accuracy(module, val[0], val[1]),
            "peak_bytes": res.peak_bytes, "input_bytes": res.input_bytes, "flash_bytes": res.flash_bytes,
            "weight_bytes": res.weight_bytes, "macs": res.macs, "seconds": time.perf_counter() - start}
