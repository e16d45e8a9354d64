"""IR stage: `GraphBuilder`, the one way frontends (and tests) construct graphs.

Names are canonical — `<op>_<k>` for nodes and their outputs, `<node>.weight` / `<node>.bias` for parameters — so
two frontends that emit the same ops in the same order produce identical graphs whatever the source names were. The
source name survives in `Node.origin` for messages and reports.
"""

from __future__ import annotations

import numpy as np

from ..ops import opdef
from ..ops.types import Op
from .graph import Graph, Node, QParams, Tensor
from .shapes import infer_shape


class GraphBuilder:
    """Append-only graph construction with shape inference.

    >>> b = GraphBuilder()
    >>> x = b.input((1, 4, 4, 3))
    >>> y = b.node(Op.RELU, [x])
    >>> print(b.build([y]))
    graph model(%input:float32[1x4x4x3])
      %relu_0:float32[1x4x4x3] = RELU(%input:float32[1x4x4x3])  # relu_0
      return relu_0
    """

    def __init__(self, name: str = "model"):
        self.name = name
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self._count: dict[str, int] = {}

    def input(self, shape, dtype: str = "float32", name: str = "input", qparams: QParams | None = None) -> str:
        self.tensors[name] = Tensor(name, tuple(int(d) for d in shape), dtype, None, qparams)
        self.inputs.append(name)
        return name

    def const(self, name: str, data: np.ndarray, qparams: QParams | None = None) -> str:
        """A constant tensor; a read-only broadcast of one value (all strides 0, e.g. `np.broadcast_to(0, shape)`)
        is kept as it is, costing no memory per element, for graphs that are measured but never run."""
        if not (data.ndim and data.strides == (0,) * data.ndim):
            data = np.ascontiguousarray(data)
        if data.dtype == np.float64:
            data = data.astype(np.float32)
        data.setflags(write=False)
        self.tensors[name] = Tensor(name, tuple(data.shape), str(data.dtype), data, qparams)
        return name

    def fresh_name(self, op: Op) -> str:
        key = op.value.lower()
        k = self._count.get(key, 0)
        self._count[key] = k + 1
        return f"{key}_{k}"

    def node(self, op: Op, inputs, attrs=None, *, params: dict[str, np.ndarray] | None = None, origin: str = "",
             dtype: str | None = None, qparams: QParams | None = None) -> str:
        """Append a node; `params` (e.g. {"weight": w, "bias": b}) become constants named `<node>.<key>`.

        Returns the name of the output tensor (equal to the node name).
        """
        name = self.fresh_name(op)
        ins = list(inputs) + [self.const(f"{name}.{k}", v) for k, v in (params or {}).items() if v is not None]
        attrs = attrs if attrs is not None else opdef(op).attrs()
        shape = infer_shape(op, attrs, [self.tensors[t].shape for t in ins])
        out_dtype = dtype or self.tensors[ins[0]].dtype
        self.tensors[name] = Tensor(name, tuple(shape), out_dtype, None, qparams)
        self.nodes.append(Node(name, op, tuple(ins), (name,), attrs, origin))
        return name

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.tensors[tensor].shape

    def build(self, outputs, *, verify: bool = True) -> Graph:
        """The graph; `verify=False` skips `Graph.verify` for graphs built by code that is itself tested to build
        valid graphs, in loops that build thousands (architecture search)."""
        graph = Graph(dict(self.tensors), tuple(self.nodes), tuple(self.inputs), tuple(outputs), self.name)
        return graph.verify() if verify else graph
