"""CLI stage: options shared by several sub-commands, each defined once here (model loading, device choice, the
planner's options, calibration samples, a compiled project's folder, JSON output)."""

from __future__ import annotations

import inspect
import json
import sys

from ..driver import load
from ..kernels import KERNEL_SETS  # --kernels: the runtime's kernel sets (portable C, Cortex-M DSP, Cortex-M55 Helium)
from ..targets.devices import get_device as _get


def add_command(sub, name: str, register):
    """The sub-command `name`, documented by its `register` function's docstring the way `click` does it: the
    first line is the one-line help of `kilobyte --help`, the paragraphs after it `kilobyte NAME --help`'s text."""
    help_, _, description = inspect.cleandoc(register.__doc__).partition("\n\n")
    return sub.add_parser(name, help=help_, description=description or None)


MODEL_HELP = "zoo name (see `kilobyte profile --list`), a .onnx or .tflite file, or a Python module:attr"


def add_model_args(p) -> None:
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--resolution", "-r", type=int, default=None,
                   help="input resolution in pixels (zoo/Python models; default: the model's own)")
    p.add_argument("--width", "-w", type=float, default=None, help="width multiplier for zoo models (default 1.0)")
    p.add_argument("--channels", type=int, default=None, help="input channels (zoo small CNNs, Python models)")
    p.add_argument("--classes", type=int, default=None, help="number of classes (zoo models)")


def add_device_arg(p, default: str | None = None, why: str = "") -> None:
    """--device and --devices-file. The rule every command follows: without --device nothing is checked for fit
    (sizes are reported, exit code 0); a command that cannot work without a device (`demo` plans for a small part,
    `search` takes its bounds from it) has a `default`, and its help names it and `why`."""
    p.add_argument("--device", "-d", default=default,
                   help="the device to check the fit against (see `kilobyte devices`); "
                   + (f"default {default}: {why}" if default else "without it the fit is not checked"))
    add_devices_file_arg(p)


def add_devices_file_arg(p) -> None:
    p.add_argument("--devices-file", default=None, help="TOML file with extra devices (default: $KILOBYTE_DEVICES)")


def add_plan_args(p) -> None:
    """--no-inplace, --kernels and --conv-columns: how `plan` and `compile` plan the memory (`PlanOptions`)."""
    p.add_argument("--no-inplace", action="store_true",
                   help="disable in-place depthwise/add, conv+add fusion and aliasing")
    p.add_argument("--kernels", choices=KERNEL_SETS, default="portable",
                   help="the kernel set to plan for: portable C (default; every target), the Cortex-M DSP kernels "
                   "(M4/M7/M55) or 'mve', the DSP kernels with the Cortex-M55 Helium ones swapped in (M55 only: conv, "
                   "depthwise, fully connected, ADD/SUB, MEAN, the sparse convs); the plan reserves exactly the "
                   "scratch that set reads, and "
                   "firmware builds, `verify` and `bench` of the result use it by default")
    p.add_argument("--conv-columns", choices=("free", "wide"), default="free",
                   help="with --kernels dsp, the im2col columns the plan reserves for the DSP conv kernels: 'free' "
                   "(default) six only where the bytes are free anyway (the kernels also use the unwritten output "
                   "and consumed input rows), 'wide' six everywhere, which can raise the SRAM peak for speed")


def add_samples_arg(p) -> None:
    """--samples: how many images calibrate a float model's int8 ranges (`compile`, `quantize`)."""
    p.add_argument("--samples", type=int, default=64, help="calibration images (default 64)")


def add_project_dir_arg(p) -> None:
    """DIR: the folder `kilobyte compile` wrote (`verify`, `bench`)."""
    p.add_argument("dir", metavar="DIR", help="directory written by `kilobyte compile`")


def add_json_arg(p, what: str = "the report") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def load_model(args):
    return load(args.model, resolution=args.resolution, width=args.width, channels=args.channels,
                num_classes=args.classes)


def get_device(args):
    if not args.device:
        return None

    return _get(args.device, args.devices_file)


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")
