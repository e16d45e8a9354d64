"""Op registry: TRANSPOSE_CONV — its definition and TFLite Micro's arithmetic
(`reference_integer_ops::TransposeConv`).

Every input pixel scatters `w · (x - zp_in)` into an int32 window of the (cropped) output; the sums get the bias and
the per-channel requantisation of CONV_2D. Integer sums do not depend on their order, so `transpose_conv_sum` adds
one kernel tap at a time over all pixels (float64, exact below 2^53), and the C kernel gathers per output pixel
instead of scattering (no int32 scratch).
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError
from .c_text import c_struct
from .contract import KernelContract
from .layer_code import Buffers, LayerCode, weight_arrays, window_params
from .node_params import RequantParams, finish, requant_params
from .opdef import OpDef
from .types import Op, ShapeError, TransposeConvAttrs, apply_activation


def transpose_conv_sum(x, w, stride, padding, out_hw) -> np.ndarray:
    """Sum of TRANSPOSE_CONV before bias: x (N,H,W,Cin), w (Cout,kh,kw,Cin) -> (N,Ho,Wo,Cout) float64.

    Input pixel (i, j) adds `w[:, fy, fx] @ x[i, j]` to full-output pixel (i*sh + fy, j*sw + fx); the result is the
    full output cropped by `padding` (top, bottom, left, right); a negative bottom / right appends zero rows.
    """
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, h, wd, _ = x.shape
    cout, kh, kw, _ = w.shape
    (sh, sw), (t, _, left, _) = stride, padding
    ho, wo = out_hw
    full = np.zeros((n, max((h - 1) * sh + kh, t + ho), max((wd - 1) * sw + kw, left + wo), cout))
    for fy in range(kh):
        for fx in range(kw):
            full[:, fy: fy + (h - 1) * sh + 1: sh, fx: fx + (wd - 1) * sw + 1: sw] += x @ w[:, fy, fx, :].T
    return full[:, t: t + ho, left: left + wo]


def transpose_conv_out_size(size: int, k: int, stride: int, crop_before: int, crop_after: int) -> int:
    """Output length of a transposed convolution along one axis: the full (size-1)*stride + k, cropped.

    >>> transpose_conv_out_size(7, 4, 2, 1, 1)  # PyTorch ConvTranspose2d(k=4, s=2, p=1) doubles the size
    14
    """
    out = (size - 1) * stride + k - crop_before - crop_after
    if stride < 1 or crop_before < 0 or out < 1:
        raise ShapeError(f"transposed window {k} (stride {stride}, crop {crop_before}/{crop_after}) of input size "
                         f"{size} leaves no output")
    return out


def transpose_conv_int8(x, w, bias, p: RequantParams, *, stride, padding, out_hw) -> np.ndarray:
    """int8 TRANSPOSE_CONV. x (N,H,W,Cin) int8, w (Cout,kh,kw,Cin) int8, bias (Cout,) int32 or None ->
    (N,Ho,Wo,Cout): the int32 sums of `w · (x - zp_in)` (`transpose_conv_sum`), the bias, CONV_2D's per-channel
    requantisation and clamp."""
    return finish(transpose_conv_sum(x.astype(np.float64) - p.input_zp, w, stride, padding, out_hw), bias, p)


# -- the op ------------------------------------------------------------------------------------------------------
def _shape(attrs, shapes) -> tuple[int, ...]:
    x, w = shapes[0], shapes[1]
    if len(x) != 4 or len(w) != 4 or w[3] != x[3]:
        raise ShapeError(f"transpose conv input {x} does not match weight {w} (OHWI)")
    t, b, left, r = attrs.padding
    return (x[0], transpose_conv_out_size(x[1], w[1], attrs.stride[0], t, b),
            transpose_conv_out_size(x[2], w[2], attrs.stride[1], left, r), w[0])


def _macs(graph, node) -> int:
    """Every input pixel goes through the whole kernel: weight elements times *input* pixels (taps that land in the
    cropped border included)."""
    _, h, w, _ = graph.tensors[node.inputs[0]].shape
    return int(np.prod(graph.tensors[node.inputs[1]].shape, dtype=np.int64)) * h * w


def _float(node, args) -> np.ndarray:
    x, w = args[0], args[1]
    a = node.attrs
    t, bottom, left, r = a.padding
    out_hw = (transpose_conv_out_size(x.shape[1], w.shape[1], a.stride[0], t, bottom),
              transpose_conv_out_size(x.shape[2], w.shape[2], a.stride[1], left, r))
    y = transpose_conv_sum(x, w, a.stride, a.padding, out_hw)
    return apply_activation(y + (args[2] if len(args) > 2 else 0.0), a.activation)


def _int8(graph, node, args) -> np.ndarray:
    a = node.attrs
    out_hw = graph.tensors[node.outputs[0]].shape[1:3]
    return transpose_conv_int8(args[0], args[1], args[2] if len(args) > 2 else None, requant_params(graph, node),
                               stride=a.stride, padding=a.padding, out_hw=out_hw)


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    """A conv's weights and requantisation arrays and `kb_conv_params` (pad_t / pad_l = the crop)."""
    code = LayerCode(families={"transpose_conv"})
    p = requant_params(graph, node)
    k = graph.tensors[node.inputs[1]].shape[1:3]
    params = window_params(graph, node, bufs, k, (p.input_zp, p.output_zp), (p.act_min, p.act_max))
    w, b, m, s = weight_arrays(graph, node, code)
    code.body += [c_struct("kb_conv_params", params),
                  f"{FUNCTION}(&p, {bufs.ptr(node.inputs[0])}, {w}, {b}, {m}, {s}, {bufs.ptr(node.outputs[0])});"]
    return code


