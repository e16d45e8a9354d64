"""Codegen stage: the model's edges in C — quantisation of the input, dequantisation of the output, and the float
entry point of an "int8 model with float interface".

The TFLite converter writes such models as float input -> QUANTIZE -> int8 core -> DEQUANTIZE -> float output.
`split_float_head` takes the leading QUANTIZE off (the C core runs int8 to int8, `kb_invoke`); `model.h` then also
declares, from the same quantisation parameters as `kilobyte.json`:
- `KB_INPUT_SCALE`, `KB_INPUT_ZERO_POINT`, `KB_OUTPUT_SCALE`, `KB_OUTPUT_ZERO_POINT`;
- `kb_quantize_input(const float *x, int8_t *q)` and `kb_dequantize_output(const int8_t *q, float *y)`, TFLite's
  QUANTIZE and DEQUANTIZE bit for bit (`kb_quantize.c`), for every model;
- `kb_invoke_float(input, output)` when the file's input is float (QUANTIZE head) or its output is a DEQUANTIZE:
  the model exactly as the file defines it, with float where the file has float. Its int8 buffers are static.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..interp.int8_ref import tensor_qparams
from ..ir import Graph, Op
from ..transforms.edit import drop_unused_tensors


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


def edge_header(graph: Graph, edges: Edges) -> list[str]:
    """Lines of model.h: the input/output quantisation and the edge functions."""
    (si, zi), (so, zo) = tensor_qparams(graph, graph.inputs[0]), tensor_qparams(graph, graph.outputs[0])
    in_t = "float" if edges.float_input else "int8_t"
    out_t = "float" if edges.float_output else "int8_t"
    lines = [
        f"#define KB_INPUT_SCALE       {float(si)!r}f  /* real = scale * (q - zero_point) */",
        f"#define KB_INPUT_ZERO_POINT  {zi}",
        f"#define KB_OUTPUT_SCALE      {float(so)!r}f",
        f"#define KB_OUTPUT_ZERO_POINT {zo}",
        "",
        "/* TFLite's QUANTIZE of KB_INPUT_BYTES floats, and DEQUANTIZE of KB_OUTPUT_BYTES int8 outputs. */",
        "void kb_quantize_input(const float *x, int8_t *q);",
        "void kb_dequantize_output(const int8_t *q, float *y);",
    ]
    if edges.has_float_entry:
        lines += ["", "/* The model as its file defines it (float where the file has float). Not reentrant. */",
                  f"void kb_invoke_float(const {in_t} *input, {out_t} *output);"]
    return lines


def edge_source(edges: Edges) -> str:
    """The edge functions' definitions for model.c (they call kb_quantize.c)."""
    text = [
        "void kb_quantize_input(const float *x, int8_t *q)",
        "{",
        "    kb_quantize(KB_INPUT_BYTES, x, KB_INPUT_SCALE, KB_INPUT_ZERO_POINT, q);",
        "}",
        "",
        "void kb_dequantize_output(const int8_t *q, float *y)",
        "{",
        "    kb_dequantize(KB_OUTPUT_BYTES, q, KB_OUTPUT_SCALE, KB_OUTPUT_ZERO_POINT, y);",
        "}",
        "",
    ]
    if edges.has_float_entry:
        in_t = "float" if edges.float_input else "int8_t"
        out_t = "float" if edges.float_output else "int8_t"
        text += [f"void kb_invoke_float(const {in_t} *input, {out_t} *output)", "{"]
        if edges.float_input:
            text += ["    static int8_t q_in[KB_INPUT_BYTES];", "    kb_quantize_input(input, q_in);"]
        if edges.float_output:
            text += ["    static int8_t q_out[KB_OUTPUT_BYTES];"]
        text += [f"    kb_invoke({'q_in' if edges.float_input else 'input'}, "
                 f"{'q_out' if edges.float_output else 'output'});"]
        if edges.float_output:
            text += ["    kb_dequantize_output(q_out, output);"]
        text += ["}", ""]
    return "\n".join(text)
