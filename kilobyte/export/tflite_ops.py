"""Export stage: lower each IR node to TFLite operators (builtin code, tensor names, options fields).

Most nodes become one operator. TFLite only knows SAME/VALID padding, so a window op whose explicit padding is
neither becomes PAD (CONV_2D, DEPTHWISE_CONV_2D: pads with the zero point) or PADV2 with the dtype minimum
(MAX_POOL_2D) followed by the VALID op; AVG_POOL_2D cannot be padded that way (TFLite divides by the count of
in-image taps) and is refused. A TRANSPOSE_CONV whose crop is neither SAME's nor VALID's (PyTorch's k=3, s=2, p=1,
output_padding=1 crops the top row, SAME the bottom one) becomes a VALID TRANSPOSE_CONV into the whole uncropped
output followed by a STRIDED_SLICE (a byte copy) of the IR's rows and columns: TFLite (unlike TFLite Micro) refuses
an output size from which it cannot derive the input size back. Attributes TFLite keeps in tensors (PAD paddings,
MEAN / REDUCE_MAX axes, RESHAPE shape, TRANSPOSE perm, STRIDED_SLICE begin/end/strides, TILE multiples, resize
size, TRANSPOSE_CONV output shape) become int32 constants. A resolved STRIDED_SLICE end of -1 (a negative stride
running down to index 0) cannot be written as an index (TFLite reads -1 as the last element): that axis gets its
end_mask bit instead. An int8 CONV_2D without a bias gets a zero int32 one: TFLite, unlike TFLite Micro, refuses an
int8 conv without, and TFLite's converter always writes one. Every added tensor is named after the IR output it
serves (`<out>.pad`, `<out>.axes`, `<out>.uncropped`, `<out>.zero_bias`, ...), so the writer is deterministic and
the reader can recognise (and fold back) what the writer added.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..formats import tflite_schema as S
from ..ir import Graph, Node, QParams, Tensor
from ..ops import opdef

B = S.B


@dataclass(frozen=True)
class TflOp:
    """One TFLite operator: builtin code, tensor names (None = optional input left out), options fields."""

    code: int
    inputs: tuple[str | None, ...]
    outputs: tuple[str, ...]
    options: dict  # field name (as in the generated `<Options>Add<Field>` functions) -> value or tuple (vector)


def lower_graph(graph: Graph) -> tuple[list[TflOp], list[Tensor]]:
    """All operators of `graph` in node order, plus the tensors the lowering added (constants and pad outputs)."""
    ops: list[TflOp] = []
    extra: list[Tensor] = []
    for node in graph.nodes:
        node_ops, node_tensors = lower_node(graph, node)
        ops += node_ops
        extra += node_tensors
    for t in extra:
        if t.name in graph.tensors:
            raise KilobyteError(f"graph '{graph.name}': tensor name '{t.name}' is reserved for the .tflite writer")
    return ops, extra


class Lowering:
    """What an op's own lowering (`OpDef.lower`, `kilobyte.ops`) writes through: operators by builtin name, the
    constants and intermediate tensors it adds, the fused activation code, and the schema's facts (`schema`)."""

    schema = S

    def __init__(self, graph: Graph):
        self.graph = graph
        self.ops: list[TflOp] = []
        self.tensors: list[Tensor] = []

    def op(self, builtin: str, inputs, outputs, options: dict) -> None:
        self.ops.append(TflOp(getattr(B, builtin), tuple(inputs), tuple(outputs), options))

    def const(self, name: str, data: np.ndarray, like: str | None = None) -> str:
        """An added constant; `like`: quantised per tensor as that graph tensor is (an int8 pad value)."""
        q = None
        if like is not None:
            lq = self.graph.tensors[like].qparams
            q = QParams.per_tensor(float(lq.scale[0]), int(lq.zero_point[0]))
        self.tensors.append(_const(name, data, q))
        return name

    def tensor_like(self, name: str, shape, like: Tensor) -> str:
        """An added activation tensor of `shape` with `like`'s dtype and quantisation."""
        self.tensors.append(Tensor(name, tuple(shape), like.dtype, None, like.qparams))
        return name

    def activation(self, node: Node) -> int:
        return _act(node)

    def quantised(self, name: str) -> bool:
        """Whether graph tensor `name` is quantised."""
        return self.graph.tensors[name].qparams is not None

    def zero_bias(self, node: Node) -> str:
        """An added int32 bias of zeros at TFLite's bias scale (the input's scale times each weight scale), for an
        int8 CONV_2D without one: TFLite, unlike TFLite Micro, refuses an int8 conv without a bias."""
        graph = self.graph
        w = graph.tensors[node.inputs[1]].qparams
        s_in = graph.tensors[node.inputs[0]].qparams.scale[0]
        n = graph.tensors[node.inputs[1]].shape[0]
        scale = np.broadcast_to(np.float32(s_in) * w.scale.astype(np.float32), (n,)).astype(np.float32)
        q = QParams(scale, np.zeros(n, np.int64), 0)
        name = S.zero_bias_tensor_name(node.outputs[0])
        self.tensors.append(Tensor(name, (n,), "int32", np.zeros(n, np.int32), q))
        return name


def lower_node(graph: Graph, node: Node) -> tuple[list[TflOp], list[Tensor]]:
    """`node`'s operators and added tensors: its own lowering (`OpDef.lower`), through the `Lowering` writer."""
    lower = opdef(node.op).lower
    if lower is None:
        raise UnsupportedOpError(f"node '{node.name}': {node.op.value} has no TFLite operator; run the inference "
                                 f"transforms (fold batch norm, fuse activations) before export")
    w = Lowering(graph)
    lower(w, graph, node)
    return w.ops, w.tensors


def _const(name: str, data: np.ndarray, qparams: QParams | None = None) -> Tensor:
    data = np.ascontiguousarray(data)
    data.setflags(write=False)
    return Tensor(name, tuple(data.shape), str(data.dtype), data, qparams)


def _params(node: Node) -> tuple[str, ...]:
    """(weight,) or (weight, bias) of a CONV / DEPTHWISE node. A missing bias is left out, not written as -1:
    TFLite Micro's DEPTHWISE_CONV_2D dereferences an optional input of -1 and crashes."""
    return tuple(node.inputs[1:3])


def _act(node: Node) -> int:
    return S.ACT_TO_TFL[node.attrs.activation]


