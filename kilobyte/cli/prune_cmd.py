"""CLI stage: `kilobyte prune MODEL --data D --sparsity S | --device D [--method filterlet|csr|channel] --out DIR` —
train (or take trained) a PyTorch model, prune it, retrain, quantise, and report what the pruning saved.

Writes DIR/report.json (the `--json` output), DIR/pruned.pt (the pruned float module, `torch.save`) and DIR/model.tflite
(its int8 graph, pruned weights stored as zeros: TFLite has no FWCS or CSR). The Flash figures count the pruned
layers in their sparse formats (FWCS for filterlets, CSR for weights); `kilobyte compile` does not emit those formats
from this command's output.
"""

from __future__ import annotations

from pathlib import Path

from .common import add_model_args, atomic_write_bytes, print_json


def register(sub) -> None:
    p = sub.add_parser(
        "prune", help="prune a PyTorch model: DTMM filterlets, unstructured (CSR) or channels",
        description="Train the model on the dataset (--epochs; 0 if it is trained already), score its standard "
        "convolutions' filterlets, weights or channels by first-order Taylor importance, remove the least important "
        "to a sparsity (or, with --device, to the ratios DTMM's scheduler picks to fit the device's Flash with the "
        "least modelled latency), retrain with the pruned weights held at zero, and quantise to int8.")
    add_model_args(p)
    p.add_argument("--data", required=True, metavar="NAME|PATH", help="dataset: mnist, digits, .npz or folder")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--sparsity", type=float, metavar="S", help="fraction of the prunable weights to remove")
    target.add_argument("--device", "-d", metavar="DEVICE", help="fit this device's Flash (filterlet method)")
    p.add_argument("--devices-file", default=None, help="TOML file with extra devices (default: $KILOBYTE_DEVICES)")
    p.add_argument("--method", choices=["filterlet", "csr", "channel"], default="filterlet",
                   help="pruning unit (default filterlet)")
    p.add_argument("--loss-budget", type=float, default=None, metavar="DL",
                   help="--device: most summed Taylor loss the pruned filterlets may cost (default 0.01)")
    p.add_argument("--epochs", type=int, default=10, help="training epochs before pruning (default 10; 0: none)")
    p.add_argument("--retrain-epochs", type=int, default=3, help="retraining epochs after pruning (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="output folder")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..api import load, prune

    model = load(args.model, resolution=args.resolution or _data_resolution(args.data), width=args.width,
                 channels=args.channels or _data_channels(args.data), num_classes=args.classes)
    device = None
    if args.device:
        from ..targets.devices import get_device

        device = get_device(args.device, args.devices_file)
    result = prune(model, args.data, method=args.method, sparsity=args.sparsity, device=device, epochs=args.epochs,
                   retrain_epochs=args.retrain_epochs, loss_budget=args.loss_budget, seed=args.seed)
    report = result.to_dict()
    _write(Path(args.out), result, report)
    if args.json:
        print_json(report)
    else:
        print(format_report(report))
        print(f"wrote {args.out}/report.json, pruned.pt, model.tflite")
    return 0


def _data_resolution(spec: str) -> int:
    return _peek(spec).shape[1]


def _data_channels(spec: str) -> int:
    return _peek(spec).shape[3]


def _peek(spec: str):
    from ..data import load_dataset

    return load_dataset(spec).x[:1]


def _write(out: Path, result, report: dict) -> None:
    import io
    import json

    import torch

    from ..export.tflite import to_tflite

    buf = io.BytesIO()
    torch.save(result.module, buf)
    atomic_write_bytes(out / "pruned.pt", buf.getvalue())
    atomic_write_bytes(out / "model.tflite", to_tflite(result.graph))
    atomic_write_bytes(out / "report.json", (json.dumps(report, indent=2) + "\n").encode())


def format_report(r: dict) -> str:
    """The human table: one line per pruned layer, then the totals."""
    lines = [f"{'layer':<28} {'ratio':>6} {'weights B':>10} {'index B':>8}"]
    for layer in r["layers"]:
        lines.append(f"{layer['name']:<28} {layer['ratio']:>6.1%} {layer['weight_bytes']:>10} "
                     f"{layer['index_bytes']:>8}")
    before, after = r["accuracy_before"], r["accuracy_after"]
    lines += [f"method {r['method']}: {r['sparsity']:.1%} of the convolution weights removed; "
              f"weights {r['weight_bytes']} B + index {r['index_bytes']} B; "
              f"Flash {r['flash_bytes']} B (unpruned {r['dense_flash_bytes']} B)",
              f"accuracy float {before['float']:.1%} -> {after['float']:.1%}, "
              f"int8 {before['int8']:.1%} -> {after['int8']:.1%} (held-out)"]
    return "\n".join(lines)
