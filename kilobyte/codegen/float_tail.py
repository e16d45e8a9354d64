"""Codegen stage: the float ops a model file runs after its int8 core — each output's "float tail".

A converter writes an int8 model's outputs as int8 tensors, or as a DEQUANTIZE of one, possibly followed by a short
float chain (a PTQ'd ONNX LeNet: DEQUANTIZE -> LOG_SOFTMAX; our own quantiser: DEQUANTIZE -> SOFTMAX; detectors:
DEQUANTIZE -> LOGISTIC, or MUL / ADD by anchor constants). `split_float_tail` cuts every output's chain off the graph:
the C core (`kb_invoke`) ends at the int8 (or uint8) tensors, and `<prefix>_invoke_float` (io_edges.py) runs each
chain in C after it, in place on the caller's float buffer (`tail_source`, runtime `kb_float_tail.c`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import KilobyteError
from ..ir import Activation, Graph, Node, Op
from ..transforms.edit import drop_unused_tensors

TAIL_OPS = (Op.DEQUANTIZE, Op.SOFTMAX, Op.LOG_SOFTMAX, Op.LOGISTIC, Op.ADD, Op.MUL, Op.RESHAPE)
INTEGER = ("int8", "uint8")
F32_MAX = float(np.finfo(np.float32).max)
CLAMP = {Activation.NONE: (-F32_MAX, F32_MAX), Activation.RELU: (0.0, F32_MAX),
         Activation.RELU6: (0.0, 6.0)}  # TFLite's float activation range (lowest()..max() for none)


@dataclass(frozen=True)
class FloatTail:
    """One file output: `core`, the int8/uint8 tensor kb_invoke writes, and the float `nodes` (DEQUANTIZE first)
    that turn it into `output`; no nodes when the output is the core tensor itself."""

    output: str
    core: str
    core_dtype: str = "int8"
    nodes: tuple[Node, ...] = ()
    consts: dict[str, np.ndarray] = field(default_factory=dict)  # ADD / MUL operands by tensor name
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # each node's output shape, by node name

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n.op.value for n in self.nodes)


def _step(graph: Graph, node: Node, t: str) -> tuple[str, dict]:
    """The input of `node` the chain came through, and its constant operand (ADD / MUL), checking the op's form."""
    where = f"graph '{graph.name}': output tail node '{node.name}' ({node.op.value})"
    if node.op is Op.DEQUANTIZE:
        if graph.tensors[node.inputs[0]].dtype not in INTEGER:
            raise KilobyteError(f"{where}: dequantizes a {graph.tensors[node.inputs[0]].dtype} tensor")
        return node.inputs[0], {}
    if node.op in (Op.ADD, Op.MUL):
        const = [i for i in node.inputs if graph.tensors[i].is_const]
        if len(node.inputs) != 2 or len(const) != 1 or node.attrs.activation not in CLAMP:
            raise KilobyteError(f"{where}: only a float {node.op.value} by one constant (no activation, RELU or RELU6) "
                                "runs after the int8 core")
        x = next(i for i in node.inputs if i not in const)
        c = np.asarray(graph.tensors[const[0]].data, np.float32)
        if np.broadcast_shapes(graph.tensors[x].shape, c.shape) != tuple(graph.tensors[x].shape) or \
                not np.all(np.isfinite(c)):
            raise KilobyteError(f"{where}: its constant {list(c.shape)} must be finite and broadcast into "
                                f"{list(graph.tensors[x].shape)}")
        return x, {const[0]: c}
    return node.inputs[0], {}


def _walk(graph: Graph, out: str) -> FloatTail:
    """The chain of float ops from an int8/uint8 core tensor to output `out`."""
    nodes, consts, t = [], {}, out
    while graph.tensors[t].dtype not in INTEGER:
        node = graph.producer(t)
        if node is None or node.op not in TAIL_OPS:
            raise KilobyteError(f"graph '{graph.name}': output '{out}' is {graph.tensors[t].dtype} and its tail "
                                f"has {'no producer' if node is None else node.op.value}; only "
                                f"{'/'.join(o.value for o in TAIL_OPS)} after a DEQUANTIZE run after the int8 core "
                                "(quantise the model first: kilobyte quantize)")
        t, more = _step(graph, node, t)
        nodes.insert(0, node)
        consts.update(more)
    shapes = {n.name: tuple(graph.tensors[n.outputs[0]].shape) for n in nodes}
    return FloatTail(out, t, graph.tensors[t].dtype, tuple(nodes), consts, shapes)


