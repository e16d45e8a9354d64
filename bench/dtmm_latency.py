"""Measured samples for DTMM's latency model (issue #16, §III-C): Cortex-M7 instructions of the filterlet (FWCS) DSP
conv on varied geometries and sparsities, their fit, and the constants shipped as the scheduler's default.

Geometries come as six chains of four int8 convs (a layer's Cin is the previous layer's N), so one firmware measures
four layers: the unicorn counter reports instructions per `kb_layer_*` function (icount.py), each layer's whole call
(requantisation prepared once, windows widened, filterlets walked, outputs stored). Each chain is built four times,
its layers' filterlet sparsities rotated through SPARSITIES, so every geometry is measured at every sparsity: 24
geometries x 4 sparsities = 96 samples in 24 firmwares. N, Cin (multiples of 4 — the SMLAD path — and not — the
scalar path), kernel 1/3/5, stride 1/2 and output size 3x3 ... 16x16 all vary. Every firmware's output is checked
against the numpy int8 reference (itself bit-exact with TFLite Micro, tests/runtime/test_sparse_conv.py) first.

One geometry per chain (HELD_OUT) is left out of the fit and predicted: its error is the held-out error. The shipped
constants (kilobyte/prune/latency_cortex_m7.json) are the fit on the other samples, which the file stores with them,
with the fifth constant t_tap (latency.py); bench/results/dtmm_latency.json also has DTMM's four-constant fit.

    python bench/bench_dtmm.py --fit-latency     # about 2 minutes on one core
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
from sparse_nets import pruned_chain

from kilobyte.codegen import compile_graph
from kilobyte.interp import run_int8
from kilobyte.prune.latency import SHIPPED_MODELS, LatencySample, fit_kernel_latency, sample_to_dict
from kilobyte.schedule import PlanOptions
from kilobyte.targets.cortexm import build_firmware, count_instructions
from kilobyte.targets.cortexm.toolchain import arm_gcc
from kilobyte.transforms import set_weight_format

TARGET = "cortex-m7"
SPARSITIES = (0.0, 0.3, 0.6, 0.9)
# (input H = W, input C, [(N, kernel, stride), ...]): Cin of each layer is the previous N
CHAINS = [
    (16, 3, [(8, 3, 1), (16, 3, 2), (24, 1, 1), (12, 3, 1)]),
    (12, 4, [(16, 5, 1), (20, 3, 1), (32, 1, 2), (8, 3, 1)]),
    (20, 1, [(12, 3, 2), (24, 5, 1), (40, 3, 2), (16, 1, 1)]),
    (8, 6, [(32, 3, 1), (64, 3, 1), (48, 3, 2), (10, 5, 1)]),
    (10, 5, [(7, 3, 1), (9, 1, 1), (6, 5, 2), (11, 3, 1)]),
    (14, 2, [(10, 3, 2), (15, 3, 1), (28, 1, 1), (36, 3, 1)]),
]
HELD_OUT = {(c, c % 4) for c in range(len(CHAINS))}  # (chain, layer) left out of the fit
SHIPPED = SHIPPED_MODELS[TARGET]
RESULTS = Path(__file__).resolve().parent / "results" / "dtmm_latency.json"


def measure_chain(work: Path, c: int, rotation: int) -> list[tuple[LatencySample, bool]]:
    """One firmware: chain `c` with its layers' sparsities rotated by `rotation`; (sample, held out) per layer."""
    chain = CHAINS[c]
    sparsities = [SPARSITIES[(i + rotation) % len(SPARSITIES)] for i in range(len(chain[2]))]
    g, x, layers = pruned_chain(100 * c + rotation, chain, sparsities)
    g = set_weight_format(g, "fwcs")
    want = run_int8(g, x)[g.outputs[0]].reshape(-1)
    r = compile_graph(g, work / f"c{c}r{rotation}", PlanOptions(kernels="dsp"))
    counts = count_instructions(build_firmware(r.out_dir, TARGET, kernels="dsp"), x)
    if not np.array_equal(counts.output, want):
        raise RuntimeError(f"chain {c} rotation {rotation}: the firmware's output differs from the reference")
    per_layer = list(counts.per_layer.values())  # in call order: one kb_layer_* per conv
    if len(per_layer) != len(layers):
        raise RuntimeError(f"chain {c}: {len(per_layer)} layer functions counted for {len(layers)} convs")
    out = []
    for i, (node, layer, count) in enumerate(zip(g.nodes, layers, per_layer)):
        w = g.tensors[node.inputs[1]].data
        alpha = float((~(w != 0).any(axis=-1)).mean())  # filterlets with no nonzero weight: FWCS drops them
        out.append((LatencySample(layer, alpha, float(count)), (c, i) in HELD_OUT))
    return out


def fit_latency_file(work: Path) -> dict:
    """Measure every chain at every rotation, fit on the samples not held out (with t_tap: shipped; and DTMM's four
    constants: compared), write the shipped JSON and bench/results/dtmm_latency.json; the latter's content."""
    rows = [row for c in range(len(CHAINS)) for rot in range(len(SPARSITIES)) for row in measure_chain(work, c, rot)]
    train = [s for s, held in rows if not held]
    held_out = [s for s, held in rows if held]
    gcc = subprocess.run([arm_gcc(), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    about = {"target": TARGET, "kernels": "dsp", "kernel": "kb_conv_fwcs (runtime/c/arm/kb_sparse_conv.c)",
             "counter": "unicorn instruction count per kb_layer_* (icount.py)", "compiler": gcc,
             "command": "python bench/bench_dtmm.py --fit-latency"}
    results = dict(about, held_out_geometries=sorted(HELD_OUT), fits={})
    for name, per_tap in (("with t_tap (shipped)", True), ("DTMM's four constants", False)):
        fit = fit_kernel_latency(train, per_tap=per_tap)
        results["fits"][name] = {"model": fit.model.to_dict(), "fit": fit.summary(), "held_out": fit.evaluate(held_out)}
    shipped = results["fits"]["with t_tap (shipped)"]
    SHIPPED.write_text(json.dumps(dict(about, **shipped, samples=[sample_to_dict(s) for s in train],
                                       held_out_samples=[sample_to_dict(s) for s in held_out]), indent=1) + "\n")
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    return results


def markdown(results: dict) -> str:
    lines = ["| constants | path | l | t_mem | t_idx | t_com | t_post | t_tap | fit samples | fit rel. RMS / max | "
             "held-out rel. RMS / max |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results["fits"].items():
        m, f, h = r["model"], r["fit"], r["held_out"]
        for path in ("vector", "scalar", "all"):
            c = m.get(path, {})
            consts = " | ".join(f"{c[k]:.2f}" if k in c else "" for k in ("t_mem", "t_idx", "t_com", "t_post", "t_tap"))
            lines.append(f"| {name} | {path} | {c.get('lanes', '')} | {consts} | {f[path]['samples']} | "
                         f"{100 * f[path]['relative_rms']:.1f} / {100 * f[path]['max_relative']:.1f} % | "
                         f"{100 * h[path]['relative_rms']:.1f} / {100 * h[path]['max_relative']:.1f} % |")
        lines.append(f"| {name} | MSE (instructions²) | | | | | | | | {f['all']['mse']:.3g} | {h['all']['mse']:.3g} |")
    return "\n".join(lines)
