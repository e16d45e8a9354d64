"""CLI stage: `kilobyte compile MODEL --device D --out DIR` — quantise (if float), plan, generate and build C."""

from __future__ import annotations

from .common import add_device_arg, add_model_args, get_device, kb, load_model, print_json
from .plan_cmd import parse_patch
from .profile_cmd import fit_verdict

CODE_BYTES_PER_KERNEL = 2048  # estimate of one kernel family's Flash (host builds cannot measure Cortex-M code)


def register(sub) -> None:
    p = sub.add_parser(
        "compile", help="generate a C library for the model (quantising float models first) and build it",
        description="Quantise a float model with calibration data (--data), plan its memory, generate model.c/"
        "model.h with only the kernels it uses and a static arena of exactly the planned size, build it on the "
        "host and print the fit report (SRAM = arena incl. scratch; Flash = weights + code). Exit code 2 if it "
        "does not fit --device.")
    add_model_args(p)
    add_device_arg(p, default="stm32f412")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="output directory (replaced atomically)")
    p.add_argument("--data", metavar="NAME|PATH", help="calibration data for float models: mnist, digits, .npz, folder")
    p.add_argument("--samples", type=int, default=64, help="calibration images (default 64)")
    p.add_argument("--patch", default="off", metavar="auto|off|N,P", help="patch-based stage (see `kilobyte plan`)")
    p.add_argument("--no-inplace", action="store_true", help="disable in-place depthwise/add and aliasing")
    p.add_argument("--json", action="store_true", help="print the fit report as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..api import compile_model

    model = load_model(args)
    device = get_device(args)
    result = compile_model(model, args.out, data=args.data, samples=args.samples,
                           patch=parse_patch(args.patch, model.graph), inplace=not args.no_inplace)
    report = fit_report(result, device)
    if args.json:
        print_json(report)
    else:
        print(f"wrote {result.out_dir}/ ({', '.join(result.manifest['kernels'])} kernels)")
        print(f"SRAM  arena {kb(report['arena_bytes'])} (incl. scratch {kb(report['scratch_bytes'])}) + input "
              f"{kb(report['input_bytes'])} (caller-owned)")
        print(f"Flash weights {kb(report['weight_bytes'])} + code ~{kb(report['code_bytes'])} (estimate)")
        print(f"MACs  {report['macs'] / 1e6:.2f} M")
        if report["verdict"]:
            print(report["verdict"])
    return 0 if report["fits"] else 2


def weight_bytes(graph) -> int:
    """Flash of the constant data the C model holds: weights, biases and per-channel multipliers/shifts."""
    total = 0
    for node in graph.nodes:
        consts = [graph.tensors[t] for t in node.inputs if graph.tensors[t].is_const]
        total += sum(t.nbytes for t in consts)
        if len(consts) >= 1:
            total += 8 * graph.tensors[node.outputs[0]].shape[-1]  # int32 multiplier + shift per channel
    return total


def fit_report(result, device) -> dict:
    m = result.manifest
    wbytes = weight_bytes(result.graph)
    code = CODE_BYTES_PER_KERNEL * len(m["kernels"])
    verdict = fit_verdict(m["arena_bytes"], wbytes + code, device)
    return {"out_dir": str(result.out_dir), "arena_bytes": m["arena_bytes"], "scratch_bytes": m["scratch_bytes"],
            "peak_bytes": m["peak_bytes"], "input_bytes": m["input_bytes"], "weight_bytes": wbytes,
            "code_bytes": code, "flash_bytes": wbytes + code, "macs": m["macs"],
            "device": device.name if device else None, "fits": verdict["fits"], "verdict": verdict["text"]}
