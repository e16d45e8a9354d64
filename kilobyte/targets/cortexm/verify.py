"""Targets stage (Cortex-M): run and benchmark a compiled project on a QEMU board.

    y, run = run_on_target("out/", x, "cortex-m4")   # one input under QEMU
    numbers = bench_on_target("out/", "cortex-m7")   # measured Flash / SRAM / stack, instructions, MACs

Both build the firmware first (`build_firmware`, so a `device` holds the link to that part's Flash and SRAM and a
model over budget raises `DoesNotFitError`). A fault, a lock-up or a timeout under QEMU is a one-line
`KilobyteError`, never a silent pass. Instruction counts come from unicorn (Cortex-M4/M7 only): for a Cortex-M55
build `bench_on_target` reports `instructions: None` with a note, and QEMU still measures the stack. Verifying a
project on the board against the reference and TFLite is the driver's (`kilobyte.driver.verify_target`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kilobyte.errors import KilobyteError
from kilobyte.formats.project import manifest
from kilobyte.targets.devices import Device, get_device

from .cycles import cycle_model
from .firmware import build_firmware
from .icount import count_instructions
from .measure import measure
from .qemu import run_qemu
from .toolchain import BOARDS, get_board

CYCLE_MODEL_NOTE = ("modelled {target} cycles at zero wait states: each executed instruction priced by Arm's "
                    "timings plus a pipeline refill per taken branch (kilobyte/targets/cortexm/cycles.py)")
BEAT_MODEL_NOTE = ("modelled {target} cycles at zero wait states (the beat model, kilobyte/targets/cortexm/cycles.py: "
                   "Helium instructions hold their unit for 2 cycles, instructions on other units overlap, scalar "
                   "ones cost 1; no data-dependence stalls); instructions counted under QEMU by kilobyte's TCG plugin")


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
            raise KilobyteError(f"give --target {'|'.join(BOARDS)} (or a --device with one of these cores)")
        target = dev.core
    return get_board(target).core, dev


def _check_input(project: Path, x: np.ndarray, shape: tuple[int, ...]) -> None:
    if tuple(x.shape) != shape or x.dtype != np.int8:
        raise KilobyteError(f"{project}: input is {x.dtype}{list(x.shape)}, the model wants int8{list(shape)}")


def run_on_target(project, x: np.ndarray, target: str | None, *, device: str | Device | None = None,
                  kernels: str | None = None, timeout: float = 60):
    """Build the firmware and run one input under QEMU: (output in the manifest's shape, QemuResult)."""

    project = Path(project)
    m = manifest(project)
    _check_input(project, np.asarray(x), tuple(m["input"]["shape"]))
    target, dev = resolve_target(target, device)
    result = run_qemu(build_firmware(project, target, device=dev, kernels=kernels), x, timeout=timeout)
    return result.output.reshape(tuple(m["output"]["shape"])), result


def bench_on_target(project, target: str | None, *, device: str | Device | None = None, kernels: str | None = None,
                    seed: int = 0, timeout: float = 120) -> dict[str, Any]:
    """Measured Flash / SRAM (from the ELF), stack high-water mark (QEMU) and instructions of one run: by unicorn,
    with the cycles they model, on the cores it runs; else (Cortex-M55) by Kilobyte's QEMU plugin, with the beat
    model's cycles.

    The input is random int8 (`seed`); QEMU's and unicorn's outputs must agree, else a KilobyteError.
    """

    project = Path(project)
    target, dev = resolve_target(target, device)
    m = manifest(project)
    build = build_firmware(project, target, device=dev, kernels=kernels)
    x = np.random.default_rng(seed).integers(-128, 128, tuple(m["input"]["shape"])).astype(np.int8)
    run = run_qemu(build, x, timeout=timeout, count=build.board.unicorn_cpu is None)
    counts = None
    if build.board.unicorn_cpu is not None:
        counts = count_instructions(build, x, timeout=timeout)
        if not np.array_equal(counts.output, run.output):
            raise KilobyteError(f"{build.elf}: unicorn and QEMU produced different outputs on the same input")
    return _bench_dict(m, build, measure(build), run, counts)


def _bench_dict(m: dict, build, sizes: dict, run, counts) -> dict[str, Any]:
    macs = int(m["macs"])
    instructions = counts.total if counts else run.instructions
    per_layer = dict(counts.per_layer) if counts else run.per_layer
    has_model = cycle_model(build.target) is not None
    cycles = (counts.cycles if counts else run.cycles) if has_model else None
    note = CYCLE_MODEL_NOTE if counts else BEAT_MODEL_NOTE
    return {
        "model": m.get("model"), "target": build.target, "machine": build.board.machine, "kernels": build.kernels,
        "device": build.device.name if build.device else None,
        "flash_bytes": sizes["flash_bytes"], "sram_bytes": sizes["sram_bytes"], "stack_bytes": run.stack_bytes,
        "instructions": instructions, "macs": macs,
        "instructions_per_mac": round(instructions / macs, 3) if instructions and macs else None,
        "per_layer_instructions": per_layer,
        "cycles": cycles, "cycles_per_mac": round(cycles / macs, 3) if cycles and macs else None,
        "per_layer_cycles": (dict(counts.per_layer_cycles) if counts else run.per_layer_cycles) if has_model else None,
        "cycle_model": note.format(target=build.target) if cycles is not None else None,
        "flash": {"weights": sizes["flash_weights_bytes"], "kernels": sizes["flash_kernel_bytes"],
                  "other": sizes["flash_other_bytes"], "limit": sizes["flash_limit_bytes"]},
        "sram": {"arena": sizes["sram_arena_bytes"], "stack_reserve": sizes["sram_stack_bytes"],
                 "other": sizes["sram_other_bytes"], "limit": sizes["sram_limit_bytes"]},
        "planned": {"arena_bytes": m["arena_bytes"], "peak_bytes": m["peak_bytes"]},
        "qemu_seconds": round(run.seconds, 3), "elf": str(build.elf),
    }
