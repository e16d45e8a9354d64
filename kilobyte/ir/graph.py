"""IR stage: Tensor, Node and Graph — the one representation every stage after the frontends speaks.

A `Graph` holds named tensors (NHWC, batch 1; float32, int8 or int32; constants carry their data), nodes in a valid
topological order, and the names of the graph inputs and outputs. Quantisation parameters are typed (`QParams`),
never a free-form dict. Graphs are treated as values: passes build new graphs with `Graph.replace` and constant arrays
are shared read-only between them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import KilobyteError
from ..ops import opdef
from ..ops.types import Op
from .shapes import ShapeError, infer_shape

DTYPES = ("float32", "int8", "int32", "uint8")  # uint8: only at a model's edges, around a QUANTIZE


class GraphError(KilobyteError):
    """The graph is malformed; the message names the node or tensor and the reason."""


@dataclass(frozen=True)
class QParams:
    """Affine quantisation: real = scale * (q - zero_point). Per-tensor when `axis` is None."""

    scale: np.ndarray  # float32, shape (1,) or (C,)
    zero_point: np.ndarray  # int64, same shape as scale
    axis: int | None = None

    @staticmethod
    def per_tensor(scale: float, zero_point: int) -> QParams:
        return QParams(np.array([scale], np.float32), np.array([zero_point], np.int64))

    def __eq__(self, other) -> bool:
        return (isinstance(other, QParams) and self.axis == other.axis
                and np.array_equal(self.scale, other.scale) and np.array_equal(self.zero_point, other.zero_point))

    def __hash__(self) -> int:
        return hash((self.scale.tobytes(), self.zero_point.tobytes(), self.axis))


@dataclass(frozen=True, eq=False)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    data: np.ndarray | None = None  # constant tensors only
    qparams: QParams | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def numel(self) -> int:
        return int(math.prod(self.shape))  # hot in the planner: np.prod costs ~10x more on a short tuple

    @property
    def nbytes(self) -> int:
        return self.numel * np.dtype(self.dtype).itemsize

    def __eq__(self, other) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        same_data = (self.data is None and other.data is None) or (
            self.data is not None and other.data is not None and np.array_equal(self.data, other.data))
        return (self.name, self.shape, self.dtype, self.qparams) == (
            other.name, other.shape, other.dtype, other.qparams) and same_data

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Node:
    name: str
    op: Op
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: object = None
    origin: str = field(default="", compare=False)  # source-framework name, for messages only

    def __post_init__(self):
        if self.attrs is None:
            object.__setattr__(self, "attrs", opdef(self.op).attrs())


@dataclass(frozen=True, eq=False)
class Graph:
    tensors: dict[str, Tensor]
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    name: str = "model"
    _producer: dict = field(default=None, init=False, repr=False, compare=False)
    _by_name: dict = field(default=None, init=False, repr=False, compare=False)  # `node` is hot in the planner
    _readers: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        prod = {t: n for n in self.nodes for t in n.outputs}
        object.__setattr__(self, "_producer", prod)
        by_name: dict[str, Node] = {}
        for n in self.nodes:
            by_name.setdefault(n.name, n)  # the first of a name, as a scan would find (verify() refuses duplicates)
        object.__setattr__(self, "_by_name", by_name)
        readers: dict[str, list[Node]] = {}
        for n in self.nodes:
            for t in dict.fromkeys(n.inputs):  # a node reading a tensor twice is one consumer
                readers.setdefault(t, []).append(n)
        object.__setattr__(self, "_readers", readers)

    # -- queries ---------------------------------------------------------------------------------------------------
    def replace(self, **changes) -> Graph:
        """A new graph with some fields changed (the pure-pass way to edit)."""
        return dataclasses.replace(self, **changes)

    def producer(self, tensor: str) -> Node | None:
        return self._producer.get(tensor)

    def consumers(self, tensor: str) -> list[Node]:
        """The nodes that read `tensor`, in graph order, each once."""
        return list(self._readers.get(tensor, ()))

    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(name) from None

    def activation_inputs(self, node: Node) -> list[str]:
        """Inputs of `node` that are activations (not constant weights/biases)."""
        return [t for t in node.inputs if not self.tensors[t].is_const]

    def __eq__(self, other) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (self.nodes == other.nodes and self.inputs == other.inputs and self.outputs == other.outputs
                and self.tensors.keys() == other.tensors.keys()
                and all(self.tensors[k] == other.tensors[k] for k in self.tensors))

    __hash__ = None  # type: ignore[assignment]

    # -- checks ----------------------------------------------------------------------------------------------------
    def verify(self) -> Graph:
        """Check names, topological order, attrs types, shapes, dtypes and quantisation params; return self."""
        defined = set(self.inputs) | {k for k, t in self.tensors.items() if t.is_const}
        for name in self.inputs:
            self._tensor(name, "graph input")
        seen_nodes: set[str] = set()
        for n in self.nodes:
            self._verify_node(n, defined, seen_nodes)
            defined.update(n.outputs)
        for name in self.outputs:
            if name not in defined:
                raise GraphError(f"graph output '{name}' is never produced")
        for t in self.tensors.values():
            _verify_tensor(t)
        return self

    def _tensor(self, name: str, what: str) -> Tensor:
        if name not in self.tensors:
            raise GraphError(f"{what} '{name}' is not a tensor of the graph")
        return self.tensors[name]

    def _verify_node(self, n: Node, defined: set[str], seen: set[str]) -> None:
        if n.name in seen:
            raise GraphError(f"node '{n.name}': duplicate node name")
        seen.add(n.name)
        if not isinstance(n.attrs, opdef(n.op).attrs):
            raise GraphError(f"node '{n.name}' ({n.op.value}): attrs must be {opdef(n.op).attrs.__name__}")
        if getattr(n.attrs, "weight_format", "dense") not in ("dense", "fwcs", "csr"):
            raise GraphError(f"node '{n.name}': unknown weight_format {n.attrs.weight_format!r}")
        for t in n.inputs:
            self._tensor(t, f"node '{n.name}' input")
            if t not in defined:
                raise GraphError(f"node '{n.name}' reads '{t}' before it is produced (cycle or bad order)")
        if len(n.outputs) != 1:
            raise GraphError(f"node '{n.name}': expected exactly one output, got {len(n.outputs)}")
        out = self._tensor(n.outputs[0], f"node '{n.name}' output")
        if out.name in defined:
            raise GraphError(f"node '{n.name}': output '{out.name}' is produced twice")
        if opdef(n.op).params and any(not self.tensors[t].is_const for t in n.inputs[1:]):
            raise GraphError(f"node '{n.name}' ({n.op.value}): weights and bias must be constant tensors")
        try:
            want = infer_shape(n.op, n.attrs, [self.tensors[t].shape for t in n.inputs])
        except ShapeError as e:
            raise GraphError(f"node '{n.name}' ({n.op.value}): {e}") from None
        if tuple(want) != tuple(out.shape):
            raise GraphError(f"node '{n.name}' ({n.op.value}): output shape {out.shape}, expected {want}")

    # -- printing --------------------------------------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(_fmt(self.tensors[t]) for t in self.inputs)})"]
        for n in self.nodes:
            args = ", ".join(_fmt(self.tensors[t]) if not self.tensors[t].is_const else f"%{t}" for t in n.inputs)
            attrs = _fmt_attrs(n.attrs)
            lines.append(f"  {_fmt(self.tensors[n.outputs[0]])} = {n.op.value}({args}){' ' + attrs if attrs else ''}"
                         f"  # {n.name}{' <- ' + n.origin if n.origin else ''}")
        lines.append(f"  return {', '.join(self.outputs)}")
        return "\n".join(lines)


def _verify_tensor(t: Tensor) -> None:
    if t.dtype not in DTYPES:
        raise GraphError(f"tensor '{t.name}': dtype {t.dtype} not one of {DTYPES}")
    if t.data is not None:
        if tuple(t.data.shape) != tuple(t.shape) or str(t.data.dtype) != t.dtype:
            raise GraphError(f"tensor '{t.name}': data {t.data.dtype}{t.data.shape} does not match {t.dtype}{t.shape}")
    q = t.qparams
    if q is None:
        if t.dtype == "int8":
            raise GraphError(f"tensor '{t.name}': int8 tensor without quantisation params")
        return
    if q.scale.shape != q.zero_point.shape or q.scale.ndim != 1:
        raise GraphError(f"tensor '{t.name}': scale and zero_point must be 1-D of equal length")
    want = 1 if q.axis is None else t.shape[q.axis]
    if len(q.scale) != want:
        raise GraphError(f"tensor '{t.name}': {len(q.scale)} scales for {want} channels (axis {q.axis})")
    if not np.all((q.scale > 0) & np.isfinite(q.scale)):
        raise GraphError(f"tensor '{t.name}': quantisation scales must be positive and finite")


def _fmt(t: Tensor) -> str:
    dims = "x".join(str(d) for d in t.shape)
    return f"%{t.name}:{t.dtype}[{dims}]"


def _fmt_attrs(attrs) -> str:
    if attrs is None or not dataclasses.fields(attrs):
        return ""
    parts = []
    for f in dataclasses.fields(attrs):
        v = getattr(attrs, f.name)
        if f.default is not dataclasses.MISSING and v == f.default:
            continue
        parts.append(f"{f.name}={getattr(v, 'value', v)}")
    return "{" + ", ".join(parts) + "}" if parts else ""
