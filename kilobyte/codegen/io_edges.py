"""Codegen stage: the model's edges in C — quantisation of the input, dequantisation of the output, and the float
entry point of an "int8 model with float interface".

The TFLite converter writes such models as float input -> QUANTIZE -> int8 core -> DEQUANTIZE -> float output.
`split_float_head` takes the leading QUANTIZE off (the C core runs int8 to int8, `kb_invoke`). The header declares,
for every model, the quantisation macros and the inline `kb_quantize_input` / `kb_dequantize_output` helpers
(`header.py`); this module adds `kb_invoke_float(input, output)` (prefixed like every export) when the file's input
is float (QUANTIZE head) or its output is a DEQUANTIZE: the model exactly as the file defines it, with float where
the file has float. Its int8 buffers are static.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph, Op
from ..transforms.edit import drop_unused_tensors
from .library import LibraryOptions


@dataclass(frozen=True)
class Edges:
    """How the file's input and output relate to the int8 core: float_input (a QUANTIZE head was taken off),
    float_output (the output is one DEQUANTIZE of the core's output)."""

    float_input: bool = False
    float_output: bool = False

    @property
    def has_float_entry(self) -> bool:
        return self.float_input or self.float_output


def split_float_head(graph: Graph) -> tuple[Graph, tuple[str, ...]]:
    """`graph` without a leading float -> int8 QUANTIZE (the core then takes the int8 tensor as its input), and the
    ops taken off: ("QUANTIZE",) or ()."""
    if len(graph.inputs) != 1 or graph.tensors[graph.inputs[0]].dtype != "float32":
        return graph, ()
    readers = graph.consumers(graph.inputs[0])
    if len(readers) != 1 or readers[0].op is not Op.QUANTIZE:
        return graph, ()
    q = readers[0]
    if graph.tensors[q.outputs[0]].dtype != "int8" or q.outputs[0] in graph.outputs:
        return graph, ()
    nodes = tuple(n for n in graph.nodes if n.name != q.name)
    core = graph.replace(nodes=nodes, inputs=(q.outputs[0],))
    return drop_unused_tensors(core).verify(), ("QUANTIZE",)


def edge_source(edges: Edges, lib: LibraryOptions) -> str:
    """`<prefix>_invoke_float` for model.c: the float edges around the int8 invoke, through the header's inline
    quantize / dequantize helpers (kb_quantize.c)."""
    in_t = "float" if edges.float_input else "int8_t"
    out_t = "float" if edges.float_output else "int8_t"
    text = [f"void {lib.symbol('invoke_float')}(const {in_t} *input, {out_t} *output)", "{"]
    if edges.float_input:
        text += [f"    static int8_t q_in[{lib.macro('INPUT_BYTES')}];",
                 f"    {lib.symbol('quantize_input')}(input, q_in);"]
    if edges.float_output:
        text += [f"    static int8_t q_out[{lib.macro('OUTPUT_BYTES')}];"]
    text += [f"    {lib.symbol('invoke')}({'q_in' if edges.float_input else 'input'}, "
             f"{'q_out' if edges.float_output else 'output'});"]
    if edges.float_output:
        text += [f"    {lib.symbol('dequantize_output')}(q_out, output);"]
    return "\n".join(text + ["}", ""])
