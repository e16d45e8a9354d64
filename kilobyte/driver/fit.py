"""Driver stage: does a compiled library fit a device — from the plan's estimate, or measured on linked firmware.

`fit_report` is the plan's figures: SRAM = the planned arena (scratch included), Flash = the Flash model's estimate
of the linked firmware for the device's core (`schedule/flash.py`: weights exact, the rest measured on ELF files).
`measured_fit` replaces them with the MEASURED sizes when the firmware can be built — a device with a Cortex-M4/M7/M55
core, arm-none-eabi-gcc and pyelftools installed: it is linked into the device's Flash and SRAM and its sizes read
from the ELF, and a link overflow is a verdict of its own with the linker's numbers. `device_fit` does both, as
`kilobyte compile`, `kilobyte prune` and a search's deployment report the fit. Without a device nothing is checked:
`fits` is None rather than a claim. `suggested` adds what would fit instead (`targets.fit_hint`).

Each result is a frozen dataclass read by attribute; `to_dict()` is the JSON the commands print and keep in their
report.json files (its keys and their order are part of the interface).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace

from ..errors import DoesNotFitError, KilobyteError
from ..schedule.estimate import estimate_resources
from ..targets.cortexm import BOARDS, build_firmware, measure
from ..targets.cortexm.toolchain import arm_gcc
from ..targets.fit_hint import FitHint, suggest_fit
from ..units import kb

NO_DEVICE_TEXT = "fit not checked: no --device (`kilobyte devices` lists the catalogue)"
NOTHING_FITS_TEXT = ("nothing in the device catalogue fits it, with or without --patch auto (`kilobyte devices`; "
                     "add a part with --devices-file)")


@dataclass(frozen=True)
class Verdict:
    """Whether needs fit a device, and the line saying so (what overflows and by how much); `fits` is None when
    there was no device to check against."""

    fits: bool | None
    text: str


def fit_verdict(sram_need: int, flash_need: int, device) -> Verdict:
    """Compare needs with a device; the text names what overflows and by how much (no device: fits, no text)."""
    if device is None:
        return Verdict(True, "")
    problems = []
    if sram_need > device.sram_bytes:
        problems.append(f"SRAM {kb(sram_need)} > {kb(device.sram_bytes)} (over by {sram_need - device.sram_bytes} B)")
    if flash_need > device.flash_bytes:
        problems.append(f"Flash {kb(flash_need)} > {kb(device.flash_bytes)} "
                        f"(over by {flash_need - device.flash_bytes} B)")
    if problems:
        return Verdict(False, f"DOES NOT FIT {device.name}: " + "; ".join(problems))
    return Verdict(True, f"fits {device.name}: SRAM {kb(sram_need)} of {kb(device.sram_bytes)}, "
                         f"Flash {kb(flash_need)} of {kb(device.flash_bytes)}")


@dataclass(frozen=True)
class FirmwareSizes:
    """The linked firmware's measured Flash and SRAM (`targets.cortexm.measure`), split as the report prints them."""

    target: str
    elf: str
    flash_bytes: int
    sram_bytes: int
    flash_weights: int
    flash_kernels: int
    flash_other: int
    sram_arena: int
    sram_stack_reserve: int
    sram_other: int

    @classmethod
    def from_measure(cls, sizes: dict, elf) -> FirmwareSizes:
        """From `targets.cortexm.measure`'s dict of a build and the build's ELF path."""
        return cls(sizes["target"], str(elf), sizes["flash_bytes"], sizes["sram_bytes"], sizes["flash_weights_bytes"],
                   sizes["flash_kernel_bytes"], sizes["flash_other_bytes"], sizes["sram_arena_bytes"],
                   sizes["sram_stack_bytes"], sizes["sram_other_bytes"])

    def to_dict(self) -> dict:
        """The fit report's `firmware` object: totals, then Flash and SRAM by part."""
        return {"target": self.target, "elf": self.elf, "flash_bytes": self.flash_bytes, "sram_bytes": self.sram_bytes,
                "flash": {"weights": self.flash_weights, "kernels": self.flash_kernels, "other": self.flash_other},
                "sram": {"arena": self.sram_arena, "stack_reserve": self.sram_stack_reserve,
                         "other": self.sram_other}}


@dataclass(frozen=True)
class Suggestion:
    """What would fit a model that does not: a configuration of the catalogue (`hint`), or none at all."""

    text: str  # the one line printed under the verdict
    hint: FitHint | None = None

    def to_dict(self) -> dict:
        """The fit report's `suggestion` object: the hint's figures (none when nothing fits) and the line."""
        return {"text": self.text} if self.hint is None else {**self.hint.to_json(), "text": self.text}


