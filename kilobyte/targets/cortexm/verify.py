"""Targets stage (Cortex-M): verify and benchmark a compiled project on a QEMU board.

    report = verify_on_target("out/", "cortex-m4")   # QEMU output == numpy reference == host C, every input
    numbers = bench_on_target("out/", "cortex-m7")   # measured Flash / SRAM / stack, instructions, MACs

Both build the firmware first (`build_firmware`, so a `device` holds the link to that part's Flash and SRAM and a
model over budget raises `DoesNotFitError`). A fault, a lock-up or a timeout under QEMU is a one-line
`KilobyteError`, never a silent pass. Instruction counts come from unicorn (Cortex-M4/M7 only): for a Cortex-M55
build `bench_on_target` reports `instructions: None` with a note, and QEMU still measures the stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from kilobyte.errors import KilobyteError
from kilobyte.targets.devices import Device, get_device

from .firmware import build_firmware
from .icount import count_instructions
from .measure import measure
from .qemu import run_qemu
from .toolchain import get_board

NO_ICOUNT_NOTE = ("instruction counts are unavailable for cortex-m55: unicorn cannot run v8.1-M code (DLS/LE "
                  "loops); Flash, SRAM and the stack are still measured")


def resolve_target(target: str | None, device: str | Device | None,
                   devices_file: str | None = None) -> tuple[str, Device | None]:
    """The core to build for and the device (if any): `target` wins, else the device's own core.

    >>> resolve_target("Cortex-M7", None)
    ('cortex-m7', None)
    >>> resolve_target(None, "f746")[0]
    'cortex-m7'
    """
    dev = get_device(device, devices_file) if isinstance(device, str) else device
    if target is None:
        if dev is None:
            raise KilobyteError("give --target cortex-m4|cortex-m7|cortex-m55 (or a --device with one of these cores)")
        target = dev.core
    return get_board(target).core, dev


def _check_input(project: Path, x: np.ndarray, shape: tuple[int, ...]) -> None:
    if tuple(x.shape) != shape or x.dtype != np.int8:
        raise KilobyteError(f"{project}: input is {x.dtype}{list(x.shape)}, the model wants int8{list(shape)}")


def run_on_target(project, x: np.ndarray, target: str | None, *, device: str | Device | None = None,
                  kernels: str | None = None, timeout: float = 60):
    """Build the firmware and run one input under QEMU: (output in the manifest's shape, QemuResult)."""
    from kilobyte.codegen.host import manifest

    project = Path(project)
    m = manifest(project)
    _check_input(project, np.asarray(x), tuple(m["input"]["shape"]))
    target, dev = resolve_target(target, device)
    result = run_qemu(build_firmware(project, target, device=dev, kernels=kernels), x, timeout=timeout)
    return result.output.reshape(tuple(m["output"]["shape"])), result


def verify_on_target(project, target: str | None, *, device: str | Device | None = None, kernels: str | None = None,
                     n_random: int = 8, data: str | None = None, progress: bool = False, timeout: float = 60):
    """Run every verification input under QEMU; compare with the numpy reference and the host C build, bit for bit.
    A model with a float entry point runs that too, in the same firmware (`build_firmware(float_entry=True)`): its
    outputs are compared with the TFLite engine's run of the file (TFLite Micro, or TFLite's interpreter), integers
    bit for bit and floats within 1 ulp, or with the host C build's when neither is installed.

    Returns a `kilobyte.codegen.verify.VerifyReport` (engines qemu-<core>, c-host, reference); TFLite Micro and the
    sanitizer build are host checks (`verify_project`), so the report lists them as not run here.
    """
    from kilobyte.codegen import HostModel
    from kilobyte.codegen.host import manifest
    from kilobyte.codegen.verify import VerifyReport, file_input, flat_outputs, reference_graph, verify_inputs
    from kilobyte.interp import run_int8

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
    return report


def _float_checker(project: Path, m: dict, host, engine: str, report):
    """A function (input index, file input, firmware's file_output bytes) that adds the float entry point's
    mismatches to `report`; it compares with the TFLite engine on model.tflite, else with the host C build."""
    from kilobyte.codegen.host import unpack_file_outputs
    from kilobyte.codegen.verify import (
        file_output_mismatches,
        float_entry_note,
        oracle_run,
        project_tflite,
        reference_graph,
        tflite_engine,
    )

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


def bench_on_target(project, target: str | None, *, device: str | Device | None = None, kernels: str | None = None,
                    seed: int = 0, timeout: float = 120) -> dict[str, Any]:
    """Measured Flash / SRAM (from the ELF), stack high-water mark (QEMU) and instructions (unicorn) of one run.

    The input is random int8 (`seed`); QEMU's and unicorn's outputs must agree, else a KilobyteError.
    """
    from kilobyte.codegen.host import manifest

    project = Path(project)
    target, dev = resolve_target(target, device)
    m = manifest(project)
    build = build_firmware(project, target, device=dev, kernels=kernels)
    x = np.random.default_rng(seed).integers(-128, 128, tuple(m["input"]["shape"])).astype(np.int8)
    run = run_qemu(build, x, timeout=timeout)
    counts = None
    if build.board.unicorn_cpu is not None:
        counts = count_instructions(build, x, timeout=timeout)
        if not np.array_equal(counts.output, run.output):
            raise KilobyteError(f"{build.elf}: unicorn and QEMU produced different outputs on the same input")
    return _bench_dict(m, build, measure(build), run, counts)


def _bench_dict(m: dict, build, sizes: dict, run, counts) -> dict[str, Any]:
    macs = int(m["macs"])
    instructions = counts.total if counts else None
    return {
        "model": m.get("model"), "target": build.target, "machine": build.board.machine, "kernels": build.kernels,
        "device": build.device.name if build.device else None,
        "flash_bytes": sizes["flash_bytes"], "sram_bytes": sizes["sram_bytes"], "stack_bytes": run.stack_bytes,
        "instructions": instructions, "macs": macs,
        "instructions_per_mac": round(instructions / macs, 3) if instructions and macs else None,
        "per_layer_instructions": dict(counts.per_layer) if counts else None,
        "flash": {"weights": sizes["flash_weights_bytes"], "kernels": sizes["flash_kernel_bytes"],
                  "other": sizes["flash_other_bytes"], "limit": sizes["flash_limit_bytes"]},
        "sram": {"arena": sizes["sram_arena_bytes"], "stack_reserve": sizes["sram_stack_bytes"],
                 "other": sizes["sram_other_bytes"], "limit": sizes["sram_limit_bytes"]},
        "planned": {"arena_bytes": m["arena_bytes"], "peak_bytes": m["peak_bytes"]},
        "qemu_seconds": round(run.seconds, 3), "elf": str(build.elf),
        "note": None if counts else NO_ICOUNT_NOTE,
    }
