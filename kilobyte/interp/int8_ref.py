"""Reference stage: a numpy int8 interpreter with TFLite's integer arithmetic — bit-exact with TensorFlow Lite Micro.

`run_int8` runs a whole quantised graph; `eval_node_int8` runs one node from its argument arrays (a memory-plan
executor calls it node by node). Each op's int8 reference is its `OpDef.int8_ref` (`kilobyte.ops`: the binary ops'
broadcasting ADD / SUB / MUL / MAXIMUM / MINIMUM, the lookup-table activations, PRELU, the softmaxes, MEAN, the
resizes, the transposed convolution, data movement, the model-edge QUANTIZE, ...); the two ops still pending in the
registry are here: CONV_2D and DEPTHWISE_CONV_2D (`conv2d_int8`, `depthwise_conv2d_int8`), which take plain integer
parameters so the C runtime can be tested against them directly; `kilobyte.ops.node_params` (`requant_params`, ...)
derives those parameters from a graph exactly as TFLite Micro's Prepare functions do.

Integer semantics follow TFLite's reference kernels: convolutions accumulate `w · (x - zp_in)` (padding contributes
nothing, i.e. the input is padded with its zero point) in int32, add the int32 bias and requantise per output
channel. Products are summed in float64, which is exact for every integer sum below 2^53, so BLAS does the heavy
lifting without changing a bit. Kernels accept any batch size N in the leading axis.
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..ir import Graph, Node, Op
from ..ops import opdef
from ..ops.node_params import (
    RequantParams,
    finish,
    requant_params,
)
from ..ops.window import out_hw, pad_hw, taps


# -- graph-level execution ---------------------------------------------------------------------------------------------
def run_int8(graph: Graph, inputs, *, keep_all: bool = False) -> dict[str, np.ndarray]:
    """Execute a quantised `graph`; return its outputs (or every non-constant tensor with `keep_all`).

    `inputs` is one int8 array (single-input graphs) or a dict name -> int8 array in the graph's shapes; a
    leading axis of N instead of the graph's batch of 1 runs N samples at once (results equal N single runs).
    Quantise float data first with `kilobyte.quant.quantize_input`.
    """
    if not isinstance(inputs, dict):
        inputs = {graph.inputs[0]: inputs}
    env: dict[str, np.ndarray] = {name: _check_input(graph, name, inputs.get(name)) for name in graph.inputs}
    for node in graph.nodes:
        args = [env[t] if t in env else graph.tensors[t].data for t in node.inputs]
        env[node.outputs[0]] = eval_node_int8(graph, node, args)
    names = list(env) if keep_all else list(graph.outputs)
    return {k: env[k] for k in names}


def _check_input(graph: Graph, name: str, x) -> np.ndarray:
    t = graph.tensors[name]
    if x is None:
        raise KilobyteError(f"graph input '{name}' was not given")
    x = np.asarray(x)
    if x.dtype != np.dtype(t.dtype):
        hint = " (quantise float data with kilobyte.quant.quantize_input)" if t.dtype == "int8" else ""
        raise KilobyteError(f"graph input '{name}' is {t.dtype}, got {x.dtype}{hint}")
    if x.shape != t.shape and not (t.shape[0] == 1 and x.shape[1:] == t.shape[1:]):
        raise KilobyteError(f"graph input '{name}': shape {x.shape}, graph expects {t.shape}")
    return x


def eval_node_int8(graph: Graph, node: Node, args: list[np.ndarray]) -> np.ndarray:
    """Run one node of a quantised graph on its argument arrays (activations, then weight / bias data): the op's
    own int8 reference (`OpDef.int8_ref`), or for the ops still pending in the registry the rules below."""
    op, d = node.op, opdef(node.op)
    if d.int8_input and args[0].dtype != np.int8:
        raise KilobyteError(f"node '{node.name}' ({op.value}): expects an int8 input, got {args[0].dtype}")
    if d.int8_ref is not None:
        return d.int8_ref(graph, node, args)
    if op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D):
        return _eval_weighted(graph, node, args)
    raise UnsupportedOpError(f"node '{node.name}': no int8 kernel for {op.value}")


def _eval_weighted(graph: Graph, node: Node, args: list[np.ndarray]) -> np.ndarray:
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    p = requant_params(graph, node)
    a = node.attrs
    if node.op is Op.CONV_2D:
        return conv2d_int8(x, w, bias, p, stride=a.stride, padding=a.padding, dilation=a.dilation)
    return depthwise_conv2d_int8(x, w, bias, p, stride=a.stride, padding=a.padding, dilation=a.dilation,
                                 depth_multiplier=a.depth_multiplier)


# -- kernels -----------------------------------------------------------------------------------------------------------
def conv2d_int8(x, w, bias, p: RequantParams, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """int8 CONV_2D. x (N,H,W,Cin) int8, w (Cout,kh,kw,Cin) int8, bias (Cout,) int32 or None -> (N,Ho,Wo,Cout)."""
    cout, kh, kw, _ = w.shape
    ho, wo = out_hw(x, kh, kw, stride, padding, dilation)
    xp = pad_hw(x.astype(np.float64) - p.input_zp, padding)  # zero-point padding == skipping padded taps
    wf = w.astype(np.float64)
    acc = np.zeros((x.shape[0], ho, wo, cout))
    for i, j, view in taps(xp, kh, kw, stride, dilation, (ho, wo)):
        acc += view @ wf[:, i, j, :].T  # (N,Ho,Wo,Cin) @ (Cin,Cout)
    return finish(acc, bias, p)


def depthwise_conv2d_int8(x, w, bias, p: RequantParams, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                          depth_multiplier: int = 1) -> np.ndarray:
    """int8 DEPTHWISE_CONV_2D. x (N,H,W,C), w (1,kh,kw,C·m) -> (N,Ho,Wo,C·m); output channel c·m+k reads c."""
    _, kh, kw, _ = w.shape
    ho, wo = out_hw(x, kh, kw, stride, padding, dilation)
    xs = x.astype(np.float64) - p.input_zp
    if depth_multiplier != 1:
        xs = np.repeat(xs, depth_multiplier, axis=3)
    xp = pad_hw(xs, padding)
    wf = w[0].astype(np.float64)
    acc = np.zeros((x.shape[0], ho, wo, w.shape[3]))
    for i, j, view in taps(xp, kh, kw, stride, dilation, (ho, wo)):
        acc += view * wf[i, j]
    return finish(acc, bias, p)
