"""Op registry: MEAN — its definition, TFLite Micro's integer MEAN (`reference_ops::QuantizedMeanOrSum`) and the
fields of `kb_mean` (runtime/c/kb_mean.c), which gets the same multiplier and shift as the reference.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .arith import multiply_by_quantized_multiplier, quantize_multiplier
from .c_text import c_struct
from .contract import KernelContract
from .layer_code import Buffers, LayerCode
from .movement import reduce_shape
from .node_params import tensor_qparams
from .opdef import OpDef
from .types import MeanAttrs, Op


def mean_int8(x, axes, keepdims: bool, input_scale, input_zp: int, output_scale, output_zp: int) -> np.ndarray:
    """int8 MEAN as TFLite Micro computes it (`reference_ops::QuantizedMeanOrSum`, integer version), any axes.

    `sum(x - zp_in)` over the n reduced values is requantised with `QuantizeMultiplier(s_in / s_out)` into which
    1/n is folded: `k = min(floor(log2 n), 32, 31 + shift)`, `multiplier = (multiplier << k) / n` (truncating),
    `shift -= k`; then `+ zp_out` and the int8 clamp.
    """
    axes = tuple(sorted({a % x.ndim for a in axes}))
    n = int(np.prod([x.shape[a] for a in axes]))
    acc = (np.asarray(x, np.int64) - input_zp).sum(axis=axes, keepdims=keepdims)
    m, s = mean_multiplier(input_scale, output_scale, n)
    return np.clip(multiply_by_quantized_multiplier(acc, m, s) + output_zp, -128, 127).astype(np.int8)


def mean_multiplier(input_scale, output_scale, n: int) -> tuple[int, int]:
    """(multiplier, shift) of an int8 MEAN over `n` values: `QuantizeMultiplier(s_in / s_out)` with 1/n folded in as
    TFLite Micro's `QuantizedMeanOrSum` does it (`mean_int8`); the C kernel `kb_mean` gets the same two numbers.

    The shift k taken out of the multiplier is at most floor(log2 n) (so `(m << k) / n` stays below 2^31), at most 32,
    and at most 31 + shift (so the final right shift stays within 31 bits).

    >>> mean_multiplier(0.5, 0.5, 49)  # 2^30 * 2^5 / 49, shift 1 - 5
    (701219150, -4)
    """
    m, s = (int(v) for v in quantize_multiplier(float(np.float32(input_scale)) / float(np.float32(output_scale))))
    k = min(n.bit_length() - 1, 32, 31 + s)
    return (m << k) // n, s - k


MEAN_MAX_REDUCE = 1 << 23  # below this many values |sum - n * zero point| < 256 n fits kb_mean's int32 sum


def mean_fields(graph, node, cstrides: tuple[int, int]) -> dict[str, int]:
    """`kb_mean_params` of an int8 MEAN whose input and output have pixel strides `cstrides`.

    kb_mean reads (outer, reduce, inner) pixels, so the reduced axes must be one contiguous run once unit axes (which
    belong to either side) are left out: over NHWC, (1, 2), (1,), (2,), (3,), (2, 3), (1, 2, 3) all work, (1, 3) only
    when W is 1. Without the channel axis a pixel is the tensor's own (c = C, the planned strides: the output may be
    a concat slice); with it the tensor is read byte by byte (c = 1), which needs a dense input and an output whose
    last axis is 1 or dense. Everything else raises a one-line `UnsupportedOpError` naming the node and its axes.
    """
    x_shape, y_shape = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    rank = len(x_shape)
    axes = sorted({a % rank for a in node.attrs.axes})
    where = f"node '{node.name}' (MEAN over axes {tuple(node.attrs.axes)} of {x_shape})"
    if rank - 1 in axes:
        y_last = y_shape[-1] if y_shape else 1
        if cstrides[0] != x_shape[-1] or (y_last != 1 and cstrides[1] != y_last):
            raise UnsupportedOpError(f"{where}: a mean over channels needs a dense input and output")
        dims, c, strides = x_shape, 1, (1, cstrides[1] if y_last == 1 else 1)
    else:
        dims, c, strides = x_shape[:-1], x_shape[-1], cstrides
    reduced = [a for a in axes if dims[a] > 1]
    first, last = (reduced[0], reduced[-1]) if reduced else (len(dims), len(dims) - 1)
    if any(a not in axes and dims[a] > 1 for a in range(first, last + 1)):
        raise UnsupportedOpError(f"{where}: kb_mean needs the reduced axes to be one contiguous run")
    outer, reduce, inner = (int(np.prod(dims[:first])), int(np.prod(dims[first:last + 1])),
                            int(np.prod(dims[last + 1:])))
    if reduce >= MEAN_MAX_REDUCE:
        raise UnsupportedOpError(f"{where}: {reduce} values overflow kb_mean's int32 sum")
    (s_in,), (z_in,) = graph.tensors[node.inputs[0]].qparams.scale, graph.tensors[node.inputs[0]].qparams.zero_point
    (s_out,), (z_out,) = graph.tensors[node.outputs[0]].qparams.scale, graph.tensors[node.outputs[0]].qparams.zero_point
    mult, shift = mean_multiplier(s_in, s_out, reduce)  # reduce == n of mean_int8: unit axes add nothing
    return dict(outer=outer, reduce=reduce, inner=inner, c=c, in_cstride=strides[0], out_cstride=strides[1],
                sum_offset=-int(z_in) * reduce, mult=mult, shift=shift, out_offset=int(z_out))


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    params = mean_fields(graph, node, (bufs.cstride(node.inputs[0]), bufs.cstride(node.outputs[0])))
    return LayerCode(body=[c_struct("kb_mean_params", params),
                           f"kb_mean(&p, {bufs.ptr(node.inputs[0])}, {bufs.ptr(node.outputs[0])});"],
                     families={"mean"})


def _float(node, args) -> np.ndarray:
    return args[0].mean(axis=tuple(node.attrs.axes), keepdims=node.attrs.keepdims)


def _int8(graph, node, args) -> np.ndarray:
    return mean_int8(args[0], node.attrs.axes, node.attrs.keepdims, *tensor_qparams(graph, node.inputs[0]),
                     *tensor_qparams(graph, node.outputs[0]))


def _lower(w, graph, node) -> None:
    axes = w.const(f"{node.outputs[0]}.axes", np.array(node.attrs.axes, np.int32))
    w.op("MEAN", (node.inputs[0], axes), node.outputs, {"KeepDims": bool(node.attrs.keepdims)})


DEFS = (
    OpDef(Op.MEAN, MeanAttrs, KernelContract(Op.MEAN, "mean", "kb_mean_params",
                                             constraints="the reduced axes are one contiguous run"),
          builtin="MEAN", function="kb_mean", shape=reduce_shape, float_ref=_float, int8_ref=_int8, emit=_emit,
          lower=_lower),
)
