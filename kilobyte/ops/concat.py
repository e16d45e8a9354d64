"""Op registry: CONCAT — along the channel axis in C: the planner places each input straight into its slice of the
output where it can (`schedule/inplace.py`), and the layer copies only the others (`kb_copy_channels`). Spatially
local: it may run inside a patch stage (its tile emitter is in `codegen/patch_loop.py`)."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .c_text import c_ident
from .contract import KernelContract
from .layer_code import Buffers, LayerCode
from .node_params import require_same_qparams
from .opdef import OpDef
from .tile_code import Columns, block, copy_columns, copy_statements, hw, row_loop
from .types import Activation, ConcatAttrs, Op, ShapeError, apply_activation


def _shape(attrs, shapes) -> tuple[int, ...]:
    rank, axis = len(shapes[0]), attrs.axis
    axis %= rank
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ShapeError(f"concat operands do not match outside axis {axis}: {shapes}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


def _float(node, args) -> np.ndarray:
    return apply_activation(np.concatenate(args, axis=node.attrs.axis), node.attrs.activation)


def _int8(graph, node, args) -> np.ndarray:
    """Values move unchanged, so inputs and output share params; TFLite Micro fuses no activation into it."""
    require_same_qparams(graph, node)
    if node.attrs.activation is not Activation.NONE:
        raise UnsupportedOpError(f"node '{node.name}': int8 CONCAT cannot fuse an activation (TFLite Micro)")
    return np.concatenate(args, axis=node.attrs.axis)


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    out = node.outputs[0]
    out_place = plan.placements[out]
    shape = graph.tensors[out].shape
    pixels = int(np.prod(shape[:-1]))
    code, c0 = LayerCode(), 0
    for t in node.inputs:
        c = graph.tensors[t].shape[-1]
        place = plan.placements.get(t)
        in_slice = place is not None and place.offset == out_place.offset + c0 and place.channel_stride == shape[-1]
        if not in_slice:
            code.families.add("concat")
            code.body.append(f"kb_copy_channels({pixels}, {c}, {bufs.ptr(t)}, {bufs.cstride(t)}, "
                             f"KB_ARENA + {out_place.offset + c0}, {out_place.channel_stride});")
        c0 += c
    if not code.body:
        code.body.append("/* CONCAT: every input was written straight into its slice */")
    return code


def _lower(w, graph, node) -> None:
    w.op("CONCATENATION", node.inputs, node.outputs,
         {"Axis": node.attrs.axis, "FusedActivationFunction": w.activation(node)})


def _emit_tile(g, k: int, code: LayerCode) -> str:
    """CONCAT (channels): each input's tile rows copied into its channel slice of the output tile."""
    node, ident = g.nodes[k], c_ident(g.nodes[k].name)
    code.families.add("concat")
    io = Columns(f"kb_po_{ident}")
    for p in range(len(g.boxes)):
        tile = g.tile(p, k)
        for j, t in enumerate(node.inputs):
            src = g.source(t, p, tile.in_box)
            io.add(p, **{f"src{j}": src.offset, f"src{j}_pitch": src.pitch})
        dst = g.target(p, k)
        h, w = hw(tile.out_box)
        io.add(p, dst=dst.offset, dst_pitch=dst.pitch, rows=h, pixels=w)
        copy_columns(g, p, k, io)
    code.decls.append(io.decl())
    out_cs, calls, c0 = g.target(0, k).cstride, [], 0
    for j, t in enumerate(node.inputs):
        c = g.channels(t)  # tiles and the caller's input are dense: pixel stride = channels
        calls.append(row_loop(io["rows"], f"kb_copy_channels({io['pixels']}, {c}, "
                              f"{io.pointer(g.base(t), f'src{j}', row=f'src{j}_pitch')}, {c}, "
                              f"{io.pointer('KB_ARENA', 'dst', c0, row='dst_pitch')}, {out_cs});"))
        c0 += c
    return block(g, k, ", row by row", io, [*calls, *copy_statements(g, k, io, code)])


DEFS = (
    OpDef(Op.CONCAT, ConcatAttrs,
          KernelContract(Op.CONCAT, "concat", local=True,
                         constraints="channel axis; producers write straight into their slice, else a channel copy"),
          fusable=True, qparams="shared", builtin="CONCATENATION", function="kb_copy_channels", shape=_shape,
          float_ref=_float, int8_ref=_int8, emit=_emit, emit_tile=_emit_tile, lower=_lower),
)
