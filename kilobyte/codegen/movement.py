"""Codegen stage: TRANSPOSE, STRIDED_SLICE, TILE and REDUCE_MAX as `kb_strided_copy` / `kb_reduce_max` calls.

Each op becomes loop axes `(steps, input byte step, output byte step)` plus a first input byte (`kb_strides_params`,
see `runtime/c/kb_movement.c`), computed here from the shapes, the op's attrs and each tensor's planned pixel stride
(either side may be a concat slice): a TRANSPOSE reads input axis perm[k] along output axis k, a STRIDED_SLICE steps
`stride * input stride` from its first element, a TILE adds a repeat axis (input step 0) around each axis, a
REDUCE_MAX walks its input with output step 0 on the reduced axes. Unit axes are dropped and axes that continue each
other merged (`collapse`), so most calls end in one memcpy per row. A TILE left with more than the kernel's four
axes is split into one call per index of the extra outer axes. Input and output must share quantisation params
(`check_shared_qparams`, as in the reference) and have at most four axes; otherwise a one-line `UnsupportedOpError`.
"""

from __future__ import annotations

import itertools

from ..errors import UnsupportedOpError
from ..interp.int8_ref import check_shared_qparams
from ..ir import Graph, Node, Op
from .c_text import c_struct

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


def movement_axes(graph: Graph, node: Node, cstrides: tuple[int, int]) -> tuple[list[Axis], int]:
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


def emit_movement(graph: Graph, node: Node, bufs, plan):
    from .layers import LayerCode

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
