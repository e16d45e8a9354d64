"""CLI stage: `kilobyte verify DIR [--target CORE]` — the compiled C model against the numpy reference (and TFLM).

On the host: host C == numpy reference == TFLite Micro (+ an ASan/UBSan build). With --target: the firmware for
that Cortex-M core runs every input under QEMU and must equal the numpy reference and the host C build. The report
names every oracle that ran and every one that did not, with why (`VerifyReport.summary`, `--json`: engines, not_run).
"""

from __future__ import annotations

from pathlib import Path

from ..driver import verify_on_target, verify_project
from ..errors import DoesNotFitError
from ..targets.cortexm.firmware import planned_kernel_set
from .bench_cmd import add_target_args, does_not_fit, target_device
from .common import add_command, add_json_arg, add_project_dir_arg, print_json


def register(sub) -> None:
    """check a compiled model bit for bit: host C (or Cortex-M under QEMU) == numpy reference == TFLM

    Build the project in DIR for the host (strict warnings; plus an ASan/UBSan build with guard bytes around the arena),
    run it on random and dataset inputs, and compare every output byte with Kilobyte's numpy int8 reference and
    TensorFlow Lite Micro (TFLite's interpreter for a model with an op TFLite Micro lacks, when kilobyte[litert] is
    installed). With --target, build the firmware for that Cortex-M core instead and run every input under QEMU: its
    output must equal the numpy reference and the host C build bit for bit. The report names each oracle that ran and
    each that did not, and why (e.g. 'TFLM: not run (no kernel for GELU)'; --json: engines, not_run). Exit code 1 on any
    mismatch, fault or timeout; 2 if it does not fit --device.
    """
    p = add_command(sub, "verify", register)
    add_project_dir_arg(p)
    p.add_argument("--samples", type=int, default=8, help="random inputs (default 8)")
    p.add_argument("--data", metavar="NAME|PATH", help="also verify on dataset images (mnist, digits, "
                   "letters, .npz, folder)")
    p.add_argument("--no-tflm", action="store_true",
                   help="skip TensorFlow Lite Micro (and TFLite's interpreter, its stand-in on GELU and TILE)")
    p.add_argument("--no-sanitize", action="store_true", help="skip the ASan/UBSan build (host check only)")
    add_target_args(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    target, device = target_device(args)
    if target is None:
        rep = verify_project(args.dir, n_random=args.samples, data=args.data, tflm=not args.no_tflm,
                             sanitize=not args.no_sanitize, progress=not args.json)
    else:
        try:
            rep = verify_on_target(args.dir, target, device=device, kernels=args.kernels, n_random=args.samples,
                                   data=args.data, progress=not args.json)
        except DoesNotFitError as e:
            return does_not_fit(e)
    if args.json:
        out = rep.to_json()
        if target is not None:
            kernels = args.kernels or planned_kernel_set(Path(args.dir))
            out.update(target=rep.target, kernels=kernels, device=device.name if device else None,
                       stack_bytes=rep.stack_bytes)
        print_json(out)
    else:
        for line in rep.mismatches:
            print(f"MISMATCH {line}")
        print(rep.summary())
        if rep.float_entry:
            print(f"  {rep.float_entry}")
        if rep.detections:
            print(f"  {rep.detections}")
    return 0 if rep.ok else 1