@dataclass(frozen=True)
class FitReport:
    """A compiled library against a device. `memory` is None for the plan's figures alone (`fit_report`), then
    "estimate" or "measured" (`measured_fit`); measured with no `firmware` means the link itself overflowed."""

    out_dir: str
    arena_bytes: int  # the planned arena, scratch included
    scratch_bytes: int
    peak_bytes: int
    input_bytes: int  # the caller-owned input buffer
    weight_bytes: int
    code_bytes: int  # the Flash model's code and firmware estimate
    macs: int
    device: str | None
    fits: bool | None  # None: no device, nothing checked
    verdict: str
    memory: str | None = None
    firmware: FirmwareSizes | None = None
    suggestion: Suggestion | None = None  # what would fit instead (`suggested`), when it does not

    @property
    def flash_estimate_bytes(self) -> int:
        """The Flash model's figure: weights + code and firmware."""
        return self.weight_bytes + self.code_bytes

    @property
    def flash_bytes(self) -> int:
        """The linked firmware's Flash when measured, else the estimate."""
        return self.firmware.flash_bytes if self.firmware else self.flash_estimate_bytes

    @property
    def sram_bytes(self) -> int:
        """The linked firmware's SRAM when measured, else the planned arena."""
        return self.firmware.sram_bytes if self.firmware else self.arena_bytes

    @property
    def link_failed(self) -> bool:
        """Measuring was tried and the firmware did not link: over the device's Flash or SRAM (the verdict says)."""
        return self.memory == "measured" and self.firmware is None

    def to_dict(self) -> dict:
        """The JSON of `kilobyte compile --json`: the plan's keys, then what measuring added (`memory`, `firmware`,
        `flash_estimate_bytes` beside a measured `flash_bytes`, `sram_bytes` unless the link failed), `suggestion`."""
        d = {"out_dir": self.out_dir, "arena_bytes": self.arena_bytes, "scratch_bytes": self.scratch_bytes,
             "peak_bytes": self.peak_bytes, "input_bytes": self.input_bytes, "weight_bytes": self.weight_bytes,
             "code_bytes": self.code_bytes, "flash_bytes": self.flash_bytes, "macs": self.macs, "device": self.device,
             "fits": self.fits, "verdict": self.verdict}
        if self.memory is not None:
            d["memory"], d["firmware"] = self.memory, self.firmware.to_dict() if self.firmware else None
            if self.firmware:
                d["flash_estimate_bytes"] = self.flash_estimate_bytes
            if not self.link_failed:
                d["sram_bytes"] = self.sram_bytes
        if self.suggestion is not None:
            d["suggestion"] = self.suggestion.to_dict()
        return d


def fit_report(result, device) -> FitReport:
    """The plan's fit report of a `codegen.CompileResult`; Flash is the estimate of the linked firmware for the
    device's core (the search's Flash model: weights exact, the rest from the table measured on ELF files)."""
    m = result.manifest
    est = estimate_resources(result.graph, result.plan.options, core=device.core if device else None)
    verdict = fit_verdict(m["arena_bytes"], est.weight_bytes + est.code_bytes, device)
    if device is None:  # nothing asked: no verdict, and `fits` is null rather than a claim
        verdict = Verdict(None, NO_DEVICE_TEXT)
    return FitReport(str(result.out_dir), m["arena_bytes"], m["scratch_bytes"], m["peak_bytes"], m["input_bytes"],
                     est.weight_bytes, est.code_bytes, m["macs"], device.name if device else None, verdict.fits,
                     verdict.text)


def can_build_firmware(device) -> bool:
    """True when `device` has a core we build for and the cross compiler and pyelftools are installed."""
    if device is None or device.core not in BOARDS or importlib.util.find_spec("elftools") is None:
        return False
    try:
        arm_gcc()
    except KilobyteError:
        return False
    return True


def measured_fit(report: FitReport, result, device) -> tuple[FitReport, DoesNotFitError | None]:
    """`report` with the MEASURED Flash/SRAM of the device's firmware when it can be built (see the module doc),
    else marked an estimate. Returns (report, the DoesNotFitError of a failed link or None)."""
    if not can_build_firmware(device):
        return replace(report, memory="estimate"), None
    try:
        build = build_firmware(result.out_dir, device.core, device=device)
    except DoesNotFitError as e:
        detail = str(e).split(f"({device.core}): ", 1)[-1]  # drop the "DIR: does not fit DEVICE (core)" prefix
        return replace(report, memory="measured", fits=False,
                       verdict=f"DOES NOT FIT {device.name} (measured: the {device.core} firmware link failed): "
                               f"{detail}"), e
    firmware = FirmwareSizes.from_measure(measure(build), build.elf)
    verdict = fit_verdict(firmware.sram_bytes, firmware.flash_bytes, device)
    return replace(report, memory="measured", firmware=firmware, fits=verdict.fits,
                   verdict=verdict.text + " (measured)"), None


def device_fit(result, device, max_flash: int | None = None) -> tuple[FitReport, DoesNotFitError | None]:
    """The fit of a compiled library on `device` as the commands report it: the plan's, measured when it can be;
    with `max_flash`, a Flash budget below the device's (`within_flash_budget`)."""
    report, error = measured_fit(fit_report(result, device), result, device)
    return within_flash_budget(report, max_flash), error


def within_flash_budget(report: FitReport, flash_bytes: int | None) -> FitReport:
    """`report` judged also against a Flash budget below its device's (`kilobyte search --max-flash`): the same
    Flash figure (measured when it was), a verdict that names the budget. Unchanged when there is no such budget
    or the device's own verdict already fails."""
    if flash_bytes is None or report.fits is not True:
        return report
    if report.flash_bytes <= flash_bytes:
        return replace(report, verdict=f"{report.verdict}; Flash within the budget's {kb(flash_bytes)}")
    over = report.flash_bytes - flash_bytes
    return replace(report, fits=False,
                   verdict=f"DOES NOT FIT the Flash budget: Flash {kb(report.flash_bytes)} > {kb(flash_bytes)} "
                           f"(over by {over} B; {report.device} alone: {report.verdict})")


def suggested(report: FitReport, result, device, devices_file=None) -> FitReport:
    """`report` with what would fit (`targets.fit_hint.suggest_fit`: `--patch auto`, a larger device of the
    catalogue) as its `suggestion`, when it does not fit; unchanged otherwise."""
    if report.fits is not False:
        return report
    hint = suggest_fit(result.graph, result.plan.options, device, devices_file)
    suggestion = Suggestion(NOTHING_FITS_TEXT) if hint is None else Suggestion(hint.text(device), hint)
    return replace(report, suggestion=suggestion)
