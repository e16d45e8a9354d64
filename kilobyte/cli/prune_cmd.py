"""CLI stage: `kilobyte prune MODEL --data D --sparsity S | --device D [--method filterlet|csr|channel] --out DIR
[--target cortex-m4|cortex-m7]` — train (or take trained) a PyTorch model, prune it, retrain, quantise, compile the
pruned int8 model to a C library and report what the pruning saved.

DIR is the compiled project of `kilobyte compile` (src/, Makefile, CMakeLists.txt, kilobyte.json, model.tflite —
the int8 graph, pruned weights stored as zeros: TFLite has no FWCS or CSR), its pruned convolutions stored in FWCS
(filterlet) or CSR (csr), plus report.json (the `--json` output) and pruned.pt (the pruned float module,
`torch.save`). The host build is verified bit for bit against the numpy reference and TFLite Micro before the report
is written; `--target` also runs the firmware under QEMU (bit-exact) and counts its instructions; `--device` also
links it for the device and reports the measured fit (exit code 2 if it does not fit, as `kilobyte compile`).
"""

from __future__ import annotations

from pathlib import Path

from ..api import prune
from ..atomic import save_torch, write_json
from ..data import load_dataset
from ..driver import VerifyReport, compile_checked, device_fit, load
from ..errors import KilobyteError
from .common import KERNEL_SETS, add_command, add_devices_file_arg, add_json_arg, add_model_args, get_device, print_json


def register(sub) -> None:
    """prune a PyTorch model: DTMM filterlets, unstructured (CSR) or channels

    Train the model on the dataset (--epochs; 0 if it is trained already), score its standard convolutions' filterlets,
    weights or channels by first-order Taylor importance, remove the least important to a sparsity (or, with --device,
    to the ratios DTMM's scheduler picks to fit the device's Flash with the least modelled latency), retrain with the
    pruned weights held at zero, and quantise to int8. Then compile it into --out as `kilobyte compile` does, the pruned
    convolutions in FWCS (filterlet) or CSR (csr), verify the host build bit for bit against TFLite Micro on random
    inputs and images of --data, and report the per-layer ratios and bytes, Flash, accuracy before and after, and with
    --target the instructions of a QEMU-verified Cortex-M run. Exit code 2 if it does not fit --device (measured on the
    linked firmware).
    """
    p = add_command(sub, "prune", register)
    add_model_args(p)
    p.add_argument("--data", required=True, metavar="NAME|PATH", help="dataset: mnist, digits, letters, .npz or "
                   "folder")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--sparsity", type=float, metavar="S", help="fraction of the prunable weights to remove")
    target.add_argument("--device", "-d", metavar="DEVICE", help="fit this device's Flash (filterlet method)")
    add_devices_file_arg(p)
    p.add_argument("--method", choices=["filterlet", "csr", "channel"], default="filterlet",
                   help="pruning unit (default filterlet)")
    p.add_argument("--loss-budget", type=float, default=None, metavar="DL",
                   help="--device: most summed Taylor loss the pruned filterlets may cost (default 0.01)")
    p.add_argument("--epochs", type=int, default=10, help="training epochs before pruning (default 10; 0: none)")
    p.add_argument("--retrain-epochs", type=int, default=3, help="retraining epochs after pruning (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kernels", choices=KERNEL_SETS, default=None,
                   help="the kernel set the library is planned and built for (as `kilobyte compile --kernels`; "
                   "default: dsp with --target, the Cortex-M kernels the firmware would run, else portable)")
    p.add_argument("--target", "-t", choices=("cortex-m4", "cortex-m7"), default=None,
                   help="also build the firmware for this core, run it under QEMU (bit-exact with the reference) "
                   "and count its instructions (unicorn), in total and per layer")
    p.add_argument("--out", "-o", required=True, metavar="DIR",
                   help="output folder: the compiled C library (replaced atomically) and the report")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:

    out = Path(args.out)
    _check_out(out)  # before minutes of training, not after
    import torch

    torch.manual_seed(args.seed)  # a zoo model's initial weights: the same command gives the same model
    model = load(args.model, resolution=args.resolution or _data_resolution(args.data), width=args.width,
                 channels=args.channels or _data_channels(args.data), num_classes=args.classes)
    device = get_device(args)
    kernels = args.kernels or ("dsp" if args.target else "portable")
    result = prune(model, args.data, method=args.method, sparsity=args.sparsity, device=device, epochs=args.epochs,
                   retrain_epochs=args.retrain_epochs, loss_budget=args.loss_budget, seed=args.seed, kernels=kernels)
    build = compile_checked(result.graph, out, args.data, name=args.model, kernels=kernels, target=args.target)
    fit, _ = device_fit(build.compiled, device)
    report = build_report(result, build, fit)
    _write(out, result, report)
    if args.json:
        print_json(report)
    else:
        print(format_report(report))
        print(f"wrote {out}/: the C library (src/, Makefile, CMakeLists.txt), report.json, pruned.pt, model.tflite")
    return 2 if fit.fits is False else 0  # None: no --device, nothing checked


