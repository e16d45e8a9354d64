"""Op registry: PRELU — its definition, and TFLite Micro's int8 PRELU, bit for bit, as one 256-entry table per
channel.

PRELU's output depends on its input byte and on the channel's alpha, a constant second input (per tensor int8 in
TFLite: `alpha->params.scale`, `zero_point`). TFLite Micro's Prepare (`CalculatePreluParams`) turns s_in / s_out and
s_in · s_alpha / s_out into two multipliers, in double; its kernel (`BroadcastPrelu4DSlow`) computes

    d = x - z_in;  out = z_out + (d >= 0 ? MBQM(d, m1, e1) : MBQM(d · (alpha - z_alpha), m2, e2)),  clamped to int8

(MBQM: `MultiplyByQuantizedMultiplier`). Per channel that is a function of one byte, so a node with an alpha that
varies along the last (channel) axis only is a (C, 256) table, and a single alpha one (1, 256) table; the generated
C runs `kb_lut` once per table over its channel. An alpha varying along other axes is refused (no such model was
seen: PyTorch's nn.PReLU and ONNX exporters write per-channel or single slopes).

>>> prelu_tables(np.array([64, -32]), 0.1, 0, 1 / 128, 0, 0.1, 0)[:, [126, 128, 130]].tolist()  # x = -2, 0, 2
[[-1, 0, 2], [1, 0, 2]]

(alphas 0.5 and -0.25: -2 · -0.25 = 0.5 rounds away from zero.)
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError
from .arith import INT8_MAX, INT8_MIN, multiply_by_quantized_multiplier, quantize_multiplier
from .c_text import c_array, c_ident
from .contract import KernelContract
from .layer_code import Buffers, LayerCode
from .lut import LUT_BYTES
from .opdef import OpDef, ShapeError, broadcast_shape
from .types import NoAttrs, Op
from .unary_math import INT8_VALUES


def prelu_params(input_scale: float, alpha_scale: float, output_scale: float) -> tuple[int, int, int, int]:
    """(identity multiplier, shift, alpha multiplier, shift): `CalculatePreluParams` in double of float32 scales."""
    s_in, s_a, s_out = (float(np.float32(s)) for s in (input_scale, alpha_scale, output_scale))
    m1, e1 = quantize_multiplier(s_in / s_out)
    m2, e2 = quantize_multiplier(s_in * s_a / s_out)
    return int(m1), int(e1), int(m2), int(e2)


def prelu_tables(alpha, input_scale: float, input_zero_point: int, alpha_scale: float, alpha_zero_point: int,
                 output_scale: float, output_zero_point: int) -> np.ndarray:
    """(n, 256) int8: row c, entry i is PRELU of the int8 value i - 128 with the int8 alpha `alpha[c]`."""
    m1, e1, m2, e2 = prelu_params(input_scale, alpha_scale, output_scale)
    d = INT8_VALUES - input_zero_point  # (256,)
    a = np.asarray(alpha, np.int64).reshape(-1, 1) - alpha_zero_point  # (n, 1)
    positive = multiply_by_quantized_multiplier(d, m1, e1)  # (256,)
    negative = multiply_by_quantized_multiplier(d * a, m2, e2)  # (n, 256)
    out = output_zero_point + np.where(d >= 0, positive, negative)
    return np.clip(out, INT8_MIN, INT8_MAX).astype(np.int8)


def channel_alphas(graph, node) -> np.ndarray:
    """The int8 alpha of each channel, (C,), or (1,) for a single alpha; refuses an alpha that varies along another
    axis than the last."""
    x, alpha = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    if not alpha.is_const:
        raise KilobyteError(f"node '{node.name}' (PRELU): alpha '{alpha.name}' must be a constant")
    if alpha.numel == 1:
        return np.asarray(alpha.data, np.int64).reshape(1)
    full = np.broadcast_to(alpha.data, x.shape).reshape(-1, x.shape[-1])  # (pixels, C)
    if not np.all(full == full[0]):
        raise KilobyteError(f"node '{node.name}' (PRELU): alpha of shape {alpha.shape} varies along more than the "
                            f"channel axis; only per-channel or single alphas are supported")
    return full[0].astype(np.int64)


def prelu_node_tables(graph, node) -> np.ndarray:
    """The (n, 256) tables of an int8 PRELU node (n = 1 or its channel count)."""
    names = (node.inputs[0], node.inputs[1], node.outputs[0])
    if any(graph.tensors[t].dtype != "int8" for t in names):
        raise KilobyteError(f"node '{node.name}' (PRELU): int8 input, alpha and output, got "
                            f"{[graph.tensors[t].dtype for t in names]}")
    qparams = []
    for t in names:
        q = graph.tensors[t].qparams
        if q is None or len(q.scale) != 1:
            raise KilobyteError(f"node '{node.name}' (PRELU): tensor '{t}' needs per-tensor quantisation params "
                                f"(TFLite Micro reads one scale and zero point)")
        qparams += [np.float32(q.scale[0]), int(q.zero_point[0])]
    s_in, z_in, s_a, z_a, s_out, z_out = qparams
    return prelu_tables(channel_alphas(graph, node), s_in, z_in, s_a, z_a, s_out, z_out)


def prelu_int8(x: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """Look up each value of `x` (..., C) in its channel's table (one shared table when there is one)."""
    index = np.asarray(x, np.int64) - INT8_MIN
    rows = np.arange(tables.shape[0]) if tables.shape[0] > 1 else 0  # (C,) broadcasts along the last axis
    return tables[rows, index]


