"""Model files with every kind of edge a converter writes, shared by the host (tests/codegen/test_io_edges.py,
test_float_tail.py) and Cortex-M (tests/targets/test_qemu_edges.py) tests: the interfaces (`edge_model`: input int8 /
uint8 / float x outputs int8 / uint8 / float, one or several) and float tails after the int8 core (`tail_model`).
Every file is written by the project's own `.tflite` writer from an IR graph built here."""

from __future__ import annotations

import dataclasses

import numpy as np
from random_nets import heads_graph, quantized, with_edges

from kilobyte.export.tflite import to_tflite
from kilobyte.ir import Activation, AddAttrs, Node, Op, ReshapeAttrs, SoftmaxAttrs, Tensor

OUTPUTS = [["int8"], ["uint8"], ["float"], ["uint8>float"], ["int8", "int8"], ["uint8", "uint8"],
           ["float", "float", "float"], ["float", "int8", "uint8"]]
FILE_DTYPE = {"int8": "int8", "uint8": "uint8", "float": "float32", "uint8>float": "float32"}  # the file's output


def edge_model(inp: str, outs: list[str]) -> bytes:
    """The `.tflite` file of a small model with `len(outs)` heads and the given edges (`with_edges`)."""
    q, _ = quantized(heads_graph(len(outs)), seed=len(outs), n=4)
    return to_tflite(with_edges(q, inp, outs))


def file_input(inp: str, shape, rng) -> np.ndarray:
    """A random input as the file takes it: floats, or integers over the whole int8 / uint8 range."""
    if inp == "float":
        return rng.normal(0, 1.5, shape).astype(np.float32)
    dtype = np.dtype(inp)
    return rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)


class _Tail:
    """Appends float ops after one int8 output of a graph being edited (tensors, nodes)."""

    def __init__(self, q, rng):
        self.tensors, self.nodes, self.rng = dict(q.tensors), list(q.nodes), rng

    def op(self, op: Op, x: str, attrs=None, const: str | None = None, shape=None) -> str:
        y = f"{x}_{op.value.lower()}"
        self.tensors[y] = Tensor(y, shape or self.tensors[x].shape, "float32", None, None)
        inputs = (x,) if const is None else ((const, x) if op is Op.MUL else (x, const))  # either operand order
        self.nodes.append(Node(y, op, inputs, (y,), attrs))
        return y

    def const(self, x: str, scale: float) -> str:
        """A finite float constant of x's shape (the IR's ADD / MUL take equal shapes), with a name of its own."""
        name = f"{x}_c{len(self.tensors)}"
        data = (self.rng.normal(0, scale, self.tensors[x].shape)).astype(np.float32)
        self.tensors[name] = Tensor(name, data.shape, "float32", data, None)
        return name


def _chain(t: _Tail, y: str) -> str:
    """DEQUANTIZE -> ADD (RELU) -> MUL -> LOGISTIC -> SOFTMAX (beta 0.7) -> RESHAPE to (1, n)."""
    x = t.op(Op.DEQUANTIZE, y)
    x = t.op(Op.ADD, x, AddAttrs(Activation.RELU), t.const(x, 1.0))
    x = t.op(Op.MUL, x, AddAttrs(), t.const(x, 2.0))
    x = t.op(Op.SOFTMAX, t.op(Op.LOGISTIC, x), SoftmaxAttrs(0.7))
    return t.op(Op.RESHAPE, x, ReshapeAttrs((1, int(np.prod(t.tensors[x].shape)))),
                shape=(1, int(np.prod(t.tensors[x].shape))))


def _detector(t: _Tail, outs) -> list[str]:
    """SSD-like heads: scores DEQUANTIZE -> LOGISTIC, boxes DEQUANTIZE -> MUL (variances) -> ADD (anchors), the pooled
    feature left int8."""
    scores = t.op(Op.LOGISTIC, t.op(Op.DEQUANTIZE, outs[0]))
    boxes = t.op(Op.DEQUANTIZE, outs[1])
    boxes = t.op(Op.ADD, t.op(Op.MUL, boxes, AddAttrs(), t.const(boxes, 0.2)), AddAttrs(), t.const(boxes, 1.0))
    return [scores, boxes, outs[2]]


TAIL_MODELS = ("log_softmax", "chain", "detector")


def tail_model(name: str) -> bytes:
    """The `.tflite` file of a model whose outputs end in float tails: "log_softmax" (a PTQ'd classifier as ONNX
    exports it: DEQUANTIZE -> LOG_SOFTMAX, here per pixel over 3 classes), "chain" (every tail op), "detector"
    (three outputs: two tails and an int8 one, behind a uint8 input)."""
    heads = 3 if name == "detector" else 1
    q, _ = quantized(heads_graph(heads), seed=5, n=4)
    if name == "detector":
        q = with_edges(q, "uint8", ["int8"] * 3)
    t = _Tail(q, np.random.default_rng(7))
    if name == "log_softmax":
        outputs = [t.op(Op.LOG_SOFTMAX, t.op(Op.DEQUANTIZE, q.outputs[0]))]
    elif name == "chain":
        outputs = [_chain(t, q.outputs[0])]
    else:
        outputs = _detector(t, list(q.outputs))
    g = dataclasses.replace(q, tensors=t.tensors, nodes=tuple(t.nodes), outputs=tuple(outputs)).verify()
    return to_tflite(g)
