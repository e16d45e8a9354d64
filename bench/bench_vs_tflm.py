"""Benchmark: Kilobyte's generated C vs TensorFlow Lite Micro, side by side in one run, on the same int8 models.

For each model (zoo nets at MCU sizes, random weights with settled BatchNorm statistics, quantised on random
images): TFLM's arena (smallest `arena_size` that allocates; TFLM keeps the input inside it) vs ours = arena
(tensors + scratch) + the caller-owned input buffer; TFLM `invoke()` median latency (the wheel's reference kernels)
vs our host build's median; and whether the outputs are identical. TinyEngine's published SRAM (thesis Table 5.4)
is listed beside ours where it exists. Writes bench/results/vs_tflm.json and prints a markdown table.

"SAME padding" rows run the same network with TFLite's SAME padding on its strided convolutions (one pixel after,
none before), as a TensorFlow-trained model has. The zoo follows PyTorch (k//2 on every side), which TFLite can only
express with an explicit PAD operator before each strided conv; TFLM then holds the padded copy beside the tensor it
pads (MbV2 w0.35 r144: 248,832 B + 262,848 B = TFLM's whole 511,680 B head), while Kilobyte folds padding into the
kernel. The SAME twins compare both engines without that handicap.

    python bench/bench_vs_tflm.py            # all models (a few minutes)
    python bench/bench_vs_tflm.py --quick    # two small models
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kilobyte.api import load  # noqa: E402
from kilobyte.codegen import HostModel, compile_graph  # noqa: E402
from kilobyte.export.tflite import to_tflite  # noqa: E402
from kilobyte.formats.tflite_schema import same_pads  # noqa: E402
from kilobyte.ir import Op  # noqa: E402
from kilobyte.quant import quantize  # noqa: E402
from kilobyte.schedule.plan_types import PlanOptions  # noqa: E402
from kilobyte.targets.tflm import run_tflm, tflm_arena_bytes, tflm_arena_report, tflm_invoke_latency  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "vs_tflm.json"
# (label, zoo name, width, resolution, patch option, TinyEngine published SRAM in kB or None, SAME padding)
MODELS = [
    ("MbV2 w0.35 r96", "mobilenetv2", 0.35, 96, None, None, False),
    ("MbV2 w0.35 r144", "mobilenetv2", 0.35, 144, None, 308, False),
    ("MbV2 w0.35 r144 + patches", "mobilenetv2", 0.35, 144, "auto", None, False),
    ("MbV2 w0.35 r144, SAME padding", "mobilenetv2", 0.35, 144, None, 308, True),
    ("MbV2 w0.35 r144, SAME padding + patches", "mobilenetv2", 0.35, 144, "auto", None, True),
    ("Proxyless w0.3 r176", "proxyless-mobile", 0.3, 176, None, 292, False),
    ("Proxyless w0.3 r176, SAME padding", "proxyless-mobile", 0.3, 176, None, 292, True),
    ("VGG-small r32", "vgg-small", 1.0, 32, None, None, False),
    ("ResNet-small r32", "resnet-small", 1.0, 32, None, None, False),
    ("MNIST demo net r28", "mnist-cnn", 1.0, 28, None, None, False),
]
REPEATS = 15


def host_latency(host: HostModel, x: np.ndarray, repeats: int) -> float:
    host(x)  # warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        host(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def same_padding_twin(graph):
    """`graph` with TFLite's SAME padding on every padded strided CONV_2D / DEPTHWISE_CONV_2D (same output shapes
    for even input sizes, which `verify()` checks): the network as TensorFlow would have defined it."""
    nodes = []
    for n in graph.nodes:
        a = n.attrs
        if n.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D) and a.stride != (1, 1) and any(a.padding):
            _, h, w, _ = graph.tensors[n.inputs[0]].shape
            _, kh, kw, _ = graph.tensors[n.inputs[1]].shape
            pads = same_pads(h, kh, a.stride[0], a.dilation[0]) + same_pads(w, kw, a.stride[1], a.dilation[1])
            n = dataclasses.replace(n, attrs=dataclasses.replace(a, padding=pads))
        nodes.append(n)
    return graph.replace(nodes=tuple(nodes)).verify()


def pad_ops(tfl: bytes) -> int:
    """PAD operators in a .tflite (padding TFLite's SAME/VALID cannot express, written as its own op)."""
    import tflite

    model = tflite.Model.GetRootAsModel(tfl, 0)
    sub = model.Subgraphs(0)
    codes = [model.OperatorCodes(sub.Operators(i).OpcodeIndex()).BuiltinCode() for i in range(sub.OperatorsLength())]
    return codes.count(tflite.BuiltinOperator.PAD)


def one(label, name, width, res, patch, tinyengine_kb, same, workdir: Path) -> dict:
    graph = load(name, width=width, resolution=res).graph
    graph = same_padding_twin(graph) if same else graph
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(0)
    q = quantize(graph, [rng.random(shape, dtype=np.float32) for _ in range(8)])
    tfl = to_tflite(q)
    res_c = compile_graph(q, workdir / label.replace(" ", "_"), PlanOptions(patch=patch, max_mac_overhead=None),
                         model_name=name)  # "+ patches": the smallest arena, no MAC limit
    host = HostModel(res_c.out_dir)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    ours = host(x)
    theirs = run_tflm(tfl, x, preserve_all=True).tensors[res_c.graph.outputs[0]].reshape(ours.shape)
    tflm_arena, tflm_recorded = tflm_arena_bytes(tfl), tflm_arena_report(tfl)
    ours_sram = res_c.plan.arena_bytes + res_c.plan.input_bytes
    t_tflm, t_ours = tflm_invoke_latency(tfl, x, repeats=REPEATS), host_latency(host, x, REPEATS)
    return {"model": label, "macs": res_c.plan.macs, "tflm_arena_bytes": tflm_arena,
            "tflm_head_bytes": tflm_recorded["head"], "tflm_tail_bytes": tflm_recorded["tail"],
            "tflm_pad_ops": pad_ops(tfl), "kilobyte_peak_bytes": res_c.plan.peak_bytes,
            "kilobyte_arena_bytes": res_c.plan.arena_bytes, "kilobyte_input_bytes": res_c.plan.input_bytes,
            "kilobyte_sram_bytes": ours_sram, "sram_ratio": tflm_arena / ours_sram,
            "tflm_latency_ms": t_tflm * 1e3, "kilobyte_latency_ms": t_ours * 1e3, "speedup": t_tflm / t_ours,
            "identical": bool(np.array_equal(ours, theirs)), "patch": res_c.manifest.get("patch"),
            "tinyengine_sram_kb": tinyengine_kb}


def markdown(rows: list[dict]) -> str:
    head = ("| model | MACs | TFLM arena | Kilobyte arena + input | SRAM ratio | TinyEngine (published) | "
            "TFLM latency | Kilobyte latency | speed-up | outputs identical |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        te = f"{r['tinyengine_sram_kb']} kB" if r["tinyengine_sram_kb"] else "–"
        lines.append(
            f"| {r['model']} | {r['macs'] / 1e6:.1f} M | {r['tflm_arena_bytes'] / 1024:.1f} kB | "
            f"{r['kilobyte_arena_bytes'] / 1024:.1f} + {r['kilobyte_input_bytes'] / 1024:.1f} = "
            f"{r['kilobyte_sram_bytes'] / 1024:.1f} kB | {r['sram_ratio']:.2f}× | {te} | "
            f"{r['tflm_latency_ms']:.2f} ms | {r['kilobyte_latency_ms']:.2f} ms | {r['speedup']:.1f}× | "
            f"{'yes' if r['identical'] else 'NO'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the two smallest models")
    args = ap.parse_args()
    models = [m for m in MODELS if m[1] in ("vgg-small", "mnist-cnn")] if args.quick else MODELS
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            print(f"... {m[0]}", file=sys.stderr, flush=True)
            rows.append(one(*m, Path(tmp)))
    table = markdown(rows)
    print(table)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        meta = {"machine": platform.platform(), "python": platform.python_version(), "repeats": REPEATS}
        RESULTS.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
