"""Codegen stage: (int8 Graph, Plan) -> a self-contained C project (data + calls into `kilobyte/runtime/c`).

`compile_graph` is the whole stage: split off a float tail (DEQUANTIZE -> SOFTMAX stays on the host: the C model
ends at the int8 logits), plan memory with `kilobyte.schedule`, generate `model.c`/`model.h` plus only the runtime
files used, a host harness and a Makefile, and write a manifest. `HostModel` loads the result for fast checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import KilobyteError
from ..ir import Graph, Op
from .host import HostModel, build_executable, run_compiled, run_executable
from .io_edges import Edges, split_float_head
from .library import ARENA_ALIGN, LibraryOptions, is_classifier, output_params
from .project import write_project

__all__ = ["CompileResult", "HostModel", "LibraryOptions", "build_executable", "compile_graph", "run_compiled",
           "run_executable", "split_float_head", "split_float_tail"]

FLOAT_TAIL_OPS = (Op.DEQUANTIZE, Op.SOFTMAX)


@dataclass(frozen=True)
class CompileResult:
    out_dir: Path
    graph: Graph  # the int8 graph the C code implements (float tail removed)
    plan: object
    tail: tuple[str, ...]  # ops left to the host after the C model (e.g. ("DEQUANTIZE", "SOFTMAX"))
    manifest: dict


def split_float_tail(graph: Graph) -> tuple[Graph, tuple[str, ...]]:
    """The int8 part of `graph` (ending at the last int8 tensor) and the names of the float ops cut off."""
    from ..transforms.edit import drop_unused_tensors

    if len(graph.outputs) > 1:  # detection heads: every output int8, written back to back (model_c.py)
        floats = [t for t in graph.outputs if graph.tensors[t].dtype not in ("int8", "uint8")]
        if floats or len(set(graph.outputs)) != len(graph.outputs) or set(graph.outputs) & set(graph.inputs):
            raise KilobyteError(f"graph '{graph.name}': with several outputs each must be a distinct int8 tensor "
                                f"produced by the model ({(floats or list(graph.outputs))[0]} is not)")
        return graph, ()
    out, tail, cut = graph.outputs[0], [], set()
    while graph.tensors[out].dtype not in ("int8", "uint8"):
        node = graph.producer(out)
        if node is None or node.op not in FLOAT_TAIL_OPS:
            raise KilobyteError(f"graph '{graph.name}': output '{out}' is float and not a DEQUANTIZE/SOFTMAX tail; "
                                "quantise the model first (kilobyte quantize)")
        tail.insert(0, node.op.value)
        cut.add(node.name)
        out = node.inputs[0]
    kept = tuple(n for n in graph.nodes if n.name not in cut)  # only the tail walked, not every such op
    return drop_unused_tensors(graph.replace(nodes=kept, outputs=(out,))).verify(), tuple(tail)


def _io(graph: Graph, name: str) -> dict:
    t = graph.tensors[name]
    return {"name": name, "shape": list(t.shape), "dtype": t.dtype, "scale": float(t.qparams.scale[0]),
            "zero_point": int(t.qparams.zero_point[0])}


def _outputs(graph: Graph) -> list[dict]:
    """Every output with its byte offset in the one output buffer (model_c.output_offsets) and its parameter name
    in the invoke (`output`, or with several outputs one pointer each, named after them)."""
    from .model_c import output_offsets

    params = output_params(graph.outputs) if len(graph.outputs) > 1 else ["output"]
    return [{**_io(graph, name), "offset": offset, "param": param}
            for (name, offset), param in zip(output_offsets(graph), params)]


def _library(lib: LibraryOptions, outputs: list[dict], float_entry: bool) -> dict:
    """The manifest's description of the C library: prefix, file names, arena ownership, exported symbols."""
    exports = [lib.symbol("invoke")] + ([] if lib.arena_extern else [lib.symbol("arena")]) + \
        ([lib.symbol("invoke_float")] if float_entry else [])
    return {"prefix": lib.prefix, "header": f"src/{lib.header}", "source": f"src/{lib.source}",
            "arena_align": ARENA_ALIGN, "arena_extern": lib.arena_extern, "target": lib.target,
            "argmax": is_classifier(outputs), "exports": exports}


def _tflite_copy(graph: Graph) -> bytes | None:
    """`graph` as `.tflite` bytes for the project, or None when the `[tflite]` extra (flatbuffers, tflite) is not
    installed: compiling needs only the core install; `kilobyte verify` needs the copy and says so."""
    try:
        from ..export.tflite import to_tflite
    except ImportError as e:
        if e.name in ("flatbuffers", "tflite"):
            return None
        raise
    return to_tflite(graph)


def compile_graph(graph: Graph, out_dir, options=None, *, model_name: str = "model",
                  library: LibraryOptions | None = None) -> CompileResult:
    """Plan and generate the C project for an int8 graph into `out_dir` (atomically); `library` names its exports
    and files (default prefix "kb"). The project's `model.tflite` is written only when the `[tflite]` extra is
    installed (the manifest's "tflite" is null otherwise)."""
    from ..quant.check import check_int8
    from ..schedule.plan import make_plan, plan_to_dict
    from ..schedule.plan_types import PlanOptions

    headless, head = split_float_head(graph)
    core, tail = split_float_tail(headless)
    edges = Edges(float_input=bool(head), float_output=tail == ("DEQUANTIZE",))
    if edges.has_float_entry and len(core.outputs) > 1:
        raise KilobyteError(f"graph '{graph.name}': a float interface with several outputs is not supported")
    if len(core.inputs) != 1 or core.tensors[core.inputs[0]].dtype not in ("int8", "uint8"):
        raise KilobyteError(f"graph '{graph.name}': code generation needs one int8 (or uint8) input; quantise the "
                            "model first")
    check_int8(core)
    plan = make_plan(core, options or PlanOptions())
    summary = plan_to_dict(plan)
    outputs = _outputs(core)
    manifest = {
        "model": model_name, "input": _io(core, core.inputs[0]), "output": _io(core, core.outputs[0]),
        "outputs": outputs, **_library(library or LibraryOptions(), outputs, edges.has_float_entry),
        "float_tail": list(tail), "arena_bytes": plan.arena_bytes, "peak_bytes": plan.peak_bytes,
        "scratch_bytes": plan.scratch_bytes, "input_bytes": plan.input_bytes, "macs": plan.macs,
        "patch": summary.get("patch"), "order": list(plan.order), "kernel_set": plan.options.kernels,
        "float_head": list(head), "float_entry": edges.has_float_entry,
    }
    path = write_project(out_dir, core, plan, manifest, _tflite_copy(graph), edges)
    return CompileResult(path, core, plan, tail, json.loads((path / "kilobyte.json").read_text()))
