"""End-to-end benchmark of DTMM (issue #16): a trained vgg-small on the bundled MNIST subset, pruned by filterlets,
single weights (CSR) and channels, each at the highest sparsity within 0.5 points of the unpruned int8 accuracy,
then compiled and run as whole models on Cortex-M7 (DSP kernels, and once with the portable ones) — Flash and
instructions side by side in one run; and DTMM's
scheduler against the uniform ratio at the same Taylor-loss budget, by measured instructions.

- Training: the recipe for `--epochs` on the first 4,000 images (28 px, width 0.5); every pruning retrains 3 epochs
  (AdamW 1e-3) with the masks held; accuracy is int8 (reference interpreter) on the other 1,000 images.
- Sweep: per method, sparsities in SWEEP ascending; the sweep of a method stops at its first sparsity over the
  0.5-point loss (accuracy is not strictly monotone in sparsity, so a higher one might pass again; not tried).
- Compile: the pruned int8 graph with its weight format on the pruned layers (filterlet -> FWCS, csr -> CSR,
  channel -> dense: a smaller model; a layer with ratio 0 stays dense), DSP kernels, Cortex-M7 firmware
  (`build_firmware`); Flash = the ELF's .text + .rodata + .data (the linked kernels' code — dense DSP conv, FWCS or
  CSR conv — included; .text and .rodata are reported apart). One test image is run by the unicorn instruction
  counter (`count_instructions`; a proxy for time, not cycles), and its output must equal both the numpy int8
  reference and TensorFlow Lite Micro on the same graph (exported dense).
- Scheduler: `prune_model(device=...)` with Flash unconstrained and ΔL_max in `--loss-budget`, against the uniform
  ratio its search starts from (the largest shared α within the same budget), both retrained the same way; latency
  is modelled (ΣT̂ with the shipped Cortex-M7 constants) and measured (instructions of the compiled model).

    python bench/bench_dtmm_e2e.py    # 3-6 minutes on one core; writes bench/results/dtmm_e2e.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results" / "dtmm_e2e.json"
SWEEP = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
FORMAT = {"filterlet": "fwcs", "csr": "csr", "channel": "dense", "dense": "dense"}
MAX_LOSS = 0.005  # int8 accuracy points (as a fraction) a pruned model may lose
TARGET = "cortex-m7"


def measure(graph, fmt, x: np.ndarray, work: Path, min_sparsity: float | None = 0.0, kernels: str = "dsp") -> dict:
    """Compile `graph` with every conv in `fmt` (a format, or one per conv node; `set_weight_format` and its
    `min_sparsity`: None stores a conv without zeros in `fmt` too), build for Cortex-M7 with the kernel set
    `kernels`, count one inference on the int8 input `x`, check it against the numpy reference and TFLite Micro;
    Flash and instructions."""
    from kilobyte.codegen import compile_graph
    from kilobyte.export.tflite import to_tflite
    from kilobyte.interp import run_int8
    from kilobyte.schedule import PlanOptions
    from kilobyte.targets.cortexm import build_firmware, count_instructions
    from kilobyte.targets.tflm import run_tflm
    from kilobyte.transforms import set_weight_format

    ref = run_int8(graph, x)[graph.outputs[0]].reshape(-1)
    tflm = next(iter(run_tflm(to_tflite(graph), x, preserve_all=False).outputs.values())).reshape(-1)
    sparse = set_weight_format(graph, fmt, min_sparsity)
    r = compile_graph(sparse, work, PlanOptions(kernels=kernels))
    build = build_firmware(r.out_dir, TARGET, kernels=kernels)
    counts = count_instructions(build, x)
    if not (np.array_equal(counts.output, ref) and np.array_equal(ref, tflm)):
        raise RuntimeError(f"{work.name}: firmware, reference and TFLite Micro outputs differ")
    flash = sum(build.sizes.get(s, 0) for s in (".text", ".rodata", ".data"))
    conv = sum(n for k, n in counts.per_layer.items() if "_conv_2d_" in k)
    return {"format": fmt, "flash_bytes": flash, "text_bytes": build.sizes.get(".text", 0),
            "rodata_bytes": build.sizes.get(".rodata", 0), "instructions": counts.total, "conv_instructions": conv,
            "per_layer": counts.per_layer, "bit_exact_vs_tflm": True}


def pruned_formats(result, fmt: str) -> dict[str, str]:
    """Per CONV_2D node of a PruneResult's graph: `fmt` if its layer was pruned (ratio > 0), else dense — a layer
    left whole keeps the dense conv even when int8 rounding made one of its weights 0."""
    from kilobyte.ir import Op

    ratios = result.ratios
    return {n.name: fmt if ratios.get(n.origin, 0.0) > 0 else "dense" for n in result.graph.nodes
            if n.op is Op.CONV_2D}


def faster_formats(sparse: dict, dense: dict, fmt: str) -> dict[str, str]:
    """Per CONV_2D node: `fmt` where its measured count (in `sparse`) is below the same layer's in the unpruned
    dense model (`dense`: the dense DSP conv does not skip zeros, so a pruned layer costs it the same), else dense."""
    out = {}
    for key, n in sparse["per_layer"].items():
        node = key.split("_", 3)[3]  # kb_layer_<i>_<node name>
        if node.startswith("conv_2d"):
            out[node] = fmt if n < dense["per_layer"][key] else "dense"
    return out


def with_hybrid(row: dict, graph, dense: dict, x, work: Path, fmt: str = "fwcs") -> dict:
    """`row` (a sparse model measured) plus the same model with the sparse format only where it was faster."""
    formats = faster_formats(row, dense, fmt)
    hybrid = measure(graph, formats, x, work)
    row["hybrid"] = {k: hybrid[k] for k in ("format", "flash_bytes", "text_bytes", "rodata_bytes", "instructions",
                                            "conv_instructions")}
    return row


def pruned_row(method: str, r, seconds: float) -> dict:
    return {"method": method, "sparsity": r.sparsity, "int8_before": r.accuracy_before["int8"],
            "int8_after": r.accuracy_after["int8"], "float_after": r.accuracy_after["float"],
            "weight_bytes": r.weight_bytes, "index_bytes": r.index_bytes, "modelled_flash_bytes": r.flash_bytes,
            "ratios": r.ratios, "seconds": round(seconds, 1)}


def sweep(module, data, method: str, config, baseline: float) -> tuple[list[dict], object]:
    """Rows of the method's sweep and the PruneResult of the highest sparsity within MAX_LOSS (None if none)."""
    from kilobyte.prune import prune_model

    rows, best = [], None
    for s in SWEEP:
        t0 = time.perf_counter()
        r = prune_model(module, data, method, sparsity=s, config=config)
        rows.append(dict(pruned_row(method, r, time.perf_counter() - t0), target=s))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "ratios"}), flush=True)
        if r.accuracy_after["int8"] < baseline - MAX_LOSS - 1e-9:
            break
        best = r
    return rows, best


