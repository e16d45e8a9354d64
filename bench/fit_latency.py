"""Fit the per-layer instruction-count model (kilobyte/schedule/latency.py) on measured Cortex-M counts.

Random networks of the MBConv space (tests/latency_nets.py: 1 or 3 channels, width 0.1-0.4, resolution 24-64, 10
classes, random weights, int8), every other one with a random patch stage (n, p), are compiled with the core's
kernel set, linked for the core and run once under the unicorn counter (`count_instructions`), whose output must
equal the numpy int8 reference. Each kb_layer_* count is a sample (the layer's features, `per_layer_features`); so
is each network's remainder (total minus its layers: kb_invoke's own code plus the whole patch stage). The constants
are fitted on the first `--networks` networks and checked on `--held-out` more, never fitted on: relative RMS and
largest relative error per layer, per remainder and per whole network. The shipped JSON holds the constants, the
errors and the measurements (per network its architecture, patch stage and per-layer counts).

    python bench/fit_latency.py --core cortex-m7 --kernels dsp        # 32 + 12 networks
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from latency_nets import candidate  # noqa: E402

from kilobyte.schedule import latency  # noqa: E402
from kilobyte.schedule.latency import Sample, fit_model, per_layer_features, relative_errors  # noqa: E402


def measure(seed: int, core: str, kernels: str, work: str, check: bool) -> tuple[dict, list[Sample]]:
    """Compile, link and count network `seed` (patch stage on odd seeds): its record (per-layer and remaining
    counts) and samples (one per layer; the remainder with the invoke and patch-stage features summed)."""
    from kilobyte.codegen import compile_graph
    from kilobyte.interp import run_int8
    from kilobyte.schedule import PlanOptions
    from kilobyte.schedule.plan import plan_steps
    from kilobyte.targets.cortexm import build_firmware, count_instructions

    c = candidate(seed, patch=seed % 2 == 1)
    options = PlanOptions(kernels=kernels, patch=c.patch)
    r = compile_graph(c.graph, Path(work) / f"n{seed}", options)
    counts = count_instructions(build_firmware(r.out_dir, core, kernels=kernels), c.input, timeout=600)
    if check:
        want = run_int8(c.graph, c.input.reshape(c.graph.tensors[c.graph.inputs[0]].shape))[c.graph.outputs[0]]
        if not np.array_equal(counts.output, want.reshape(-1)):
            raise RuntimeError(f"network {seed}: the firmware's output differs from the int8 reference")
    per_layer = {r.plan.order[int(key.split("_")[2])]: n for key, n in counts.per_layer.items()}
    record = {"seed": seed, "arch": c.arch, "in_channels": c.in_channels, "patch": c.patch, "total": counts.total,
              "per_layer": per_layer, "rest": counts.total - sum(per_layer.values())}
    steps = plan_steps(c.graph, options)
    if steps.life.order != r.plan.order:
        raise RuntimeError(f"network {seed}: plan_steps and the compiled plan disagree on the order")
    features = per_layer_features(c.graph, steps)
    samples = [Sample(features.pop(name), float(n)) for name, n in per_layer.items()]
    rest: dict[str, float] = {}
    for f in features.values():  # INVOKE and the stage nodes
        for k, v in f.items():
            rest[k] = rest.get(k, 0.0) + v
    return record, samples + [Sample(rest, float(record["rest"]), "rest")]


def errors(model, records: list[dict], samples: list[list[Sample]]) -> dict:
    """Relative errors per layer, per remainder, per network (all / with a patch stage / without)."""
    def pred(s: Sample) -> float:
        return model.predict(s.features)

    layers = [s for ss in samples for s in ss if s.kind == "layer"]
    rests = [ss[-1] for ss in samples]
    nets = [(sum(map(pred, ss)), float(r["total"]), r["patch"] is not None) for r, ss in zip(records, samples)]
    out = {"layers": relative_errors([pred(s) for s in layers], [s.instructions for s in layers]),
           "rest": relative_errors([pred(s) for s in rests], [s.instructions for s in rests]),
           "networks": relative_errors([p for p, _, _ in nets], [t for _, t, _ in nets])}
    for name, want in (("networks_patch", True), ("networks_per_layer", False)):
        part = [(p, t) for p, t, patch in nets if patch == want]
        out[name] = relative_errors([p for p, _ in part], [t for _, t in part])
    return out



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", default="cortex-m7")
    ap.add_argument("--kernels", default="dsp", choices=("dsp", "portable"))
    ap.add_argument("--networks", type=int, default=32, help="networks fitted on")
    ap.add_argument("--held-out", type=int, default=12, help="networks predicted, never fitted on")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--no-check", action="store_true", help="skip checking outputs against the int8 reference")
    ap.add_argument("--samples", type=Path, default=None, help="also write every sample's features (JSON)")
    ap.add_argument("--out", type=Path, default=None, help="JSON to write (default: the shipped file)")
    args = ap.parse_args()
    from tqdm import tqdm

    from kilobyte.targets.cortexm.toolchain import arm_gcc

    seeds = list(range(args.networks + args.held_out))
    records, by_seed = {}, {}
    with tempfile.TemporaryDirectory() as work, ProcessPoolExecutor(args.jobs) as pool:
        jobs = [pool.submit(measure, s, args.core, args.kernels, work, not args.no_check) for s in seeds]
        for job in tqdm(as_completed(jobs), total=len(jobs), desc=f"{args.core} {args.kernels}", unit="net"):
            rec, samples = job.result()
            records[rec["seed"]], by_seed[rec["seed"]] = rec, samples
    records, samples = [records[s] for s in seeds], [by_seed[s] for s in seeds]
    fit, held = slice(0, args.networks), slice(args.networks, None)
    model = fit_model([s for ss in samples[fit] for s in ss], args.core, args.kernels)
    gcc = subprocess.run([arm_gcc(), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    result = {"core": args.core, "kernels": args.kernels, "compiler": gcc,
              "counter": "unicorn instruction count per kb_layer_* (icount.py); rest = total - layers",
              "command": f"python bench/fit_latency.py --core {args.core} --kernels {args.kernels} "
                         f"--networks {args.networks} --held-out {args.held_out}",
              "constants": model.constants, "fit": errors(model, records[fit], samples[fit]),
              "held_out": errors(model, records[held], samples[held]),
              "fit_networks": records[fit], "held_out_networks": records[held]}
    if args.samples:
        args.samples.write_text(json.dumps([[s.__dict__ for s in ss] for ss in samples]))
    out = args.out or latency.SHIPPED[(args.core, args.kernels)]
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    print(f"wrote {out}")


def markdown(result: dict) -> str:
    lines = [f"{result['core']} / {result['kernels']}:", "",
             "| set | layers rel. RMS / max | rest rel. RMS / max | networks rel. RMS / max | with patch stage | "
             "per layer only |", "|---|---:|---:|---:|---:|---:|"]
    for name in ("fit", "held_out"):
        e = result[name]
        cells = [f"{100 * e[k]['relative_rms']:.1f} / {100 * e[k]['max_relative']:.1f} % ({e[k]['count']})"
                 for k in ("layers", "rest", "networks", "networks_patch", "networks_per_layer")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
