"""Frontend stage (ONNX): the GELU chains exporters write below opset 20, found before any node is lowered.

ONNX has a `Gelu` operator only from opset 20; below it PyTorch's exporters spell nn.GELU out in elementwise nodes:

- exact: `x / sqrt(2)` (or `x * (1 / sqrt 2)`) -> Erf -> + 1 -> * x -> * 0.5;
- tanh-approximate: `x * x * x` (TorchScript) or `Pow(x, 3)` (torch.export) -> * 0.044715 -> + x -> * sqrt(2 / pi)
  -> Tanh -> + 1 -> * x -> * 0.5.

The TorchScript exporter multiplies by x before 0.5, the torch.export one by 0.5 before x, and constants stand on
either side of a Mul or Add. A chain whose intermediate values nothing else reads (and that are no graph outputs)
becomes one GELU of x at its last Mul; its other nodes lower to nothing. Any other use of Erf or Tanh is left alone: a
Tanh lowers to TANH, an Erf stays an unsupported op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
KAPPA = 0.044715  # the cubic term's coefficient of the tanh approximation


@dataclass(frozen=True)
class GeluChain:
    """One exporter GELU: its input tensor, its form, and its nodes in order (the last Mul last)."""

    x: str
    approximate: bool
    nodes: tuple[onnx.NodeProto, ...]


def find_gelu_chains(graph: onnx.GraphProto) -> dict[int, GeluChain]:
    """Every GELU chain of `graph`, by the id of its last Mul."""
    match = _Matcher(graph)
    chains = {}
    for core in graph.node:
        if core.op_type not in ("Erf", "Tanh"):
            continue
        head = match.erf_head(core) if core.op_type == "Erf" else match.tanh_head(core)
        tail = match.tail(core, head[0]) if head is not None else None
        if tail is not None:
            chains[id(tail[-1])] = GeluChain(head[0], core.op_type == "Tanh", (*head[1], core, *tail))
    return chains


class _Matcher:
    def __init__(self, graph: onnx.GraphProto):
        self.producer = {o: n for n in graph.node for o in n.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in set(node.input):
                self.readers.setdefault(name, []).append(node)
        self.outputs = {o.name for o in graph.output}
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)

    def reader(self, name: str, op_type: str | None = None) -> onnx.NodeProto | None:
        """The one node reading `name` (of `op_type` if given), if `name` is private to it."""
        users = self.readers.get(name, [])
        if len(users) != 1 or name in self.outputs or (op_type is not None and users[0].op_type != op_type):
            return None
        return users[0]

    def scalar(self, name: str | None, value: float) -> bool:
        v = self.constants.get(name) if name is not None else None
        return v is not None and v.size == 1 and bool(np.isclose(float(v.reshape(-1)[0]), value, rtol=1e-4))

    def by_constant(self, name: str, op_type: str, value: float) -> tuple[onnx.NodeProto, str] | None:
        """(node, operand) when `name` is `operand <op_type> value` (a Mul's constant on either side)."""
        node = self.producer.get(name)
        if node is None or node.op_type != op_type or len(node.input) != 2:
            return None
        a, b = node.input
        if self.scalar(b, value):
            return node, a
        if op_type == "Mul" and self.scalar(a, value):
            return node, b
        return None

    def erf_head(self, erf: onnx.NodeProto) -> tuple[str, tuple[onnx.NodeProto, ...]] | None:
        """(x, nodes before Erf) for Erf(x / sqrt 2) or Erf(x * (1 / sqrt 2))."""
        step = self.by_constant(erf.input[0], "Div", math.sqrt(2)) or \
            self.by_constant(erf.input[0], "Mul", math.sqrt(0.5))
        if step is None or self.reader(step[0].output[0]) is not erf:
            return None
        return step[1], (step[0],)

    def tanh_head(self, tanh: onnx.NodeProto) -> tuple[str, tuple[onnx.NodeProto, ...]] | None:
        """(x, nodes before Tanh) for Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)), every intermediate private."""
        outer = self.by_constant(tanh.input[0], "Mul", SQRT_2_OVER_PI)
        add = self.producer.get(outer[1]) if outer is not None else None
        if add is None or add.op_type != "Add" or len(add.input) != 2:
            return None
        for x, term in (add.input, add.input[::-1]):
            scaled = self.by_constant(term, "Mul", KAPPA)
            cube = self.cube(scaled[1], x) if scaled is not None else None
            if cube is None:
                continue
            nodes = (*cube, scaled[0], add, outer[0])
            if all(self.reader(n.output[0]) is after for n, after in zip(nodes, (*nodes[1:], tanh))):
                return x, nodes
        return None

    def cube(self, name: str, x: str) -> tuple[onnx.NodeProto, ...] | None:
        """The nodes computing `name` = x^3: Pow(x, 3), or Mul(x, Mul(x, x)) with the factors in either order."""
        node = self.producer.get(name)
        if node is None or len(node.input) != 2:
            return None
        if node.op_type == "Pow":
            return (node,) if node.input[0] == x and self.scalar(node.input[1], 3.0) else None
        if node.op_type != "Mul" or x not in node.input:
            return None
        square = self.producer.get(node.input[1] if node.input[0] == x else node.input[0])
        if square is None or square.op_type != "Mul" or list(square.input) != [x, x]:
            return None
        return square, node

    def tail(self, core: onnx.NodeProto, x: str) -> tuple[onnx.NodeProto, ...] | None:
        """(Add, Mul, Mul) of `(1 + core) * x * 0.5` with the two multiplications in either order."""
        add = self.reader(core.output[0], "Add")
        mul = self.reader(add.output[0], "Mul") if add is not None else None
        last = self.reader(mul.output[0], "Mul") if mul is not None else None
        if last is None or not self.scalar(_other(add, core), 1.0):
            return None
        p, q = _other(mul, add), _other(last, mul)
        if (p == x and self.scalar(q, 0.5)) or (q == x and self.scalar(p, 0.5)):
            return add, mul, last
        return None


def _other(node: onnx.NodeProto, source: onnx.NodeProto) -> str | None:
    """The input of two-input `node` that is not `source`'s output (None if there is no such single input)."""
    if len(node.input) != 2:
        return None
    rest = [i for i in node.input if i != source.output[0]]
    return rest[0] if len(rest) == 1 else None