def split_float_tail(graph: Graph) -> tuple[Graph, tuple[FloatTail, ...]]:
    """The int8 core of `graph` (its outputs: each output's core tensor, in order) and every output's tail."""

    tails = tuple(_walk(graph, out) for out in graph.outputs)
    cores = [t.core for t in tails]
    bad = next((c for k, c in enumerate(cores) if c in cores[:k] or c in graph.inputs), None)
    if bad is not None:
        raise KilobyteError(f"graph '{graph.name}': each output must come from its own int8 tensor produced by the "
                            f"model ('{bad}' is the input or feeds two outputs)")
    if not any(t.nodes for t in tails):
        return graph, tails
    cut = {n.name for t in tails for n in t.nodes}
    kept = tuple(n for n in graph.nodes if n.name not in cut)
    core = drop_unused_tensors(graph.replace(nodes=kept, outputs=tuple(cores)))
    return core.verify(), tails


def _f32(v: float) -> str:
    """A float32 value as an exact C99 hexadecimal float literal (0.75 -> 0x1.8p-1f).

    >>> _f32(0.75), _f32(-1.0), _f32(0.0)
    ('0x1.8p-1f', '-0x1p+0f', '0x0p+0f')
    """
    mantissa, exponent = float(np.float32(v)).hex().split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}f"


def _broadcast(c: np.ndarray, shape) -> tuple[np.ndarray, int]:
    """Constant `c` as the values and `inner` of kb_*_const_f32 (index (i / inner) % len): c's non-unit axes, right
    aligned to `shape`, when they are one contiguous run equal to shape's there; else c expanded to `shape`."""
    dims = (1,) * (len(shape) - c.ndim) + tuple(c.shape)
    live = [k for k, d in enumerate(dims) if d != 1]
    if not live:
        return c.reshape(1), 1
    a, b = live[0], live[-1] + 1
    if all(dims[k] == shape[k] for k in range(a, b)):
        return c.reshape(-1), int(np.prod(shape[b:], dtype=np.int64))
    return np.broadcast_to(c, shape).reshape(-1), 1


def tail_source(tail: FloatTail, y: str, q: str, m: str, const_name: str) -> tuple[list, list]:
    """(constant definitions, statements) that run `tail` in C: `q` the core tensor's buffer, `y` the float output
    buffer (every step in place on it), `m` the output's macro prefix (its _BYTES, _SCALE, _ZERO_POINT) and
    `const_name` the stem of the constants' names."""
    defs, body = [], []
    n = f"{m}_BYTES"
    for k, node in enumerate(tail.nodes):
        shape = tail.shapes[node.name]
        if node.op is Op.DEQUANTIZE:
            fn = "kb_dequantize_u8" if tail.core_dtype == "uint8" else "kb_dequantize"
            body.append(f"{fn}({n}, {q}, {m}_SCALE, {m}_ZERO_POINT, {y});")
        elif node.op in (Op.SOFTMAX, Op.LOG_SOFTMAX):
            depth = shape[-1]
            rows = f"{n} / {depth}"
            body.append(f"kb_softmax_f32({rows}, {depth}, {_f32(node.attrs.beta)}, {y});" if node.op is Op.SOFTMAX
                        else f"kb_log_softmax_f32({rows}, {depth}, {y});")
        elif node.op is Op.LOGISTIC:
            body.append(f"kb_logistic_f32({n}, {y});")
        elif node.op in (Op.ADD, Op.MUL):
            (cname, c), = ((i, tail.consts[i]) for i in node.inputs if i in tail.consts)
            values, inner = _broadcast(c, shape)
            arr = f"{const_name}_{k}"
            defs.append(f"static const float {arr}[{values.size}] = {{{', '.join(map(_f32, values))}}};"
                        f"  /* {node.op.value} {cname} */")
            lo, hi = CLAMP[node.attrs.activation]
            body.append(f"kb_{node.op.value.lower()}_const_f32({n}, {y}, {arr}, {values.size}, {inner}, {_f32(lo)}, "
                        f"{_f32(hi)});")
        else:  # RESHAPE: the same floats in the same order
            body.append(f"/* {node.op.value} to {list(shape)}: no code */")
    return defs, body
