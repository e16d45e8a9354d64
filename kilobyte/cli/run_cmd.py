"""CLI stage: `kilobyte run MODEL --input in.npy --out out.npy` — run an int8 model on one input.

MODEL is a .tflite (numpy reference or TFLM) or a compiled directory (its host C build, or with --target the
Cortex-M firmware under QEMU).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..atomic import write_bytes
from ..codegen.host import run_compiled
from ..errors import DoesNotFitError, KilobyteError
from ..formats.project import manifest
from ..interp import run_int8
from ..ops.arith import quantize_values
from ..targets.cortexm.verify import run_on_target
from ..targets.tflm import run_tflm
from .bench_cmd import add_target_args, does_not_fit, target_device
from .common import add_command


def register(sub) -> None:
    """run an int8 model (.tflite or compiled directory) on an .npy input

    Run MODEL on one input. MODEL is an int8 .tflite (engines: reference = Kilobyte's numpy interpreter, tflm =
    TensorFlow Lite Micro) or a directory written by `kilobyte compile` (engine: its host C build, or with --target the
    Cortex-M firmware under QEMU). The input is an int8 array in the model's own (NHWC) shape; the output is written as
    .npy.
    """
    p = add_command(sub, "run", register)
    p.add_argument("model", metavar="MODEL", help=".tflite file or compiled directory")
    p.add_argument("--input", "-i", required=True,
                   help="input .npy in the model's input shape: int8, or float32 values that are quantised with the "
                   "input's scale and zero point first (TFLite's QUANTIZE, as the header's NAME_quantize_input)")
    p.add_argument("--out", "-o", required=True, help="output .npy path")
    p.add_argument("--engine", choices=["reference", "tflm", "c"], default=None,
                   help="reference (default for .tflite), tflm, or c (default for a compiled directory)")
    add_target_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    x = _load_input(args.input)
    path = Path(args.model)
    target, device = target_device(args)
    if target is not None:
        try:
            out, how = _run_on_target(path, x, target, device, args)
        except DoesNotFitError as e:
            return does_not_fit(e)
    elif path.is_dir():
        out, how = _run_compiled(path, quantize_float_input(x, _manifest_input(path)), args.engine), "host C"
    elif path.suffix == ".tflite":
        out, how = _run_tflite(path, x, args.engine or "reference"), args.engine or "reference"
    else:
        raise KilobyteError(f"{path}: expected a .tflite file or a compiled directory")
    buf = _npy_bytes(out)
    write_bytes(args.out, buf)
    print(f"wrote {args.out}: {out.dtype}{list(out.shape)} ({how})")
    return 0


def _load_input(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise KilobyteError(f"{path}: cannot read .npy ({e})") from None


def _manifest_input(project: Path) -> dict:

    return manifest(project)["input"]


def quantize_float_input(x: np.ndarray, spec: dict) -> np.ndarray:
    """A float input for an int8 model, quantised with the input's scale and zero point (TFLite's QUANTIZE, bit for
    bit what the generated NAME_quantize_input does); any other input unchanged."""
    if not np.issubdtype(x.dtype, np.floating) or spec.get("dtype", "int8") != "int8":
        return x

    return quantize_values(x, spec["scale"], spec["zero_point"])


def _check_input(x: np.ndarray, tensor, where: str) -> None:
    if tuple(x.shape) != tuple(tensor.shape) or str(x.dtype) != tensor.dtype:
        raise KilobyteError(f"{where}: input is {x.dtype}{list(x.shape)}, the model wants "
                            f"{tensor.dtype}{list(tensor.shape)}")


def _run_tflite(path: Path, x: np.ndarray, engine: str) -> np.ndarray:
    from ..frontends.tflite import from_tflite  # defers tflite

    graph = from_tflite(path)
    t = graph.tensors[graph.inputs[0]]
    if t.qparams is not None:
        x = quantize_float_input(x, {"dtype": t.dtype, "scale": float(t.qparams.scale[0]),
                                     "zero_point": int(t.qparams.zero_point[0])})
    _check_input(x, t, str(path))
    if engine == "reference":
        return run_int8(graph, x)[graph.outputs[0]]
    if engine == "tflm":
        res = run_tflm(path.read_bytes(), x, preserve_all=False)
        return res.outputs[graph.outputs[0]]
    raise KilobyteError(f"engine '{engine}' runs compiled directories; use reference or tflm for .tflite")


def _run_compiled(path: Path, x: np.ndarray, engine: str | None) -> np.ndarray:

    if engine not in (None, "c"):
        raise KilobyteError(f"{path}: a compiled directory runs with engine 'c'")
    return run_compiled(path, x)


def _run_on_target(path: Path, x: np.ndarray, target: str, device, args) -> tuple[np.ndarray, str]:

    if not path.is_dir():
        raise KilobyteError(f"{path}: --target runs a directory written by `kilobyte compile`, not a single file")
    if args.engine is not None:
        raise KilobyteError(f"--target runs the firmware under QEMU; drop --engine {args.engine}")
    x = quantize_float_input(x, _manifest_input(path))
    out, result = run_on_target(path, x, target, device=device, kernels=args.kernels)
    return out, f"{target} under QEMU, stack {result.stack_bytes} B"


def _npy_bytes(a: np.ndarray) -> bytes:

    b = io.BytesIO()
    np.save(b, a, allow_pickle=False)
    return b.getvalue()