# -- .tflite -----------------------------------------------------------------------------------------------------
def _lower(w, graph, node) -> None:
    """TFLite's operand order (output shape, weight, input, bias); the output shape is an int32 constant. SAME or
    VALID when one of them crops as the IR does *and* gives back the input size from the output size (TFLite checks
    that, TFLite Micro does not); otherwise a VALID TRANSPOSE_CONV into the whole uncropped output (plus the rows and
    columns a negative crop after appends, fewer than the stride) and a STRIDED_SLICE of the IR's output."""
    S, a = w.schema, node.attrs
    out = graph.tensors[node.outputs[0]]
    in_hw = graph.tensors[node.inputs[0]].shape[1:3]
    kernel = graph.tensors[node.inputs[1]].shape[1:3]
    crop = (a.padding[0], a.padding[2])
    opts = {"StrideW": a.stride[1], "StrideH": a.stride[0], "FusedActivationFunction": w.activation(node)}
    for mode in (S.SAME, S.VALID):
        if _tflite_crops(S, mode, in_hw, out.shape[1:3], kernel, a.stride) == crop:
            _lower_op(w, node, out.name, out.shape, {**opts, "Padding": mode})
            return
    appended = (max(-a.padding[1], 0), max(-a.padding[3], 0))
    if any(e >= s for e, s in zip(appended, a.stride)):
        raise KilobyteError(f"node '{node.name}': TRANSPOSE_CONV crop {a.padding} appends {max(appended)} rows or "
                            f"columns, TFLite at most stride - 1 ({a.stride}); PyTorch's output_padding stays below "
                            f"the stride")
    full_hw = tuple((n - 1) * s + k + e for n, s, k, e in zip(in_hw, a.stride, kernel, appended))
    full_shape = (out.shape[0], *full_hw, out.shape[3])
    full = S.uncropped_tensor_name(out.name)
    _lower_op(w, node, full, full_shape, {**opts, "Padding": S.VALID})
    w.tensor_like(full, full_shape, out)  # after the output-shape constant: the writer's tensor order
    begin = w.const(f"{out.name}.begin", np.array([0, crop[0], crop[1], 0], np.int32))
    end = w.const(f"{out.name}.end", np.array([full_shape[0], crop[0] + out.shape[1], crop[1] + out.shape[2],
                                               full_shape[3]], np.int32))
    strides = w.const(f"{out.name}.strides", np.ones(4, np.int32))
    w.op("STRIDED_SLICE", (full, begin, end, strides), (out.name,), {})


def _tflite_crops(S, mode: int, in_hw, out_hw, kernel, stride) -> tuple[int, int] | None:
    """The (top, left) crop TFLite applies in padding `mode` for this output size, or None when TFLite would refuse
    the sizes (the input size it derives from the output differs from the real one)."""
    if any(S.transpose_conv_windows(mode, o, k, s) != n for n, o, k, s in zip(in_hw, out_hw, kernel, stride)):
        return None
    return tuple(S.transpose_conv_crop(mode, o, k, s) for o, k, s in zip(out_hw, kernel, stride))


def _lower_op(w, node, out: str, out_shape, opts: dict) -> None:
    shape = w.const(f"{out}.output_shape", np.array(out_shape, np.int32))
    w.op("TRANSPOSE_CONV", (shape, node.inputs[1], node.inputs[0], *node.inputs[2:3]), (out,), opts)


FUNCTION = "kb_transpose_conv"
DEFS = (
    OpDef(Op.TRANSPOSE_CONV, TransposeConvAttrs,
          KernelContract(Op.TRANSPOSE_CONV, "transpose_conv", "kb_conv_params",
                         constraints="any kernel and stride, crop on any side (SAME, VALID, PyTorch's padding and "
                         "output_padding); per-channel weights, bias; fused ReLU/ReLU6; no scratch (gathers per "
                         "output pixel where TFLite Micro scatters into an int32 copy of the output); runs per layer, "
                         "never in a patch stage"),
          params=True, weight_axis=0, fusable=True, builtin="TRANSPOSE_CONV", function=FUNCTION, shape=_shape,
          macs=_macs, float_ref=_float, int8_ref=_int8, emit=_emit, lower=_lower),
)
