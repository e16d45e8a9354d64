"""Op registry: the int8 unary ops that run as one 256-entry lookup table — LOGISTIC, TANH, ELU, HARD_SWISH,
LEAKY_RELU, GELU, RELU_N1_TO_1, EXP, LOG and a standing RELU / RELU6 (family `lut`, one C kernel: `kb_lut`).

Each output depends on its input byte alone, so a node is fully described by its table (`node_table`): TFLite's
kernel over all 256 input values (`unary_math.py`), computed from the node's quantisation params. The int8 reference
looks values up in it, the emitter writes it into model.c, the Flash model counts its 256 bytes. Float references
are the ops' definitions (GELU's erfc form or tanh approximation, as TFLite's).

>>> import numpy as np
>>> from kilobyte.ops.types import LeakyReluAttrs
>>> TABLES[Op.LEAKY_RELU](np.float32(0.1), 0, np.float32(0.1), 0, LeakyReluAttrs(0.5))[[0, 127, 128, 255]].tolist()
[-64, 0, 0, 127]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import KilobyteError
from .c_text import c_array, c_ident
from .contract import KernelContract
from .layer_code import Buffers, LayerCode
from .node_params import require_same_qparams, tensor_qparams
from .opdef import OpDef, same_shape
from .types import GeluAttrs, LeakyReluAttrs, NoAttrs, Op
from .unary_math import (
    INT8_VALUES,
    LOGISTIC_OUTPUT_QPARAMS,
    TANH_OUTPUT_QPARAMS,
    apply_table,
    elu_int8,
    exp_int8,
    gelu_int8,
    hard_swish_int8,
    leaky_relu_int8,
    log_int8,
    logistic_int8,
    relu6_int8,
    relu_int8,
    relu_n1_to_1_int8,
    tanh_int8,
)

LUT_BYTES = 256

# op -> its table from (input scale, input zero point, output scale, output zero point, attrs)
TABLES: dict[Op, Callable[..., np.ndarray]] = {
    Op.LOGISTIC: lambda si, zi, so, zo, a: logistic_int8(INT8_VALUES, si, zi),
    Op.TANH: lambda si, zi, so, zo, a: tanh_int8(INT8_VALUES, si, zi),
    Op.ELU: lambda si, zi, so, zo, a: elu_int8(INT8_VALUES, si, zi, so, zo),
    Op.HARD_SWISH: lambda si, zi, so, zo, a: hard_swish_int8(INT8_VALUES, si, zi, so, zo),
    Op.LEAKY_RELU: lambda si, zi, so, zo, a: leaky_relu_int8(INT8_VALUES, si, zi, so, zo, a.alpha),
    Op.GELU: lambda si, zi, so, zo, a: gelu_int8(INT8_VALUES, si, zi, so, zo, a.approximate),
    Op.RELU_N1_TO_1: lambda si, zi, so, zo, a: relu_n1_to_1_int8(INT8_VALUES, si, zi, so, zo),
    Op.EXP: lambda si, zi, so, zo, a: exp_int8(INT8_VALUES, si, zi, so, zo),
    Op.LOG: lambda si, zi, so, zo, a: log_int8(INT8_VALUES, si, zi, so, zo),
    Op.RELU: lambda si, zi, so, zo, a: relu_int8(INT8_VALUES, si, zi, so, zo),
    Op.RELU6: lambda si, zi, so, zo, a: relu6_int8(INT8_VALUES, si, zi),
}


def node_table(graph, node) -> np.ndarray:
    """The 256-entry int8 table of an int8 node of one of these ops (TFLite Micro's Prepare and kernel over every
    input value; TFLite's for GELU, RELU_N1_TO_1, EXP and LOG), refusing outputs whose meaning TFLite's kernel would
    not honour: LOGISTIC writes scale 1/256 and zero point -128 whatever the file says, TANH 1/128 and 0, RELU6 never
    rescales."""
    x, y = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
    where = f"node '{node.name}' ({node.op.value})"
    if x.dtype != "int8" or y.dtype != "int8":
        raise KilobyteError(f"{where}: int8 in and out, got {x.dtype} -> {y.dtype}")
    (s_in, z_in), (s_out, z_out) = tensor_qparams(graph, node.inputs[0]), tensor_qparams(graph, node.outputs[0])
    fixed = FIXED_QPARAMS.get(node.op)
    if fixed is not None and (s_out, z_out) != fixed:
        raise KilobyteError(f"{where}: output scale {float(fixed[0])} and zero point {fixed[1]} (TFLite Micro's kernel "
                            f"writes those), got {y.qparams}")
    if node.op is Op.RELU6:
        require_same_qparams(graph, node)
    try:
        return TABLES[node.op](s_in, z_in, s_out, z_out, node.attrs)
    except KilobyteError as e:
        raise KilobyteError(f"{where}: {e}") from None


def _int8(graph, node, args) -> np.ndarray:
    return apply_table(args[0], node_table(graph, node))


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    """The node's table, computed with the reference's own arithmetic, as a const array, and one `kb_lut` call
    (pixel strides: either side may be a slice)."""
    x, y = node.inputs[0], node.outputs[0]
    shape = graph.tensors[y].shape
    table = f"kb_lut_{c_ident(node.name)}"
    return LayerCode(decls=[c_array(table, "int8_t", node_table(graph, node))],
                     body=[f"kb_lut({int(np.prod(shape[:-1]))}, {shape[-1]}, {table}, {bufs.ptr(x)}, "
                           f"{bufs.cstride(x)}, {bufs.ptr(y)}, {bufs.cstride(y)});"],
                     families={"lut"})


def _table_bytes(graph, node) -> int:
    return LUT_BYTES if graph.tensors[node.inputs[0]].dtype == "int8" else 0


# -- float references ----------------------------------------------------------------------------------------------
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def gelu_float(x, approximate: bool) -> np.ndarray:
    """x * Phi(x): 0.5 x erfc(-x / sqrt 2) (TFLite's form, exact for large negative x), or the tanh approximation."""
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * _erfc(-x / math.sqrt(2.0))


def _log(x) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) = -inf, log(x < 0) = nan, as PyTorch's
        return np.log(x)


FLOAT: dict[Op, Callable[[np.ndarray, object], np.ndarray]] = {
    Op.LOGISTIC: lambda x, a: 1.0 / (1.0 + np.exp(-x)),
    Op.TANH: lambda x, a: np.tanh(x),
    Op.ELU: lambda x, a: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),  # the minimum: no overflow warning
    Op.HARD_SWISH: lambda x, a: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    Op.LEAKY_RELU: lambda x, a: np.where(x > 0, x, x * a.alpha),  # alpha may exceed 1 or be negative: no max()
    Op.GELU: lambda x, a: gelu_float(x, a.approximate),
    Op.RELU_N1_TO_1: lambda x, a: np.clip(x, -1.0, 1.0),
    Op.EXP: lambda x, a: np.exp(x),
    Op.LOG: lambda x, a: _log(x),
    Op.RELU: lambda x, a: np.maximum(x, 0.0),
    Op.RELU6: lambda x, a: np.clip(x, 0.0, 6.0),
}


