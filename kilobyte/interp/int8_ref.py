"""Reference stage: a numpy int8 interpreter with TFLite's integer arithmetic — bit-exact with TensorFlow Lite Micro.

`run_int8` runs a whole quantised graph; `eval_node_int8` runs one node from its argument arrays (a memory-plan
executor calls it node by node): the op's own int8 reference when its `OpDef` has one (`kilobyte.ops`), else the
per-op kernels below (`conv2d_int8`, `depthwise_conv2d_int8`, `add_int8`, `sub_int8`, `mul_int8`, `avg_pool_int8`,
`max_pool_int8`), which take plain integer parameters so the C runtime can be tested against them
directly; `kilobyte.ops.node_params` (`requant_params`, `add_node_params`, `mul_node_params`, `activation_range_of`)
derives those parameters from a graph exactly as TFLite Micro's Prepare functions do.

Beyond the conv / pool / ADD core:
- MEAN (`kilobyte.ops.mean`: TFLM's integer MEAN; its requantisation shared with the code generator);
- SOFTMAX and LOG_SOFTMAX (`kilobyte.ops.softmax`; `kernel_fields` gives their C kernel's fields);
- ADD, SUB, MUL, MAXIMUM, MINIMUM: broadcast as numpy does (TFLite Micro's broadcast kernels,
  `BroadcastAdd6DSlow`, `BroadcastQuantSubSlow`, `BroadcastMul6DSlow`, compute the same formula per element), either
  operand may be a constant of any shape that broadcasts (a (C,) bias, a single value); `constant_terms` gives a
  constant operand's share of each element, which the C kernels take from a table; MAXIMUM / MINIMUM compare raw int8
  values, so their inputs and output must share params;
- LOGISTIC, TANH, ELU, HARD_SWISH, LEAKY_RELU, GELU, RELU_N1_TO_1, EXP, LOG and a standing RELU / RELU6: the
  256-entry table `kilobyte.ops.lut.node_table` builds, the same table the C kernel reads;
- PRELU: one such table per channel (`kilobyte.ops.prelu`);
- RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR (output quantised like the input: TFLite Micro never rescales) and
  TRANSPOSE_CONV (CONV_2D's per-channel requantisation): `kilobyte.ops.resize`, `kilobyte.ops.transpose_conv`;
- QUANTIZE between uint8 and int8 at a model's edges (`requantize_values`), which only imported `.tflite` files have;
- TRANSPOSE, STRIDED_SLICE, TILE and REDUCE_MAX (`kilobyte.ops.movement`): values moved or compared raw, so
  input and output must share quantisation params (`check_shared_qparams`; TFLite's converter writes them equal, and
  TFLite Micro's kernels copy bytes without looking).

Integer semantics follow TFLite's reference kernels: convolutions accumulate `w · (x - zp_in)` (padding contributes
nothing, i.e. the input is padded with its zero point) in int32, add the int32 bias and requantise per output
channel; max pooling ignores padded taps; average pooling divides by the number of in-image taps with
`(sum ± count/2) / count`. Products are summed in float64, which is exact for every integer sum below 2^53, so BLAS
does the heavy lifting without changing a bit. Kernels accept any batch size N in the leading axis.
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..ir import Graph, Node, Op, conv_out_size
from ..ops import opdef
from ..ops.node_params import (
    RequantParams,
    activation_range_of,
    finish,
    requant_params,
    require_same_qparams,
)


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
    if op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        require_same_qparams(graph, node)
        a = node.attrs
        lo, hi = activation_range_of(graph, node)
        pool = avg_pool_int8 if op is Op.AVG_POOL_2D else max_pool_int8
        return pool(args[0], a.kernel, a.stride, a.padding, lo, hi)
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
def _taps(xp: np.ndarray, kh: int, kw: int, stride, dilation, out_hw):
    """Yield `(i, j, view)` for every kernel tap: `view` (N,Ho,Wo,C) holds the padded input under tap (i, j)."""
    (sh, sw), (dh, dw), (ho, wo) = stride, dilation, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw, :]


def _out_hw(x: np.ndarray, kh: int, kw: int, stride, padding, dilation=(1, 1)) -> tuple[int, int]:
    t, b, left, r = padding
    return (conv_out_size(x.shape[1], kh, stride[0], t, b, dilation[0]),
            conv_out_size(x.shape[2], kw, stride[1], left, r, dilation[1]))


def _pad_hw(x: np.ndarray, padding, value=0) -> np.ndarray:
    t, b, left, r = padding
    return np.pad(x, ((0, 0), (t, b), (left, r), (0, 0)), constant_values=value)


def conv2d_int8(x, w, bias, p: RequantParams, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """int8 CONV_2D. x (N,H,W,Cin) int8, w (Cout,kh,kw,Cin) int8, bias (Cout,) int32 or None -> (N,Ho,Wo,Cout)."""
    cout, kh, kw, _ = w.shape
    ho, wo = _out_hw(x, kh, kw, stride, padding, dilation)
    xp = _pad_hw(x.astype(np.float64) - p.input_zp, padding)  # zero-point padding == skipping padded taps
    wf = w.astype(np.float64)
    acc = np.zeros((x.shape[0], ho, wo, cout))
    for i, j, view in _taps(xp, kh, kw, stride, dilation, (ho, wo)):
        acc += view @ wf[:, i, j, :].T  # (N,Ho,Wo,Cin) @ (Cin,Cout)
    return finish(acc, bias, p)


def depthwise_conv2d_int8(x, w, bias, p: RequantParams, *, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                          depth_multiplier: int = 1) -> np.ndarray:
    """int8 DEPTHWISE_CONV_2D. x (N,H,W,C), w (1,kh,kw,C·m) -> (N,Ho,Wo,C·m); output channel c·m+k reads c."""
    _, kh, kw, _ = w.shape
    ho, wo = _out_hw(x, kh, kw, stride, padding, dilation)
    xs = x.astype(np.float64) - p.input_zp
    if depth_multiplier != 1:
        xs = np.repeat(xs, depth_multiplier, axis=3)
    xp = _pad_hw(xs, padding)
    wf = w[0].astype(np.float64)
    acc = np.zeros((x.shape[0], ho, wo, w.shape[3]))
    for i, j, view in _taps(xp, kh, kw, stride, dilation, (ho, wo)):
        acc += view * wf[i, j]
    return finish(acc, bias, p)


def avg_pool_int8(x, kernel, stride, padding, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 AVG_POOL_2D: mean of the in-image taps, rounded as TFLite does (`(sum ± count/2) / count`, truncating)."""
    kh, kw = kernel
    ho, wo = _out_hw(x, kh, kw, stride, padding)
    xp = _pad_hw(x.astype(np.int64), padding)
    ones = _pad_hw(np.ones((1,) + x.shape[1:3] + (1,), np.int64), padding)
    total = np.zeros((x.shape[0], ho, wo, x.shape[3]), np.int64)
    count = np.zeros((1, ho, wo, 1), np.int64)
    for (_, _, view), (_, _, ones_view) in zip(_taps(xp, kh, kw, stride, (1, 1), (ho, wo)),
                                               _taps(ones, kh, kw, stride, (1, 1), (ho, wo))):
        total += view
        count += ones_view
    half = count // 2
    mean = np.where(total > 0, (total + half) // count, -((half - total) // count))  # C division truncates
    return np.clip(mean, act_min, act_max).astype(np.int8)


def max_pool_int8(x, kernel, stride, padding, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int8 MAX_POOL_2D: maximum over the in-image taps (padded taps never win), then the activation clamp."""
    kh, kw = kernel
    ho, wo = _out_hw(x, kh, kw, stride, padding)
    xp = _pad_hw(x.astype(np.int16), padding, value=-129)  # below every int8: padded taps are ignored
    best = np.full((x.shape[0], ho, wo, x.shape[3]), -129, np.int16)
    for _, _, view in _taps(xp, kh, kw, stride, (1, 1), (ho, wo)):
        np.maximum(best, view, out=best)
    return np.clip(best, act_min, act_max).astype(np.int8)
