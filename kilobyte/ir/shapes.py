"""IR stage: output-shape rules, one per op.

Frontends use these to give every new tensor its shape and `Graph.verify()` uses them to check a graph; both must
agree, so there is exactly one rule per op. Shapes are NHWC with batch 1.
"""

from __future__ import annotations

from ..ops import opdef
from ..ops.types import Op, ShapeError
from ..ops.window import window_shape


def infer_shape(op: Op, attrs, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Shape of the (single) output of `op` given its input shapes (activations and parameters): the op's own rule
    (`OpDef.shape`), or for the two convolutions still pending in the registry the rules below."""
    rule = opdef(op).shape
    if rule is not None:
        return rule(attrs, shapes)
    x = shapes[0]
    if op is Op.CONV_2D:
        w = shapes[1]
        if len(x) != 4 or len(w) != 4 or w[3] != x[3]:
            raise ShapeError(f"conv input {x} does not match weight {w} (OHWI)")
        return window_shape(x, w[1], w[2], attrs, w[0])
    if op is Op.DEPTHWISE_CONV_2D:
        w = shapes[1]
        if len(x) != 4 or w[3] != x[3] * attrs.depth_multiplier:
            raise ShapeError(f"depthwise input {x} does not match weight {w} (1,kh,kw,C)")
        return window_shape(x, w[1], w[2], attrs, w[3])
    raise ShapeError(f"{op.value} has no shape rule")  # every other op's is its OpDef's (tests/ops/test_registry.py)


