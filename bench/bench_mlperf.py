"""Benchmark: the four MLPerf Tiny reference model shapes, Kilobyte vs TensorFlow Lite Micro, side by side in one run.

For kws-dscnn, vww-mbv1, ic-resnet8 (each ending in an int8 SOFTMAX, as the reference models do) and ad-autoencoder
(zoo weights seeded, settled BatchNorm statistics, quantised on 8 random inputs):
- host: TFLM's arena (smallest that allocates; it holds the input) vs ours (arena + caller-owned input), TFLM's
  `invoke()` median latency (the wheel's reference kernels) vs our host build's, outputs identical;
- Cortex-M4 and M7 (unicorn / QEMU images from arm-none-eabi-gcc -O2): Flash and SRAM measured from the ELF, and
  instructions and modelled cycles per inference (`targets/cortexm/cycles.py`), portable kernels and DSP kernels
  (each from a plan made for that kernel set), beside the best published MLPerf Tiny result's cycles on that core
  (issue 29's yardstick; target: <= 0.8x the Cortex-M4's); per weighted layer too (bench_cortexm.py's rows:
  instructions and cycles, per MAC);
- Cortex-M55 (QEMU mps3-an547): the same, with the instructions counted by Kilobyte's QEMU plugin (unicorn cannot
  run v8.1-M code) and no cycles yet (issue 30's beat model), beside the Renesas RA8D1's (Cortex-M85, 480 MHz)
  published cycles.
Writes bench/results/mlperf.json and prints markdown tables.

    python bench/bench_mlperf.py      # about two minutes
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_cortexm import layer_table, per_layer  # noqa: E402
from bench_vs_tflm import host_latency  # noqa: E402

from kilobyte import zoo  # noqa: E402
from kilobyte.api import load  # noqa: E402
from kilobyte.codegen import HostModel, compile_graph  # noqa: E402
from kilobyte.export.tflite import to_tflite  # noqa: E402
from kilobyte.interp import run_int8  # noqa: E402
from kilobyte.ir import Node, Op, QParams, SoftmaxAttrs, Tensor  # noqa: E402
from kilobyte.kernels import KERNEL_SETS, kernel_sets  # noqa: E402
from kilobyte.quant import quantize  # noqa: E402
from kilobyte.schedule.plan_types import PlanOptions  # noqa: E402
from kilobyte.targets.cortexm import build_firmware, count_instructions, measure, run_qemu  # noqa: E402
from kilobyte.targets.cortexm.cycles import cycle_model  # noqa: E402
from kilobyte.targets.tflm import run_tflm, tflm_arena_bytes, tflm_invoke_latency  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "mlperf.json"
REPEATS = 15
SOFTMAX_HEAD = ("kws-dscnn", "vww-mbv1", "ic-resnet8")
# the M55: counted by the QEMU plugin, cycles by the beat model; the M0+ (portable only) and M33 (issue 31): counted
# by unicorn, no cycle model yet
TARGETS = ("cortex-m0plus", "cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55")
# Best published MLPerf Tiny closed-division latency per model (tiny_results v1.1-v1.3, as issue 29 lists them):
# (milliseconds, clock in MHz, engine). Cycles = ms x MHz x 1000 at the board's clock.
PUBLISHED = {
    "cortex-m4": {"kws-dscnn": (43.2, 120, "ST X-CUBE-AI 9.0"), "vww-mbv1": (88.9, 120, "ST X-CUBE-AI 9.0"),
                  "ic-resnet8": (165.1, 120, "ST X-CUBE-AI 9.0"), "ad-autoencoder": (4.05, 120, "Plumerai")},
    "cortex-m7": {"kws-dscnn": (11.3, 280, None), "vww-mbv1": (23.8, 280, None), "ic-resnet8": (40.8, 280, None),
                  "ad-autoencoder": (1.08, 280, None)},
    # issue 30: Renesas RA8D1 (Cortex-M85 at 480 MHz), TFLM + CMSIS-NN, the fastest Cortex-M results
    "cortex-m55": {"kws-dscnn": (3.47, 480, "RA8D1 M85, TFLM + CMSIS-NN"), "vww-mbv1": (13.39, 480, None),
                   "ic-resnet8": (8.48, 480, None), "ad-autoencoder": (0.53, 480, None)},
}
TARGET_FRACTION = 0.8  # issue 29: modelled Cortex-M4 cycles (DSP kernels) <= 0.8 x the best published cycles


def published_cycles(name: str, target: str) -> int | None:
    """The best published result in cycles, None for a core without one in PUBLISHED."""
    if target not in PUBLISHED:
        return None
    ms, mhz, _ = PUBLISHED[target][name]
    return round(ms * mhz * 1000)


def int8_model(name: str):
    """The zoo model quantised on 8 seeded random inputs, with an int8 SOFTMAX after the logits where the
    reference model has one."""
    import torch

    torch.manual_seed(0)
    graph = load(name).graph
    rng = np.random.default_rng(0)
    shape = graph.tensors[graph.inputs[0]].shape
    q = quantize(graph, [rng.normal(size=shape).astype(np.float32) for _ in range(8)])
    if name not in SOFTMAX_HEAD:
        return q
    logits = q.outputs[0]
    tensors = {**q.tensors, "probs": Tensor("probs", q.tensors[logits].shape, "int8", None,
                                            QParams.per_tensor(1 / 256, -128))}
    nodes = (*q.nodes, Node("probs", Op.SOFTMAX, (logits,), ("probs",), SoftmaxAttrs(1.0)))
    return dataclasses.replace(q, tensors=tensors, nodes=nodes, outputs=("probs",)).verify()


def host_row(name: str, q, work: Path) -> dict:
    tfl = to_tflite(q)
    result = compile_graph(q, work / f"{name}-host", model_name=name)
    host = HostModel(result.out_dir)
    x = np.random.default_rng(1).integers(-128, 128, q.tensors[q.inputs[0]].shape).astype(np.int8)
    ours = host(x)
    theirs = run_tflm(tfl, x, preserve_all=False).outputs
    theirs = next(iter(theirs.values())).reshape(ours.shape)
    tflm_arena = tflm_arena_bytes(tfl)
    sram = result.plan.arena_bytes + result.plan.input_bytes
    t_tflm, t_ours = tflm_invoke_latency(tfl, x, repeats=REPEATS), host_latency(host, x, REPEATS)
    return {"model": name, "macs": result.plan.macs, "tflm_arena_bytes": tflm_arena,
            "kilobyte_arena_bytes": result.plan.arena_bytes, "kilobyte_input_bytes": result.plan.input_bytes,
            "sram_ratio": tflm_arena / sram, "tflm_latency_ms": t_tflm * 1e3, "kilobyte_latency_ms": t_ours * 1e3,
            "speedup": t_tflm / t_ours, "identical": bool(np.array_equal(ours, theirs))}


def target_rows(name: str, q, work: Path) -> list[dict]:
    x = np.random.default_rng(2).integers(-128, 128, q.tensors[q.inputs[0]].shape).astype(np.int8)
    want = run_int8(q, x)[q.outputs[0]].reshape(-1)
    rows = []
    for kernels in KERNEL_SETS:
        result = compile_graph(q, work / f"{name}-{kernels}", PlanOptions(kernels=kernels), model_name=name)
        for target in (t for t in TARGETS if kernels in kernel_sets(t)):
            build = build_firmware(result.out_dir, target)
            if build.board.unicorn_cpu is not None:
                count = count_instructions(build, x, timeout=600)
                modelled = cycle_model(target) is not None
                output, total, cycles = count.output, count.total, count.cycles if modelled else None
                layers = per_layer(count.per_layer, count.per_layer_cycles if modelled else None,
                                   layer_table(result.graph))
            else:  # unicorn cannot run v8.1-M code: Kilobyte's QEMU plugin counts, the beat model prices
                run = run_qemu(build, x, timeout=600, count=True)
                output, total, cycles = run.output, run.instructions, run.cycles
                layers = per_layer(run.per_layer, run.per_layer_cycles, layer_table(result.graph))
            if not np.array_equal(output, want):
                raise SystemExit(f"{name} {target} {kernels}: output differs from run_int8")
            sizes = measure(build)
            best = published_cycles(name, target)
            rows.append({"model": name, "target": target, "kernels": kernels, "instructions": total,
                         "per_mac": total / result.plan.macs, "cycles": cycles,
                         "cycles_per_mac": cycles / result.plan.macs if cycles else None, "published_cycles": best,
                         "vs_published": cycles / best if cycles and best else None,
                         "flash_bytes": sizes["flash_bytes"],
                         "flash_weights_bytes": sizes["flash_weights_bytes"],
                         "flash_kernel_bytes": sizes["flash_kernel_bytes"], "sram_bytes": sizes["sram_bytes"],
                         "arena_bytes": result.plan.arena_bytes, "layers": layers})
    return rows


def markdown(host: list[dict], target: list[dict]) -> str:
    lines = ["| model | MACs | TFLM arena | Kilobyte arena + input | SRAM ratio | TFLM latency | Kilobyte latency | "
             "speed-up | identical |", "|" + "---|" * 9]
    for r in host:
        lines.append(f"| {r['model']} | {r['macs'] / 1e6:.2f} M | {r['tflm_arena_bytes'] / 1024:.1f} kB | "
                     f"{r['kilobyte_arena_bytes'] / 1024:.1f} + {r['kilobyte_input_bytes'] / 1024:.1f} kB | "
                     f"{r['sram_ratio']:.2f}× | {r['tflm_latency_ms']:.2f} ms | {r['kilobyte_latency_ms']:.3f} ms | "
                     f"{r['speedup']:.1f}× | {'yes' if r['identical'] else 'NO'} |")
    lines += ["", "| model | core | kernels | instructions | per MAC | cycles (model) | per MAC | best published "
              "cycles | ours / best | Flash (weights + kernels) | SRAM measured |", "|" + "---|" * 11]
    for r in target:
        cycles = "n/a" if r["cycles"] is None else f"{r['cycles']:,} | {r['cycles_per_mac']:.2f}"
        ratio = "n/a" if r["vs_published"] is None else f"{r['vs_published']:.2f}"
        if r["cycles"] is None:
            cycles += " | n/a"
        best = "n/a" if r["published_cycles"] is None else f"{r['published_cycles']:,}"
        lines.append(f"| {r['model']} | {r['target']} | {r['kernels']} | {r['instructions']:,} | {r['per_mac']:.2f} | "
                     f"{cycles} | {best} | "
                     f"{ratio} | {r['flash_bytes'] / 1024:.1f} kB "
                     f"({r['flash_weights_bytes'] / 1024:.1f} + "
                     f"{r['flash_kernel_bytes'] / 1024:.1f}) | {r['sram_bytes'] / 1024:.1f} kB |")
    return "\n".join(lines)


def main() -> None:
    host, target = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in zoo.names("mlperf-tiny"):
            print(f"... {name}", file=sys.stderr, flush=True)
            q = int8_model(name)
            host.append(host_row(name, q, Path(tmp)))
            target += target_rows(name, q, Path(tmp))
    print(markdown(host, target))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.platform(), "python": platform.python_version(), "repeats": REPEATS,
            "published": PUBLISHED, "target_fraction": TARGET_FRACTION,
            "cycles": "modelled per block (kilobyte/targets/cortexm/cycles.py; the M55: the beat model), zero wait "
                      "states"}
    RESULTS.write_text(json.dumps({"meta": meta, "host": host, "targets": target}, indent=2) + "\n")


if __name__ == "__main__":
    main()
