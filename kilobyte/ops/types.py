"""Op registry: the closed set of operators and their typed attributes.

Every node of a Kilobyte graph carries one `Op` and one attrs dataclass of the matching type (its `OpDef.attrs`).
Layouts follow TFLite so the `.tflite` writer and the C runtime need no transposes: activations are NHWC, CONV_2D
weights are OHWI `(Cout, kh, kw, Cin)`, DEPTHWISE_CONV_2D weights are `(1, kh, kw, C)`, FULLY_CONNECTED weights are
`(out, in)`, TRANSPOSE_CONV weights are OHWI too, biases are 1-D. Padding is explicit `(top, bottom, left, right)`:
PyTorch's symmetric padding and TFLite's SAME/VALID are both special cases of it (for TRANSPOSE_CONV it crops the
output instead of padding the input).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

# what `kilobyte.ir` re-exports: the Op enum and every attrs dataclass
__all__ = [
    "Activation", "AddAttrs", "BatchNormAttrs", "ConcatAttrs", "ConvAttrs", "DepthwiseAttrs", "FullyConnectedAttrs",
    "GeluAttrs", "LeakyReluAttrs", "MeanAttrs", "NoAttrs", "Op", "PadAttrs", "PoolAttrs", "ReshapeAttrs",
    "ResizeAttrs", "SoftmaxAttrs", "StridedSliceAttrs", "TileAttrs", "TransposeAttrs", "TransposeConvAttrs",
]


class ShapeError(ValueError):
    """A node's inputs do not fit its op; the message names the reason."""


class Op(enum.Enum):
    CONV_2D = "CONV_2D"
    DEPTHWISE_CONV_2D = "DEPTHWISE_CONV_2D"
    FULLY_CONNECTED = "FULLY_CONNECTED"
    ADD = "ADD"
    SUB = "SUB"
    MUL = "MUL"
    MAXIMUM = "MAXIMUM"
    MINIMUM = "MINIMUM"
    AVG_POOL_2D = "AVG_POOL_2D"
    MAX_POOL_2D = "MAX_POOL_2D"
    MEAN = "MEAN"
    PAD = "PAD"
    RESHAPE = "RESHAPE"
    CONCAT = "CONCAT"
    # Data movement imported from .tflite files: output values are input values (shared quantisation params).
    TRANSPOSE = "TRANSPOSE"
    STRIDED_SLICE = "STRIDED_SLICE"
    TILE = "TILE"
    REDUCE_MAX = "REDUCE_MAX"
    SOFTMAX = "SOFTMAX"
    LOG_SOFTMAX = "LOG_SOFTMAX"
    # int8 unary activations: the C code runs each as one 256-entry lookup table (kb_lut).
    LOGISTIC = "LOGISTIC"
    HARD_SWISH = "HARD_SWISH"
    LEAKY_RELU = "LEAKY_RELU"
    GELU = "GELU"
    TANH = "TANH"
    ELU = "ELU"
    RELU_N1_TO_1 = "RELU_N1_TO_1"
    EXP = "EXP"
    LOG = "LOG"
    PRELU = "PRELU"  # x >= 0 ? x : alpha * x, alpha a constant second input, per channel (last axis) or single
    # Upsampling (decoders): two resizes and the transposed convolution.
    RESIZE_NEAREST_NEIGHBOR = "RESIZE_NEAREST_NEIGHBOR"
    RESIZE_BILINEAR = "RESIZE_BILINEAR"
    TRANSPOSE_CONV = "TRANSPOSE_CONV"
    # Training-graph ops: frontends emit them, the inference transforms remove them.
    BATCH_NORM = "BATCH_NORM"
    RELU = "RELU"
    RELU6 = "RELU6"
    IDENTITY = "IDENTITY"
    # Graph-edge conversions between float and int8 (TFLite QUANTIZE / DEQUANTIZE).
    QUANTIZE = "QUANTIZE"
    DEQUANTIZE = "DEQUANTIZE"


class Activation(enum.Enum):
    """Fused activation of a producer op (TFLite's fused_activation_function)."""

    NONE = "NONE"
    RELU = "RELU"
    RELU6 = "RELU6"


def apply_activation(x: np.ndarray, act: Activation) -> np.ndarray:
    """A float tensor through a fused activation (what the float references do after the op)."""
    if act is Activation.RELU:
        return np.maximum(x, 0.0)
    if act is Activation.RELU6:
        return np.clip(x, 0.0, 6.0)
    return x


Pad4 = tuple[int, int, int, int]  # (top, bottom, left, right)


# windowed ops: a kernel slides over H and W
@dataclass(frozen=True)
class ConvAttrs:
    """CONV_2D. Inputs: x (1,H,W,Cin), weight (Cout,kh,kw,Cin), bias (Cout,) optional.

    `weight_format`: how the generated C stores the weights (`ops/sparse.py`): "dense" (OHWI), "fwcs" (DTMM's
    filterlet format) or "csr". The weight tensor stays dense in the IR (pruned weights are zeros), so every
    executor but the C code is unaffected; `transforms.set_weight_format` chooses it."""

    stride: tuple[int, int] = (1, 1)
    padding: Pad4 = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    activation: Activation = Activation.NONE
    weight_format: str = "dense"


@dataclass(frozen=True)
class DepthwiseAttrs:
    """DEPTHWISE_CONV_2D. Inputs: x (1,H,W,C), weight (1,kh,kw,C*multiplier), bias optional."""

    stride: tuple[int, int] = (1, 1)
    padding: Pad4 = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    depth_multiplier: int = 1
    activation: Activation = Activation.NONE


