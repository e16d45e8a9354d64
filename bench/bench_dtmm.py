"""Benchmark of DTMM's storage format and kernel (issue #16): FWCS vs CSR bytes, and Cortex-M7 instructions of the
filterlet conv (kb_conv_fwcs) vs the CSR conv (kb_conv_csr) vs Kilobyte's dense DSP conv, in one run.

Layers are int8 3x3 SAME convs with random weights, scales and zero points whose filterlets are pruned at random
(tests/sparse_nets.py, no other zeros, so FWCS and CSR hold the same nonzero weights and do the same MACs).
- Storage: five layers shaped like a small VGG (Cin 3, 32, 64, 128, 128) at 90 % filterlet sparsity, compiled
  with each format; bytes are the sizes of the weight and index arrays in the generated model.c (bias, multipliers
  and shifts are the same for every format and are reported apart). DTMM's Fig. 6a: FWCS 49.6 % smaller than CSR.
- Latency: one layer (16x16x64 -> 64, 3x3, the shape of a VGG / ResNet middle block at CIFAR scale) at sparsities
  0 ... 0.95, each compiled dense, FWCS and CSR with the DSP kernels for Cortex-M7 and counted by the unicorn
  instruction counter (`count_instructions`: deterministic, a proxy for time, not a cycle count); every firmware's
  output is checked against the numpy reference first. Reported: instructions per format, FWCS vs CSR, FWCS vs
  dense, and the crossover sparsity where FWCS overtakes the dense DSP conv.

    python bench/bench_dtmm.py        # about 2 minutes on one core
    python bench/bench_dtmm.py --fit-latency   # the latency model's samples and fit instead (dtmm_latency.py)
    python bench/bench_dtmm.py --target cortex-m55   # the latency part on the Cortex-M55 with the Helium kernels
                                                     # (mve): QEMU plugin counts and beat-model cycles,
                                                     # bench/results/dtmm_m55.json

Issue 30 moved the >= 3x FWCS-vs-CSR criterion to the Cortex-M55, where DTMM measured it (Helium's 16 lanes).
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from sparse_nets import pruned_conv  # noqa: E402

from kilobyte.codegen import compile_graph  # noqa: E402
from kilobyte.interp import run_int8  # noqa: E402
from kilobyte.schedule import PlanOptions  # noqa: E402
from kilobyte.targets.cortexm import build_firmware, count_instructions, run_qemu  # noqa: E402
from kilobyte.targets.cortexm.toolchain import arm_gcc  # noqa: E402
from kilobyte.transforms import set_weight_format  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "dtmm.json"
RESULTS_M55 = ROOT / "bench" / "results" / "dtmm_m55.json"
STORAGE_LAYERS = [  # (name, hw, cin, cout)
    ("L1 3->32 @32x32", (32, 32), 3, 32), ("L2 32->64 @16x16", (16, 16), 32, 64),
    ("L3 64->128 @8x8", (8, 8), 64, 128), ("L4 128->128 @8x8", (8, 8), 128, 128),
    ("L5 128->256 @4x4", (4, 4), 128, 256)]
STORAGE_SPARSITY = 0.9
LATENCY_LAYER = dict(hw=(16, 16), cin=64, cout=64)
SPARSITIES = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
FORMATS = ("dense", "fwcs", "csr")
TARGET = "cortex-m7"
_C_SIZES = {"int8_t": 1, "uint16_t": 2, "int32_t": 4}


def array_bytes(model_c: str) -> dict[str, int]:
    """Bytes of each constant array of a generated model.c, by the array's prefix (kb_w, kb_i, kb_f, kb_b, ...)."""
    out: dict[str, int] = {}
    for ctype, name, n in re.findall(r"static const (\w+) (kb_[a-z]+)_\w+\[(\d+)\]", model_c):
        out[name] = out.get(name, 0) + _C_SIZES[ctype] * int(n)
    return out


