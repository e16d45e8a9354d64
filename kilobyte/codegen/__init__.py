"""Codegen stage: (int8 Graph, Plan) -> a self-contained C project (data + calls into `kilobyte/runtime/c`).

`compile_graph` is the whole stage: split off the float edges (a float input's QUANTIZE; each output's DEQUANTIZE and
the float ops after it, e.g. SOFTMAX: `kb_invoke` ends at the int8 tensors, `<prefix>_invoke_float` runs the rest in
C), plan memory with `kilobyte.schedule`, generate `model.c`/`model.h` plus only the runtime
files used, a host harness and a Makefile, and write a manifest. `HostModel` loads the result for fast checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import KilobyteError
from ..formats.project import symbol
from ..ir import Graph
from ..ops.detect_post import DetectConfig, manifest_spec
from ..quant.check import check_int8
from ..schedule.plan import make_plan, plan_to_dict
from ..schedule.plan_types import PlanOptions
from .float_tail import FloatTail, split_float_tail
from .host import HostModel, build_executable, run_compiled, run_executable
from .io_edges import Edges, split_float_head
from .library import ARENA_ALIGN, LibraryOptions, is_classifier, output_params
from .model_c import output_offsets
from .project import write_project

__all__ = ["CompileResult", "HostModel", "LibraryOptions", "build_executable", "compile_graph", "run_compiled",
           "run_executable", "split_float_head", "split_float_tail"]


@dataclass(frozen=True)
class CompileResult:
    """The project written, the int8 graph `kb_invoke` implements (float head and tails removed), its plan, and
    `tail`: the float ops `<prefix>_invoke_float` runs in C after the core, every output's in order (e.g.
    ("DEQUANTIZE", "SOFTMAX")); each output's own are in manifest["outputs"][k]["tail"]."""

    out_dir: Path
    graph: Graph
    plan: object
    tail: tuple[str, ...]
    manifest: dict


def _io(graph: Graph, name: str) -> dict:
    t = graph.tensors[name]
    return {"name": name, "shape": list(t.shape), "dtype": t.dtype, "scale": float(t.qparams.scale[0]),
            "zero_point": int(t.qparams.zero_point[0])}


def _outputs(graph: Graph, tails: tuple[FloatTail, ...], shapes: dict) -> list[dict]:
    """Every output of kb_invoke with its byte offset in the one output buffer (model_c.output_offsets), its
    parameter name in the invokes (`output`, or with several outputs one pointer each, named after them), and the
    file's output it becomes (name, dtype, shape, the float ops of its tail: what `<prefix>_invoke_float` gives)."""

    params = output_params(graph.outputs) if len(graph.outputs) > 1 else ["output"]
    outs = [{**_io(graph, name), "offset": offset, "param": param, "file_name": t.output,
             "file_dtype": "float32" if t.nodes else graph.tensors[name].dtype,
             "file_shape": list(shapes[t.output]), "tail": list(t.ops)}
            for (name, offset), param, t in zip(output_offsets(graph), params, tails)]
    at = 0  # the float entry's outputs back to back in one byte buffer, each at a multiple of 4 (a float's align)
    for o in outs:
        o["file_offset"] = at
        at += _padded_bytes(graph.tensors[o["name"]].numel, o["file_dtype"])
    return outs


def _padded_bytes(numel: int, dtype: str) -> int:
    """Bytes of `numel` values of `dtype` (float32: 4 each) rounded up to a multiple of 4."""
    return -(-numel * (4 if dtype == "float32" else 1) // 4) * 4


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
        from ..export.tflite import to_tflite  # defers tflite
    except ImportError as e:
        if e.name in ("flatbuffers", "tflite"):
            return None
        raise
    return to_tflite(graph)


def compile_graph(graph: Graph, out_dir, options=None, *, model_name: str = "model",
                  library: LibraryOptions | None = None, detect: DetectConfig | None = None) -> CompileResult:
    """Plan and generate the C project for an int8 graph into `out_dir` (atomically); `library` names its exports
    and files (default prefix "kb"). The project's `model.tflite` is written only when the `[tflite]` extra is
    installed (the manifest's "tflite" is null otherwise). With `detect`, the outputs are a detector's heads and the
    library gains `<prefix>_detections` (`detect_c.py`)."""

    headless, head = split_float_head(graph)
    core, tails = split_float_tail(headless)
    edges = Edges(float_input=bool(head), tails=tails)
    tail = tuple(op for t in tails for op in t.ops)
    if len(core.inputs) != 1 or core.tensors[core.inputs[0]].dtype not in ("int8", "uint8"):
        raise KilobyteError(f"graph '{graph.name}': code generation needs one int8 (or uint8) input; quantise the "
                            "model first")
    check_int8(core)
    plan = make_plan(core, options or PlanOptions())
    summary = plan_to_dict(plan)
    outputs = _outputs(core, tails, {t: graph.tensors[t].shape for t in graph.outputs})
    manifest = {
        "model": model_name, "input": _io(core, core.inputs[0]), "output": _io(core, core.outputs[0]),
        "outputs": outputs, **_library(library or LibraryOptions(), outputs, edges.has_float_entry),
        "float_tail": list(tail), "arena_bytes": plan.arena_bytes, "peak_bytes": plan.peak_bytes,
        "scratch_bytes": plan.scratch_bytes, "input_bytes": plan.input_bytes, "macs": plan.macs,
        "patch": summary.get("patch"), "order": list(plan.order), "kernel_set": plan.options.kernels,
        "float_head": list(head), "float_entry": edges.has_float_entry,
        "file_input_bytes": core.tensors[core.inputs[0]].numel * (4 if head else 1),
        "file_output_bytes": sum(_padded_bytes(core.tensors[o["name"]].numel, o["file_dtype"]) for o in outputs),
    }
    if detect is not None:
        if edges.has_float_entry or any(o["dtype"] != "int8" for o in outputs):
            raise KilobyteError(f"graph '{graph.name}': detection post-processing reads int8 head outputs; this "
                                f"model's outputs are {[o['file_dtype'] for o in outputs]}")
        manifest["detect"] = detect.to_json()
        manifest_spec(manifest)  # checks the heads against the outputs: a one-line error before anything is written
        manifest["exports"].append(symbol(manifest["prefix"], "detections"))
    path = write_project(out_dir, core, plan, manifest, _tflite_copy(graph), edges)
    return CompileResult(path, core, plan, tail, json.loads((path / "kilobyte.json").read_text()))
