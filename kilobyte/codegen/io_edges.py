"""Codegen stage: the model's edges in C — quantisation of the input, dequantisation of the output, and the float
entry point of an "int8 model with float interface".

The TFLite converter writes such models as float input -> QUANTIZE -> int8 core -> DEQUANTIZE -> float output.
`split_float_head` takes the leading QUANTIZE off (the C core runs int8 to int8, `kb_invoke`), `float_tail.py` each
output's DEQUANTIZE and the float ops after it. The header declares, for every model, the quantisation macros and
the inline `kb_quantize_input` / `kb_dequantize_output` helpers (int8 or uint8 edges, `header.py`); this module adds
`kb_invoke_float(input, outputs...)` (prefixed like every export) when the file's input is float (QUANTIZE head) or
an output is float: the model exactly as the file defines it, with float where the file has float and int8 / uint8
where it has those (a uint8 input is passed to kb_invoke as it is). Its int8 buffers are static.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph, Op
from ..transforms.edit import drop_unused_tensors
from .float_tail import FloatTail, tail_source
from .header import CTYPE, float_params, output_macro
from .library import LibraryOptions, output_name


@dataclass(frozen=True)
class Edges:
    """How the file's input and outputs relate to the int8 core: float_input (a QUANTIZE head was taken off) and
    each output's float tail (float_tail.py; no nodes for an output kb_invoke writes as the file has it)."""

    float_input: bool = False
    tails: tuple[FloatTail, ...] = ()

    @property
    def float_output(self) -> bool:
        return any(t.nodes for t in self.tails)

    @property
    def has_float_entry(self) -> bool:
        return self.float_input or self.float_output

    @property
    def families(self) -> set[str]:
        """The runtime families the float entry calls: kb_quantize.c, and kb_float_tail.c past a DEQUANTIZE."""
        if not self.has_float_entry:
            return set()
        return {"quantize"} | ({"float_tail"} if any(len(t.nodes) > 1 for t in self.tails) else set())


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


def edge_source(edges: Edges, lib: LibraryOptions, m: dict) -> str:
    """`<prefix>_invoke_float` for model.c (`m`: the manifest): the float edges around the int8 invoke — the header's
    inline quantize helper before it, each output's float tail after it (float_tail.py), in place on the caller's
    buffer. The int8 buffers between them are static."""
    outs, defs = m["outputs"], []
    text = [f"void {lib.symbol('invoke_float')}({', '.join(float_params(m))})", "{"]
    args = ["q_in" if edges.float_input else "input"]
    if edges.float_input:
        text += [f"    static int8_t q_in[{lib.macro('INPUT_BYTES')}];",
                 f"    {lib.symbol('quantize_input')}(input, q_in);"]
    steps = []
    for o, tail in zip(outs, edges.tails):
        p, macro = output_name(o, len(outs)), output_macro(lib, o, len(outs))
        if not tail.nodes:
            args.append(p)
            continue
        text.append(f"    static {CTYPE[o['dtype']]} q_{p}[{macro}_BYTES];")
        args.append(f"q_{p}")
        d, body = tail_source(tail, p, f"q_{p}", macro, f"tail_{p}")
        defs += d
        steps += [f"    {line}" for line in body]
    text += [f"    {lib.symbol('invoke')}({', '.join(args)});", *steps, "}", ""]
    return "\n".join(defs + ([""] if defs else []) + text)
