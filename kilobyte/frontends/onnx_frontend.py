"""Frontend stage: ONNX model (file or `ModelProto`, opset 13+; older opsets where easy) -> IR.

`from_onnx` loads and checks the model (a file that cannot be parsed is a `ModelFileError` naming it), then walks
the nodes in their (topological) file order. Initializers are constants; a node whose inputs are all constant — the
`Constant`/`Shape`/`Gather`/`Concat` chains exporters leave behind to compute a reshape target or pads — is
evaluated on the spot with ONNX's reference implementation, and `Shape` of an activation is its static shape. Every
other node goes through the op table in `onnx_ops.py` to the shared `Lowering` (NCHW -> NHWC), the same one the
PyTorch frontend uses. A `MatMul` whose only consumer adds a constant becomes one FULLY_CONNECTED with bias; the
GELU chains exporters write below opset 20 (`onnx_gelu.py`) become one GELU each.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ModelFileError, UnsupportedOpError
from ..ir import Graph
from .lowering import Lowering, LoweringError, Value
from .onnx_gelu import find_gelu_chains
from .onnx_ops import NOT_IN_IR, OPS, SUPPORTED, matmul


def from_onnx(model: str | os.PathLike | onnx.ModelProto) -> Graph:
    """Convert an ONNX model with one NCHW float input (batch 1) to a float IR graph with NHWC input `(1,H,W,C)`."""
    proto, label = _load(model)
    return _Converter(proto, label).run()


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _load(model) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        proto, label = model, f"<ONNX model {model.graph.name or 'unnamed'}>"
    else:
        label = os.fspath(model)
        if not os.path.isfile(label):
            raise ModelFileError(f"{label}: no such ONNX file")
        try:
            proto = onnx.load(label)
        except Exception as e:  # protobuf and onnx raise several types for a corrupt file
            raise ModelFileError(f"{label}: cannot parse ONNX model ({_first_line(e)})") from None
    try:
        onnx.checker.check_model(proto)
    except Exception as e:
        raise ModelFileError(f"{label}: invalid ONNX model ({_first_line(e)})") from None
    if not proto.graph.node or not proto.graph.output:
        raise ModelFileError(f"{label}: the ONNX graph has no nodes or no outputs (truncated file?)")
    return proto, label


class _Converter:
    """`env` maps each ONNX tensor name to a `Value` (activation) or an `np.ndarray` (constant)."""

    def __init__(self, proto: onnx.ModelProto, label: str):
        self.graph, self.label = proto.graph, label
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.low = Lowering(proto.graph.name or "model")
        self.env: dict[str, Value | np.ndarray] = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in proto.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.graph_outputs = {o.name for o in proto.graph.output}
        self.fused: set[int] = set()  # ids of nodes already lowered as part of another (MatMul's Add, GELU chains)
        self.gelu = find_gelu_chains(proto.graph)  # id of a GELU chain's last Mul -> the chain
        self.fused |= {id(n) for chain in self.gelu.values() for n in chain.nodes[:-1]}

    def run(self) -> Graph:
        for inp in self.graph.input:
            if inp.name not in self.env:  # old exporters list initializers as inputs too
                self.env[inp.name] = self._wrap(None, f"input '{inp.name}'", lambda i=inp: self.low.input(
                    self._input_shape(i)))
        for node in self.graph.node:
            if id(node) not in self.fused:
                self._node(node)
        outputs = [self.env.get(o.name) for o in self.graph.output]
        if not all(isinstance(v, Value) for v in outputs):
            raise UnsupportedOpError(f"{self.label}: every graph output must be computed from the graph input")
        return self._wrap(None, "output", lambda: self.low.build(outputs))

    def _wrap(self, node, origin: str, fn):
        """Run `fn`, turning a lowering failure into a one-line error naming the file, node and op."""
        try:
            return fn()
        except LoweringError as e:
            where = f"node '{origin}' (ONNX {node.op_type})" if node is not None else origin
            raise UnsupportedOpError(f"{self.label}: {where}: {e}") from None

    def _input_shape(self, inp: onnx.ValueInfoProto) -> tuple[int, ...]:
        ttype = inp.type.tensor_type
        if ttype.elem_type != onnx.TensorProto.FLOAT:
            raise LoweringError(f"'{inp.name}' has element type {ttype.elem_type}; only float32 inputs")
        shape = []
        for i, d in enumerate(ttype.shape.dim):
            if not d.HasField("dim_value") and i != 0:
                raise LoweringError(f"'{inp.name}' has a dynamic dimension {i}; export with a fixed input size")
            shape.append(d.dim_value if d.HasField("dim_value") else 1)  # a symbolic batch is batch 1
        return tuple(shape)

    def _inputs(self, node: onnx.NodeProto) -> list:
        ins = []
        for name in node.input:
            if name and name not in self.env:
                raise ModelFileError(f"{self.label}: node '{node.name}' reads '{name}', which is never defined")
            ins.append(self.env[name] if name else None)
        return ins

    def _node(self, node: onnx.NodeProto) -> None:
        origin = node.name or node.output[0]
        chain = self.gelu.get(id(node))
        if chain is not None:
            x = self.env[chain.x]
            self.env[node.output[0]] = self._wrap(node, origin, lambda: self.low.gelu(
                x, approximate=chain.approximate, origin=origin))
            return
        ins = self._inputs(node)
        self.env[node.output[0]] = self._wrap(node, origin, lambda: self._lower(node, origin, ins))

    def _lower(self, node: onnx.NodeProto, origin: str, ins: list):
        if node.domain not in ("", "ai.onnx"):
            raise LoweringError(f"operator domain {node.domain!r} is not supported; supported: {SUPPORTED}")
        if not any(isinstance(v, Value) for v in ins):
            return self._fold(node, ins)
        if node.op_type == "Shape":
            return self._shape(node, ins[0])
        handler = OPS.get(node.op_type)
        if node.op_type in NOT_IN_IR:
            raise LoweringError(f"needs {NOT_IN_IR[node.op_type]}, which the IR does not have yet")
        if handler is None:
            raise LoweringError(f"unsupported op; supported: {SUPPORTED}")
        if any(self.consumers.get(o) or o in self.graph_outputs for o in node.output[1:] if o):
            raise LoweringError("only the first output may be used (mask/indices outputs are not supported)")
        attrs = {a.name: _attr(a) for a in node.attribute}
        if node.op_type == "MatMul":
            return self._matmul(node, origin, attrs, ins)
        return handler(self.low, origin, attrs, ins, self.opset)

    def _matmul(self, node, origin: str, attrs: dict, ins: list) -> Value:
        """MatMul with a constant weight; fuse a following Add of a constant bias (the exporter's Linear)."""
        users = self.consumers.get(node.output[0], [])
        add = users[0] if len(users) == 1 and users[0].op_type == "Add" else None
        if add is None or node.output[0] in self.graph_outputs:
            return matmul(self.low, origin, attrs, ins, self.opset)
        other = [self.env.get(n) for n in add.input if n != node.output[0]]
        if len(other) != 1 or not isinstance(other[0], np.ndarray):
            return matmul(self.low, origin, attrs, ins, self.opset)
        w = ins[1]
        bias = np.broadcast_to(other[0], (1, w.shape[-1])).reshape(-1) if isinstance(w, np.ndarray) else None
        out = matmul(self.low, origin, attrs, ins, self.opset, bias=bias)
        self.env[add.output[0]] = out
        self.fused.add(id(add))
        return out

    def _shape(self, node: onnx.NodeProto, x: Value) -> np.ndarray:
        attrs = {a.name: _attr(a) for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(x.shape))
        return np.array(x.shape[start:end], np.int64)

    def _fold(self, node: onnx.NodeProto, ins: list) -> np.ndarray:
        """Evaluate a node whose inputs are all constants with ONNX's reference implementation."""
        from onnx.reference import ReferenceEvaluator

        names = [n for n in node.input if n]
        feeds = {n: v for n, v in zip(node.input, ins) if n}
        graph = helper.make_graph([node], "fold", [helper.make_tensor_value_info(n, 0, None) for n in names],
                                  [helper.make_tensor_value_info(node.output[0], 0, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])
        except Exception as e:  # the reference runtime raises many types
            raise LoweringError(f"cannot evaluate this constant node ({_first_line(e)})") from None


def _attr(a: onnx.AttributeProto):
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, float):  # ONNX stores float32: 1e-5 arrives as 9.99999974e-06; take the shortest float32 repr
        return float(str(np.float32(v)))
    return list(v) if isinstance(v, (list, tuple)) else v
