"""Targets stage: when a model does not fit a device, the configuration that would — one line for `kilobyte compile`.

A model over a device's SRAM may fit it with a patch-based first stage (`--patch auto`, MCUNetV2), or fit a larger
part of the catalogue, with or without one. `suggest_fit` plans the model both ways (`estimate_resources`: exactly
the arena `kilobyte compile` would plan) and walks the catalogue from the device asked for upwards in SRAM, trying the
per-layer plan and then `--patch auto` on each: the first that fits is the suggestion. "Fits" counts what a linked
firmware holds besides the arena: the caller-owned input and output buffers, the firmware's stack reserve and
`FIRMWARE_SLACK_BYTES` of libc state (the bound `tests/targets/test_qemu_models.py` holds measured SRAM to), and
Flash from the Flash model of the device's core.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..schedule.estimate import estimate_resources
from ..schedule.inplace import planned_bytes
from ..units import kb
from .cortexm.firmware import DEFAULT_STACK_BYTES
from .devices import Device, list_devices

FIRMWARE_SLACK_BYTES = 2048  # SRAM of a linked firmware beyond arena, I/O buffers and stack (libc state, statics)


@dataclass(frozen=True)
class FitHint:
    """A configuration that fits: `device` planned with `patch` ("auto" or None, the per-layer plan)."""

    device: Device
    patch: str | None
    arena_bytes: int  # the planned arena (what `kilobyte compile` reports as SRAM arena)
    sram_bytes: int  # arena + input + output + stack reserve + slack: the firmware's SRAM, estimated
    flash_bytes: int  # the Flash model's estimate (for the largest of the calibrated cores: an upper bound)

    def text(self, asked: Device) -> str:
        """"try --patch auto --device stm32f746: plans at 181.5 kB of arena, fits STM32F746 (...)" — one line."""
        flags = [f"--patch {self.patch}"] if self.patch else []
        if self.device.name != asked.name:
            flags.append(f"--device {self.device.name.lower()}")
        return (f"try {' '.join(flags)}: plans at {kb(self.arena_bytes)} of arena, fits {self.device.name} (SRAM "
                f"~{kb(self.sram_bytes)} of {kb(self.device.sram_bytes)} with I/O buffers and stack, Flash "
                f"~{kb(self.flash_bytes)} of {kb(self.device.flash_bytes)}; estimates)")

    def to_json(self) -> dict:
        return {"device": self.device.name, "patch": self.patch, "arena_bytes": self.arena_bytes,
                "sram_bytes": self.sram_bytes, "flash_bytes": self.flash_bytes}


def suggest_fit(graph, options, asked: Device, devices_file: str | None = None) -> FitHint | None:
    """The first configuration that fits, from `asked` upwards in SRAM (per-layer plan, then `--patch auto`, on each
    device); None when nothing in the catalogue fits. `options`: the `PlanOptions` the model was compiled with (the
    kernel set and in-place rules are kept; only `patch` changes)."""
    hints = _hints(graph, options)
    bigger = [d for d in list_devices(devices_file) if d.sram_bytes >= asked.sram_bytes and d.name != asked.name]
    for device in [asked, *sorted(bigger, key=lambda d: (d.sram_bytes, d.flash_bytes))]:
        for patch, (arena, sram, flash) in hints.items():
            if device.name == asked.name and patch == options.patch:
                continue  # what was asked for already: it does not fit
            if sram <= device.sram_bytes and flash <= device.flash_bytes:
                return FitHint(device, patch, arena, sram, flash)
    return None


def _hints(graph, options) -> dict[str | None, tuple[int, int, int]]:
    """patch -> (arena, firmware SRAM, Flash) for the per-layer plan and `--patch auto` (when that plans a stage)."""
    io = sum(planned_bytes(graph, t) for t in (*graph.inputs, *graph.outputs))
    out = {}
    for patch in (None, "auto"):
        r = estimate_resources(graph, replace(options, patch=patch))  # core None: the largest Flash of the cores
        out[patch] = (r.arena_bytes, r.arena_bytes + io + DEFAULT_STACK_BYTES + FIRMWARE_SLACK_BYTES, r.flash_bytes)
    if out["auto"][0] >= out[None][0]:
        del out["auto"]  # auto found no stage that lowers the arena: nothing new to suggest
    return out
