"""Kernels stage: the loop axes of `kb_strided_copy` / `kb_reduce_max` (runtime/c/kb_movement.c) for TRANSPOSE,
STRIDED_SLICE, TILE and REDUCE_MAX — shared by the code generator (`codegen/movement.py`, which writes the calls)
and the Flash model (`schedule/flash.py`, which counts them: a TILE left with more than `MAX_AXES` axes becomes one
call, with its own parameter struct, per index of the extra outer axes).
"""

from __future__ import annotations

import math

from ..ir import Graph, Node, Op

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


def movement_calls(graph: Graph, node: Node, cstrides: tuple[int, int]) -> int:
    """How many kernel calls `node` becomes with pixel strides `cstrides` (input, output): one, or one per index of
    the axes beyond the kernel's `MAX_AXES` after `collapse`."""
    axes = collapse(movement_axes(graph, node, cstrides)[0])
    return math.prod(n for n, _, _ in axes[:-MAX_AXES]) if len(axes) > MAX_AXES else 1
