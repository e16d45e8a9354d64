"""Quantisation stage: `check_int8` — does an int8 graph follow the TFLite int8 spec the kernels assume?

A `.tflite` file can be well-formed and still break the spec: a float tensor between int8 ops, float biases, weights
with per-tensor zero points other than 0. The reference interpreter, the C kernels and TFLite Micro would then
disagree or crash, so the code generator checks first and names the node and tensor on one line.
"""

from __future__ import annotations

from ..errors import UnsupportedOpError
from ..ir import Graph, Op
from ..ops import opdef

EDGE_OPS = (Op.QUANTIZE, Op.DEQUANTIZE)  # float <-> int8 at the model's edges


def check_int8(graph: Graph) -> Graph:
    """Raise `UnsupportedOpError` unless every activation a node reads or writes is int8 (QUANTIZE / DEQUANTIZE may
    have a float side, QUANTIZE a uint8 one), weights are int8 and biases int32; return `graph`."""
    for node in graph.nodes:
        tensors = [(t, "input") for t in graph.activation_inputs(node)] + [(node.outputs[0], "output")]
        for t, role in tensors:
            dtype = graph.tensors[t].dtype
            edge = node.op in EDGE_OPS and (role == "input") == (node.op is Op.QUANTIZE)
            uint8_edge = node.op is Op.QUANTIZE and dtype == "uint8"  # uint8 <-> int8 at the model's input/output
            if dtype != "int8" and not (edge and dtype == "float32") and not uint8_edge:
                raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): {role} '{t}' is {dtype} inside "
                                         f"the int8 model; only int8 activations are compiled")
        if opdef(node.op).params:
            _check_params(graph, node)
    return graph


def _check_params(graph: Graph, node) -> None:
    want = ("int8", "int32")
    for k, t in enumerate(node.inputs[1:3]):
        if graph.tensors[t].dtype != want[k]:
            what = ("weights", "bias")[k]
            raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): {what} '{t}' are "
                                     f"{graph.tensors[t].dtype}, need {want[k]} (TFLite int8 spec)")
