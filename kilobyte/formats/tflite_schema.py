"""Formats: the facts of the TFLite flatbuffer schema that the `.tflite` writer and reader share.

One table per mapping (IR op <-> builtin operator, dtype <-> TensorType, fused activation), TFLite's SAME padding
rule, and the naming convention for tensors the writer adds. The reader (`kilobyte.frontends.tflite`), the writer
(`kilobyte.export.tflite`) and the TFLite Micro bridge (`kilobyte.targets.tflm`) import this module, so that both
directions agree by construction. Values are those of schema version 3 (the `tflite` package).
"""

from __future__ import annotations

try:
    import flatbuffers  # noqa: F401  (the writer's dependency; fail here with the same hint)
    import tflite
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("reading or writing .tflite needs the 'tflite' and 'flatbuffers' packages: "
                      "pip install kilobyte[tflite]") from e

from ..ir import Activation, Op
from ..ops import defs

SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"
DESCRIPTION = "kilobyte"
# Model.metadata entry holding the IR node names ('\n'-joined, UTF-8): operators have no name field in the schema.
NODE_NAMES_METADATA = "kilobyte.node_names"
# Builtin codes above this live only in OperatorCode.builtin_code; deprecated_builtin_code holds this placeholder.
PLACEHOLDER_FOR_GREATER_OP_CODES = 127

B = tflite.BuiltinOperator
# Each op's builtin is in its OpDef (`kilobyte.ops`): the name here becomes the schema's code.
OP_TO_BUILTIN: dict[Op, int] = {d.op: getattr(B, d.builtin) for d in defs() if d.builtin is not None}
BUILTIN_TO_OP: dict[int, Op] = {v: k for k, v in OP_TO_BUILTIN.items()}
BUILTIN_NAMES: dict[int, str] = {v: k for k, v in vars(B).items() if not k.startswith("_") and isinstance(v, int)}

# Options table (name in the schema) written for each builtin; the union tag has the same name.
BUILTIN_OPTIONS: dict[int, str] = {
    B.CONV_2D: "Conv2DOptions",
    B.DEPTHWISE_CONV_2D: "DepthwiseConv2DOptions",
    B.FULLY_CONNECTED: "FullyConnectedOptions",
    B.ADD: "AddOptions",
    B.SUB: "SubOptions",
    B.MUL: "MulOptions",
    B.MAXIMUM: "MaximumMinimumOptions",
    B.MINIMUM: "MaximumMinimumOptions",
    B.AVERAGE_POOL_2D: "Pool2DOptions",
    B.MAX_POOL_2D: "Pool2DOptions",
    B.MEAN: "ReducerOptions",
    B.PAD: "PadOptions",
    B.PADV2: "PadV2Options",
    B.RESHAPE: "ReshapeOptions",
    B.CONCATENATION: "ConcatenationOptions",
    B.TRANSPOSE: "TransposeOptions",
    B.STRIDED_SLICE: "StridedSliceOptions",
    B.TILE: "TileOptions",
    B.REDUCE_MAX: "ReducerOptions",
    # Operators the reader only folds into constants (shape arithmetic, kilobyte.frontends.tflite_fold).
    B.SHAPE: "ShapeOptions",
    B.PACK: "PackOptions",
    B.GATHER: "GatherOptions",
    B.CAST: "CastOptions",
    B.SQUEEZE: "SqueezeOptions",
    B.EXPAND_DIMS: "ExpandDimsOptions",
    B.SOFTMAX: "SoftmaxOptions",
    B.LOG_SOFTMAX: "LogSoftmaxOptions",
    B.QUANTIZE: "QuantizeOptions",
    B.DEQUANTIZE: "DequantizeOptions",
    B.HARD_SWISH: "HardSwishOptions",
    B.LEAKY_RELU: "LeakyReluOptions",
    B.GELU: "GeluOptions",
    B.RESIZE_NEAREST_NEIGHBOR: "ResizeNearestNeighborOptions",
    B.RESIZE_BILINEAR: "ResizeBilinearOptions",
    B.TRANSPOSE_CONV: "TransposeConvOptions",
    B.STRIDED_SLICE: "StridedSliceOptions",
}

T = tflite.TensorType
DTYPE_TO_TFL: dict[str, int] = {"float32": T.FLOAT32, "int8": T.INT8, "int32": T.INT32, "uint8": T.UINT8}
TFL_TO_DTYPE: dict[int, str] = {v: k for k, v in DTYPE_TO_TFL.items()}
TFL_TYPE_NAMES: dict[int, str] = {v: k for k, v in vars(T).items() if not k.startswith("_") and isinstance(v, int)}
# Types that may appear on attribute tensors only (paddings, axes), which the reader consumes into attrs.
TFL_INT64 = T.INT64

