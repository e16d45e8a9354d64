"""Driver stage: verify a compiled project on a Cortex-M board under QEMU, as `verify.py` does on the host.

    report = verify_on_target("out/", "cortex-m4")   # QEMU output == numpy reference == host C, every input

The firmware is built first (`targets.cortexm.build_firmware`, so a `device` holds the link to that part's Flash and
SRAM and a model over budget raises `DoesNotFitError`). A fault, a lock-up or a timeout under QEMU is a one-line
`KilobyteError`, never a silent pass. Running one input and benchmarking a build stay in `targets.cortexm.verify`;
this module compares the board with the reference, the host build and the TFLite engines, so it sits above them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..codegen import HostModel
from ..codegen.host import unpack_file_outputs
from ..formats.project import manifest
from ..interp import run_int8
from ..targets.cortexm.firmware import build_firmware
from ..targets.cortexm.qemu import run_qemu
from ..targets.cortexm.verify import resolve_target
from ..targets.devices import Device
from .verify import (
    VerifyReport,
    detection_mismatches,
    detections_note,
    file_input,
    file_output_mismatches,
    flat_outputs,
    float_entry_note,
    oracle_run,
    project_tflite,
    reference_graph,
    tflite_engine,
    verify_inputs,
)


def verify_on_target(project, target: str | None, *, device: str | Device | None = None, kernels: str | None = None,
                     n_random: int = 8, data: str | None = None, progress: bool = False, timeout: float = 60):
    """Run every verification input under QEMU; compare with the numpy reference and the host C build, bit for bit.
    A model with a float entry point runs that too, in the same firmware (`build_firmware(float_entry=True)`): its
    outputs are compared with the TFLite engine's run of the file (TFLite Micro, or TFLite's interpreter), integers
    bit for bit and floats within 1 ulp, or with the host C build's when neither is installed.

    Returns a `VerifyReport` (engines qemu-<core>, c-host, reference); TFLite Micro and the
    sanitizer build are host checks (`verify_project`), so the report lists them as not run here.
    """
    project = Path(project)
    target, dev = resolve_target(target, device)
    core, _ = reference_graph(project)
    m = manifest(project)
    floats = bool(m.get("float_entry"))
    build = build_firmware(project, target, device=dev, kernels=kernels, float_entry=floats)
    host = HostModel(project)
    xs = verify_inputs(project, n_random, data)
    engine = f"qemu-{build.target}"
    host_only = "a host check: run `kilobyte verify DIR` without --target"
    report = VerifyReport(len(xs), (engine, "c-host", "reference"), target=build.target, stack_bytes=0,
                          not_run={"tflm": host_only, "sanitizer": host_only})
    check_float = _float_checker(project, m, host, engine, report) if floats else None
    for i, x in enumerate(tqdm(xs, desc=f"verify {target}", unit="input", disable=not progress, leave=False)):
        want = flat_outputs(run_int8(core, x), core.outputs)  # every output, back to back (int8 or uint8)
        feed = file_input(m, x) if floats else None
        run = run_qemu(build, x, timeout=timeout, file_input=feed)
        report.stack_bytes = max(report.stack_bytes, run.stack_bytes)
        for name, y in ((engine, run.output.reshape(-1).view(want.dtype)), ("c-host", host(x).reshape(-1))):
            if not np.array_equal(y, want):
                report.mismatches.append(f"input {i}: {name} differs from the reference in "
                                         f"{int(np.sum(y != want))} values")
        if check_float is not None:
            check_float(i, feed, run.file_output)
        if m.get("detect"):
            report.mismatches += detection_mismatches(m, want, run.detections, engine, i)
            report.mismatches += detection_mismatches(m, want, host.detections(x), "c-host", i)
    report.detections = detections_note(m, f"{engine} == c-host", len(xs))
    return report


def _float_checker(project: Path, m: dict, host, engine: str, report):
    """A function (input index, file input, firmware's file_output bytes) that adds the float entry point's
    mismatches to `report`; it compares with the TFLite engine on model.tflite, else with the host C build."""
    oracle, _ = tflite_engine(reference_graph(project)[0])
    tfl = project_tflite(project)
    names = [o["file_name"] for o in m["outputs"]]
    note = float_entry_note(m, oracle or "the host C build", report.inputs)
    report.float_entry = f"{note} under QEMU ({engine})"

    def check(i: int, feed: np.ndarray, raw: bytes) -> None:
        want = oracle_run(oracle, tfl, feed, names) if oracle else host.float_outputs(feed)
        report.mismatches.extend(file_output_mismatches(m, unpack_file_outputs(m, raw), want,
                                                        f"{engine} float entry", i))
    return check
