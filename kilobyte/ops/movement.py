"""Op registry: the ops that move values without changing them — TRANSPOSE, STRIDED_SLICE, TILE — and REDUCE_MAX,
which picks one of the values it reads (family `movement`: `kb_strided_copy` / `kb_reduce_max`,
runtime/c/kb_movement.c).

References: numpy over any dtype, so the float interpreter, the int8 interpreter and the `.tflite` importer's
constant folding (int32 shape arithmetic) share one definition of each. In int8 these are exact only when input and
output share quantisation params (TFLite's converter writes them so; TFLite Micro copies raw bytes whatever the
params say): the int8 reference and the emitter check that first. Arrays whose leading axis holds N samples instead
of the graph's batch of 1 (`run_int8` with N inputs at once) are handled by `batched`: an op that leaves axis 0 alone
runs on all N at once; one that moves, tiles or reduces the batch axis refuses N > 1 with a one-line error.

C: each op becomes loop axes `(steps, input byte step, output byte step)` plus a first input byte
(`kb_strides_params`), computed from the shapes, the attrs and each tensor's planned pixel stride (either side may be
a concat slice): a TRANSPOSE reads input axis perm[k] along output axis k, a STRIDED_SLICE steps `stride * input
stride` from its first element, a TILE adds a repeat axis (input step 0) around each axis, a REDUCE_MAX walks its
input with output step 0 on the reduced axes. Unit axes are dropped and axes that continue each other merged
(`collapse`), so most calls end in one memcpy per row. A TILE left with more than the kernel's `MAX_AXES` axes is
split into one call (its own parameter struct) per index of the extra outer axes — which the Flash model counts
(`movement_calls`). More than four axes otherwise: a one-line `UnsupportedOpError`.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from .c_text import c_struct
from .contract import KernelContract
from .layer_code import LayerCode
from .node_params import check_shared_qparams
from .opdef import OpDef
from .types import MeanAttrs, Op, ShapeError, StridedSliceAttrs, TileAttrs, TransposeAttrs


# -- references ----------------------------------------------------------------------------------------------------
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


def move_values(node, x: np.ndarray) -> np.ndarray:
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


def batched(node, x: np.ndarray, graph_shape: tuple[int, ...]) -> np.ndarray:
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


# -- C: loop axes --------------------------------------------------------------------------------------------------
MAX_AXES = 4  # loop axes of kb_strided_copy / kb_reduce_max
Axis = tuple[int, int, int]  # (steps, input byte step, output byte step)


def byte_strides(shape: tuple[int, ...], cstride: int) -> list[int]:
    """Byte step of each axis of an int8 tensor whose last-axis rows ("pixels") are `cstride` bytes apart.

    >>> byte_strides((1, 4, 5, 3), 8)  # a 3-channel slice of an 8-channel concat output
    [160, 40, 8, 1]
    """
    strides = [1] * len(shape)
    if len(shape) >= 2:
        strides[-2] = cstride
    for k in range(len(shape) - 3, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return strides


def collapse(axes: list[Axis]) -> list[Axis]:
    """Drop one-step axes and merge an axis into the one inside it when their steps continue each other.

    >>> collapse([(1, 60, 60), (4, 15, 15), (5, 3, 3), (3, 1, 1)])  # a dense copy: one row of 60 bytes
    [(60, 1, 1)]
    """
    out: list[Axis] = []
    for n, si, so in reversed([a for a in axes if a[0] != 1]):
        if out and si == out[0][1] * out[0][0] and so == out[0][2] * out[0][0]:
            out[0] = (n * out[0][0], out[0][1], out[0][2])
        else:
            out.insert(0, (n, si, so))
    return out or [(1, 0, 0)]


def movement_axes(graph, node, cstrides: tuple[int, int]) -> tuple[list[Axis], int]:
    """The loop axes (outermost first) and first input byte of a TRANSPOSE / STRIDED_SLICE / TILE / REDUCE_MAX."""
    x, y = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    si, so = byte_strides(x, cstrides[0]), byte_strides(y, cstrides[1])
    a = node.attrs
    if node.op is Op.TRANSPOSE:
        return [(y[k], si[p], so[k]) for k, p in enumerate(a.perm)], 0
    if node.op is Op.STRIDED_SLICE:
        start = sum(b * s for b, s in zip(a.begin, si))
        return [(y[k], si[k] * a.strides[k], so[k]) for k in range(len(x))], start
    if node.op is Op.TILE:
        axes = []
        for k, m in enumerate(a.multiples):
            axes += [(m, 0, so[k] * x[k]), (x[k], si[k], so[k])]
        return axes, 0
    reduced = {ax % len(x) for ax in a.axes}
    out_axis = {k: (k if a.keepdims else k - sum(r < k for r in reduced)) for k in range(len(x)) if k not in reduced}
    return [(x[k], si[k], 0 if k in reduced else so[out_axis[k]]) for k in range(len(x))], 0


def movement_calls(graph, node, cstrides: tuple[int, int]) -> int:
    """How many kernel calls `node` becomes with pixel strides `cstrides` (input, output): one, or one per index of
    the axes beyond the kernel's `MAX_AXES` after `collapse`."""
    axes = collapse(movement_axes(graph, node, cstrides)[0])
    return math.prod(n for n, _, _ in axes[:-MAX_AXES]) if len(axes) > MAX_AXES else 1


