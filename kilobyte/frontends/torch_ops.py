"""Frontend stage: the PyTorch op table — one handler per supported module type, function and tensor method.

Each handler takes `(low, origin, <the PyTorch call's own arguments>)`, normalises PyTorch's argument conventions
(ints or pairs, 'same'/'valid' padding, `F.pad`'s reversed pairs) and makes one `Lowering` call. Function handlers
mirror PyTorch's signatures so positional and keyword arguments bind the same way; module handlers read the
module's attributes and parameters.
"""

from __future__ import annotations

import inspect
import operator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..ir import Op
from .lowering import LoweringError, Value, same_padding

SUPPORTED = ("Conv2d (groups 1 or depthwise), BatchNorm2d, ReLU, ReLU6/hardtanh(0,6)/clamp, Linear, AvgPool2d, "
             "MaxPool2d, AdaptiveAvgPool2d, mean, add, cat, flatten/view/reshape, Dropout, Identity, "
             "ZeroPad2d/pad, Softmax")


# -- small argument helpers ------------------------------------------------------------------------------------------
def _np(t) -> np.ndarray | None:
    if t is None:
        return None
    if isinstance(t, Value):
        raise LoweringError("weights computed from activations are not supported (they must be parameters)")
    return t.detach().cpu().to(torch.float32).numpy().copy()


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, (int, float)) else (int(v[0]), int(v[-1]))


def _conv_padding(padding, x: Value, kernel, stride, dilation) -> tuple[int, int, int, int]:
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":  # PyTorch puts the odd extra pixel at the end, like ONNX SAME_UPPER
        top, bottom = same_padding(x.shape[2], kernel[0], stride[0], dilation[0])
        left, right = same_padding(x.shape[3], kernel[1], stride[1], dilation[1])
        return (top, bottom, left, right)
    ph, pw = _pair(padding)
    return (ph, ph, pw, pw)


def _pool_padding(padding) -> tuple[int, int, int, int]:
    ph, pw = _pair(padding)
    return (ph, ph, pw, pw)


