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
    if op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        return _window_shape(x, attrs.kernel[0], attrs.kernel[1], attrs, x[3])
    # Elementwise: BATCH_NORM, RELU, RELU6, LOGISTIC, HARD_SWISH, LEAKY_RELU, GELU, TANH, ELU, RELU_N1_TO_1, EXP, LOG,
    # IDENTITY, QUANTIZE, DEQUANTIZE.
    return x


