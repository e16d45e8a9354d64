"""Op registry: QUANTIZE and DEQUANTIZE — conversions at a model's edges (TFLite's QUANTIZE / DEQUANTIZE).

QUANTIZE between uint8 and int8 (a converter's uint8 input or output) runs in C as TFLite Micro's Requantize
(`kb_requantize_*`, runtime/c/kb_quantize.c); float -> int8 at the input and int8 -> float at an output run in
`<prefix>_invoke_float` (`codegen/io_edges.py`, `codegen/float_tail.py`), around the int8 core. The runtime function
of a QUANTIZE depends on its direction, so `kernels.calls.node_function` chooses it.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .arith import dequantize_values, quantize_values, requant_multiplier, requantize_values
from .c_text import c_struct
from .contract import KernelContract
from .layer_code import Buffers, LayerCode
from .node_params import tensor_qparams
from .opdef import OpDef, same_shape
from .types import NoAttrs, Op


def _float(node, args) -> np.ndarray:
    return args[0]  # the float model computes in real values: a conversion is the identity


def _quantize_int8(graph, node, args) -> np.ndarray:
    x, y = node.inputs[0], node.outputs[0]
    if args[0].dtype in (np.int8, np.uint8):  # uint8 <-> int8 at a model's edges
        return requantize_values(args[0], *tensor_qparams(graph, x), *tensor_qparams(graph, y),
                                 np.dtype(graph.tensors[y].dtype))
    return quantize_values(args[0], *tensor_qparams(graph, y))


def _dequantize_int8(graph, node, args) -> np.ndarray:
    return dequantize_values(args[0], *tensor_qparams(graph, node.inputs[0]))


def _emit_quantize(graph, node, bufs: Buffers, plan) -> LayerCode:
    """QUANTIZE between uint8 and int8 (a model's uint8 input or output): TFLite Micro's Requantize."""
    x, y = node.inputs[0], node.outputs[0]
    kinds = (graph.tensors[x].dtype, graph.tensors[y].dtype)
    if kinds not in (("uint8", "int8"), ("int8", "uint8")):
        raise UnsupportedOpError(f"node '{node.name}' (QUANTIZE {kinds[0]} -> {kinds[1]}): only uint8 <-> int8 runs "
                                 "in C (a float QUANTIZE belongs at the input: kb_invoke_float)")
    (si, zi), (so, zo) = tensor_qparams(graph, x), tensor_qparams(graph, y)
    mult, shift = requant_multiplier(si, so)
    fields = dict(n=graph.tensors[y].numel, in_offset=zi, out_offset=zo, mult=mult, shift=shift)
    fn = "kb_requantize_u8_i8" if kinds[0] == "uint8" else "kb_requantize_i8_u8"
    return LayerCode(body=[c_struct("kb_requantize_params", fields),
                           f"{fn}(&p, (const void *){bufs.ptr(x)}, (void *){bufs.ptr(y)});"], families={"quantize"})


def _lower(w, graph, node) -> None:
    w.op(node.op.value, node.inputs, node.outputs, {})


DEFS = (
    OpDef(Op.QUANTIZE, NoAttrs,
          KernelContract(Op.QUANTIZE, "quantize", "kb_requantize_params",
                         constraints="uint8 <-> int8 at the model's input or output; float -> int8 at the input "
                         "through kb_invoke_float"),
          int8_input=False, builtin="QUANTIZE", shape=same_shape, float_ref=_float, int8_ref=_quantize_int8,
          emit=_emit_quantize, lower=_lower),
    OpDef(Op.DEQUANTIZE, NoAttrs,
          KernelContract(Op.DEQUANTIZE, "quantize", constraints="int8 / uint8 -> float at a model's output, through "
                         "kb_invoke_float, with the float ops after it (SOFTMAX, LOG_SOFTMAX, LOGISTIC, ADD / MUL by "
                         "a constant, RESHAPE: kb_float_tail.c)"),
          builtin="DEQUANTIZE", shape=same_shape, float_ref=_float, int8_ref=_dequantize_int8, lower=_lower),
)
