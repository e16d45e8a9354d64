"""Frontend stage: TFLite's index rules, resolved at import so that the IR holds plain numbers.

`slice_bounds` resolves a STRIDED_SLICE's begin / end / strides and masks for one input shape the way TensorFlow Lite
Micro does (`StridedSliceStartForAxis` / `StridedSliceEndForAxis`), into the `range(begin, end, stride)` per axis that
`StridedSliceAttrs` holds. The `.tflite` importer uses it for int8 slices (`tflite_ops`) and for the int32 shape
arithmetic it folds into constants (`tflite_fold`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SliceBounds:
    """A STRIDED_SLICE resolved for one input shape: `range(begin[i], end[i], strides[i])` per axis (never empty),
    and the axes the output drops (shrink_axis_mask)."""

    begin: tuple[int, ...]
    end: tuple[int, ...]
    strides: tuple[int, ...]
    shrink: tuple[int, ...]

    @property
    def kept_shape(self) -> tuple[int, ...]:
        """The slice's shape with the shrunk axes still there (each of size 1)."""
        return tuple(len(range(b, e, s)) for b, e, s in zip(self.begin, self.end, self.strides))

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(d for i, d in enumerate(self.kept_shape) if i not in self.shrink)


def slice_bounds(shape, begin, end, strides, begin_mask: int = 0, end_mask: int = 0,
                 shrink_mask: int = 0) -> SliceBounds:
    """TFLite Micro's resolution of STRIDED_SLICE indices (`StridedSliceStartForAxis` / `StridedSliceEndForAxis`):
    a negative index counts from the end, indices are clamped to the axis ([0, n] going up, [-1, n-1] going down), a
    begin / end mask bit takes the whole axis in the stride's direction, a shrink axis takes the one element at begin.
    Raises `ValueError` for a zero stride, an empty result, or a shrink axis with a negative stride or past the end
    (TFLite Micro writes nothing there).

    >>> b = slice_bounds((1, 6, 4), [0, -1, 1], [1, 0, 0], [1, -2, 1], end_mask=0b100, shrink_mask=0b001)
    >>> b.begin, b.end, b.kept_shape, b.out_shape
    ((0, 5, 1), (1, 0, 4), (1, 3, 3), (3, 3))
    """
    out_b, out_e, shrink = [], [], []
    for i, (n, s) in enumerate(zip(shape, strides)):
        if s == 0:
            raise ValueError(f"axis {i}: stride 0")
        lo, hi = (0, n) if s > 0 else (-1, n - 1)
        b = begin[i] + n if begin[i] < 0 else begin[i]
        b = (0 if s > 0 else n - 1) if begin_mask >> i & 1 else min(max(b, lo), hi)
        if shrink_mask >> i & 1:
            if s < 0 or b >= n:
                raise ValueError(f"axis {i} (size {n}): shrink_axis at index {begin[i]} with stride {s} selects "
                                 "nothing in TFLite Micro")
            e = b + 1
            shrink.append(i)
        else:
            e = end[i] + n if end[i] < 0 else end[i]
            e = (n if s > 0 else -1) if end_mask >> i & 1 else min(max(e, lo), hi)
        if len(range(b, e, s)) < 1:
            raise ValueError(f"axis {i} (size {n}): begin {begin[i]}, end {end[i]}, stride {s} select nothing")
        out_b.append(b)
        out_e.append(e)
    return SliceBounds(tuple(out_b), tuple(out_e), tuple(strides), tuple(shrink))