def _emit(graph, node, bufs, plan) -> LayerCode:
    check_shared_qparams(graph, node)
    x, y = node.inputs[0], node.outputs[0]
    ranks = (len(graph.tensors[x].shape), len(graph.tensors[y].shape))
    if max(ranks) > MAX_AXES:
        raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): rank {max(ranks)} has no C kernel (at most "
                                 f"{MAX_AXES} axes)")
    axes, start = movement_axes(graph, node, (bufs.cstride(x), bufs.cstride(y)))
    axes = collapse(axes)
    outer, inner = axes[:-MAX_AXES], [(1, 0, 0)] * (MAX_AXES - len(axes)) + axes[-MAX_AXES:]
    if outer and node.op is Op.REDUCE_MAX:  # cannot happen (rank <= 4); a split would restart the maxima
        raise UnsupportedOpError(f"node '{node.name}': REDUCE_MAX needs more than {MAX_AXES} loop axes")
    fn = "kb_reduce_max" if node.op is Op.REDUCE_MAX else "kb_strided_copy"
    body = []
    for index in itertools.product(*(range(n) for n, _, _ in outer)):
        in_off = start + sum(i * si for i, (_, si, _) in zip(index, outer))
        out_off = sum(i * so for i, (_, _, so) in zip(index, outer))
        fields = dict(dims=tuple(a[0] for a in inner), in_step=tuple(a[1] for a in inner),
                      out_step=tuple(a[2] for a in inner), in_start=in_off)
        stmts = [c_struct("kb_strides_params", fields), f"{fn}(&p, {bufs.ptr(x)}, {_offset(bufs.ptr(y), out_off)});"]
        body += ["{", *("    " + s for s in stmts), "}"] if outer else stmts  # a block per call: its own `p`
    return LayerCode(body=body, families={"movement"})


def _offset(ptr: str, offset: int) -> str:
    return ptr if offset == 0 else f"({ptr} + {offset})"


# -- shapes --------------------------------------------------------------------------------------------------------
def reduce_shape(attrs, shapes) -> tuple[int, ...]:
    """MEAN and REDUCE_MAX: the input without (or, with keepdims, with unit) reduced axes."""
    x = tuple(shapes[0])
    if any(not -len(x) <= a < len(x) for a in attrs.axes):
        raise ShapeError(f"axes {tuple(attrs.axes)} out of range for input shape {x}")
    axes = {a % len(x) for a in attrs.axes}
    if attrs.keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in axes)


def _transpose_shape(attrs, shapes) -> tuple[int, ...]:
    x = tuple(shapes[0])
    if sorted(attrs.perm) != list(range(len(x))):
        raise ShapeError(f"perm {tuple(attrs.perm)} is not a permutation of the {len(x)} axes of {x}")
    return tuple(x[p] for p in attrs.perm)