A = tflite.ActivationFunctionType
ACT_TO_TFL: dict[Activation, int] = {Activation.NONE: A.NONE, Activation.RELU: A.RELU, Activation.RELU6: A.RELU6}
TFL_TO_ACT: dict[int, Activation] = {v: k for k, v in ACT_TO_TFL.items()}
TFL_ACT_NAMES: dict[int, str] = {v: k for k, v in vars(A).items() if not k.startswith("_") and isinstance(v, int)}

SAME = tflite.Padding.SAME
VALID = tflite.Padding.VALID


def deprecated_builtin_code(code: int) -> int:
    """The int8 `deprecated_builtin_code` the schema asks writers to fill (codes >= 127 get the placeholder)."""
    return min(code, PLACEHOLDER_FOR_GREATER_OP_CODES)


def same_pads(size: int, k: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """(before, after) padding TFLite uses for SAME along one axis; the odd pixel goes after.

    >>> same_pads(224, 3, 2)
    (0, 1)
    >>> same_pads(7, 3, 1)
    (1, 1)
    """
    eff = (k - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def tflite_padding(in_hw, kernel, stride, dilation, padding) -> int | None:
    """VALID when `padding` (top,bottom,left,right) is all zero, SAME when it is TFLite's SAME padding, else None.

    >>> tflite_padding((8, 8), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)) == SAME
    True
    >>> tflite_padding((8, 8), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)) is None  # SAME would be (0, 1, 0, 1)
    True
    """
    if not any(padding):
        return VALID
    t, b, left, r = padding
    if (t, b) == same_pads(in_hw[0], kernel[0], stride[0], dilation[0]) and \
            (left, r) == same_pads(in_hw[1], kernel[1], stride[1], dilation[1]):
        return SAME
    return None


def explicit_padding(mode: int, in_hw, kernel, stride, dilation) -> tuple[int, int, int, int]:
    """The IR's explicit (top, bottom, left, right) for a TFLite SAME/VALID window op."""
    if mode == VALID:
        return (0, 0, 0, 0)
    return same_pads(in_hw[0], kernel[0], stride[0], dilation[0]) + same_pads(in_hw[1], kernel[1], stride[1],
                                                                                 dilation[1])


def _c_div(a: int, b: int) -> int:
    """C's `/` on ints (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def transpose_conv_windows(mode: int, out_size: int, k: int, stride: int) -> int:
    """The input size TFLite's TRANSPOSE_CONV derives from the output size along one axis (the conv output size of
    `ComputePaddingHeightWidth` run from the output's side). TFLite (not TFLite Micro) refuses a file in which this
    differs from the real input size.

    >>> transpose_conv_windows(SAME, 14, 4, 2), transpose_conv_windows(VALID, 15, 3, 2)
    (7, 7)
    """
    if mode == SAME:
        return _c_div(out_size + stride - 1, stride)
    return _c_div(out_size + stride - k, stride)


def transpose_conv_crop(mode: int, out_size: int, k: int, stride: int) -> int:
    """The rows (columns) TFLite's TRANSPOSE_CONV crops before its output along one axis, for padding `mode` and the
    output size the file gives: `ComputePaddingHeightWidth` run from the output's side (TFLite's padding.h, C integer
    division); the crop after is whatever the output size leaves.

    >>> transpose_conv_crop(SAME, 14, 4, 2), transpose_conv_crop(SAME, 14, 3, 2), transpose_conv_crop(VALID, 15, 3, 2)
    (1, 0, 0)
    """
    windows = transpose_conv_windows(mode, out_size, k, stride)
    return max((windows - 1) * stride + k - out_size, 0) // 2


def pad_tensor_name(out: str) -> str:
    """Name of the padded input the writer inserts before the op producing `out` (the reader's fold marker)."""
    return f"{out}.pad"


def zero_bias_tensor_name(out: str) -> str:
    """Name of the zero int32 bias the writer gives an int8 CONV_2D that has none (TFLite, unlike TFLite Micro,
    refuses an int8 conv without a bias; the reader drops it again, like `pad_tensor_name`)."""
    return f"{out}.zero_bias"


def uncropped_tensor_name(out: str) -> str:
    """Name of the uncropped TRANSPOSE_CONV output the writer slices into `out` when TFLite's SAME/VALID cannot
    express the IR's crop (the reader's fold marker, like `pad_tensor_name`)."""
    return f"{out}.uncropped"


def unique_tensor_names(names) -> list[str]:
    """File tensor names made usable as IR names: empty -> `tensor_<i>`, a repeated name gets `__<i>` appended.

    >>> unique_tensor_names(["x", "", "x"])
    ['x', 'tensor_1', 'x__2']
    """
    out: list[str] = []
    seen: set[str] = set()
    for i, name in enumerate(names):
        name = name or f"tensor_{i}"
        if name in seen:
            name = f"{name}__{i}"
        seen.add(name)
        out.append(name)
    return out
