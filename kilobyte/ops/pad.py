"""Op registry: PAD — zeros around H, W and C (int8: the input's zero point, the quantised 0), one `kb_pad` call
(runtime/c/kb_pad.c); usually folded into the conv after it at import. Spatially local: it may run inside a patch
stage (its tile emitter is in `codegen/patch_loop.py`)."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .c_text import c_ident, c_struct
from .contract import KernelContract, pad_window
from .layer_code import Buffers, LayerCode
from .node_params import require_same_qparams, tensor_qparams
from .opdef import OpDef
from .tile_code import Columns, block, copy_columns, copy_statements, hw, param_table
from .types import Op, PadAttrs, ShapeError


def pad_int8(x, pads, zero_point: int) -> np.ndarray:
    """int8 PAD: pad every axis with the zero point (the quantised value of real 0)."""
    return np.pad(x, tuple(tuple(p) for p in pads), constant_values=np.int8(zero_point))


def _shape(attrs, shapes) -> tuple[int, ...]:
    x = tuple(shapes[0])
    if len(attrs.pads) != len(x):
        raise ShapeError(f"pad has {len(attrs.pads)} axes, input has {len(x)}")
    return tuple(d + a + b for d, (a, b) in zip(x, attrs.pads))


def _float(node, args) -> np.ndarray:
    return np.pad(args[0], node.attrs.pads)


def _int8(graph, node, args) -> np.ndarray:
    """Values move unchanged, so input and output params must agree."""
    require_same_qparams(graph, node)
    return pad_int8(args[0], node.attrs.pads, tensor_qparams(graph, node.inputs[0])[1])


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    (n0, n1), (t, b), (left, r), (c0, c1) = node.attrs.pads
    if n0 or n1:
        raise UnsupportedOpError(f"node '{node.name}': PAD on the batch axis has no C kernel")
    _, ih, iw, ic = graph.tensors[node.inputs[0]].shape
    zp = int(graph.tensors[node.inputs[0]].qparams.zero_point[0])
    params = dict(in_h=ih, in_w=iw, in_c=ic, in_cstride=bufs.cstride(node.inputs[0]), pad_t=t, pad_b=b, pad_l=left,
                  pad_r=r, pad_c0=c0, pad_c1=c1, out_cstride=bufs.cstride(node.outputs[0]), value=zp, in_row=iw,
                  out_row=left + iw + r)
    return LayerCode(body=[c_struct("kb_pad_params", params),
                           f"kb_pad(&p, {bufs.ptr(node.inputs[0])}, {bufs.ptr(node.outputs[0])});"],
                     families={"pad"})


def _lower(w, graph, node) -> None:
    pads = w.const(f"{node.outputs[0]}.paddings", np.array(node.attrs.pads, np.int32).reshape(-1, 2))
    w.op("PAD", (node.inputs[0], pads), node.outputs, {})


def _emit_tile(g, k: int, code: LayerCode) -> str:
    """PAD: the tile's share of the layer's padding (zero-point bytes only where the tile meets the border)."""
    node, ident = g.nodes[k], c_ident(g.nodes[k].name)
    code.families.add("pad")
    (_, _), _, _, (c0, c1) = node.attrs.pads
    zp = int(g.graph.tensors[node.inputs[0]].qparams.zero_point[0])
    io, rows = Columns(f"kb_po_{ident}"), []
    for p in range(len(g.boxes)):
        tile = g.tile(p, k)
        src, dst = g.source(node.inputs[0], p, tile.in_box), g.target(p, k)
        (ih, iw), (t, b, left, r) = hw(tile.in_box), tile.padding
        rows.append(dict(in_h=ih, in_w=iw, in_c=g.channels(node.inputs[0]), in_cstride=src.cstride, pad_t=t,
                         pad_b=b, pad_l=left, pad_r=r, pad_c0=c0, pad_c1=c1, out_cstride=dst.cstride, value=zp,
                         in_row=src.row, out_row=dst.row))
        io.add(p, src=src.offset, dst=dst.offset)
        copy_columns(g, p, k, io)
    code.decls += [param_table("kb_pad_params", f"kb_pp_{ident}", rows), io.decl()]
    call = f"kb_pad(&kb_pp_{ident}[p], {io.pointer(g.base(node.inputs[0]), 'src')}, {io.pointer('KB_ARENA', 'dst')});"
    return block(g, k, "", io, [call, *copy_statements(g, k, io, code)])


DEFS = (
    OpDef(Op.PAD, PadAttrs,
          KernelContract(Op.PAD, "pad", "kb_pad_params", local=True, window=pad_window,
                         constraints="H, W and C; padded with the zero point; folded into a following conv at "
                         "import"),
          qparams="shared", builtin="PAD", function="kb_pad", shape=_shape, float_ref=_float, int8_ref=_int8,
          emit=_emit, emit_tile=_emit_tile, lower=_lower),
)
