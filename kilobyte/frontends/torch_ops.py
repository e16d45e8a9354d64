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

from ..ir import LeakyReluAttrs, Op
from .lowering import LoweringError, Value, same_padding

SUPPORTED = ("Conv1d/Conv2d (groups 1 or depthwise), BatchNorm1d/2d, Linear, ReLU, ReLU6/hardtanh(0,6)/clamp, "
             "hardtanh(-1,1)/clamp(-1,1), Sigmoid, Tanh, ELU (alpha 1), PReLU, exp, log, Hardswish, Hardsigmoid, SiLU, "
             "LeakyReLU, Avg/MaxPool1d/2d, AdaptiveAvg/MaxPool1d/2d, mean, add, sub, mul, div by a constant, "
             "maximum, minimum, cat, flatten/view/reshape/squeeze/unsqueeze, Dropout, Identity, ZeroPad/pad, "
             "Softmax, LogSoftmax, ConvTranspose1d/2d, Upsample/interpolate (nearest, nearest-exact, bilinear), GELU")

# PyTorch ops whose IR op is not there yet: the error names what they need.
NOT_IN_IR = {
    torch.amax: "REDUCE_MAX", "amax": "REDUCE_MAX", torch.tile: "TILE", "tile": "TILE", "repeat": "TILE",
    "expand": "TILE (sub, mul, maximum and minimum broadcast without an expand)",
    "expand_as": "TILE (sub, mul, maximum and minimum broadcast without an expand)",
}


def missing_ir_op(target) -> str | None:
    """The IR op a PyTorch module, function or method name needs that the IR does not have yet (else None)."""
    key = type(target) if isinstance(target, nn.Module) else target
    try:
        return NOT_IN_IR.get(key)
    except TypeError:  # unhashable targets
        return None


# -- small argument helpers ------------------------------------------------------------------------------------------
def _np(t) -> np.ndarray | None:
    if t is None:
        return None
    if isinstance(t, Value):
        raise LoweringError("weights computed from activations are not supported (they must be parameters)")
    return t.detach().cpu().to(torch.float32).numpy().copy()


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, (int, float)) else (int(v[0]), int(v[-1]))


def _single(v) -> int:
    return int(v) if isinstance(v, (int, float)) else int(v[0])


def _sizes(v, n: int) -> tuple:
    """An adaptive pool's output size as n entries (int or None)."""
    return tuple(v) if isinstance(v, (tuple, list, torch.Size)) else (v,) * n


