"""CLI stage: `kilobyte quantize MODEL --data D --out model.tflite` — post-training int8 quantisation."""

from __future__ import annotations

from ..atomic import write_bytes
from ..driver import quantize
from .common import add_command, add_model_args, add_samples_arg, load_model


def register(sub) -> None:
    """post-training int8 quantisation to a .tflite file (TFLite int8 spec)

    Calibrate activation ranges on a dataset (built-in: mnist, digits, letters; or a .npz / image folder), quantise to
    int8 exactly as TFLite does (per-channel weights, int32 bias) and write a .tflite that TFLite Micro runs bit-exactly
    like Kilobyte's own reference interpreter.
    """
    p = add_command(sub, "quantize", register)
    add_model_args(p)
    p.add_argument("--data", required=True, metavar="NAME|PATH", help="calibration data: mnist, digits, letters, "
                   ".npz or folder")
    p.add_argument("--out", "-o", required=True, metavar="FILE.tflite", help="output .tflite path")
    add_samples_arg(p)
    p.add_argument("--method", choices=["minmax", "percentile"], default="minmax",
                   help="activation range estimator (default minmax)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..export.tflite import to_tflite  # defers tflite

    model = load_model(args)
    graph = quantize(model, args.data, samples=args.samples, method=args.method)
    data = to_tflite(graph)
    write_bytes(args.out, data)
    print(f"wrote {args.out} ({len(data)} bytes, {len(graph.nodes)} ops, int8)")
    return 0
