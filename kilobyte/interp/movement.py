"""Reference stage: the ops that move values without changing them — TRANSPOSE, STRIDED_SLICE, TILE — and REDUCE_MAX,
which picks one of the values it reads. numpy over any dtype, so the float interpreter, the int8 interpreter and the
`.tflite` importer's constant folding (int32 shape arithmetic) share one definition of each.

In int8 these are exact only when input and output share quantisation params (TFLite's converter writes them so;
TFLite Micro copies raw bytes whatever the params say): the int8 interpreter checks that before calling them.

Arrays whose leading axis holds N samples instead of the graph's batch of 1 (`run_int8` with N inputs at once) are
handled by `batched`: an op that leaves axis 0 alone runs on all N at once; one that moves, tiles or reduces the
batch axis refuses N > 1 with a one-line error rather than mixing samples.
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError
from ..ir import Node, Op


def transpose_values(x: np.ndarray, perm) -> np.ndarray:
    """numpy's transpose: output axis i is input axis perm[i]."""
    return np.ascontiguousarray(np.transpose(x, tuple(perm)))


def strided_slice_values(x: np.ndarray, begin, end, strides) -> np.ndarray:
    """Indices `range(begin[i], end[i], strides[i])` along every axis i (resolved bounds: end -1 = down to index 0).

    >>> strided_slice_values(np.arange(6), (5,), (-1,), (-2,))
    array([5, 3, 1])
    """
    index = tuple(slice(b, None if e < 0 else e, s) for b, e, s in zip(begin, end, strides))
    return np.ascontiguousarray(x[index])


def tile_values(x: np.ndarray, multiples) -> np.ndarray:
    """numpy's tile with one multiple per axis."""
    return np.tile(x, tuple(multiples))


def reduce_max_values(x: np.ndarray, axes, keepdims: bool) -> np.ndarray:
    """Maximum over `axes` (negative and repeated axes allowed; none: the input itself), as TFLite's ReduceGeneric with
    its lowest-value start: for int8 the raw int8 maximum."""
    axes = tuple(sorted({a % x.ndim for a in axes}))
    if not axes:
        return x.copy()
    return np.max(x, axis=axes, keepdims=keepdims)


def move_values(node: Node, x: np.ndarray) -> np.ndarray:
    """Run a TRANSPOSE / STRIDED_SLICE / TILE / REDUCE_MAX node on `x`, shaped exactly as the node's input."""
    a = node.attrs
    if node.op is Op.TRANSPOSE:
        return transpose_values(x, a.perm)
    if node.op is Op.STRIDED_SLICE:
        return strided_slice_values(x, a.begin, a.end, a.strides)
    if node.op is Op.TILE:
        return tile_values(x, a.multiples)
    if node.op is Op.REDUCE_MAX:
        return reduce_max_values(x, a.axes, a.keepdims)
    raise KilobyteError(f"node '{node.name}': {node.op.value} is not a data-movement op")


def batched(node: Node, x: np.ndarray, graph_shape: tuple[int, ...]) -> np.ndarray:
    """`move_values` on `x` whose leading axis may hold N samples where the graph's input `graph_shape` has 1."""
    if x.shape[0] == graph_shape[0]:
        return move_values(node, x)
    a = node.attrs
    moves_batch = ((node.op is Op.TRANSPOSE and a.perm[0] != 0) or (node.op is Op.TILE and a.multiples[0] != 1)
                   or (node.op is Op.REDUCE_MAX and 0 in {ax % x.ndim for ax in a.axes}))
    if moves_batch:
        raise KilobyteError(f"node '{node.name}' ({node.op.value}) moves the batch axis: run one sample at a time")
    if node.op is Op.STRIDED_SLICE:  # a non-empty slice of the size-1 batch axis is all of it: keep all N samples
        return strided_slice_values(x, (0, *a.begin[1:]), (x.shape[0], *a.end[1:]), (1, *a.strides[1:]))
    return move_values(node, x)