def _tile_shape(attrs, shapes) -> tuple[int, ...]:
    x = tuple(shapes[0])
    if len(attrs.multiples) != len(x) or min(attrs.multiples, default=1) < 1:
        raise ShapeError(f"multiples {tuple(attrs.multiples)} must be one positive count per axis of {x}")
    return tuple(d * m for d, m in zip(x, attrs.multiples))


def slice_shape(attrs, shapes) -> tuple[int, ...]:
    """Output shape of a resolved STRIDED_SLICE (see `StridedSliceAttrs`): len(range(begin, end, stride)) per axis.

    >>> slice_shape(StridedSliceAttrs((0, 1, 4, 0), (1, 8, -1, 3), (1, 2, -1, 1)), [(1, 8, 5, 3)])
    (1, 4, 5, 3)
    """
    a, x = attrs, tuple(shapes[0])
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


# -- the ops -------------------------------------------------------------------------------------------------------
def _float(node, args) -> np.ndarray:
    return move_values(node, args[0])


def _int8(graph, node, args) -> np.ndarray:
    check_shared_qparams(graph, node)
    return batched(node, args[0], graph.tensors[node.inputs[0]].shape)


def _lower(w, graph, node) -> None:
    """TFLite keeps the attrs in int32 constant operands. A resolved STRIDED_SLICE end of -1 (a negative stride
    running down to index 0) cannot be written as an index (TFLite reads -1 as the last element): that axis gets its
    end_mask bit instead."""
    a, x, out = node.attrs, node.inputs[0], node.outputs[0]
    if node.op is Op.STRIDED_SLICE:
        names = [w.const(f"{out}.{k}", np.array(v, np.int32))
                 for k, v in (("begin", a.begin), ("end", [max(e, 0) for e in a.end]), ("strides", a.strides))]
        end_mask = sum(1 << i for i, e in enumerate(a.end) if e < 0)
        w.op("STRIDED_SLICE", (x, *names), node.outputs,
             {"BeginMask": 0, "EndMask": end_mask, "EllipsisMask": 0, "NewAxisMask": 0, "ShrinkAxisMask": 0})
    elif node.op is Op.REDUCE_MAX:
        axes = w.const(f"{out}.axes", np.array(a.axes, np.int32))
        w.op("REDUCE_MAX", (x, axes), node.outputs, {"KeepDims": bool(a.keepdims)})
    else:
        key, values = ("perm", a.perm) if node.op is Op.TRANSPOSE else ("multiples", a.multiples)
        w.op(node.op.value, (x, w.const(f"{out}.{key}", np.array(values, np.int32))), node.outputs, {})


def _movement(op: Op, attrs: type, function: str, shape, constraints: str) -> OpDef:
    return OpDef(op, attrs, KernelContract(op, "movement", "kb_strides_params", constraints=constraints),
                 qparams="shared", builtin=op.value, function=function, shape=shape, float_ref=_float,
                 int8_ref=_int8, emit=_emit, lower=_lower)


DEFS = (
    _movement(Op.TRANSPOSE, TransposeAttrs, "kb_strided_copy", _transpose_shape,
              "any permutation of up to 4 axes (NCHW -> NHWC is (0, 2, 3, 1)); input and output share quantisation "
              "params; one strided copy (kb_strided_copy); not spatially local: ends a patch stage"),
    _movement(Op.STRIDED_SLICE, StridedSliceAttrs, "kb_strided_copy", slice_shape,
              "up to 4 axes; begin, end and shrink masks, negative indices and strides (resolved at import as TFLite "
              "Micro does; ellipsis, new-axis and offset are refused: TFLite Micro ignores them); input and output "
              "share quantisation params; one strided copy; not spatially local"),
    _movement(Op.TILE, TileAttrs, "kb_strided_copy", _tile_shape,
              "up to 4 axes; input and output share quantisation params; a strided copy with repeats (TFLite Micro "
              "has no TILE: checked against TFLite's interpreter); not spatially local"),
    _movement(Op.REDUCE_MAX, MeanAttrs, "kb_reduce_max", reduce_shape,
              "any axes of up to 4, keep_dims either way; input and output share quantisation params (TFLite Micro "
              "requires it); raw int8 maximum (kb_reduce_max)"),
)
