"""IR stage: output-shape rules, one per op.

Frontends use these to give every new tensor its shape and `Graph.verify()` uses them to check a graph; both must
agree, so there is exactly one rule per op. Shapes are NHWC with batch 1.
"""

from __future__ import annotations

from ..ops import opdef
from ..ops.types import Op, ShapeError


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


def _window_shape(x: tuple[int, ...], kh: int, kw: int, attrs, cout: int) -> tuple[int, ...]:
    t, b, left, r = attrs.padding
    dh, dw = getattr(attrs, "dilation", (1, 1))
    ho = conv_out_size(x[1], kh, attrs.stride[0], t, b, dh)
    wo = conv_out_size(x[2], kw, attrs.stride[1], left, r, dw)
    return (x[0], ho, wo, cout)


def infer_shape(op: Op, attrs, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Shape of the (single) output of `op` given its input shapes (activations and parameters): the op's own rule
    (`OpDef.shape`), or for the ops still pending in the registry the rules below."""
    rule = opdef(op).shape
    if rule is not None:
        return rule(attrs, shapes)
    x = shapes[0]
    if op is Op.CONV_2D:
        w = shapes[1]
        if len(x) != 4 or len(w) != 4 or w[3] != x[3]:
            raise ShapeError(f"conv input {x} does not match weight {w} (OHWI)")
        return _window_shape(x, w[1], w[2], attrs, w[0])
    if op is Op.DEPTHWISE_CONV_2D:
        w = shapes[1]
        if len(x) != 4 or w[3] != x[3] * attrs.depth_multiplier:
            raise ShapeError(f"depthwise input {x} does not match weight {w} (1,kh,kw,C)")
        return _window_shape(x, w[1], w[2], attrs, w[3])
    if op is Op.FULLY_CONNECTED:
        w = shapes[1]
        if len(x) != 2 or x[1] != w[1]:
            raise ShapeError(f"fully connected input {x} does not match weight {w} (out,in)")
        return (x[0], w[0])
    if op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        return _window_shape(x, attrs.kernel[0], attrs.kernel[1], attrs, x[3])
    if op in BINARY_OPS:
        if len(shapes) != 2:
            raise ShapeError(f"{op.value} takes two operands, got {len(shapes)}")
        return broadcast_shape(shapes[0], shapes[1])
    if op is Op.PRELU:
        if len(shapes) != 2 or broadcast_shape(x, shapes[1]) != x:
            raise ShapeError(f"PRELU takes an input and an alpha that broadcasts to it, got {shapes}")
        return x
    if op in (Op.MEAN, Op.REDUCE_MAX):
        if any(not -len(x) <= a < len(x) for a in attrs.axes):
            raise ShapeError(f"axes {tuple(attrs.axes)} out of range for input shape {x}")
        axes = {a % len(x) for a in attrs.axes}
        if attrs.keepdims:
            return tuple(1 if i in axes else d for i, d in enumerate(x))
        return tuple(d for i, d in enumerate(x) if i not in axes)
    if op is Op.PAD:
        if len(attrs.pads) != len(x):
            raise ShapeError(f"pad has {len(attrs.pads)} axes, input has {len(x)}")
        return tuple(d + a + b for d, (a, b) in zip(x, attrs.pads))
    if op is Op.RESHAPE:
        if _numel(attrs.shape) != _numel(x):
            raise ShapeError(f"cannot reshape {x} to {attrs.shape}")
        return tuple(attrs.shape)
    if op is Op.CONCAT:
        return _concat_shape(shapes, attrs.axis)
    if op is Op.TRANSPOSE:
        if sorted(attrs.perm) != list(range(len(x))):
            raise ShapeError(f"perm {tuple(attrs.perm)} is not a permutation of the {len(x)} axes of {x}")
        return tuple(x[p] for p in attrs.perm)
    if op is Op.STRIDED_SLICE:
        return _slice_shape(x, attrs)
    if op is Op.TILE:
        if len(attrs.multiples) != len(x) or min(attrs.multiples, default=1) < 1:
            raise ShapeError(f"multiples {tuple(attrs.multiples)} must be one positive count per axis of {x}")
        return tuple(d * m for d, m in zip(x, attrs.multiples))
    if op in (Op.SOFTMAX, Op.LOG_SOFTMAX):
        if len(x) < 1 or x[-1] < 1:
            raise ShapeError(f"{op.value} works along the last axis; input shape {x} has none")
        return x
    # Elementwise: BATCH_NORM, RELU, RELU6, LOGISTIC, HARD_SWISH, LEAKY_RELU, GELU, TANH, ELU, RELU_N1_TO_1, EXP, LOG,
    # IDENTITY, QUANTIZE, DEQUANTIZE.
    return x


BINARY_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM})  # two operands, TFLite (numpy) broadcasting


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy / TFLite broadcasting of two shapes, aligned at the last axis.

    >>> broadcast_shape((1, 4, 4, 8), (1, 1, 1, 8))
    (1, 4, 4, 8)
    """
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise ShapeError(f"operands {a} and {b} do not broadcast")
    return tuple(x if y == 1 else y for x, y in zip(a, b))


def _concat_shape(shapes: list[tuple[int, ...]], axis: int) -> tuple[int, ...]:
    rank = len(shapes[0])
    axis %= rank
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ShapeError(f"concat operands do not match outside axis {axis}: {shapes}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


def _slice_shape(x: tuple[int, ...], attrs) -> tuple[int, ...]:
    """Output shape of a resolved STRIDED_SLICE (see `StridedSliceAttrs`): len(range(begin, end, stride)) per axis.

    >>> from kilobyte.ir import StridedSliceAttrs
    >>> _slice_shape((1, 8, 5, 3), StridedSliceAttrs((0, 1, 4, 0), (1, 8, -1, 3), (1, 2, -1, 1)))
    (1, 4, 5, 3)
    """
    a = attrs
    if not len(a.begin) == len(a.end) == len(a.strides) == len(x):
        raise ShapeError(f"begin/end/strides {a.begin}/{a.end}/{a.strides} need one entry per axis of {x}")
    out = []
    for d, b, e, s in zip(x, a.begin, a.end, a.strides):
        if s == 0 or not 0 <= b < d or not -1 <= e <= d or len(range(b, e, s)) < 1:
            raise ShapeError(f"slice begin {b}, end {e}, stride {s} of an axis of size {d} is empty or out of range")
        out.append(len(range(b, e, s)))
    return tuple(out)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