def scheduler_rows(module, data, config, budgets, x, work: Path, dense: dict) -> list[dict]:
    """Scheduler vs uniform at each ΔL_max: ratios, accuracy, modelled ΣT̂ and measured instructions."""
    from kilobyte.prune import prune_model
    from kilobyte.targets.devices import Device

    device = Device("unlimited", TARGET, 1 << 24, 1 << 30, 216_000_000)
    rows = []

    def measured(name: str, budget: float, strategy, **request):
        """`prune_model` with `request`, compiled as FWCS (and FWCS only where faster) and counted; a row."""
        t0 = time.perf_counter()
        r = prune_model(module, data, "filterlet", config=config, **request)
        row = dict(pruned_row(name, r, time.perf_counter() - t0), loss_budget=budget,
                   modelled=(strategy or r.strategy).latency, taylor_loss=(strategy or r.strategy).loss)
        row.update(measure(r.graph, pruned_formats(r, "fwcs"), x(r.graph), work / f"{name}{budget}"))
        with_hybrid(row, r.graph, dense, x(r.graph), work / f"{name}{budget}h")
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("ratios", "per_layer")}), flush=True)
        return r

    for budget in budgets:
        r = measured("scheduler", budget, None, device=device, loss_budget=budget)
        if not r.uniform.feasible or not any(r.uniform.ratios.values()):
            rows.append({"method": "uniform", "loss_budget": budget, "error": "no shared ratio > 0 fits"})
            continue
        measured("uniform", budget, r.uniform, ratios=r.uniform.ratios)
    return rows


