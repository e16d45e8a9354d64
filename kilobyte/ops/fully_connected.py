"""Op registry: FULLY_CONNECTED — `(1, in) @ W(out, in)^T + b`, int8 with per-channel (per output) weights as TFLite
Micro runs it, a fused ReLU / ReLU6, one `kb_fully_connected` call (runtime/c/kb_fc.c)."""

from __future__ import annotations

import numpy as np

from .c_text import c_struct
from .contract import KernelContract
from .layer_code import Buffers, LayerCode, folded_bias, weight_arrays
from .node_params import RequantParams, finish, requant_params
from .opdef import OpDef
from .types import FullyConnectedAttrs, Op, ShapeError, apply_activation


def fully_connected_int8(x, w, bias, p: RequantParams) -> np.ndarray:
    """int8 FULLY_CONNECTED. x (N,in) int8, w (out,in) int8, bias (out,) int32 or None -> (N,out)."""
    acc = (x.astype(np.float64) - p.input_zp) @ w.astype(np.float64).T
    return finish(acc, bias, p)


def _shape(attrs, shapes) -> tuple[int, ...]:
    x, w = shapes[0], shapes[1]
    if len(x) != 2 or x[1] != w[1]:
        raise ShapeError(f"fully connected input {x} does not match weight {w} (out,in)")
    return (x[0], w[0])


def _float(node, args) -> np.ndarray:
    y = args[0] @ args[1].T + (args[2] if len(args) > 2 else 0.0)
    return apply_activation(y, node.attrs.activation)


def _int8(graph, node, args) -> np.ndarray:
    return fully_connected_int8(args[0], args[1], args[2] if len(args) > 2 else None, requant_params(graph, node))


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    code = LayerCode(families={"fc"})
    p = requant_params(graph, node)
    w_shape = graph.tensors[node.inputs[1]].shape
    params = dict(in_n=w_shape[1], out_n=w_shape[0], in_offset=0, out_offset=p.output_zp,
                  act_min=p.act_min, act_max=p.act_max)  # the input offset is in the bias (folded_bias)
    w, b, m, s = weight_arrays(graph, node, code, folded_bias(graph, node))
    code.body += [c_struct("kb_fc_params", params),
                  f"kb_fully_connected(&p, {bufs.ptr(node.inputs[0])}, {w}, {b}, {m}, {s}, "
                  f"{bufs.ptr(node.outputs[0])});"]
    return code


def _lower(w, graph, node) -> None:
    """(input, weight[, bias]): a missing bias is left out, not written as -1."""
    w.op("FULLY_CONNECTED", (node.inputs[0], *node.inputs[1:3]), node.outputs,
         {"FusedActivationFunction": w.activation(node)})


DEFS = (
    OpDef(Op.FULLY_CONNECTED, FullyConnectedAttrs,
          KernelContract(Op.FULLY_CONNECTED, "fc", "kb_fc_params", constraints="2-D input (1, in); fused ReLU/ReLU6"),
          params=True, weight_axis=0, fusable=True, builtin="FULLY_CONNECTED", function="kb_fully_connected",
          shape=_shape, float_ref=_float, int8_ref=_int8, emit=_emit, lower=_lower),
)
