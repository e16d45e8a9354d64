"""`driver.fit`: the verdict's text, the `FitReport`'s figures by state (plan only, estimate, measured, failed link)
and `to_dict()`'s keys in the order `kilobyte compile --json` has always printed them; then a real compiled library
on a device without an Arm build (RP2040's Cortex-M0+: an estimate) and with none at all.
"""

from __future__ import annotations

from dataclasses import replace

from random_nets import movement_model

from kilobyte.codegen import compile_graph
from kilobyte.driver.fit import (
    FirmwareSizes,
    FitReport,
    Suggestion,
    Verdict,
    device_fit,
    fit_report,
    fit_verdict,
    measured_fit,
    suggested,
    within_flash_budget,
)
from kilobyte.targets.devices import get_device

PLAN_KEYS = ["out_dir", "arena_bytes", "scratch_bytes", "peak_bytes", "input_bytes", "weight_bytes", "code_bytes",
             "flash_bytes", "macs", "device", "fits", "verdict"]


def test_verdict_names_what_overflows_and_by_how_much():
    f410 = get_device("stm32f410")  # 32 kB SRAM, 128 kB Flash
    assert fit_verdict(40_000, 1_000, f410) == Verdict(
        False, "DOES NOT FIT STM32F410: SRAM 39.1 kB > 32.0 kB (over by 7232 B)")
    assert fit_verdict(2048, 200_000, f410).text == "DOES NOT FIT STM32F410: Flash 195.3 kB > 128.0 kB " \
                                                    "(over by 68928 B)"
    assert fit_verdict(2048, 4096, f410) == Verdict(True, "fits STM32F410: SRAM 2.0 kB of 32.0 kB, "
                                                          "Flash 4.0 kB of 128.0 kB")
    assert fit_verdict(10**9, 10**9, None) == Verdict(True, "")


def _report(**kw) -> FitReport:
    base = FitReport("out", arena_bytes=1000, scratch_bytes=10, peak_bytes=990, input_bytes=64, weight_bytes=3000,
                     code_bytes=700, macs=5, device="STM32F410", fits=True, verdict="fits")
    return replace(base, **kw)


FIRMWARE = FirmwareSizes("cortex-m4", "fw.elf", flash_bytes=3500, sram_bytes=5200, flash_weights=3000,
                         flash_kernels=400, flash_other=100, sram_arena=1000, sram_stack_reserve=4096, sram_other=104)


def test_figures_by_state():
    plan = _report()
    assert (plan.flash_bytes, plan.sram_bytes, plan.flash_estimate_bytes) == (3700, 1000, 3700)
    measured = _report(memory="measured", firmware=FIRMWARE)
    assert (measured.flash_bytes, measured.sram_bytes, measured.flash_estimate_bytes) == (3500, 5200, 3700)
    failed = _report(memory="measured", fits=False)
    assert failed.link_failed and (failed.flash_bytes, failed.sram_bytes) == (3700, 1000)
    assert not _report(memory="estimate").link_failed


def test_to_dict_keeps_the_json_of_each_state():
    assert list(_report().to_dict()) == PLAN_KEYS
    est = _report(memory="estimate").to_dict()
    assert list(est) == [*PLAN_KEYS, "memory", "firmware", "sram_bytes"]
    assert est["firmware"] is None and est["sram_bytes"] == 1000 and est["flash_bytes"] == 3700
    m = _report(memory="measured", firmware=FIRMWARE).to_dict()
    assert list(m) == [*PLAN_KEYS, "memory", "firmware", "flash_estimate_bytes", "sram_bytes"]
    assert (m["flash_bytes"], m["flash_estimate_bytes"], m["sram_bytes"]) == (3500, 3700, 5200)
    assert m["firmware"] == {"target": "cortex-m4", "elf": "fw.elf", "flash_bytes": 3500, "sram_bytes": 5200,
                             "flash": {"weights": 3000, "kernels": 400, "other": 100},
                             "sram": {"arena": 1000, "stack_reserve": 4096, "other": 104}}
    failed = _report(memory="measured", fits=False, suggestion=Suggestion("nothing fits")).to_dict()
    assert list(failed) == [*PLAN_KEYS, "memory", "firmware", "suggestion"] and failed["firmware"] is None
    assert failed["suggestion"] == {"text": "nothing fits"}


def test_a_compiled_library_without_device_and_on_a_core_without_firmware(tmp_path):
    result = compile_graph(movement_model("transpose-hw", seed=1), tmp_path / "p")
    none = fit_report(result, None)
    assert none.device is None and none.fits is None and none.verdict.startswith("fit not checked")
    assert none.arena_bytes == result.manifest["arena_bytes"] and none.memory is None
    part = replace(get_device("rp2040"), name="M3PART", core="cortex-m3")  # a core without a firmware board (the
    report, overflow = measured_fit(fit_report(result, part), result, part)  # RP2040's M0+ has one since issue 31)
    assert overflow is None and report.memory == "estimate" and report.firmware is None
    assert report.fits is True and report.sram_bytes == report.arena_bytes
    assert report.verdict.startswith("fits M3PART: SRAM ")
    assert suggested(report, result, part) is report  # it fits: nothing to suggest


def test_a_flash_budget_below_the_devices_is_judged_on_the_same_figure():
    measured = _report(memory="measured", firmware=FIRMWARE)  # 3,500 B of Flash measured, 3,700 B estimated
    assert within_flash_budget(measured, None) is measured
    inside = within_flash_budget(measured, 3500)
    assert inside.fits is True and inside.verdict == "fits; Flash within the budget's 3.4 kB"
    over = within_flash_budget(measured, 3499)
    assert over.fits is False and over.flash_bytes == 3500
    assert over.verdict.startswith("DOES NOT FIT the Flash budget: Flash 3.4 kB > 3.4 kB (over by 1 B; STM32F410")
    failed = _report(fits=False, verdict="DOES NOT FIT STM32F410: SRAM")  # the device's own verdict stands
    assert within_flash_budget(failed, 10) is failed


def test_device_fit_judges_a_compiled_library_against_max_flash(tmp_path):
    result = compile_graph(movement_model("transpose-hw", seed=1), tmp_path / "p")
    rp2040 = get_device("rp2040")
    alone, _ = device_fit(result, rp2040)
    assert alone.fits is True
    assert device_fit(result, rp2040, None)[0] == alone
    assert device_fit(result, rp2040, alone.flash_bytes)[0].fits is True
    tight, overflow = device_fit(result, rp2040, alone.flash_bytes - 1)
    assert overflow is None and tight.fits is False and "over by 1 B" in tight.verdict
