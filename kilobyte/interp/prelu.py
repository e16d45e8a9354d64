"""Reference stage: TFLite Micro's int8 PRELU, bit for bit, as one 256-entry table per channel.

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
from ..ir import Graph, Node
from ..ops.arith import INT8_MAX, INT8_MIN, multiply_by_quantized_multiplier, quantize_multiplier

INT8_VALUES = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)


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


def channel_alphas(graph: Graph, node: Node) -> np.ndarray:
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


def prelu_node_tables(graph: Graph, node: Node) -> np.ndarray:
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
