"""Behaviour lock for refactors (issue 27): the generated C projects of a fixed corpus, as SHA-256 digests per file.

The corpus: the zoo's models (small widths and resolutions, calibrated on fixed random images), random graphs
(convs, depthwise, pools, residual ADDs, CONCATs, PADs, heads), random decoders (TRANSPOSE_CONV, both resizes, GELU),
every data-movement and upsampling case of `tests/random_nets.py`, the unary (LUT) ops, PRELU, the softmaxes,
sparse (FWCS / CSR) convolutions and float edges — each compiled with the default options, the DSP kernel set and,
for the zoo's CNNs, a patch stage. Every file of every project (model.c, model.h, runtime copies, Makefile,
CMakeLists.txt, kilobyte.json with the plan's arena, order and patch figures, model.tflite) is hashed, and the search's
resource estimate of the graph (`estimate_resources`) and its analysis (`profile`: MACs, ops, params, Flash, peak,
per layer) are recorded.

    python bench/codegen_digest.py --write /tmp/before.json    # on the commit before a refactor
    python bench/codegen_digest.py --check /tmp/before.json    # after it: exit 1 naming every project that differs

The digests depend on the exact numpy / torch versions (calibration), so the reference is written on the same
machine, not stored in the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

ZOO = [("mnist-cnn", 28, 1.0), ("mobilenetv2", 64, 0.35), ("mbv2-rd", 64, 0.35), ("mnasnet", 64, 0.35),
       ("proxyless-mobile", 64, 0.35), ("resnet-small", 32, 1.0), ("vgg-small", 32, 1.0), ("kws-dscnn", None, 1.0),
       ("ic-resnet8", None, 1.0), ("vww-mbv1", None, 0.25), ("ad-autoencoder", None, 1.0)]


def corpus():
    """(name, int8 graph, option sets) of every case, built deterministically."""
    import random_decoders
    import random_nets
    import softmax_cases
    import sparse_nets
    import unary_cases
    from codegen.test_prelu_codegen import prelu_model

    from kilobyte import api
    from kilobyte.ir import Op
    from kilobyte.quant import quantize

    both = ("default", "dsp")
    for name, res, width in ZOO:
        model = api.load(name, resolution=res, width=width)
        shape = model.graph.tensors[model.graph.inputs[0]].shape
        samples = np.random.default_rng(0).normal(0.0, 1.0, (4,) + tuple(shape[1:])).astype(np.float32)
        yield f"zoo-{name}", quantize(model.graph, samples), both + (("patch",) if len(shape) == 4 else ())
    for seed in range(12):
        yield f"random-{seed}", random_nets.quantized(random_nets.random_graph(seed), seed)[0], both
    for seed in range(6):
        yield f"decoder-{seed}", random_nets.quantized(random_decoders.random_decoder(seed, gelu=seed % 2 == 1),
                                                       seed)[0], both
    for kind in random_nets.MOVEMENTS:
        yield f"movement-{kind}", random_nets.movement_model(kind), both
    for kind in random_nets.UPSAMPLES:
        yield f"upsample-{kind}", random_nets.upsample_model(kind), both
    for i, (op, q_in, q_out, alpha) in enumerate(unary_cases.CASES + unary_cases.LITERT_CASES):
        yield f"unary-{i}-{op.value}", unary_cases.unary_graph(op, q_in, q_out, alpha), ("default",)
    for op in (Op.SOFTMAX, Op.LOG_SOFTMAX):
        for shape in softmax_cases.SHAPES:
            yield f"{op.value}-{'x'.join(map(str, shape))}", softmax_cases.softmax_graph(op, shape, 0.1), ("default",)
    for i in range(len(sparse_nets.CASES)):
        for fmt in ("fwcs", "csr"):
            yield f"sparse-{i}-{fmt}", sparse_nets.case_graph(i, fmt)[0], both
    q = random_nets.quantized(random_nets.random_graph(3), 3)[0]
    for head, tail in ((True, False), (False, True), (True, True)):
        yield f"edges-{int(head)}{int(tail)}", random_nets.float_edges(q, head, tail), ("default",)
    yield "heads-3", random_nets.quantized(random_nets.heads_graph(3), 0)[0], both
    for seed, per_channel, concat in ((0, True, False), (1, False, False), (2, True, True)):
        yield f"prelu-{seed}", prelu_model(seed, per_channel, concat), both


def float_graphs():
    """(name, float graph) of the zoo and the random nets, as the search hands graphs to `estimate_resources`."""
    import random_nets

    from kilobyte import api

    for name, res, width in ZOO:
        yield f"float/zoo-{name}", api.load(name, resolution=res, width=width).graph
    for seed in range(12):
        yield f"float/random-{seed}", random_nets.random_graph(seed)


def options(kind: str):
    from kilobyte.schedule.plan_types import PlanOptions

    return {"default": PlanOptions(), "dsp": PlanOptions(kernels="dsp"),
            "patch": PlanOptions(patch="auto", max_mac_overhead=None)}[kind]


def estimate(graph, opts) -> str:
    """The search's figures for the graph (`estimate_resources`: peak, arena, scratch, input, weights, code, MACs,
    kernel families and functions) and its float MACs / params (`analysis`), as one line: what the Flash model, the
    planner and the analyses say must not move either."""
    from kilobyte.analysis import profile
    from kilobyte.errors import KilobyteError
    from kilobyte.schedule.estimate import estimate_resources

    try:
        r = estimate_resources(graph, opts)
        p = json.dumps(profile(graph).to_dict(), sort_keys=True, default=str)
        return f"{r} profile={hashlib.sha256(p.encode()).hexdigest()}"
    except KilobyteError as e:
        return f"error: {e}"


def digests(root: Path, progress: bool = True) -> dict[str, dict[str, str]]:
    from kilobyte.codegen import compile_graph
    from kilobyte.errors import KilobyteError

    out: dict[str, dict[str, str]] = {}
    for name, graph, kinds in corpus():
        for kind in kinds:
            key = f"{name}/{kind}"
            d = root / key.replace("/", "__")
            try:
                compile_graph(graph, d, options(kind))
            except KilobyteError as e:  # a refused case is behaviour too: its message is the digest
                out[key] = {"error": hashlib.sha256(str(e).encode()).hexdigest()}
                continue
            out[key] = {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in sorted(d.rglob("*")) if p.is_file()}
            out[key]["estimate"] = estimate(graph, options(kind))
            if progress:
                print(f"{key}: {len(out[key])} files", file=sys.stderr)
    for name, graph in float_graphs():
        out[name] = {kind: estimate(graph, options(kind)) for kind in ("default", "dsp")}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="write the digests of the current code to this JSON file")
    group.add_argument("--check", type=Path, help="compare the current code's digests with this JSON file")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        now = digests(Path(tmp))
    if args.write:
        part = args.write.with_suffix(".part")
        part.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        part.replace(args.write)
        print(f"wrote {len(now)} projects to {args.write}")
        return 0
    before = json.loads(args.check.read_text())
    bad = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    for key in bad:
        files = sorted(f for f in (before.get(key) or {}).keys() | (now.get(key) or {}).keys()
                       if (before.get(key) or {}).get(f) != (now.get(key) or {}).get(f))
        print(f"DIFFERS {key}: {', '.join(files) or 'missing'}")
    print(f"{len(before) - len(bad)} of {len(before)} projects identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