def _constant(v) -> np.ndarray:
    """A Python number or a parameter / buffer tensor as a float32 array."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, torch.Tensor)):
        raise LoweringError(f"operand {v!r} is neither a tensor nor a number")
    return _np(v) if isinstance(v, torch.Tensor) else np.float32(v)


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


def _conv1d(low, origin, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    w = _np(weight)
    stride, dilation = _single(stride), _single(dilation)
    if padding == "valid":
        pads = (0, 0)
    elif padding == "same":
        pads = same_padding(input.shape[2], w.shape[2], stride, dilation)
    else:
        pads = (_single(padding),) * 2
    return low.conv1d(input, w, _np(bias), stride=stride, padding=pads, dilation=dilation, groups=int(groups),
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
    if min == -1 and max == 1:
        return low.unary(Op.RELU_N1_TO_1, input, origin=origin)
    raise LoweringError(f"clamp to [{min}, {max}]; only [0, 6] (ReLU6), [0, inf) (ReLU) and [-1, 1] (TFLite's "
                        f"RELU_N1_TO_1) are supported")


def _hardtanh(low, origin, input, min_val=-1.0, max_val=1.0, inplace=False):
    return _clamp(low, origin, input, min_val, max_val)


def _sigmoid(low, origin, input):
    return low.unary(Op.LOGISTIC, input, origin=origin)


def _tanh(low, origin, input):
    return low.unary(Op.TANH, input, origin=origin)


def _exp(low, origin, input):
    return low.unary(Op.EXP, input, origin=origin)


def _log(low, origin, input):
    return low.unary(Op.LOG, input, origin=origin)


def _elu(low, origin, input, alpha=1.0, inplace=False):
    if alpha != 1.0:
        raise LoweringError(f"elu with alpha={alpha}; TFLite's ELU has alpha 1 only")
    return low.unary(Op.ELU, input, origin=origin)


def _prelu(low, origin, input, weight):
    w = _np(weight)
    if w.size > 1:  # PyTorch's weight runs along dim 1: (C,) -> (C, 1, ..) to broadcast as numpy does
        w = w.reshape((-1,) + (1,) * (len(input.shape) - 2))
    return low.prelu(input, w, origin=origin)


def _hardswish(low, origin, input, inplace=False):
    return low.unary(Op.HARD_SWISH, input, origin=origin)


def _hardsigmoid(low, origin, input, inplace=False):
    return low.hard_sigmoid(input, 1.0 / 6.0, 0.5, origin=origin)


def _silu(low, origin, input, inplace=False):
    return low.binary(Op.MUL, input, low.unary(Op.LOGISTIC, input, origin=origin), origin=origin)


def _leaky_relu(low, origin, input, negative_slope=0.01, inplace=False):
    return low.unary(Op.LEAKY_RELU, input, origin=origin, attrs=LeakyReluAttrs(alpha=float(negative_slope)))


def _gelu(low, origin, input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise LoweringError(f"gelu approximate={approximate!r}; expected 'none' or 'tanh'")
    return low.gelu(input, approximate=approximate == "tanh", origin=origin)


def _conv_transpose2d(low, origin, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                      dilation=1):
    (ph, pw) = _pair(padding)
    return low.conv_transpose2d(input, _np(weight), _np(bias), stride=_pair(stride), padding=(ph, ph, pw, pw),
                                output_padding=_pair(output_padding), dilation=_pair(dilation), groups=int(groups),
                                origin=origin)


def _conv_transpose1d(low, origin, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                      dilation=1):
    if int(groups) != 1 or _single(dilation) != 1:
        raise LoweringError(f"transposed convolution with groups={groups}, dilation={dilation}; only groups 1 and "
                            "dilation 1 are supported")
    p = _single(padding)
    return low.conv_transpose1d(input, _np(weight), _np(bias), stride=_single(stride), padding=(p, p),
                                output_padding=_single(output_padding), origin=origin)


RESIZE_MODES = {"nearest": ("nearest", False), "nearest-exact": ("nearest", True), "bilinear": ("bilinear", True)}


def _interpolate(low, origin, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None, antialias=False):
    """F.interpolate of an (N, C, H, W) input: PyTorch's "nearest" is TFLite's nearest without flags, "nearest-exact"
    with half-pixel centres; "bilinear" with align_corners is TFLite's align_corners, without it half-pixel centres.
    A scale factor must give whole output sizes (PyTorch then maps coordinates by 1/scale, TFLite by in/out)."""
    if mode not in RESIZE_MODES or antialias:
        raise LoweringError(f"interpolate mode={mode!r}{' with antialias' if antialias else ''}; supported: "
                            f"{', '.join(RESIZE_MODES)} (2-D, no antialias)")
    if len(input.shape) != 4:
        raise LoweringError(f"interpolate of a rank-{len(input.shape)} input; only (N, C, H, W) images")
    hw = input.shape[2:]
    if size is not None:
        out = _pair(size)
    else:
        factors = (scale_factor,) * 2 if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        exact = [d * float(f) for d, f in zip(hw, factors)]
        if any(e != int(e) for e in exact) and not recompute_scale_factor:
            raise LoweringError(f"interpolate scale_factor={scale_factor} of a {hw[0]}x{hw[1]} input gives "
                                "fractional sizes; pass size= (or recompute_scale_factor=True)")
        out = tuple(int(e) for e in exact)
    kind, half_pixel = RESIZE_MODES[mode]
    aligned = bool(align_corners) and kind == "bilinear"
    return low.resize(input, out, mode=kind, align_corners=aligned, half_pixel_centers=half_pixel and not aligned,
                      origin=origin)


# -- arithmetic: two activations, or an activation and a constant (a per-channel or scalar scale / shift) ----------
def _arith(low, origin, op: Op, a, b):
    if isinstance(a, Value) and isinstance(b, Value):
        return low.add(a, b, origin=origin) if op is Op.ADD else low.binary(op, a, b, origin=origin)
    x, c = (a, _constant(b)) if isinstance(a, Value) else (b, _constant(a))
    if op in (Op.ADD, Op.SUB, Op.MUL):
        return low.arith_const(op, x, c, const_first=x is not a, origin=origin)
    raise LoweringError(f"{op.value.lower()} with a constant operand is not supported")


def _add(low, origin, input, other, alpha=1):
    if alpha != 1:
        raise LoweringError(f"add with alpha={alpha} is not supported")
    return _arith(low, origin, Op.ADD, input, other)


def _sub(low, origin, input, other, alpha=1):
    if alpha != 1:
        raise LoweringError(f"sub with alpha={alpha} is not supported")
    return _arith(low, origin, Op.SUB, input, other)


def _rsub(low, origin, input, other, alpha=1):
    return _sub(low, origin, other, input, alpha)


def _mul(low, origin, input, other):
    return _arith(low, origin, Op.MUL, input, other)


def _div(low, origin, input, other, rounding_mode=None):
    if isinstance(other, Value) or rounding_mode is not None:
        raise LoweringError("only true division by a constant is supported")
    return _arith(low, origin, Op.MUL, input, 1.0 / _constant(other))


def _neg(low, origin, input):
    return low.scale_shift(input, -1.0, 0.0, origin=origin)


def _maximum(low, origin, input, other):
    return _arith(low, origin, Op.MAXIMUM, input, other)


def _minimum(low, origin, input, other):
    return _arith(low, origin, Op.MINIMUM, input, other)


def _max_or_min(op: Op):
    """torch.max / torch.min: of two tensors (MAXIMUM / MINIMUM) or a reduction (not in the IR yet)."""
    def handler(low, origin, input, *args, **kwargs):
        other = args[0] if len(args) == 1 and not kwargs else kwargs.get("other")
        if not isinstance(other, Value) or len(args) + len(kwargs) != 1:
            raise LoweringError(f"a {op.value.lower()} reduction needs REDUCE_{op.value[:3]}, which the IR does not "
                                "have yet")
        return low.binary(op, input, other, origin=origin)
    return handler


def _cat(low, origin, tensors, dim=0):
    if not all(isinstance(t, Value) for t in tensors):
        raise LoweringError("concatenation with a constant tensor is not supported")
    return low.concat(list(tensors), dim, origin=origin)


def _flatten(low, origin, input, start_dim=0, end_dim=-1):
    return low.flatten(input, start_dim, end_dim, origin=origin)


def _reshape(low, origin, input, *shape):
    return low.reshape(input, _dims(shape), origin=origin)


def _getitem(low, origin, a, index):
    """Indexing a tuple of results (Python's own), or slicing a tensor (not in the IR yet)."""
    if isinstance(a, (list, tuple)):
        return a[index]
    raise LoweringError("slicing a tensor needs STRIDED_SLICE, which the IR does not have yet")


def _dims(shape) -> tuple:
    """`*shape` arguments as one tuple: `view(1, -1)` and `view((1, -1))` alike."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        return tuple(shape[0])
    return tuple(shape)


def _squeeze(low, origin, input, dim=None):
    return low.squeeze(input, None if dim is None else [dim] if isinstance(dim, int) else list(dim), origin=origin)


def _unsqueeze(low, origin, input, dim):
    return low.unsqueeze(input, [dim], origin=origin)


def _permute(low, origin, input, *dims):
    return low.transpose(input, _dims(dims), origin=origin)


def _transpose(low, origin, input, dim0, dim1):
    perm = list(range(len(input.shape)))
    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
    return low.transpose(input, perm, origin=origin)


def _mean(low, origin, input, dim=None, keepdim=False, dtype=None):
    if dim is None:
        raise LoweringError("mean over all axes is not supported; use mean((2, 3))")
    return low.mean(input, [dim] if isinstance(dim, int) else list(dim), keepdim, origin=origin)


def _adaptive_avg_pool2d(low, origin, input, output_size):
    return low.adaptive_pool(Op.AVG_POOL_2D, input, _sizes(output_size, 2), origin=origin)


def _adaptive_avg_pool1d(low, origin, input, output_size):
    return low.adaptive_pool(Op.AVG_POOL_2D, input, _sizes(output_size, 1), origin=origin)


def _adaptive_max_pool(n: int):
    def handler(low, origin, input, output_size, return_indices=False):
        if return_indices:
            raise LoweringError("adaptive max pooling with return_indices is not supported")
        return low.adaptive_pool(Op.MAX_POOL_2D, input, _sizes(output_size, n), origin=origin)
    return handler


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


def _avg_pool1d(low, origin, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    k = _single(kernel_size)
    s = k if stride is None or stride == [] else _single(stride)
    p = _single(padding)
    return low.pool1d(Op.AVG_POOL_2D, input, kernel=k, stride=s, padding=(p, p), ceil_mode=ceil_mode,
                      count_include_pad=count_include_pad, origin=origin)


def _max_pool1d(low, origin, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                return_indices=False):
    if _single(dilation) != 1 or return_indices:
        raise LoweringError("max_pool1d with dilation or return_indices is not supported")
    k = _single(kernel_size)
    s = k if stride is None or stride == [] else _single(stride)
    p = _single(padding)
    return low.pool1d(Op.MAX_POOL_2D, input, kernel=k, stride=s, padding=(p, p), ceil_mode=ceil_mode, origin=origin)


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


def _log_softmax(low, origin, input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        raise LoweringError("log_softmax without an explicit dim is not supported")
    return low.softmax(input, dim, origin=origin, log=True)


def _dropout(low, origin, input, p=0.5, training=True, inplace=False):
    if training:
        raise LoweringError("dropout with training=True is random at inference; pass training=self.training")
    return low.unary(Op.IDENTITY, input, origin=origin)


FUNCTIONS = {
    F.conv1d: _conv1d, F.conv2d: _conv2d, F.linear: _linear, F.batch_norm: _batch_norm,
    F.relu: _relu, torch.relu: _relu, torch.relu_: _relu, F.relu_: _relu,
    F.relu6: _relu6, F.hardtanh: _hardtanh, torch.clamp: _clamp, torch.clip: _clamp,
    torch.sigmoid: _sigmoid, F.sigmoid: _sigmoid, torch.tanh: _tanh, F.tanh: _tanh, F.elu: _elu,
    torch.exp: _exp, torch.log: _log, F.prelu: _prelu, torch.prelu: _prelu,
    F.hardswish: _hardswish, F.hardsigmoid: _hardsigmoid,
    F.silu: _silu, F.leaky_relu: _leaky_relu, F.gelu: _gelu, F.interpolate: _interpolate,
    F.conv_transpose1d: _conv_transpose1d, F.conv_transpose2d: _conv_transpose2d,
    operator.add: _add, operator.iadd: _add, torch.add: _add, operator.sub: _sub, operator.isub: _sub,
    torch.sub: _sub, torch.subtract: _sub, torch.rsub: _rsub, operator.mul: _mul, operator.imul: _mul,
    torch.mul: _mul, torch.multiply: _mul, operator.truediv: _div, operator.itruediv: _div, torch.div: _div,
    operator.neg: _neg, torch.neg: _neg, torch.maximum: _maximum, torch.minimum: _minimum,
    torch.max: _max_or_min(Op.MAXIMUM), torch.min: _max_or_min(Op.MINIMUM),
    torch.cat: _cat, torch.concat: _cat, torch.flatten: _flatten, torch.reshape: _reshape, operator.getitem: _getitem,
    torch.squeeze: _squeeze, torch.unsqueeze: _unsqueeze, torch.permute: _permute, torch.transpose: _transpose,
    torch.mean: _mean, F.adaptive_avg_pool1d: _adaptive_avg_pool1d, F.adaptive_avg_pool2d: _adaptive_avg_pool2d,
    F.adaptive_max_pool1d: _adaptive_max_pool(1), F.adaptive_max_pool2d: _adaptive_max_pool(2),
    F.avg_pool1d: _avg_pool1d, F.avg_pool2d: _avg_pool2d, F.max_pool1d: _max_pool1d, F.max_pool2d: _max_pool2d,
    F.pad: _pad, F.softmax: _softmax, torch.softmax: _softmax, F.log_softmax: _log_softmax,
    torch.log_softmax: _log_softmax, F.dropout: _dropout, F.dropout1d: _dropout, F.dropout2d: _dropout,
}

METHODS = {
    "relu": _relu, "relu_": _relu, "clamp": _clamp, "clamp_": _clamp, "clip": _clamp, "sigmoid": _sigmoid,
    "tanh": _tanh, "exp": _exp, "log": _log,
    "add": _add, "add_": _add, "sub": _sub, "sub_": _sub, "mul": _mul, "mul_": _mul, "div": _div, "div_": _div,
    "neg": _neg, "maximum": _maximum, "minimum": _minimum, "max": _max_or_min(Op.MAXIMUM),
    "min": _max_or_min(Op.MINIMUM), "flatten": _flatten, "view": _reshape, "reshape": _reshape,
    "squeeze": _squeeze, "unsqueeze": _unsqueeze, "permute": _permute, "transpose": _transpose, "mean": _mean,
    "softmax": _softmax, "log_softmax": _log_softmax,
}

# Handlers whose first operand may be a constant (`3 + x`, `1 - x`, `2 * x` reach them as add(3, x) etc.).
EITHER_OPERAND = frozenset({_add, _sub, _rsub, _mul, _maximum, _minimum})


# -- modules ---------------------------------------------------------------------------------------------------------
def _conv_module(fn, transposed: bool = False):
    def handler(low, origin, m, input, output_size=None):
        if m.padding_mode != "zeros":
            raise LoweringError(f"padding_mode={m.padding_mode!r}; only zero padding is supported")
        if output_size is not None:
            raise LoweringError("a transposed convolution called with output_size is not supported; set "
                                "output_padding on the module")
        if transposed:
            return fn(low, origin, input, m.weight, m.bias, m.stride, m.padding, m.output_padding, m.groups,
                      m.dilation)
        return fn(low, origin, input, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)
    return handler


def _batch_norm_module(low, origin, m: nn.BatchNorm2d, input):
    return _batch_norm(low, origin, input, m.running_mean, m.running_var, m.weight, m.bias, eps=m.eps)


def _pool_module(fn):
    def handler(low, origin, m, input):
        args = {k: getattr(m, k) for k in inspect.signature(fn).parameters if k not in ("low", "origin", "input")
                and hasattr(m, k)}
        return fn(low, origin, input, **args)
    return handler


MODULES = {
    nn.Conv1d: _conv_module(_conv1d),
    nn.Conv2d: _conv_module(_conv2d),
    nn.ConvTranspose1d: _conv_module(_conv_transpose1d, transposed=True),
    nn.ConvTranspose2d: _conv_module(_conv_transpose2d, transposed=True),
    nn.GELU: lambda low, origin, m, input: _gelu(low, origin, input, m.approximate),
    nn.Upsample: lambda low, origin, m, input: _interpolate(low, origin, input, m.size, m.scale_factor, m.mode,
                                                            m.align_corners, m.recompute_scale_factor),
    nn.BatchNorm2d: _batch_norm_module,
    nn.BatchNorm1d: _batch_norm_module,
    nn.Linear: lambda low, origin, m, input: _linear(low, origin, input, m.weight, m.bias),
    nn.ReLU: lambda low, origin, m, input: _relu(low, origin, input),
    nn.ReLU6: lambda low, origin, m, input: _relu6(low, origin, input),
    nn.Hardtanh: lambda low, origin, m, input: _hardtanh(low, origin, input, m.min_val, m.max_val),
    nn.Sigmoid: lambda low, origin, m, input: _sigmoid(low, origin, input),
    nn.Tanh: lambda low, origin, m, input: _tanh(low, origin, input),
    nn.ELU: lambda low, origin, m, input: _elu(low, origin, input, m.alpha),
    nn.PReLU: lambda low, origin, m, input: _prelu(low, origin, input, m.weight),
    nn.Hardswish: lambda low, origin, m, input: _hardswish(low, origin, input),
    nn.Hardsigmoid: lambda low, origin, m, input: _hardsigmoid(low, origin, input),
    nn.SiLU: lambda low, origin, m, input: _silu(low, origin, input),
    nn.LeakyReLU: lambda low, origin, m, input: _leaky_relu(low, origin, input, m.negative_slope),
    nn.Identity: lambda low, origin, m, input: low.unary(Op.IDENTITY, input, origin=origin),
    nn.Flatten: lambda low, origin, m, input: _flatten(low, origin, input, m.start_dim, m.end_dim),
    nn.Unflatten: lambda low, origin, m, input: low.reshape(
        input, input.shape[:m.dim % len(input.shape)] + tuple(m.unflattened_size)
        + input.shape[m.dim % len(input.shape) + 1:], origin=origin),
    nn.Softmax: lambda low, origin, m, input: _softmax(low, origin, input, m.dim),
    nn.LogSoftmax: lambda low, origin, m, input: _log_softmax(low, origin, input, m.dim),
    nn.AvgPool1d: _pool_module(_avg_pool1d),
    nn.AvgPool2d: _pool_module(_avg_pool2d),
    nn.MaxPool1d: _pool_module(_max_pool1d),
    nn.MaxPool2d: _pool_module(_max_pool2d),
    nn.AdaptiveAvgPool1d: _pool_module(_adaptive_avg_pool1d),
    nn.AdaptiveAvgPool2d: _pool_module(_adaptive_avg_pool2d),
    nn.AdaptiveMaxPool1d: _pool_module(_adaptive_max_pool(1)),
    nn.AdaptiveMaxPool2d: _pool_module(_adaptive_max_pool(2)),
    nn.ZeroPad1d: lambda low, origin, m, input: _pad(low, origin, input, m.padding),
    nn.ZeroPad2d: lambda low, origin, m, input: _pad(low, origin, input, m.padding),
    nn.ConstantPad1d: lambda low, origin, m, input: _pad(low, origin, input, m.padding, value=m.value),
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
