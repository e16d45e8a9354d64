"""IR stage: output-shape rules, one per op.

Frontends use these to give every new tensor its shape and `Graph.verify()` uses them to check a graph; both must
agree, so there is exactly one rule per op. Shapes are NHWC with batch 1.
"""

from __future__ import annotations

from ..ops import opdef
from ..ops.types import Op, ShapeError


def infer_shape(op: Op, attrs, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Shape of the (single) output of `op` given its input shapes (activations and parameters): the op's own rule
    (`OpDef.shape`)."""
    rule = opdef(op).shape
    if rule is not None:
        return rule(attrs, shapes)
    raise ShapeError(f"{op.value} has no shape rule")  # every other op's is its OpDef's (tests/ops/test_registry.py)


