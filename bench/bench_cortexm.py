"""Benchmark of the Cortex-M kernels: executed instructions per inference, portable C vs the DSP (SMLAD) kernels.

For each model (MobileNetV2 w0.35 at 96 px, vgg-small and resnet-small at 32 px, mnist-cnn at 28 px; int8, quantised
on random calibration images) and each core (Cortex-M4, M7), the firmware is built with kernels="portable" and
kernels="dsp", and with the DSP kernels once more from a plan with conv_columns="wide" (six im2col columns for every
conv, even where that raises the SRAM peak). One inference is emulated with unicorn (`count_instructions`:
deterministic, a proxy for time, not a cycle count). Reported: instructions per inference and per MAC, overall and by
layer kind (per-layer counts / that layer's MACs from `node_macs`): all CONV_2D layers together, the share of conv
MACs in layers at <= 1.0 instr/MAC, the conv-heavy layer (each model's CONV_2D layer with the most MACs, the slowest
of them on a tie; its MACs per output value say how long its dot products are), the best CONV_2D layer, the
depthwise and FC layers; the DSP speed-up; Flash / SRAM from `measure()` and the planned arena. Every build's
output is checked against the numpy reference (`run_int8`) first. Target, recorded and not asserted: <= 1.0
instruction per MAC on the conv-heavy layers with the DSP kernels (default plan). Prints a markdown table and writes
bench/results/cortexm.json (with every weighted layer's count).

    python bench/bench_cortexm.py            # all four models, about 5 minutes
    python bench/bench_cortexm.py --models mnist-cnn vgg-small
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kilobyte.analysis.macs import node_macs  # noqa: E402
from kilobyte.api import load  # noqa: E402
from kilobyte.codegen import compile_graph  # noqa: E402
from kilobyte.interp import run_int8  # noqa: E402
from kilobyte.ir import Op  # noqa: E402
from kilobyte.ops.c_text import c_ident  # noqa: E402
from kilobyte.quant import quantize  # noqa: E402
from kilobyte.schedule import PlanOptions  # noqa: E402
from kilobyte.targets.cortexm import build_firmware, count_instructions, measure  # noqa: E402
from kilobyte.targets.cortexm.toolchain import arm_gcc  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cortexm.json"
MODELS = {  # name -> load() arguments
    "mobilenetv2": dict(width=0.35, resolution=96),
    "vgg-small": dict(width=1.0, resolution=32),
    "resnet-small": dict(width=1.0, resolution=32),
    "mnist-cnn": dict(width=1.0, resolution=28),
}
TARGETS = ("cortex-m4", "cortex-m7")
KERNEL_SETS = ("portable", "dsp")
RUNS = [(t, k, "free") for t in TARGETS for k in KERNEL_SETS] + [(t, "dsp", "wide") for t in TARGETS]
TARGET_IPM = 1.0  # instructions per MAC on conv-heavy layers, DSP kernels


PLANS = [("portable", "free"), ("dsp", "free"), ("dsp", "wide")]  # (PlanOptions.kernels, conv_columns)


def compiled(name: str, out_dir: Path, seed: int = 0):
    """(CompileResult per (kernel set, conv_columns), int8 input): the zoo model quantised on 8 random images and
    compiled for each kernel set with the default plan ("free": im2col columns only from free bytes), and for the DSP
    kernels with conv_columns="wide"."""
    import torch

    torch.manual_seed(seed)  # the zoo's initial weights: the same models, so the same counts, on every run
    graph = load(name, **MODELS[name]).graph
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(seed)
    qgraph = quantize(graph, [rng.normal(0, 1, shape).astype(np.float32) for _ in range(8)])
    results = {(k, cols): compile_graph(qgraph, out_dir / f"{name}-{k}-{cols}",
                                        PlanOptions(conv_columns=cols, kernels=k), model_name=name)
               for k, cols in PLANS}
    first = results[PLANS[0]].graph
    x = rng.integers(-128, 128, first.tensors[first.inputs[0]].shape).astype(np.int8)
    return results, x


def layer_table(graph) -> dict[str, dict]:
    """Generated layer function suffix (the node's C name) -> {node, op, macs, reduction} for weighted nodes;
    reduction = MACs per output value (kh * kw * Cin for a conv)."""
    ops = (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED)
    table = {}
    for n in graph.nodes:
        if n.op in ops:
            macs, outputs = node_macs(graph, n), int(np.prod(graph.tensors[n.outputs[0]].shape))
            table[c_ident(n.name)] = dict(node=n.name, op=n.op.value, macs=macs, reduction=macs // outputs)
    return table


def per_layer(counts: dict[str, int], cycles: dict[str, int] | None, table: dict) -> list[dict]:
    """kb_layer_<k>_<node> counts and modelled cycles (None: a core without a cycle model) -> rows {node, op, macs,
    reduction, instructions, ipm, cycles, cpm} for the weighted layers."""
    rows = []
    for fn, n in counts.items():
        suffix = fn.split("_", 3)[3] if fn.count("_") >= 3 else fn  # kb_layer_<k>_<node>
        if suffix in table and table[suffix]["macs"]:
            macs = table[suffix]["macs"]
            c = cycles[fn] if cycles is not None else None
            rows.append(dict(table[suffix], instructions=n, ipm=round(n / macs, 3), cycles=c,
                             cpm=round(c / macs, 3) if c is not None else None))
    return rows


def at_target(conv: list[dict]) -> float | None:
    """Share of the CONV_2D MACs in layers at <= TARGET_IPM instructions per MAC."""
    total = sum(r["macs"] for r in conv)
    return round(sum(r["macs"] for r in conv if r["ipm"] <= TARGET_IPM) / total, 3) if total else None


def ratio(rows: list[dict], op: str) -> float | None:
    chosen = [r for r in rows if r["op"] == op and r["macs"]]
    return round(sum(r["instructions"] for r in chosen) / sum(r["macs"] for r in chosen), 3) if chosen else None


def bench_model(name: str, work: Path) -> dict:
    start = time.perf_counter()
    results, x = compiled(name, work)
    result = results[PLANS[0]]
    want = run_int8(result.graph, x)[result.graph.outputs[0]].reshape(-1)
    table, macs = layer_table(result.graph), int(result.manifest["macs"])
    runs = []
    for target, kernels, columns in RUNS:
        build = build_firmware(results[kernels, columns].out_dir, target, kernels=kernels)
        count = count_instructions(build, x, timeout=600)
        if not np.array_equal(count.output, want):
            raise SystemExit(f"{name} {target} {kernels} {columns}: output differs from run_int8")
        rows = per_layer(count.per_layer, count.per_layer_cycles, table)
        conv = [r for r in rows if r["op"] == "CONV_2D"]
        heaviest = max(conv, key=lambda r: (r["macs"], r["ipm"])) if conv else None  # the conv-heavy layer (the
        # slowest of those tied for the most MACs: resnet-small has eight)
        sizes = measure(build)
        runs.append(dict(target=target, kernels=kernels, columns=columns, instructions=count.total,
                         ipm=round(count.total / macs, 3), cycles=count.cycles, cpm=round(count.cycles / macs, 3),
                         conv_ipm=ratio(rows, "CONV_2D"),
                         heaviest_conv=heaviest and {k: heaviest[k] for k in ("node", "reduction", "ipm")},
                         conv_best_ipm=min(r["ipm"] for r in conv) if conv else None,
                         depthwise_ipm=ratio(rows, "DEPTHWISE_CONV_2D"), fc_ipm=ratio(rows, "FULLY_CONNECTED"),
                         flash_bytes=sizes["flash_bytes"], sram_bytes=sizes["sram_bytes"],
                         kernel_flash_bytes=sizes["flash_kernel_bytes"],
                         arena_bytes=results[kernels, columns].plan.arena_bytes,
                         conv_macs_at_target=at_target(conv), layers=rows))
    shape = result.graph.tensors[result.graph.inputs[0]].shape
    return dict(model=name, **MODELS[name], input=list(shape), macs=macs, seconds=round(time.perf_counter() - start, 1),
                runs=runs)


def speedup(model: dict, run: dict) -> float:
    """Portable instructions over this (DSP) run's."""
    by = {(r["target"], r["kernels"], r["columns"]): r["instructions"] for r in model["runs"]}
    return by[run["target"], "portable", "free"] / run["instructions"]


def markdown(models: list[dict]) -> str:
    head = ("| model | MACs | core | kernels | columns | instructions | instr/MAC | cycles (model) | cycles/MAC "
            "| all conv | conv MACs at <= 1.0 | heaviest conv layer | best conv layer | depthwise | FC | speed-up "
            "| Flash B | SRAM B | arena B |\n"
            "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for m in models:
        label = f"{m['model']} w{m['width']} r{m['resolution']}"
        for r in m["runs"]:
            h = r["heaviest_conv"]
            heavy = f"{h['ipm']} ({h['node']}, {h['reduction']} MAC/out)" if h else "-"
            up = f"{speedup(m, r):.2f}x" if r["kernels"] == "dsp" else ""
            share = f"{100 * r['conv_macs_at_target']:.0f} %" if r["conv_macs_at_target"] is not None else "-"
            lines.append(f"| {label} | {m['macs']:,} | {r['target']} | {r['kernels']} | {r['columns']} | "
                         f"{r['instructions']:,} | {r['ipm']} | {r['cycles']:,} | {r['cpm']} | "
                         f"{r['conv_ipm'] or '-'} | {share} | {heavy} | "
                         f"{r['conv_best_ipm'] or '-'} | {r['depthwise_ipm'] or '-'} | {r['fc_ipm'] or '-'} | {up} | "
                         f"{r['flash_bytes']:,} | {r['sram_bytes']:,} | {r['arena_bytes']:,} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    models = []
    with tempfile.TemporaryDirectory(prefix="kilobyte-bench-") as tmp:
        for name in args.models:
            models.append(bench_model(name, Path(tmp)))
            print(f"{name}: {models[-1]['seconds']} s", file=sys.stderr)
    dsp_conv = [r["heaviest_conv"]["ipm"] for m in models for r in m["runs"]
                if r["kernels"] == "dsp" and r["columns"] == "free" and r["heaviest_conv"]]
    gcc = subprocess.run([arm_gcc(), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    out = dict(python=platform.python_version(), compiler=gcc, counter="unicorn basic-block count (icount.py)",
               cycles="modelled per block (cycles.py: Arm's timings, zero wait states; M7 dual issue approximated)",
               target_conv_ipm=TARGET_IPM, target_met=bool(dsp_conv) and max(dsp_conv) <= TARGET_IPM, models=models)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(markdown(models))
    print(f"\nconv-heavy target <= {TARGET_IPM} instr/MAC (DSP kernels, each model's heaviest CONV_2D layer): "
          f"{'met' if out['target_met'] else 'not met'}; written {RESULTS}")


if __name__ == "__main__":
    main()
