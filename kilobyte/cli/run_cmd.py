"""CLI stage: `kilobyte run MODEL --input in.npy --out out.npy` — run an int8 model on one input."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import KilobyteError
from .common import atomic_write_bytes


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="run an int8 model (.tflite or compiled directory) on an .npy input",
        description="Run MODEL on one input. MODEL is an int8 .tflite (engines: reference = Kilobyte's numpy "
        "interpreter, tflm = TensorFlow Lite Micro) or a directory written by `kilobyte compile` (engine: its host "
        "C build). The input is an int8 array in the model's own (NHWC) shape; the output is written as .npy.")
    p.add_argument("model", metavar="MODEL", help=".tflite file or compiled directory")
    p.add_argument("--input", "-i", required=True, help="input .npy (int8, the model's input shape)")
    p.add_argument("--out", "-o", required=True, help="output .npy path")
    p.add_argument("--engine", choices=["reference", "tflm", "c"], default=None,
                   help="reference (default for .tflite), tflm, or c (default for a compiled directory)")
    p.set_defaults(func=run)


def run(args) -> int:
    x = _load_input(args.input)
    path = Path(args.model)
    if path.is_dir():
        out = _run_compiled(path, x, args.engine)
    elif path.suffix == ".tflite":
        out = _run_tflite(path, x, args.engine or "reference")
    else:
        raise KilobyteError(f"{path}: expected a .tflite file or a compiled directory")
    buf = _npy_bytes(out)
    atomic_write_bytes(args.out, buf)
    print(f"wrote {args.out}: {out.dtype}{list(out.shape)}")
    return 0


def _load_input(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise KilobyteError(f"{path}: cannot read .npy ({e})") from None


def _check_input(x: np.ndarray, tensor, where: str) -> None:
    if tuple(x.shape) != tuple(tensor.shape) or str(x.dtype) != tensor.dtype:
        raise KilobyteError(f"{where}: input is {x.dtype}{list(x.shape)}, the model wants "
                            f"{tensor.dtype}{list(tensor.shape)}")


def _run_tflite(path: Path, x: np.ndarray, engine: str) -> np.ndarray:
    from ..frontends.tflite import from_tflite

    graph = from_tflite(path)
    _check_input(x, graph.tensors[graph.inputs[0]], str(path))
    if engine == "reference":
        from ..interp import run_int8

        return run_int8(graph, x)[graph.outputs[0]]
    if engine == "tflm":
        from ..targets.tflm import run_tflm

        res = run_tflm(path.read_bytes(), x, preserve_all=False)
        return res.outputs[graph.outputs[0]]
    raise KilobyteError(f"engine '{engine}' runs compiled directories; use reference or tflm for .tflite")


def _run_compiled(path: Path, x: np.ndarray, engine: str | None) -> np.ndarray:
    from ..codegen.host import run_compiled

    if engine not in (None, "c"):
        raise KilobyteError(f"{path}: a compiled directory runs with engine 'c'")
    return run_compiled(path, x)


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    b = io.BytesIO()
    np.save(b, a, allow_pickle=False)
    return b.getvalue()