# -- the op --------------------------------------------------------------------------------------------------------
def _shape(attrs, shapes) -> tuple[int, ...]:
    x = tuple(shapes[0])
    if len(shapes) != 2 or broadcast_shape(x, shapes[1]) != x:
        raise ShapeError(f"PRELU takes an input and an alpha that broadcasts to it, got {shapes}")
    return x


def _float(node, args) -> np.ndarray:
    return np.where(args[0] >= 0, args[0], args[0] * args[1])


def _int8(graph, node, args) -> np.ndarray:
    return prelu_int8(args[0], prelu_node_tables(graph, node))


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    """Its tables (one per channel, or one for a single alpha) as one const array; one `kb_lut` call over all
    channels, or a loop of calls each running one channel's table over every pixel."""
    x, y = node.inputs[0], node.outputs[0]
    shape = graph.tensors[y].shape
    pixels, channels = int(np.prod(shape[:-1])), shape[-1]
    tables = prelu_node_tables(graph, node)  # (1 or C, 256)
    name = f"kb_lut_{c_ident(node.name)}"
    if tables.shape[0] == 1:
        body = [f"kb_lut({pixels}, {channels}, {name}, {bufs.ptr(x)}, {bufs.cstride(x)}, {bufs.ptr(y)}, "
                f"{bufs.cstride(y)});"]
    else:  # channel c: a one-channel image at pixel stride cstride, starting c bytes in
        body = [f"for (int32_t c = 0; c < {channels}; ++c) {{",
                f"    kb_lut({pixels}, 1, {name} + 256 * c, {bufs.ptr(x)} + c, {bufs.cstride(x)}, {bufs.ptr(y)} + c, "
                f"{bufs.cstride(y)});", "}"]
    return LayerCode(decls=[c_array(name, "int8_t", tables.reshape(-1))], body=body, families={"lut"})


def _table_bytes(graph, node) -> int:
    """A 256-byte table per alpha (one, or one per channel)."""
    if graph.tensors[node.inputs[0]].dtype != "int8":
        return 0
    return LUT_BYTES * (1 if graph.tensors[node.inputs[1]].numel == 1 else graph.tensors[node.outputs[0]].shape[-1])


def _lower(w, graph, node) -> None:
    w.op("PRELU", node.inputs, node.outputs, {})  # its alpha the second input


DEFS = (
    OpDef(Op.PRELU, NoAttrs,
          KernelContract(Op.PRELU, "lut", constraints="int8 in, out and constant alpha (per tensor params, as TFLite "
                         "Micro); alpha per channel or single: a 256-entry table per channel, one kb_lut per table"),
          elementwise_cost=True, const_operands=True, builtin="PRELU", function="kb_lut", shape=_shape,
          float_ref=_float, int8_ref=_int8, emit=_emit, table_bytes=_table_bytes, lower=_lower),
)