def storage(work: Path) -> list[dict]:
    rows = []
    for i, (name, hw, cin, cout) in enumerate(STORAGE_LAYERS):
        g, _ = pruned_conv(10 + i, hw=hw, cin=cin, cout=cout, sparsity=STORAGE_SPARSITY, extra=0.0)
        row = {"layer": name, "sparsity": float((g.tensors[g.nodes[0].inputs[1]].data == 0).mean())}
        for fmt in FORMATS:
            r = compile_graph(set_weight_format(g, fmt), work / f"s{i}{fmt}")
            arrays = array_bytes((r.out_dir / "src" / "model.c").read_text())
            row[fmt] = {"weights": arrays["kb_w"], "index": arrays.get("kb_i", 0) + arrays.get("kb_f", 0),
                        "per_channel": arrays["kb_b"] + arrays["kb_mult"] + arrays["kb_shift"]}
            row[fmt]["total"] = row[fmt]["weights"] + row[fmt]["index"]
        row["fwcs_vs_csr"] = round(1 - row["fwcs"]["total"] / row["csr"]["total"], 4)
        rows.append(row)
    return rows


def latency(work: Path, target: str = TARGET) -> list[dict]:
    """Instructions per format and sparsity on `target`: the DSP kernels counted by unicorn on the M7; on the M55 the
    Helium kernels (mve) counted by Kilobyte's QEMU plugin, with the beat model's cycles (`{fmt}_cycles`)."""
    kernels = "mve" if target == "cortex-m55" else "dsp"
    rows = []
    for s in SPARSITIES:
        g, x = pruned_conv(7, **LATENCY_LAYER, sparsity=s, extra=0.0)
        want = run_int8(g, x)[g.outputs[0]].reshape(-1)
        row = {"sparsity": s, "macs_dense": int(np.prod(g.tensors[g.outputs[0]].shape)) * 9 * LATENCY_LAYER["cin"]}
        row["macs_kept"] = int(row["macs_dense"] * (1 - float((g.tensors[g.nodes[0].inputs[1]].data == 0).mean())))
        for fmt in FORMATS:
            r = compile_graph(set_weight_format(g, fmt), work / f"l{int(s * 100)}{fmt}", PlanOptions(kernels=kernels))
            build = build_firmware(r.out_dir, target, kernels=kernels)
            if build.board.unicorn_cpu is None:
                run = run_qemu(build, x, timeout=600, count=True)
                output, row[fmt], row[f"{fmt}_cycles"] = run.output, run.instructions, run.cycles
            else:
                counts = count_instructions(build, x)
                output, row[fmt] = counts.output, counts.total
                row[f"{fmt}_functions"] = {k: v for k, v in counts.per_function.items() if v > 0.01 * counts.total}
            if not np.array_equal(output, want):
                raise RuntimeError(f"sparsity {s} {fmt}: the firmware's output differs from the reference")
        row["csr_over_fwcs"] = round(row["csr"] / row["fwcs"], 3)
        row["dense_over_fwcs"] = round(row["dense"] / row["fwcs"], 3)
        rows.append(row)
    return rows


def crossover(rows: list[dict]) -> float | None:
    """The sparsity where FWCS's count meets the dense conv's (linear between the measured points), None if never."""
    for a, b in zip(rows, rows[1:]):
        da, db = a["fwcs"] - a["dense"], b["fwcs"] - b["dense"]
        if da >= 0 > db:
            return round(a["sparsity"] + (b["sparsity"] - a["sparsity"]) * da / (da - db), 3)
    return rows[0]["sparsity"] if rows and rows[0]["fwcs"] < rows[0]["dense"] else None