# -- functions (signatures mirror PyTorch's, after (low, origin)) -----------------------------------------------------
def _conv2d(low, origin, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    w = _np(weight)
    stride, dilation = _pair(stride), _pair(dilation)
    pads = _conv_padding(padding, input, w.shape[2:], stride, dilation)
    return low.conv2d(input, w, _np(bias), stride=stride, padding=pads, dilation=dilation, groups=int(groups),
                      origin=origin)


def _linear(low, origin, input, weight, bias=None):
    return low.linear(input, _np(weight), _np(bias), origin=origin)


def _batch_norm(low, origin, input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                eps=1e-5):
    if training or running_mean is None:
        raise LoweringError("batch norm without running statistics (training mode) is not supported")
    mean, var = _np(running_mean), _np(running_var)
    gamma = np.ones_like(mean) if weight is None else _np(weight)
    beta = np.zeros_like(mean) if bias is None else _np(bias)
    return low.batch_norm(input, gamma, beta, mean, var, eps=eps, origin=origin)


def _relu(low, origin, input, inplace=False):
    return low.unary(Op.RELU, input, origin=origin)


def _relu6(low, origin, input, inplace=False):
    return low.unary(Op.RELU6, input, origin=origin)


def _clamp(low, origin, input, min=None, max=None):
    if min == 0 and max is None:
        return low.unary(Op.RELU, input, origin=origin)
    if min == 0 and max == 6:
        return low.unary(Op.RELU6, input, origin=origin)
    raise LoweringError(f"clamp to [{min}, {max}]; only [0, 6] (ReLU6) and [0, inf) (ReLU) are supported")


def _hardtanh(low, origin, input, min_val=-1.0, max_val=1.0, inplace=False):
    return _clamp(low, origin, input, min_val, max_val)


def _add(low, origin, input, other, alpha=1):
    if not isinstance(other, Value) or alpha != 1:
        raise LoweringError("only the sum of two tensors of the same shape is supported")
    return low.add(input, other, origin=origin)


def _cat(low, origin, tensors, dim=0):
    if not all(isinstance(t, Value) for t in tensors):
        raise LoweringError("concatenation with a constant tensor is not supported")
    return low.concat(list(tensors), dim, origin=origin)


def _flatten(low, origin, input, start_dim=0, end_dim=-1):
    return low.flatten(input, start_dim, end_dim, origin=origin)


def _reshape(low, origin, input, *shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    return low.reshape(input, shape, origin=origin)


def _mean(low, origin, input, dim=None, keepdim=False, dtype=None):
    if dim is None:
        raise LoweringError("mean over all axes is not supported; use mean((2, 3))")
    return low.mean(input, [dim] if isinstance(dim, int) else list(dim), keepdim, origin=origin)


def _adaptive_avg_pool2d(low, origin, input, output_size):
    _, _, h, w = input.shape
    size = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    oh, ow = (h if size[0] is None else int(size[0])), (w if size[1] is None else int(size[1]))
    if (oh, ow) == (1, 1):
        return low.mean(input, (2, 3), True, origin=origin)
    if h % oh or w % ow:
        raise LoweringError(f"adaptive pooling {h}x{w} -> {oh}x{ow} with uneven windows is not supported")
    k = (h // oh, w // ow)
    return low.pool(Op.AVG_POOL_2D, input, kernel=k, stride=k, padding=(0, 0, 0, 0), origin=origin)


def _avg_pool2d(low, origin, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if divisor_override is not None:
        raise LoweringError("avg_pool2d with divisor_override is not supported")
    k = _pair(kernel_size)
    s = k if stride is None or stride == [] else _pair(stride)
    return low.pool(Op.AVG_POOL_2D, input, kernel=k, stride=s, padding=_pool_padding(padding), ceil_mode=ceil_mode,
                    count_include_pad=count_include_pad, origin=origin)


def _max_pool2d(low, origin, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                return_indices=False):
    if _pair(dilation) != (1, 1) or return_indices:
        raise LoweringError("max_pool2d with dilation or return_indices is not supported")
    k = _pair(kernel_size)
    s = k if stride is None or stride == [] else _pair(stride)
    return low.pool(Op.MAX_POOL_2D, input, kernel=k, stride=s, padding=_pool_padding(padding), ceil_mode=ceil_mode,
                    origin=origin)


def _pad(low, origin, input, pad, mode="constant", value=None):
    if mode != "constant" or value not in (None, 0):
        raise LoweringError(f"padding mode {mode!r} value {value}; only zero padding is supported")
    rank = len(input.shape)
    pads = [(0, 0)] * rank
    for i in range(len(pad) // 2):  # F.pad lists (before, after) pairs starting from the last axis
        pads[rank - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return low.pad(input, pads, origin=origin)


def _softmax(low, origin, input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        raise LoweringError("softmax without an explicit dim is not supported")
    return low.softmax(input, dim, origin=origin)


def _dropout(low, origin, input, p=0.5, training=True, inplace=False):
    if training:
        raise LoweringError("dropout with training=True is random at inference; pass training=self.training")
    return low.unary(Op.IDENTITY, input, origin=origin)


FUNCTIONS = {
    F.conv2d: _conv2d, F.linear: _linear, F.batch_norm: _batch_norm,
    F.relu: _relu, torch.relu: _relu, torch.relu_: _relu, F.relu_: _relu,
    F.relu6: _relu6, F.hardtanh: _hardtanh, torch.clamp: _clamp, torch.clip: _clamp,
    operator.add: _add, operator.iadd: _add, torch.add: _add,
    torch.cat: _cat, torch.concat: _cat, torch.flatten: _flatten, torch.reshape: _reshape,
    torch.mean: _mean, F.adaptive_avg_pool2d: _adaptive_avg_pool2d, F.avg_pool2d: _avg_pool2d,
    F.max_pool2d: _max_pool2d, F.pad: _pad, F.softmax: _softmax, torch.softmax: _softmax,
    F.dropout: _dropout, F.dropout1d: _dropout, F.dropout2d: _dropout,
}

METHODS = {
    "relu": _relu, "relu_": _relu, "clamp": _clamp, "clamp_": _clamp, "clip": _clamp, "add": _add, "add_": _add,
    "flatten": _flatten, "view": _reshape, "reshape": _reshape, "mean": _mean, "softmax": _softmax,
}


# -- modules ---------------------------------------------------------------------------------------------------------
def _conv2d_module(low, origin, m: nn.Conv2d, input):
    if m.padding_mode != "zeros":
        raise LoweringError(f"padding_mode={m.padding_mode!r}; only zero padding is supported")
    return _conv2d(low, origin, input, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)


def _batch_norm_module(low, origin, m: nn.BatchNorm2d, input):
    return _batch_norm(low, origin, input, m.running_mean, m.running_var, m.weight, m.bias, eps=m.eps)


def _pool_module(fn):
    def handler(low, origin, m, input):
        args = {k: getattr(m, k) for k in inspect.signature(fn).parameters if k not in ("low", "origin", "input")
                and hasattr(m, k)}
        return fn(low, origin, input, **args)
    return handler


MODULES = {
    nn.Conv2d: _conv2d_module,
    nn.BatchNorm2d: _batch_norm_module,
    nn.BatchNorm1d: _batch_norm_module,
    nn.Linear: lambda low, origin, m, input: _linear(low, origin, input, m.weight, m.bias),
    nn.ReLU: lambda low, origin, m, input: _relu(low, origin, input),
    nn.ReLU6: lambda low, origin, m, input: _relu6(low, origin, input),
    nn.Hardtanh: lambda low, origin, m, input: _hardtanh(low, origin, input, m.min_val, m.max_val),
    nn.Identity: lambda low, origin, m, input: low.unary(Op.IDENTITY, input, origin=origin),
    nn.Flatten: lambda low, origin, m, input: _flatten(low, origin, input, m.start_dim, m.end_dim),
    nn.Softmax: lambda low, origin, m, input: _softmax(low, origin, input, m.dim),
    nn.AvgPool2d: _pool_module(_avg_pool2d),
    nn.MaxPool2d: _pool_module(_max_pool2d),
    nn.AdaptiveAvgPool2d: _pool_module(_adaptive_avg_pool2d),
    nn.ZeroPad2d: lambda low, origin, m, input: _pad(low, origin, input, m.padding),
    nn.ConstantPad2d: lambda low, origin, m, input: _pad(low, origin, input, m.padding, value=m.value),
}
for _cls in (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout):
    MODULES[_cls] = MODULES[nn.Identity]  # eval mode: dropout passes its input through


def module_handler(m: nn.Module):
    """Handler for a leaf module: its exact type, or a base type whose forward it does not override."""
    for cls in type(m).__mro__:
        if cls in MODULES and type(m).forward is cls.forward:
            return MODULES[cls]
    return None
