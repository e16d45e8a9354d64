"""Op registry: PAD — zeros around H, W and C (int8: the input's zero point, the quantised 0), one `kb_pad` call
(runtime/c/kb_pad.c); usually folded into the conv after it at import. Spatially local: it may run inside a patch
stage (its tile emitter is in `codegen/patch_loop.py`)."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .c_text import c_struct
from .contract import KernelContract, pad_window
from .layer_code import Buffers, LayerCode
from .node_params import require_same_qparams, tensor_qparams
from .opdef import OpDef
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


DEFS = (
    OpDef(Op.PAD, PadAttrs,
          KernelContract(Op.PAD, "pad", "kb_pad_params", local=True, window=pad_window,
                         constraints="H, W and C; padded with the zero point; folded into a following conv at "
                         "import"),
          qparams="shared", builtin="PAD", function="kb_pad", shape=_shape, float_ref=_float, int8_ref=_int8,
          emit=_emit, lower=_lower),
)