def markdown(store: list[dict], lat: list[dict], cross: float | None) -> str:
    lines = ["| layer | sparsity | dense B | FWCS weights + index B | CSR weights + index B | FWCS vs CSR |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in store:
        lines.append(f"| {r['layer']} | {r['sparsity']:.3f} | {r['dense']['total']:,} | {r['fwcs']['weights']:,} + "
                     f"{r['fwcs']['index']:,} | {r['csr']['weights']:,} + {r['csr']['index']:,} | "
                     f"{-100 * r['fwcs_vs_csr']:+.1f} % |")
    fw, cs = sum(r["fwcs"]["total"] for r in store), sum(r["csr"]["total"] for r in store)
    mean = sum(r["fwcs_vs_csr"] for r in store) / len(store)
    lines.append(f"| all five | | {sum(r['dense']['total'] for r in store):,} | {fw:,} | {cs:,} | "
                 f"{-100 * (1 - fw / cs):+.1f} % (mean of layers {-100 * mean:+.1f} %) |")
    lines += ["", "| sparsity | kept MACs | dense DSP conv | FWCS conv | CSR conv | CSR / FWCS | dense / FWCS |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in lat:
        lines.append(f"| {r['sparsity']:.2f} | {r['macs_kept']:,} | {r['dense']:,} | {r['fwcs']:,} | {r['csr']:,} | "
                     f"{r['csr_over_fwcs']:.2f}x | {r['dense_over_fwcs']:.2f}x |")
    where = cross if cross is not None else "none of the measured ones"
    lines.append(f"\nFWCS overtakes the dense DSP conv at sparsity {where}.")
    return "\n".join(lines)


def markdown_m55(lat: list[dict], cross: float | None) -> str:
    lines = ["| sparsity | kept MACs | dense Helium conv | FWCS conv | CSR conv | CSR / FWCS | dense / FWCS | "
             "FWCS cycles (beat model) | dense cycles |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in lat:
        lines.append(f"| {r['sparsity']:.2f} | {r['macs_kept']:,} | {r['dense']:,} | {r['fwcs']:,} | {r['csr']:,} | "
                     f"{r['csr_over_fwcs']:.2f}x | {r['dense_over_fwcs']:.2f}x | {r['fwcs_cycles']:,} | "
                     f"{r['dense_cycles']:,} |")
    where = cross if cross is not None else "none of the measured ones"
    lines.append(f"\nFWCS overtakes the dense Helium conv (instructions) at sparsity {where}.")
    return "\n".join(lines)


def main_m55() -> None:
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="kilobyte-dtmm-m55-") as tmp:
        lat = latency(Path(tmp), "cortex-m55")
    cross = crossover(lat)
    gcc = subprocess.run([arm_gcc(), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    out = dict(python=platform.python_version(), compiler=gcc, target="cortex-m55", kernels="mve",
               counter="Kilobyte's QEMU plugin (targets/qemu), cycles by the beat model (targets/cortexm/cycles.py)",
               latency_layer=LATENCY_LAYER, latency=lat, crossover_sparsity=cross,
               seconds=round(time.time() - start, 1))
    RESULTS_M55.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_M55.write_text(json.dumps(out, indent=1) + "\n")
    print(markdown_m55(lat, cross))
    print(f"\nwritten {RESULTS_M55} in {out['seconds']} s")


def main() -> None:
    if "--target" in sys.argv[1:]:
        target = sys.argv[sys.argv.index("--target") + 1]
        if target != "cortex-m55":
            raise SystemExit(f"--target {target}: the default run is the Cortex-M7's; --target takes cortex-m55")
        main_m55()
        return
    if "--fit-latency" in sys.argv[1:]:
        from dtmm_latency import SHIPPED, fit_latency_file
        from dtmm_latency import markdown as fit_markdown

        start = time.time()
        with tempfile.TemporaryDirectory(prefix="kilobyte-dtmm-fit-") as tmp:
            print(fit_markdown(fit_latency_file(Path(tmp))))
        print(f"\nwritten {SHIPPED} in {time.time() - start:.1f} s")
        return
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="kilobyte-dtmm-") as tmp:
        store = storage(Path(tmp))
        lat = latency(Path(tmp))
    cross = crossover(lat)
    gcc = subprocess.run([arm_gcc(), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    out = dict(python=platform.python_version(), compiler=gcc, target=TARGET, kernels="dsp",
               counter="unicorn basic-block count (icount.py)", storage_sparsity=STORAGE_SPARSITY, storage=store,
               latency_layer=LATENCY_LAYER, latency=lat, crossover_sparsity=cross,
               seconds=round(time.time() - start, 1))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(markdown(store, lat, cross))
    print(f"\nwritten {RESULTS} in {out['seconds']} s")


if __name__ == "__main__":
    main()