def _float(node, args) -> np.ndarray:
    return FLOAT[node.op](args[0], node.attrs)


# -- .tflite -------------------------------------------------------------------------------------------------------
OPTIONS = {Op.LEAKY_RELU: lambda a: {"Alpha": float(a.alpha)}, Op.GELU: lambda a: {"Approximate": bool(a.approximate)}}


def _lower(w, graph, node) -> None:
    options = OPTIONS.get(node.op)
    w.op(node.op.value, node.inputs, node.outputs, options(node.attrs) if options else {})


FIXED_QPARAMS = {Op.LOGISTIC: LOGISTIC_OUTPUT_QPARAMS, Op.TANH: TANH_OUTPUT_QPARAMS}
CONSTRAINTS = {
    Op.LOGISTIC: "int8 in, int8 out with scale 1/256 and zero point -128 (TFLite); a 256-entry table per node",
    Op.TANH: "int8 in, int8 out with scale 1/128 and zero point 0 (TFLite); a 256-entry table per node",
    Op.ELU: "int8 in and out (alpha 1, as TFLite); a 256-entry table per node, built as TFLite Micro's Prepare builds "
            "it",
    Op.HARD_SWISH: "int8 in and out, input scale below 128x the output's (TFLite Micro); a 256-entry table per node",
    Op.LEAKY_RELU: "int8 in and out, any alpha (negative too); a 256-entry table per node",
    Op.GELU: "int8 in and out, exact (erf) or tanh-approximate; a 256-entry table per node, built as TFLite's int8 "
             "GELU builds it (TFLite Micro has no GELU kernel)",
    Op.RELU_N1_TO_1: "int8 in and out; a 256-entry table per node, TFLite's requantise-and-clamp (TFLite Micro has no "
                     "RELU_N1_TO_1: checked against TFLite's interpreter)",
    **{op: "int8 in and out; a 256-entry table per node, built as TFLite's Prepare builds it in float32 (TFLite "
           "Micro's kernel is float only: checked against TFLite's interpreter)" for op in (Op.EXP, Op.LOG)},
    Op.RELU: "folded into the producer at import; one left standing in an int8 file runs as a 256-entry table",
    Op.RELU6: "folded into the producer at import; one left standing in an int8 file runs as a 256-entry table, input "
              "and output quantised alike (TFLite Micro never rescales)",
}
ATTRS = {Op.LEAKY_RELU: LeakyReluAttrs, Op.GELU: GeluAttrs}


def _lut(op: Op) -> OpDef:
    fixed = FIXED_QPARAMS.get(op)
    rule = "fixed" if fixed is not None else "shared" if op is Op.RELU6 else "own"
    return OpDef(op, ATTRS.get(op, NoAttrs), KernelContract(op, "lut", constraints=CONSTRAINTS[op]),
                 qparams=rule, fixed_qparams=fixed, elementwise_cost=True, builtin=op.value, function="kb_lut",
                 shape=same_shape, float_ref=_float, int8_ref=_int8, emit=_emit, table_bytes=_table_bytes,
                 lower=_lower)


DEFS = tuple(_lut(op) for op in TABLES)
