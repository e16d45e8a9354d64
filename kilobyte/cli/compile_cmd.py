"""CLI stage: `kilobyte compile MODEL --out DIR [--device D]` — quantise (if float), plan, generate and build C.

Without --device nothing is checked for fit: the library is written and its sizes reported (planned arena, Flash
from the Flash model: an estimate). With --device the fit report is MEASURED when it can be: for a device with a
Cortex-M4/M7/M55 core and arm-none-eabi-gcc (plus pyelftools) installed, the firmware is linked into the device's
Flash and SRAM and its sizes read from the ELF; a link overflow is exit code 2 with the linker's numbers. Otherwise
Flash and SRAM are estimates from the plan. A model that does not fit gets one line naming a configuration that
would (`targets.fit_hint`: `--patch auto`, a larger device of the catalogue).
"""

from __future__ import annotations

import sys

from ..codegen.library import TARGETS
from ..errors import DoesNotFitError, KilobyteError
from ..units import kb
from .common import (
    add_device_arg,
    add_json_arg,
    add_model_args,
    add_plan_args,
    add_samples_arg,
    get_device,
    load_model,
    print_json,
)
from .plan_cmd import add_mac_overhead_arg, parse_patch
from .profile_cmd import fit_verdict


def register(sub) -> None:
    p = sub.add_parser(
        "compile", help="generate a C library for the model (quantising float models first) and build it",
        description="Quantise a float model with calibration data (--data), plan its memory, generate model.c/"
        "model.h (NAME_model.c/.h with --prefix NAME) with only the kernels it uses and an arena of exactly the "
        "planned size, plus a Makefile, a CMakeLists.txt and an arm-none-eabi toolchain file; build it on the "
        "host and print the fit report (SRAM = arena incl. scratch; Flash = the linked firmware's: weights + code, "
        "measured when arm-none-eabi-gcc is installed, else estimated). Without --device the fit is not checked "
        "and Flash is an estimate; with it, exit code 2 if the model does not fit, with a line naming what would "
        "(--patch auto, a larger device).")
    add_model_args(p)
    add_device_arg(p)
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="output directory (replaced atomically)")
    p.add_argument("--data", metavar="NAME|PATH",
                   help="calibration data for float models: mnist, digits, letters, .npz, folder")
    add_samples_arg(p)
    p.add_argument("--patch", default="off", metavar="auto|off|N,P", help="patch-based stage (see `kilobyte plan`)")
    add_mac_overhead_arg(p)
    add_plan_args(p)
    p.add_argument("--prefix", default="kb", metavar="NAME",
                   help="prefix of every exported name and generated file: NAME_invoke, NAME_ARENA_BYTES, "
                   "src/NAME_model.h, CMake target NAME_model (default kb: kb_invoke, src/model.h); give each model "
                   "its own to link several into one firmware (docs/integration.md)")
    p.add_argument("--arena-extern", action="store_true",
                   help="do not define the arena: your code defines NAME_arena (e.g. in DTCM); the header gives "
                   "NAME_ARENA_BYTES and NAME_ARENA_ALIGN")
    p.add_argument("--target", choices=TARGETS, default=None,
                   help="the Cortex-M core of the generated CMake toolchain file cmake/arm-none-eabi.cmake (default: "
                   "the device's core, else cortex-m4); `make TARGET=...` builds for any of them")
    add_json_arg(p, "the fit report")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..api import compile_model
    from ..codegen import LibraryOptions

    device = get_device(args)
    target = args.target or (device.core if device is not None and device.core in TARGETS else "cortex-m4")
    library = LibraryOptions(prefix=args.prefix, arena_extern=args.arena_extern, target=target)  # checked first
    model = load_model(args)
    result = compile_model(model, args.out, data=args.data, samples=args.samples,
                           patch=parse_patch(args.patch, model.graph), inplace=not args.no_inplace,
                           conv_columns=args.conv_columns, kernels=args.kernels,
                           max_mac_overhead=args.max_mac_overhead, library=library)
    report, overflow = measured_fit(fit_report(result, device), result, device)
    if report["fits"] is False:
        report["suggestion"] = _suggestion(result, device, args.devices_file)
    if args.json:
        print_json(report)
    else:
        print_fit(report, result)
    if overflow is not None:
        print(f"kilobyte: error: {overflow}", file=sys.stderr)
    return 2 if report["fits"] is False else 0


def _suggestion(result, device, devices_file) -> dict | None:
    """What would fit (`targets.fit_hint.suggest_fit`) as the report's `suggestion`, with its one line `text`."""
    from ..targets.fit_hint import suggest_fit

    hint = suggest_fit(result.graph, result.plan.options, device, devices_file)
    if hint is None:
        return {"text": "nothing in the device catalogue fits it, with or without --patch auto (`kilobyte devices`; "
                        "add a part with --devices-file)"}
    return {**hint.to_json(), "text": hint.text(device)}


