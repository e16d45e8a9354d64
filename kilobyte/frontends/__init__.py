"""Frontend stage: PyTorch modules and ONNX models -> the IR (NHWC, batch 1, float32).

Both frontends lower through one shared module (`lowering.py`), so a network gives the same IR whichever way it
arrives. PyTorch and ONNX are imported only when their frontend is used; no framework type leaves this package.
"""

from __future__ import annotations

import os


def from_torch(module, input_shape: tuple):
    """PyTorch `nn.Module` with an NCHW `input_shape` (batch 1) -> `Graph`; see `torch_fx.from_torch`."""
    from .torch_fx import from_torch as convert  # defers torch

    return convert(module, input_shape)


def from_onnx(model: str | os.PathLike | object):
    """ONNX file path or `onnx.ModelProto` -> `Graph`; see `onnx_frontend.from_onnx`."""
    from .onnx_frontend import from_onnx as convert  # defers onnx

    return convert(model)


__all__ = ["from_onnx", "from_torch"]
