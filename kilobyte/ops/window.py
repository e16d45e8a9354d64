"""Op registry: what the window ops (CONV_2D, DEPTHWISE_CONV_2D, AVG_POOL_2D, MAX_POOL_2D) share — the output size of
a window along an axis, their shape rule, the float and int8 references' window walks, and their `.tflite` padding
(TFLite knows SAME and VALID only: other explicit padding becomes a PAD, or for MAX_POOL_2D a PADV2 with the dtype's
smallest value, before a VALID op; AVG_POOL_2D cannot be padded that way: its divisor counts in-image taps)."""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError
from .types import ShapeError


def conv_out_size(size: int, k: int, stride: int, pad_before: int, pad_after: int, dilation: int = 1) -> int:
    """Output length of a convolution/pooling window along one axis.

    >>> conv_out_size(224, 3, 2, 1, 1)
    112
    """
    span = dilation * (k - 1) + 1
    out = (size + pad_before + pad_after - span) // stride + 1
    if out < 1:
        raise ShapeError(f"window {k} (stride {stride}) does not fit input size {size}")
    return out


def window_shape(x: tuple[int, ...], kh: int, kw: int, attrs, cout: int) -> tuple[int, ...]:
    """(N, Ho, Wo, cout) of a window op with kernel (kh, kw) and `attrs`' stride, padding and dilation on NHWC `x`."""
    t, b, left, r = attrs.padding
    dh, dw = getattr(attrs, "dilation", (1, 1))
    ho = conv_out_size(x[1], kh, attrs.stride[0], t, b, dh)
    wo = conv_out_size(x[2], kw, attrs.stride[1], left, r, dw)
    return (x[0], ho, wo, cout)


def pad_hw(x: np.ndarray, padding, value=0) -> np.ndarray:
    """NHWC `x` with (top, bottom, left, right) rows and columns of `value` around H and W (float and int8 alike)."""
    t, b, left, r = padding
    return np.pad(x, ((0, 0), (t, b), (left, r), (0, 0)), constant_values=value)


# -- float: every window as a view ---------------------------------------------------------------------------------
def windows(x: np.ndarray, kh: int, kw: int, stride, dilation=(1, 1)) -> np.ndarray:
    """(1,H,W,C) padded input -> (1,Ho,Wo,kh,kw,C) view of every window."""
    sh, sw = stride
    dh, dw = dilation
    ho = (x.shape[1] - dh * (kh - 1) - 1) // sh + 1
    wo = (x.shape[2] - dw * (kw - 1) - 1) // sw + 1
    v = np.lib.stride_tricks.sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(1, 2))
    v = v[:, ::sh, ::sw][:, :ho, :wo, :, ::dh, ::dw]  # (1,Ho,Wo,C,kh,kw)
    return np.moveaxis(v, 3, 5)


# -- int8: one kernel tap at a time --------------------------------------------------------------------------------
def taps(xp: np.ndarray, kh: int, kw: int, stride, dilation, out_hw):
    """Yield `(i, j, view)` for every kernel tap: `view` (N,Ho,Wo,C) holds the padded input under tap (i, j)."""
    (sh, sw), (dh, dw), (ho, wo) = stride, dilation, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw, :]


def out_hw(x: np.ndarray, kh: int, kw: int, stride, padding, dilation=(1, 1)) -> tuple[int, int]:
    t, b, left, r = padding
    return (conv_out_size(x.shape[1], kh, stride[0], t, b, dilation[0]),
            conv_out_size(x.shape[2], kw, stride[1], left, r, dilation[1]))




# -- .tflite -------------------------------------------------------------------------------------------------------
def lower_window_input(w, graph, node, kernel, dilation, pad_value: str) -> tuple[int, str]:
    """(TFLite padding mode, the input name the op reads) for a window op; explicit padding TFLite cannot express
    becomes a PAD ("zero": the zero point) or a PADV2 ("min": the dtype's smallest value) written first through `w`
    (the `.tflite` writer's interface); "none" refuses it."""
    S, a = w.schema, node.attrs
    x = graph.tensors[node.inputs[0]]
    mode = S.tflite_padding(x.shape[1:3], kernel, a.stride, dilation, a.padding)
    if mode is not None:
        return mode, x.name
    if pad_value == "none":
        raise KilobyteError(f"node '{node.name}': {node.op.value} padding {a.padding} is neither SAME nor VALID and "
                            f"TFLite cannot express it (the average divisor would change); pad to SAME or VALID")
    t, b, left, r = a.padding
    name = S.pad_tensor_name(node.outputs[0])
    shape = (x.shape[0], x.shape[1] + t + b, x.shape[2] + left + r, x.shape[3])
    pads = w.const(f"{name}.paddings", np.array([[0, 0], [t, b], [left, r], [0, 0]], np.int32))
    if pad_value == "zero":
        w.op("PAD", (x.name, pads), (name,), {})
    else:  # MAX_POOL: pad with the smallest value so padded taps never win (TFLite ignores them)
        low = np.array([-128], np.int8) if x.dtype == "int8" else np.array([np.finfo(np.float32).min], np.float32)
        value = w.const(f"{name}.value", low, like=x.name if x.dtype == "int8" else None)
        w.op("PADV2", (x.name, pads, value), (name,), {})
    w.tensor_like(name, shape, x)  # PAD keeps the input's quantisation
    return S.VALID, name
