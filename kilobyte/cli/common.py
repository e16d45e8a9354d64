"""CLI stage: options shared by several sub-commands (model loading, device choice, JSON output)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

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
    p.add_argument("--devices-file", default=None,
                   help="TOML file with extra devices (default: $KILOBYTE_DEVICES)")


def load_model(args):
    from ..driver import load

    return load(args.model, resolution=args.resolution, width=args.width, channels=args.channels,
                num_classes=args.classes)


def get_device(args):
    if not args.device:
        return None
    from ..targets.devices import get_device as _get

    return _get(args.device, args.devices_file)


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temp file beside `path`, then rename: a crash never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def kb(n: int) -> str:
    return f"{n / 1024:.1f} kB"
