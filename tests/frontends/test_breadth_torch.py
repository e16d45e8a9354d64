"""Breadth (PyTorch): ten ordinary modules a new user tries first, from `nn.Module` to C verified against TFLite
Micro.

Each case of tests/frontends/breadth_models.py is imported with `from_torch` and taken through `check_pipeline`:
float IR == PyTorch, quantised, compiled, the C == numpy reference == TFLite Micro byte for byte, and the int8 output
within a few quantisation steps of PyTorch's (TFLite's own interpreter stands in for TFLite Micro on GELU, which
it lacks).
"""

from __future__ import annotations

import pytest
import torch
from breadth_models import CASES, build, check_pipeline

from kilobyte.frontends import from_torch
from kilobyte.ir import Op


@pytest.mark.parametrize("name", list(CASES))
def test_module_imports_quantises_and_runs_bit_exact(name, tmp_path):
    module = build(name)

    def reference(x):
        with torch.no_grad():
            return module(torch.from_numpy(x)).numpy()

    result = check_pipeline(name, from_torch(module, CASES[name].shape), reference, tmp_path / name)
    expected = {"mobilenet_v3_block": {Op.HARD_SWISH, Op.LOGISTIC, Op.MUL, Op.MEAN},
                "lenet": {Op.LOG_SOFTMAX}, "kws_conv1d": {Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.MAX_POOL_2D, Op.MEAN},
                "unet": {Op.RESIZE_NEAREST_NEIGHBOR, Op.CONCAT}, "decoder": {Op.TRANSPOSE_CONV, Op.LEAKY_RELU},
                "segmentation_decoder": {Op.TRANSPOSE_CONV, Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR},
                "gelu_head": {Op.GELU}, "broadcast_constants": {Op.ADD, Op.SUB, Op.MUL},
                "lenet5_tanh": {Op.TANH, Op.AVG_POOL_2D},
                "smooth_activations": {Op.TANH, Op.ELU, Op.PRELU},
                "unit_clamp_exp_log": {Op.RELU_N1_TO_1, Op.EXP, Op.LOG}}
    assert expected.get(name, set()) <= set(result["ops"])
