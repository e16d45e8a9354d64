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
from ..ir import Graph, Node, Op
from ..kernels.movement import MAX_AXES, collapse, movement_axes
from ..ops.c_text import c_struct
from ..ops.layer_code import LayerCode
from ..ops.node_params import check_shared_qparams


def emit_movement(graph: Graph, node: Node, bufs, plan):
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
