"""Op registry: RESHAPE — the same bytes read with another shape. The planner aliases its output to its input
(`schedule/inplace.py`), so it usually costs nothing; otherwise one `memmove`. TFLite Micro runs it as a byte copy
whatever the output's quantisation params say (some converters write them different), and so does the reference."""

from __future__ import annotations

import math

import numpy as np

from .contract import KernelContract
from .layer_code import Buffers, LayerCode
from .opdef import OpDef
from .types import Op, ReshapeAttrs, ShapeError


def _shape(attrs, shapes) -> tuple[int, ...]:
    x = tuple(shapes[0])
    if math.prod(int(d) for d in attrs.shape) != math.prod(int(d) for d in x):
        raise ShapeError(f"cannot reshape {x} to {attrs.shape}")
    return tuple(attrs.shape)


def _float(node, args) -> np.ndarray:
    return args[0].reshape(node.attrs.shape)


def _int8(graph, node, args) -> np.ndarray:
    """One sample: the new shape as it is (rank 0 too); N samples at once: the batch axis kept."""
    x = args[0]
    if x.shape == graph.tensors[node.inputs[0]].shape:
        return x.reshape(tuple(node.attrs.shape))
    return x.reshape((x.shape[0],) + tuple(node.attrs.shape[1:]))


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    src, dst = node.inputs[0], node.outputs[0]
    if bufs.same_bytes(src, dst):
        return LayerCode(body=["/* RESHAPE: aliases its input, nothing to do */"])
    return LayerCode(body=[f"memmove({bufs.ptr(dst)}, {bufs.ptr(src)}, {graph.tensors[dst].numel});"])


def _lower(w, graph, node) -> None:
    """TFLite writes the new shape twice: an int32 operand and the options' NewShape."""
    shape = tuple(int(d) for d in node.attrs.shape)
    const = w.const(f"{node.outputs[0]}.shape", np.array(shape, np.int32))
    w.op("RESHAPE", (node.inputs[0], const), node.outputs, {"NewShape": shape})


DEFS = (
    OpDef(Op.RESHAPE, ReshapeAttrs,
          KernelContract(Op.RESHAPE, None, constraints="an alias of its input's bytes, or one copy"),
          qparams="shared", builtin="RESHAPE", shape=_shape, float_ref=_float, int8_ref=_int8, emit=_emit,
          lower=_lower),
)