def _check_out(out: Path) -> None:
    """`kilobyte compile` replaces a project folder and refuses any other non-empty one: say so before training."""

    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "kilobyte.json").exists())):
        raise KilobyteError(f"{out}: exists and is not a Kilobyte project; choose another --out")


def build_report(result, build, fit) -> dict:
    """The `--json` report: the pruning (`PruneResult.to_dict`), the compiled library (a `driver.CheckedBuild`), its
    verification and, with a target, its instruction counts (total and per layer) and measured Flash / SRAM; with a
    device, the measured fit (`fit`, a `driver.FitReport`)."""
    report = result.to_dict()
    m = build.compiled.manifest
    report["macs"] = m["macs"]
    report["compiled"] = {"out_dir": str(build.compiled.out_dir), "kernels": m["kernel_set"],
                          "arena_bytes": m["arena_bytes"], "flash_bytes": fit.flash_estimate_bytes,
                          "weight_bytes": fit.weight_bytes, "code_bytes": fit.code_bytes}
    node = {n.origin: n.name for n in build.compiled.graph.nodes if n.op.value == "CONV_2D"}
    for layer in report["layers"]:
        layer["node"] = node[layer["name"]]  # its arrays in src/model.c: kb_w_<node>, kb_i_<node>, kb_f_<node>
    report["verified"] = {"host": _verified(build.host)}
    if build.bench is not None:
        b = build.bench
        report["verified"][b["target"]] = _verified(build.target)
        report["instructions"], report["cycles"] = b["instructions"], b["cycles"]
        report["target"] = {"core": b["target"], "kernels": b["kernels"], "flash_bytes": b["flash_bytes"],
                            "sram_bytes": b["sram_bytes"], "stack_bytes": b["stack_bytes"],
                            "instructions_per_mac": b["instructions_per_mac"], "cycles_per_mac": b["cycles_per_mac"]}
        per_function = b["per_layer_instructions"] or {}  # by generated function: kb_layer_<step>_<node>
        per_node = {f.split("_", 3)[3]: n for f, n in per_function.items()}
        cycles = {f.split("_", 3)[3]: n for f, n in (b["per_layer_cycles"] or {}).items()}
        for layer in report["layers"]:
            layer["instructions"], layer["cycles"] = per_node.get(layer["node"]), cycles.get(layer["node"])
        report["per_layer_instructions"] = per_function
    if fit.device is not None:
        report["fit"] = {"device": fit.device, "fits": fit.fits, "memory": fit.memory, "flash_bytes": fit.flash_bytes,
                         "sram_bytes": fit.sram_bytes, "verdict": fit.verdict}
    return report


def _verified(rep) -> dict:
    """A `VerifyReport` as report.json keeps it: the oracles that ran, those that did not and why."""
    return rep.to_json()


def _data_resolution(spec: str) -> int:
    return _peek(spec).shape[1]


def _data_channels(spec: str) -> int:
    return _peek(spec).shape[3]


def _peek(spec: str):

    return load_dataset(spec).x[:1]


def _write(out: Path, result, report: dict) -> None:
    save_torch(result.module, out / "pruned.pt")
    write_json(out / "report.json", report, indent=2)


def format_report(r: dict) -> str:
    """The human table: one line per pruned layer, then the totals."""
    lines = [f"{'layer':<28} {'ratio':>6} {'weights B':>10} {'index B':>8}"]
    for layer in r["layers"]:
        lines.append(f"{layer['name']:<28} {layer['ratio']:>6.1%} {layer['weight_bytes']:>10} "
                     f"{layer['index_bytes']:>8}")
    before, after = r["accuracy_before"], r["accuracy_after"]
    lines += [f"method {r['method']}: {r['sparsity']:.1%} of the convolution weights removed; "
              f"weights {r['weight_bytes']} B + index {r['index_bytes']} B; "
              f"Flash {r['flash_bytes']} B (unpruned {r['dense_flash_bytes']} B); MACs {r['macs']:,}",
              f"dead before pruning: {r['dense_dead_fraction']:.1%} of the unpruned model's convolution weights only "
              "ever multiply padding",
              f"accuracy float {before['float']:.1%} -> {after['float']:.1%}, "
              f"int8 {before['int8']:.1%} -> {after['int8']:.1%} (held-out)"]
    for where, v in r["verified"].items():  # "host", or the core the firmware ran on under QEMU
        lines.append(f"{where}: {VerifyReport.from_json(v).summary()}")
    if "instructions" in r:
        t = r["target"]
        lines.append(f"{t['core']} ({t['kernels']} kernels): {r['instructions']:,} instructions, "
                     f"{r['cycles']:,} cycles (modelled), Flash "
                     f"{t['flash_bytes']} B, SRAM {t['sram_bytes']} B (measured)")
    if "fit" in r:
        lines.append(r["fit"]["verdict"])
    return "\n".join(lines)
