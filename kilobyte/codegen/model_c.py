"""Codegen stage: (int8 Graph, Plan) -> the text of `model.c` (the header is `header.py`'s).

`model.c` is data plus calls: constant arrays (Flash), one arena of exactly `plan.arena_bytes` (defined here, or by
the user with `arena_extern`), one non-inlined static function per layer named `kb_layer_<k>_<node>` (so
instruction counts can be attributed by symbol; a fused conv + ADD pair is one layer, named after the conv), and
`<prefix>_invoke()` calling them straight-line, with the patch stage (if any) as a generated loop over patches.
Only the arena and the invoke functions are exported, under the library's prefix (`library.py`).
"""

from __future__ import annotations

from ..errors import KilobyteError
from ..ir import Graph
from ..ops.c_text import c_ident
from ..ops.layer_code import Buffers, LayerCode
from .header import HEADER
from .layers import emit_conv_add, emit_node
from .library import LibraryOptions
from .patch_loop import emit_patch_stage


def output_offsets(graph: Graph) -> list[tuple[str, int]]:
    """(output, byte offset) in the one output buffer: the outputs back to back, in the graph's order (kb_invoke
    copies them so; model.h and the manifest give the same offsets)."""
    offsets, offset = [], 0
    for name in graph.outputs:
        offsets.append((name, offset))
        offset += graph.tensors[name].numel
    return offsets


def _arena(lib: LibraryOptions) -> list[str]:
    """The arena's definition (none with arena_extern: the user's, declared in the header), and KB_ARENA, its first
    byte, which the layers address. Test builds with KB_ARENA_GUARD put guard bytes around it."""
    arena, size = lib.symbol("arena"), lib.macro("ARENA_BYTES")
    mine = [f"int8_t {arena}[{size}] __attribute__((aligned({lib.macro('ARENA_ALIGN')})));"]
    return ["#if KB_ARENA_GUARD",
            f"int8_t {arena}_guarded[KB_ARENA_GUARD + {size} + KB_ARENA_GUARD] __attribute__((aligned(16)));",
            f"#define KB_ARENA ({arena}_guarded + KB_ARENA_GUARD)",
            "#else", *([] if lib.arena_extern else mine), f"#define KB_ARENA {arena}", "#endif"]


def _copies(graph: Graph, bufs: Buffers, params: list[str] | None) -> list[str]:
    """Copy each output from the arena to the caller's buffer: `output` (one) or its own pointer (several)."""
    if params is None:
        out = graph.outputs[0]
        return [f"    memcpy((int8_t *)output + 0, {bufs.ptr(out)}, {graph.tensors[out].numel});"]
    return [f"    memcpy({p}, {bufs.ptr(out)}, {graph.tensors[out].numel});" for p, out in zip(params, graph.outputs)]


def model_c(graph: Graph, plan, lib: LibraryOptions, signature: list[str],
            params: list[str] | None = None) -> tuple[str, set[str]]:
    """The text of model.c and the runtime kernel families it calls. `signature`: the invoke's parameters as model.h
    declares them, the input named `raw_input`; `params`: the output parameter names of a multi-output model
    (`library.output_params`), None for one output."""
    if len(graph.inputs) != 1 or not graph.outputs:
        raise KilobyteError(f"graph '{graph.name}': code generation needs exactly one input and an output")
    bufs = Buffers(graph, plan)
    decls, funcs, calls, families = [], [], [], set()
    by_name = {n.name: n for n in graph.nodes}
    stage = plan.patch
    if stage is not None:
        code = emit_patch_stage(graph, plan, bufs)
        _add(code, "kb_patch_stage", decls, funcs, families)
        calls.append("    kb_patch_stage(input);")
    fused = plan.fused  # conv -> ADD run as one layer: the ADD emits nothing
    skip = (set(stage.nodes) if stage is not None else set()) | set(fused.values())
    for k, name in enumerate(plan.order):
        if name in skip:
            continue
        fn = f"kb_layer_{k}_{c_ident(name)}"
        node = by_name[name]
        code = emit_conv_add(graph, node, by_name[fused[name]], bufs, plan) if name in fused else \
            emit_node(graph, node, bufs, plan)
        _add(code, fn, decls, funcs, families)
        calls.append(f"    {fn}(input);")
    text = "\n".join([
        HEADER, "#include <string.h>", "", '#include "kilobyte.h"', f'#include "{lib.header}"', "",
        *_arena(lib), "", *decls, "", *funcs,
        f"void {lib.symbol('invoke')}({', '.join(signature)})", "{",
        "    const int8_t *input = (const int8_t *)raw_input;  /* the layers take bytes (a uint8 input: QUANTIZE) */",
        *calls, *_copies(graph, bufs, params), "}", "",
    ])
    return text, families


def _add(code: LayerCode, fn: str, decls: list, funcs: list, families: set) -> None:
    decls.extend(code.decls)
    families.update(code.families)
    body = "\n".join("    " + line for stmt in code.body for line in stmt.split("\n"))
    funcs.append(f"static void {fn}(const int8_t *input) __attribute__((noinline));\n"
                 f"static void {fn}(const int8_t *input)\n{{\n    (void)input;\n{body}\n}}\n")