def main() -> None:
    import torch

    from kilobyte.data import load_dataset
    from kilobyte.quant import quantize_input
    from kilobyte.train import TrainConfig, fit
    from kilobyte.zoo.small_cnns import build_vgg

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--width", type=float, default=0.5)
    p.add_argument("--loss-budget", type=float, nargs="+", default=[0.05, 0.2])
    args = p.parse_args()
    start = time.time()
    torch.set_num_threads(1)
    train, test = load_dataset("mnist").split(4000)
    data = ((train.x, train.y), (test.x, test.y))
    torch.manual_seed(0)
    module = build_vgg(args.width, 10, 1)
    fit(module, train.x, train.y, TrainConfig(epochs=args.epochs, seed=0))
    module.eval()
    config = TrainConfig.plain(epochs=3, lr=1e-3)

    def image(graph):
        return quantize_input(graph, test.x[:1])

    out = {"model": f"vgg-small width {args.width}, MNIST 4,000 / 1,000, {args.epochs} epochs", "target": TARGET,
           "kernels": "dsp", "max_loss_points": 100 * MAX_LOSS, "sweep": SWEEP, "sweeps": {}, "chosen": {}}
    with tempfile.TemporaryDirectory(prefix="kilobyte-dtmm-e2e-") as tmp:
        work = Path(tmp)
        from kilobyte.train import quantise_module

        dense_graph = quantise_module(module, (1, 1, 28, 28), train.x[:64])
        out["dense"] = measure(dense_graph, "dense", image(dense_graph), work / "dense")
        baseline = None
        for method in ("filterlet", "csr", "channel"):
            if baseline is None:  # the unpruned int8 accuracy, as prune_model measures it
                from kilobyte.train import int8_accuracy

                baseline = int8_accuracy(dense_graph, test.x, test.y)
                out["dense"]["int8"] = baseline
            rows, best = sweep(module, data, method, config, baseline)
            out["sweeps"][method] = rows
            if best is not None:
                chosen = dict(pruned_row(method, best, 0.0))
                chosen.update(measure(best.graph, pruned_formats(best, FORMAT[method]), image(best.graph),
                                      work / method))
                if method != "channel":
                    with_hybrid(chosen, best.graph, out["dense"], image(best.graph), work / f"{method}h",
                                FORMAT[method])
                    # every conv in the sparse format, the unpruned ones too: no dense conv code is linked
                    every = measure(best.graph, FORMAT[method], image(best.graph), work / f"{method}a", None)
                    chosen["every_conv"] = {k: every[k] for k in ("flash_bytes", "text_bytes", "rodata_bytes",
                                                                  "instructions", "conv_instructions", "per_layer")}
                # the same model with the portable kernel set (every conv in its format): less code, more time
                port = measure(best.graph, FORMAT[method], image(best.graph), work / f"{method}p", None, "portable")
                chosen["portable"] = {k: port[k] for k in ("flash_bytes", "text_bytes", "rodata_bytes",
                                                           "instructions", "conv_instructions")}
                out["chosen"][method] = chosen
                print(json.dumps({k: v for k, v in chosen.items() if k not in ("ratios", "per_layer")}), flush=True)
        out["scheduler"] = scheduler_rows(module, data, config, args.loss_budget, image, work, out["dense"])
    out["seconds"] = round(time.time() - start, 1)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(markdown(out))


def markdown(out: dict) -> str:
    d = out["dense"]
    lines = ["| model | sparsity | int8 acc. | Flash B (ELF): .text + .rodata | instructions (convs) | sparse only "
             "where faster: Flash B, instructions | every conv sparse: Flash B, instructions | portable kernels: "
             "Flash B, instructions | bit-exact vs TFLM |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|",
             f"| dense | 0 % | {100 * d['int8']:.1f} % | {d['flash_bytes']:,}: {d['text_bytes']:,} + "
             f"{d['rodata_bytes']:,} | {d['instructions']:,} ({d['conv_instructions']:,}) | | | | yes |"]
    for method, c in out["chosen"].items():
        h, e = c.get("hybrid"), c.get("every_conv")
        hyb = f"{h['flash_bytes']:,}, {h['instructions']:,}" if h else ""
        every = f"{e['flash_bytes']:,}, {e['instructions']:,}" if e else ""
        q = c["portable"]
        port = f"{q['flash_bytes']:,}: {q['text_bytes']:,} + {q['rodata_bytes']:,}, {q['instructions']:,}"
        lines.append(f"| {method} ({FORMAT[method]}) | {100 * c['sparsity']:.1f} % | {100 * c['int8_after']:.1f} % | "
                     f"{c['flash_bytes']:,}: {c['text_bytes']:,} + {c['rodata_bytes']:,} | {c['instructions']:,} "
                     f"({c['conv_instructions']:,}) | {hyb} | {every} | {port} | yes |")
    lines += ["", "| ΔL_max | strategy | sparsity | int8 acc. | Taylor loss | modelled ΣT̂ (convs) | measured convs "
              "| measured model | sparse only where faster |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in out["scheduler"]:
        if "error" in r:
            lines.append(f"| {r['loss_budget']} | {r['method']} | {r['error']} | | | | | | |")
            continue
        lines.append(f"| {r['loss_budget']} | {r['method']} | {100 * r['sparsity']:.1f} % | "
                     f"{100 * r['int8_after']:.1f} % | {r['taylor_loss']:.4f} | {r['modelled']:,.0f} | "
                     f"{r['conv_instructions']:,} | {r['instructions']:,} | {r['hybrid']['instructions']:,} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
