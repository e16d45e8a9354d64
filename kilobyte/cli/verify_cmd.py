"""CLI stage: `kilobyte verify DIR` — the compiled C model against the numpy reference and TFLite Micro."""

from __future__ import annotations

from .common import print_json


def register(sub) -> None:
    p = sub.add_parser(
        "verify", help="check a compiled model bit for bit: host C == numpy reference == TFLite Micro",
        description="Build the project in DIR for the host (strict warnings; plus an ASan/UBSan build with guard "
        "bytes around the arena), run it on random and dataset inputs, and compare every output byte with "
        "Kilobyte's numpy int8 reference and TensorFlow Lite Micro. Exit code 1 on any mismatch.")
    p.add_argument("dir", metavar="DIR", help="directory written by `kilobyte compile`")
    p.add_argument("--samples", type=int, default=8, help="random inputs (default 8)")
    p.add_argument("--data", metavar="NAME|PATH", help="also verify on dataset images (mnist, digits, .npz, folder)")
    p.add_argument("--no-tflm", action="store_true", help="skip TensorFlow Lite Micro")
    p.add_argument("--no-sanitize", action="store_true", help="skip the ASan/UBSan build")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..codegen.verify import verify_project

    rep = verify_project(args.dir, n_random=args.samples, data=args.data, tflm=not args.no_tflm,
                         sanitize=not args.no_sanitize, progress=not args.json)
    if args.json:
        print_json({"ok": rep.ok, "inputs": rep.inputs, "engines": list(rep.engines),
                    "sanitizer_runs": rep.sanitizer_runs, "mismatches": rep.mismatches})
    else:
        for line in rep.mismatches:
            print(f"MISMATCH {line}")
        status = "OK: bit-exact" if rep.ok else "FAILED"
        print(f"{status} on {rep.inputs} inputs ({' == '.join(rep.engines)}; {rep.sanitizer_runs} sanitizer runs)")
    return 0 if rep.ok else 1
