"""CLI stage: `kilobyte compile MODEL --out DIR [--device D]` — quantise (if float), plan, generate and build C.

Without --device nothing is checked for fit: the library is written and its sizes reported (planned arena, Flash
from the Flash model: an estimate). With --device the fit report is MEASURED when it can be: for a device with a
Cortex-M4/M7/M55 core and arm-none-eabi-gcc (plus pyelftools) installed, the firmware is linked into the device's
Flash and SRAM and its sizes read from the ELF; a link overflow is exit code 2 with the linker's numbers. Otherwise
Flash and SRAM are estimates from the plan. A model that does not fit gets one line naming a configuration that
would (`targets.fit_hint`: `--patch auto`, a larger device of the catalogue). Compiling, the fit and its measurement
are the driver's (`kilobyte.driver.compile_model`, `driver.fit`); this module parses the options and prints.
"""

from __future__ import annotations

import json
import sys

from ..codegen import LibraryOptions
from ..codegen.library import TARGETS
from ..driver import compile_model, device_fit, suggested
from ..errors import KilobyteError
from ..ops.detect_post import DetectConfig
from ..units import kb
from .common import (
    add_command,
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


def register(sub) -> None:
    """generate a C library for the model (quantising float models first) and build it

    Quantise a float model with calibration data (--data), plan its memory, generate model.c/model.h (NAME_model.c/.h
    with --prefix NAME) with only the kernels it uses and an arena of exactly the planned size, plus a Makefile, a
    CMakeLists.txt and an arm-none-eabi toolchain file; build it on the host and print the fit report (SRAM = arena
    incl. scratch; Flash = the linked firmware's: weights + code, measured when arm-none-eabi-gcc is installed, else
    estimated). Without --device the fit is not checked and Flash is an estimate; with it, exit code 2 if the model does
    not fit, with a line naming what would (--patch auto, a larger device).
    """
    p = add_command(sub, "compile", register)
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
    p.add_argument("--detect", metavar="JSON",
                   help="the model is a YOLO-style detector: this file's anchors (one list of [w, h] in input pixels "
                   "per output, in output order), classes and optional score_threshold, iou_threshold, "
                   "max_candidates, max_detections; the library gains NAME_detections, which decodes the outputs "
                   "into boxes (docs/integration.md)")
    add_json_arg(p, "the fit report")
    p.set_defaults(func=run)


def read_detect_config(path: str) -> DetectConfig:
    """`--detect FILE`: a `DetectConfig` from its JSON, or a one-line error naming the file."""
    try:
        with open(path) as f:
            return DetectConfig.from_json(json.load(f), path)
    except OSError as e:
        raise KilobyteError(f"{path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise KilobyteError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None


def run(args) -> int:

    device = get_device(args)
    target = args.target or (device.core if device is not None and device.core in TARGETS else "cortex-m4")
    library = LibraryOptions(prefix=args.prefix, arena_extern=args.arena_extern, target=target)  # checked first
    detect = read_detect_config(args.detect) if args.detect else None
    model = load_model(args)
    result = compile_model(model, args.out, data=args.data, samples=args.samples,
                           patch=parse_patch(args.patch, model.graph), inplace=not args.no_inplace,
                           conv_columns=args.conv_columns, kernels=args.kernels,
                           max_mac_overhead=args.max_mac_overhead, library=library, detect=detect)
    report, overflow = device_fit(result, device)
    report = suggested(report, result, device, args.devices_file)
    if args.json:
        print_json(report.to_dict())
    else:
        print_fit(report, result)
    if overflow is not None:
        print(f"kilobyte: error: {overflow}", file=sys.stderr)
    return 2 if report.fits is False else 0


def print_fit(report, result) -> None:
    """The fit report (a `driver.FitReport`) for people: SRAM and Flash, measured or estimated, MACs, verdict."""
    print(f"wrote {result.out_dir}/ ({', '.join(result.manifest['kernels'])} kernels)")
    print(f"SRAM  arena {kb(report.arena_bytes)} (incl. scratch {kb(report.scratch_bytes)}) + input "
          f"{kb(report.input_bytes)} (caller-owned)")
    fw = report.firmware
    if fw:
        print(f"SRAM  {kb(fw.sram_bytes)} measured ({fw.target} firmware: arena {kb(fw.sram_arena)} + "
              f"stack reserve {kb(fw.sram_stack_reserve)} + other {kb(fw.sram_other)})")
        print(f"Flash {kb(fw.flash_bytes)} measured (weights {kb(fw.flash_weights)} + kernels "
              f"{kb(fw.flash_kernels)} + other {kb(fw.flash_other)})")
    else:
        print(f"Flash {kb(report.flash_bytes)}: weights {kb(report.weight_bytes)} + code and firmware "
              f"{kb(report.code_bytes)} (estimate)")
    print(f"MACs  {report.macs / 1e6:.2f} M")
    if report.verdict:
        print(report.verdict)
    if report.suggestion:
        print(report.suggestion.text)