@dataclass(frozen=True)
class TransposeConvAttrs:
    """TRANSPOSE_CONV. Inputs: x (1,H,W,Cin), weight (Cout,kh,kw,Cin) (OHWI, as TFLite), bias (Cout,) optional.

    Input pixel (i, j) adds `w[:, fy, fx, :] @ x[i, j]` to output pixel (i*sh - top + fy, j*sw - left + fx): the
    full result ((H-1)*sh + kh rows) is cropped by `padding` (top, bottom, left, right), so
    Ho = (H-1)*sh + kh - top - bottom. top and left are >= 0; bottom and right may be negative, which appends rows
    (columns) that only the bias reaches (PyTorch's output_padding beyond its padding)."""

    stride: tuple[int, int] = (1, 1)
    padding: Pad4 = (0, 0, 0, 0)
    activation: Activation = Activation.NONE


@dataclass(frozen=True)
class PoolAttrs:
    """AVG_POOL_2D / MAX_POOL_2D. Average pooling divides by the count of in-image taps (TFLite)."""

    kernel: tuple[int, int] = (2, 2)
    stride: tuple[int, int] = (2, 2)
    padding: Pad4 = (0, 0, 0, 0)
    activation: Activation = Activation.NONE


# the other weighted ops
@dataclass(frozen=True)
class FullyConnectedAttrs:
    """FULLY_CONNECTED. Inputs: x (1,in), weight (out,in), bias (out,) optional."""

    activation: Activation = Activation.NONE


@dataclass(frozen=True)
class BatchNormAttrs:
    """BATCH_NORM. Inputs: x, gamma, beta, running_mean, running_var (all (C,))."""

    eps: float = 1e-5


# elementwise, reductions and the activations' parameters
@dataclass(frozen=True)
class AddAttrs:
    """ADD, SUB, MUL: two operands (numpy broadcasting) and a fused activation."""

    activation: Activation = Activation.NONE


@dataclass(frozen=True)
class ConcatAttrs:
    """CONCATENATION of the inputs along `axis` (NHWC: 3 is channels) with a fused activation."""

    axis: int = 3
    activation: Activation = Activation.NONE


@dataclass(frozen=True)
class MeanAttrs:
    """MEAN and REDUCE_MAX over axes of the input (global average pooling is MEAN over axes=(1, 2)); each axis in
    [-rank, rank), repeats allowed (TFLite's ResolveAxis drops them)."""

    axes: tuple[int, ...] = (1, 2)
    keepdims: bool = False


@dataclass(frozen=True)
class SoftmaxAttrs:
    """SOFTMAX over the last axis of exp(beta * x) (TFLite's SoftmaxOptions)."""

    beta: float = 1.0


@dataclass(frozen=True)
class LeakyReluAttrs:
    """LEAKY_RELU: x for x >= 0, alpha * x otherwise (TFLite's LeakyReluOptions)."""

    alpha: float = 0.2


@dataclass(frozen=True)
class GeluAttrs:
    """GELU: x * Phi(x) with the exact erf form, or with `approximate` the tanh form (TFLite's GeluOptions)."""

    approximate: bool = False


# data movement: the values are copied, not computed
@dataclass(frozen=True)
class PadAttrs:
    """PAD with zeros (int8: with the input zero point). pads: (before, after) per NHWC axis."""

    pads: tuple[tuple[int, int], ...] = ((0, 0), (0, 0), (0, 0), (0, 0))


@dataclass(frozen=True)
class ReshapeAttrs:
    """RESHAPE (and SQUEEZE, FLATTEN at import) to `shape`, the batch axis included; the bytes do not move."""

    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class TransposeAttrs:
    """TRANSPOSE: output axis i is input axis perm[i] (numpy's `transpose`); NCHW -> NHWC is perm=(0, 2, 3, 1)."""

    perm: tuple[int, ...] = (0, 1, 2, 3)


@dataclass(frozen=True)
class StridedSliceAttrs:
    """STRIDED_SLICE with TFLite's masks and negative indices already resolved (at import): along axis i the output
    takes input indices `range(begin[i], end[i], strides[i])`, which is never empty; 0 <= begin[i] < size, end[i] in
    [-1, size] (-1 only with a negative stride: the slice runs down to index 0). Rank is kept: TFLite's shrink axes
    become a RESHAPE after it."""

    begin: tuple[int, ...] = ()
    end: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()


@dataclass(frozen=True)
class TileAttrs:
    """TILE: the input repeated multiples[i] >= 1 times along axis i (numpy's `tile` with equal ranks)."""

    multiples: tuple[int, ...] = ()


@dataclass(frozen=True)
class ResizeAttrs:
    """RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR of the H and W axes to `size` (TFLite's constant size operand and
    its options). `align_corners` maps the corner pixels onto each other; `half_pixel_centers` samples at pixel
    centres (PyTorch's align_corners=False); TFLite's bilinear resize refuses both at once."""

    size: tuple[int, int] = (1, 1)
    align_corners: bool = False
    half_pixel_centers: bool = False


@dataclass(frozen=True)
class NoAttrs:
    """RELU, RELU6, IDENTITY, QUANTIZE, DEQUANTIZE, LOGISTIC, HARD_SWISH, TANH, ELU (TFLite's alpha is 1),
    RELU_N1_TO_1, EXP, LOG, PRELU (alpha is an input), LOG_SOFTMAX (TFLite's has no options: beta is 1), MAXIMUM,
    MINIMUM (two operands, no fused activation in TFLite)."""
