"""Driver stage: a loaded model to a C project — quantise, plan, generate — and a compiled graph checked bit for bit.

`compile_model` is `kilobyte compile` without the printing; `compile_checked` compiles an int8 graph and proves the
result (host C == reference == TFLite Micro, and with a target the same under QEMU plus its instruction counts), as
`kilobyte prune` does for a pruned model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..codegen import compile_graph
from ..errors import KilobyteError
from ..ir import Graph
from ..quant import quantize as quantize_graph
from ..schedule.plan_types import PlanOptions
from ..targets.cortexm.verify import bench_on_target
from .load import LoadedModel, calibration_inputs
from .verify import VerifyReport, verify_project
from .verify_target import verify_on_target


def quantize(model: LoadedModel, dataset_spec: str, *, samples: int = 64, method: str = "minmax") -> Graph:
    """Post-training int8 quantisation of a float model with calibration images from a dataset."""
    if model.is_int8:
        return model.graph
    shape = model.graph.tensors[model.graph.inputs[0]].shape
    return quantize_graph(model.graph, calibration_inputs(dataset_spec, shape, samples), method=method)


def compile_model(model: LoadedModel, out_dir, *, data: str | None = None, samples: int = 64, patch=None,
                  inplace: bool = True, conv_columns: str = "free", kernels: str = "portable",
                  max_mac_overhead: float | None = 0.2, library=None, detect=None):
    """Quantise (float models need `data`), plan and generate the C project; returns a `CompileResult`.
    `kernels`: the kernel set the plan is for ("portable", or "dsp" for the Cortex-M DSP kernels): its scratch is
    what that set reads, and firmware builds of the project default to it. conv_columns="wide" gives every DSP conv
    six im2col columns even where that raises the SRAM peak (faster); "free" (default) only from bytes free anyway.
    `max_mac_overhead`: with patch="auto", the most extra MACs the patch stage may cost (None: no limit).
    `library`: a `codegen.LibraryOptions` (prefix of exported names, arena ownership, Arm target of the build files).
    `detect`: an `ops.detect_post.DetectConfig` for a detector, whose library then decodes its boxes too."""
    if not model.is_int8 and data is None:
        raise KilobyteError(f"model '{model.source}' is float: give calibration data with --data "
                            "(mnist, digits, letters, a .npz or an image folder)")
    graph = quantize(model, data, samples=samples) if not model.is_int8 else model.graph
    opts = PlanOptions(inplace_depthwise=inplace, inplace_add=inplace, alias_reshape=inplace,
                       concat_in_place=inplace, fuse_add=inplace, patch=patch, conv_columns=conv_columns,
                       kernels=kernels, max_mac_overhead=max_mac_overhead)
    name = Path(model.source).stem if model.source.endswith((".onnx", ".tflite")) else model.source
    return compile_graph(graph, out_dir, opts, model_name=name, library=library, detect=detect)


@dataclass
class CheckedBuild:
    """An int8 graph compiled and checked (`compile_checked`)."""

    compiled: object  # the `codegen.CompileResult`
    host: VerifyReport  # host C == numpy reference == TFLite Micro
    target: VerifyReport | None = None  # with a target: the QEMU report ...
    bench: dict | None = None  # ... and `bench_on_target`'s numbers (instructions, measured Flash / SRAM)


def compile_checked(graph: Graph, out_dir, data: str, *, name: str = "model", kernels: str = "portable",
                    target: str | None = None, n_random: int = 2, what: str = "pruned model") -> CheckedBuild:
    """Compile an int8 `graph` (its weight formats set: FWCS, CSR or dense) into `out_dir` as `compile_model` does,
    verify the host build against the reference and TFLite Micro on `n_random` random inputs and images of `data`;
    with `target` (a Cortex-M core) also under QEMU and count its instructions (unicorn). A differing byte raises a
    `KilobyteError` naming `what` was compiled. Returns a `CheckedBuild`."""
    compiled = compile_model(LoadedModel(name, graph), out_dir, kernels=kernels)
    host = verify_project(compiled.out_dir, n_random=n_random, data=data)
    _check_verified(host, compiled.out_dir, what, "host")
    if target is None:
        return CheckedBuild(compiled, host)
    on_target = verify_on_target(compiled.out_dir, target, n_random=n_random, data=data)
    _check_verified(on_target, compiled.out_dir, what, target)
    return CheckedBuild(compiled, host, on_target, bench_on_target(compiled.out_dir, target))


def _check_verified(report: VerifyReport, out_dir, what: str, where: str) -> None:
    if not report.ok:
        raise KilobyteError(f"{out_dir}: the {what}'s {where} build is not bit-exact ({report.mismatches[0]}; "
                            f"{len(report.mismatches)} mismatches); the project is left there to inspect — please "
                            "report this")