def print_fit(report: dict, result) -> None:
    print(f"wrote {result.out_dir}/ ({', '.join(result.manifest['kernels'])} kernels)")
    print(f"SRAM  arena {kb(report['arena_bytes'])} (incl. scratch {kb(report['scratch_bytes'])}) + input "
          f"{kb(report['input_bytes'])} (caller-owned)")
    fw = report.get("firmware")
    if fw:
        print(f"SRAM  {kb(fw['sram_bytes'])} measured ({fw['target']} firmware: arena {kb(fw['sram']['arena'])} + "
              f"stack reserve {kb(fw['sram']['stack_reserve'])} + other {kb(fw['sram']['other'])})")
        print(f"Flash {kb(fw['flash_bytes'])} measured (weights {kb(fw['flash']['weights'])} + kernels "
              f"{kb(fw['flash']['kernels'])} + other {kb(fw['flash']['other'])})")
    else:
        print(f"Flash {kb(report['flash_bytes'])}: weights {kb(report['weight_bytes'])} + code and firmware "
              f"{kb(report['code_bytes'])} (estimate)")
    print(f"MACs  {report['macs'] / 1e6:.2f} M")
    if report["verdict"]:
        print(report["verdict"])
    if report.get("suggestion"):
        print(report["suggestion"]["text"])


def fit_report(result, device) -> dict:
    """The plan's fit report; Flash is the estimate of the linked firmware for the device's core (the search's
    Flash model: weights exact, the rest from the table measured on ELF files, `schedule/flash.py`)."""
    from ..schedule.estimate import estimate_resources

    m = result.manifest
    est = estimate_resources(result.graph, result.plan.options, core=device.core if device else None)
    wbytes, code = est.weight_bytes, est.code_bytes
    verdict = fit_verdict(m["arena_bytes"], wbytes + code, device)
    if device is None:  # nothing asked: no verdict, and `fits` is null rather than a claim
        verdict = {"fits": None, "text": "fit not checked: no --device (`kilobyte devices` lists the catalogue)"}
    return {"out_dir": str(result.out_dir), "arena_bytes": m["arena_bytes"], "scratch_bytes": m["scratch_bytes"],
            "peak_bytes": m["peak_bytes"], "input_bytes": m["input_bytes"], "weight_bytes": wbytes,
            "code_bytes": code, "flash_bytes": wbytes + code, "macs": m["macs"],
            "device": device.name if device else None, "fits": verdict["fits"], "verdict": verdict["text"]}


def can_build_firmware(device) -> bool:
    """True when `device` has a core we build for and the cross compiler and pyelftools are installed."""
    import importlib.util

    from ..targets.cortexm import BOARDS
    from ..targets.cortexm.toolchain import arm_gcc

    if device is None or device.core not in BOARDS or importlib.util.find_spec("elftools") is None:
        return False
    try:
        arm_gcc()
    except KilobyteError:
        return False
    return True


def measured_fit(report: dict, result, device) -> tuple[dict, DoesNotFitError | None]:
    """The fit report with MEASURED Flash/SRAM of the device's firmware when it can be built (see module doc).

    Returns (report, the DoesNotFitError of a failed link or None). `memory` says "measured" or "estimate".
    """
    if not can_build_firmware(device):
        return {**report, "memory": "estimate", "firmware": None, "sram_bytes": report["arena_bytes"]}, None
    from ..targets.cortexm import build_firmware, measure

    try:
        build = build_firmware(result.out_dir, device.core, device=device)
    except DoesNotFitError as e:
        detail = str(e).split(f"({device.core}): ", 1)[-1]  # drop the "DIR: does not fit DEVICE (core)" prefix
        return {**report, "memory": "measured", "firmware": None, "fits": False,
                "verdict": f"DOES NOT FIT {device.name} (measured: the {device.core} firmware link failed): "
                           f"{detail}"}, e
    sizes = measure(build)
    verdict = fit_verdict(sizes["sram_bytes"], sizes["flash_bytes"], device)
    firmware = {"target": sizes["target"], "elf": str(build.elf), "flash_bytes": sizes["flash_bytes"],
                "sram_bytes": sizes["sram_bytes"],
                "flash": {"weights": sizes["flash_weights_bytes"], "kernels": sizes["flash_kernel_bytes"],
                          "other": sizes["flash_other_bytes"]},
                "sram": {"arena": sizes["sram_arena_bytes"], "stack_reserve": sizes["sram_stack_bytes"],
                         "other": sizes["sram_other_bytes"]}}
    return {**report, "memory": "measured", "firmware": firmware, "flash_estimate_bytes": report["flash_bytes"],
            "flash_bytes": sizes["flash_bytes"], "sram_bytes": sizes["sram_bytes"], "fits": verdict["fits"],
            "verdict": verdict["text"] + " (measured)"}, None
