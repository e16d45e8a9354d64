"""Benchmark: calibrate the Flash estimate against linked Cortex-M firmware, and write its table.

Measures, for every core with a firmware board (cortex-m4, cortex-m7, cortex-m55) and both kernel sets:
1. the firmware harness and, per runtime function, the code and tables its probe firmware links
   (`kilobyte.targets.cortexm.flash_parts`);
2. a set of varied compiled models (zoo models at small widths, the MLPerf Tiny shapes, random graphs from
   tests/random_nets.py with and without patch stages, one graph per op kind the zoo lacks, searched-space
   networks): each one's Flash, and the bytes of each generated kb_layer_* function, kb_invoke and kb_patch_stage.
Then derives the table (`derive`: per-layer bytes = the largest seen per kind, the patch loop by a non-negative fit
raised by its largest miss, ...), checks the estimate of every measured build is at least its Flash, and writes
`kilobyte/schedule/code_size.py` (tests/schedule/test_code_size.py fails when it is not what `derive` gives from
bench/results/flash_calibration.json).

    python bench/calibrate_flash.py               # measure (about 45 minutes on 2 cores), derive, write
    python bench/calibrate_flash.py --derive      # re-derive the table from bench/results/flash_calibration.json
    python bench/calibrate_flash.py --update      # measure only what the stored JSON lacks (new runtime functions,
                                                  # new calibration models), then derive and write
    python bench/calibrate_flash.py --acceptance  # the held-out models: estimate vs measured, markdown for the docs
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from flash_models import acceptance_models, calibration_models  # noqa: E402

from kilobyte.kernels import KERNEL_SETS, kernel_sets  # noqa: E402
from kilobyte.kernels.calls import ENTRY_POINTS  # noqa: E402
from kilobyte.schedule import flash  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "flash_calibration.json"
ACCEPTANCE = ROOT / "bench" / "results" / "flash_estimate.json"
ACCEPTANCE_CORES = ("cortex-m4", "cortex-m7")
# The acceptance models run on the acceptance cores, so with the kernel sets both build (not mve: M55 only).
ACCEPTANCE_SETS = tuple(k for k in KERNEL_SETS if all(k in kernel_sets(c) for c in ACCEPTANCE_CORES))
TABLE = ROOT / "kilobyte" / "schedule" / "code_size.py"
CORES = ("cortex-m4", "cortex-m7", "cortex-m55")  # the calibrated cores (issue 31's M0+ and M33 are not yet)
CALL_BYTES = 6  # a call in kb_invoke: `mov r0, rN` + `bl` (4 when the layer is a clone without the argument)
ALIGN_ALLOWANCE = 60  # newlib's strlen is 64-byte aligned: up to 60 bytes of padding before it
OUTPUT_COPY_BYTES = 20  # at least, per further output: a memcpy call (destination, source, size, bl) in kb_invoke
LAYER_KINDS = tuple(ENTRY_POINTS)
STAGE_KINDS = ("conv", "depthwise", "pool", "pad", "add", "concat", "copy")


# -- 1. measure --------------------------------------------------------------------------------------------------------
def measure_runtime(core: str, kernels: str, work: Path) -> dict:
    """The harness's Flash and, per runtime function, the symbols its probe links beyond the harness."""
    from kilobyte.targets.cortexm.flash_parts import closures, harness

    base, symbols = harness(core, kernels, work / "harness")
    functions = [f for names in ENTRY_POINTS.values() for f in names]
    return {"core": core, "kernels": kernels, "harness_bytes": base,
            "closures": closures(core, kernels, functions, work, base=symbols)}


def measure_model(name: str, graph, options, work: Path) -> list[dict]:
    """Compile `graph` with `options` and link it for every core that builds its kernel set: one record per core
    (see module doc)."""
    from kilobyte.codegen import compile_graph
    from kilobyte.schedule.estimate import constant_bytes
    from kilobyte.schedule.plan import plan_steps
    from kilobyte.targets.cortexm import build_firmware, measure
    from kilobyte.targets.cortexm.flash_parts import model_functions

    result = compile_graph(graph, work / "model", options)
    steps = plan_steps(result.graph, options)
    if tuple(steps.life.order) != tuple(result.plan.order):
        raise RuntimeError(f"{name}: plan_steps and make_plan disagree on the order")
    code = flash.generated_code(result.graph, steps)
    layers = flash.per_layer_code(result.graph, steps)[0]
    called = called_functions((result.out_dir / "src" / "model.c").read_text())
    if called != set(code.functions):
        raise RuntimeError(f"{name}: model.c calls {sorted(called)}, the Flash model names {sorted(code.functions)}")
    per_name = {n: sum(1 for m, _ in layers if m == n) for n, _ in layers}  # a concat: one entry per copy
    records = []
    for core in (c for c in CORES if options.kernels in kernel_sets(c)):
        build = build_firmware(result.out_dir, core, kernels=options.kernels, out_dir=work / core)
        parts = model_functions(build)
        sizes = [[kind, parts.layers.get(result.plan.order.index(n), 0) / per_name[n]] for n, kind in layers]
        records.append({
            "model": name, "core": core, "kernels": options.kernels, "flash": measure(build)["flash_bytes"],
            "weights": constant_bytes(result.graph), "functions": sorted(code.functions), "layers": sizes,
            "invoke": parts.invoke, "calls": len(parts.layers) + (1 if parts.patch_stage else 0),
            "outputs": code.outputs, "stage": list(code.stage), "stage_bytes": parts.patch_stage,
            "data_bytes": code.data_bytes})
    return records


def called_functions(model_c: str) -> set[str]:
    """The runtime functions (and memmove) model.c calls, from its text."""
    known = {f for names in ENTRY_POINTS.values() for f in names}
    return {f for f in re.findall(r"\b(kb_\w+|memmove)\(", model_c) if f in known}


def _runtime_job(args) -> dict:
    core, kernels, work = args
    return measure_runtime(core, kernels, Path(work))


def _model_job(args) -> list[dict]:
    from kilobyte.schedule.plan_types import PlanOptions

    index, kernels, work = args
    model = calibration_models()[index]
    return measure_model(model.name, model.build(), PlanOptions(kernels=kernels, patch=model.patch), Path(work))


def _missing_runtime_job(args) -> dict:
    from kilobyte.targets.cortexm.flash_parts import closures, harness

    core, kernels, work, functions = args
    base, symbols = harness(core, kernels, Path(work) / "harness")
    return {"core": core, "kernels": kernels, "harness_bytes": base,
            "closures": closures(core, kernels, functions, Path(work), base=symbols)}


def measure_missing(data: dict, jobs: int) -> dict:
    """`data` (the stored measurements) plus what it lacks: the closures of runtime functions added to
    `ENTRY_POINTS` since, and the calibration models it has no record of. The harness is re-measured with them
    and must be unchanged (else the stored closures are stale: run the full calibration)."""
    functions = [f for names in ENTRY_POINTS.values() for f in names]
    done = {(rec["model"], rec["kernels"]) for rec in data["models"]}
    missing = [(i, k) for i, m in enumerate(calibration_models()) for k in KERNEL_SETS if (m.name, k) not in done]
    with tempfile.TemporaryDirectory(prefix="kb-flashcal-") as tmp, ProcessPoolExecutor(jobs) as pool:
        runtime_args = [(p["core"], p["kernels"], f"{tmp}/rt-{p['core']}-{p['kernels']}",
                         [f for f in functions if f not in p["closures"]]) for p in data["runtime"]]
        have = {(p["core"], p["kernels"]) for p in data["runtime"]}
        new_pairs = [(c, k, f"{tmp}/rt-{c}-{k}") for c in CORES for k in kernel_sets(c) if (c, k) not in have]
        model_args = [(i, k, f"{tmp}/m{i}-{k}") for i, k in missing]
        print(f"measuring {sum(len(a[3]) for a in runtime_args)} runtime probes, {len(new_pairs)} new (core, kernel "
              f"set) runtimes and {len(missing)} (model, kernel set) builds", flush=True)
        runtime = list(pool.map(_missing_runtime_job, runtime_args))
        added = list(pool.map(_runtime_job, new_pairs))
        new_models = [r for records in pool.map(_model_job, model_args) for r in records]
    for old, new in zip(data["runtime"], runtime):
        if old["harness_bytes"] != new["harness_bytes"]:
            raise RuntimeError(f"{old['core']} {old['kernels']}: the harness changed ({old['harness_bytes']} -> "
                               f"{new['harness_bytes']} bytes); run the full calibration")
        old["closures"].update(new["closures"])
    return {"runtime": data["runtime"] + added, "models": data["models"] + new_models}


def measure_all(jobs: int) -> dict:
    """Every probe and model build (module doc), in `jobs` processes."""
    n_models = len(calibration_models())
    with tempfile.TemporaryDirectory(prefix="kb-flashcal-") as tmp, ProcessPoolExecutor(jobs) as pool:
        runtime_args = [(c, k, f"{tmp}/rt-{c}-{k}") for c in CORES for k in kernel_sets(c)]
        model_args = [(i, k, f"{tmp}/m{i}-{k}") for i in range(n_models) for k in KERNEL_SETS]
        runtime = list(pool.map(_runtime_job, runtime_args))
        models = [r for records in pool.map(_model_job, model_args) for r in records]
    return {"runtime": runtime, "models": models}


# -- 2. derive ---------------------------------------------------------------------------------------------------------
def _round4(n: float) -> int:
    return int(math.ceil(n / 4) * 4)


def derive_runtime(runtime: list[dict]) -> tuple[dict, dict, dict]:
    """(RUNTIME_SYMBOLS, RUNTIME_CLOSURES, CODE_BYTES) from the probes."""
    symbols, closures, family_bytes = {}, {}, {}
    for probe in runtime:
        key = (probe["core"], probe["kernels"])
        sizes = {}
        for linked in probe["closures"].values():
            sizes.update(linked)
        symbols[key] = dict(sorted(sizes.items()))
        closures[key] = {f: tuple(sorted(linked)) for f, linked in sorted(probe["closures"].items())}
        family_bytes[key] = {family: flash._linked_bytes(frozenset(names), symbols[key], closures[key])
                             for family, names in ENTRY_POINTS.items()}
    return symbols, closures, family_bytes


def derive_layers(models: list[dict]) -> dict:
    """LAYER_BYTES: per core and kind, the largest kb_layer_* function seen (rounded up) plus its call."""
    found: dict[str, dict[str, int]] = {core: {} for core in CORES}
    for rec in models:
        for kind, size in rec["layers"]:
            table = found[rec["core"]]
            table[kind] = max(table.get(kind, 0), _round4(size) + CALL_BYTES)
    for core, table in found.items():
        missing = [k for k in LAYER_KINDS if k not in table]
        if missing:
            raise RuntimeError(f"{core}: no calibration model has a layer of kind {missing}")
    return {core: {k: found[core][k] for k in LAYER_KINDS} for core in CORES}


def derive_invoke(models: list[dict]) -> dict:
    """INVOKE_BYTES: per core, (kb_invoke with one output, per further output) beyond CALL_BYTES per call."""
    result = {}
    for core in CORES:
        recs = [r for r in models if r["core"] == core]
        rest = [(_round4(r["invoke"]) - CALL_BYTES * r["calls"], r["outputs"]) for r in recs]
        first = max(b for b, outs in rest if outs == 1)
        per_output = max([math.ceil((b - first) / (outs - 1)) for b, outs in rest if outs > 1] + [OUTPUT_COPY_BYTES])
        result[core] = (first, per_output)
    return result


def derive_stage(models: list[dict]) -> dict:
    """STAGE_BYTES: per core, kb_patch_stage (+ its call) as "loop" + bytes per block kind: a non-negative least
    squares fit, its constant raised by the largest miss so that no measured stage exceeds it."""
    from scipy.optimize import nnls

    result = {}
    for core in CORES:
        recs = [r for r in models if r["core"] == core and r["stage"]]
        seen = {k for r in recs for k in r["stage"]}
        if set(STAGE_KINDS) - seen:
            raise RuntimeError(f"{core}: no calibration patch stage has a block of kind {set(STAGE_KINDS) - seen}")
        a = np.array([[1.0] + [r["stage"].count(k) for k in STAGE_KINDS] for r in recs])
        y = np.array([_round4(r["stage_bytes"]) + CALL_BYTES for r in recs], float)
        coef = np.ceil(nnls(a, y)[0])
        loop = int(coef[0] + max(0.0, float(np.max(y - a @ coef))))
        result[core] = {"loop": loop, **{k: int(c) for k, c in zip(STAGE_KINDS, coef[1:])}}
    return result


def derive(data: dict) -> dict:
    """The whole table from the measurements (`write_table` prints it)."""
    symbols, closures, family_bytes = derive_runtime(data["runtime"])
    base = {core: max(p["harness_bytes"] for p in data["runtime"] if p["core"] == core) + ALIGN_ALLOWANCE
            for core in CORES}
    return {"CORES": CORES, "BASE_BYTES": base, "INVOKE_BYTES": derive_invoke(data["models"]),
            "LAYER_BYTES": derive_layers(data["models"]), "STAGE_BYTES": derive_stage(data["models"]),
            "CODE_BYTES": family_bytes, "RUNTIME_SYMBOLS": symbols, "RUNTIME_CLOSURES": closures}


def estimate_of(rec: dict, table: dict) -> int:
    """The estimate `table` gives for one measured build."""
    code = flash.GeneratedCode(frozenset(rec["functions"]), tuple(k for k, _ in rec["layers"]),
                               tuple(rec["stage"]), rec["data_bytes"], rec["outputs"])
    return rec["weights"] + flash.core_code_bytes(code, rec["kernels"], rec["core"], SimpleNamespace(**table))


def check(data: dict, table: dict) -> float:
    """Print every build's estimate against its Flash; raise if one is below; return the largest relative error."""
    worst = 0.0
    for rec in data["models"]:
        est = estimate_of(rec, table)
        err = (est - rec["flash"]) / rec["flash"]
        worst = max(worst, err)
        print(f"{rec['model']:28s} {rec['core']:10s} {rec['kernels']:8s} measured {rec['flash']:8d} "
              f"estimate {est:8d} {100 * err:+6.2f} %")
        if est < rec["flash"]:
            raise RuntimeError(f"{rec['model']} {rec['core']} {rec['kernels']}: estimate {est} < measured "
                               f"{rec['flash']}")
    print(f"{len(data['models'])} builds; largest error {100 * worst:+.2f} %")
    return worst


# -- 3. write ----------------------------------------------------------------------------------------------------------
HEADER = '''"""Schedule stage: the measured table of the Flash model (`flash.py`). Generated by
`python bench/calibrate_flash.py` from bench/results/flash_calibration.json; do not edit (tests/schedule/
test_code_size.py checks it).

Bytes of a linked firmware (arm-none-eabi-gcc -O2, newlib-nano, `-ffunction-sections -Wl,--gc-sections`), per core:
BASE_BYTES       the firmware harness (vectors, startup, semihosting, main, newlib's memcpy/memset/strlen, strings)
                 + {align} bytes of alignment allowance
INVOKE_BYTES     kb_invoke beyond its calls: (with one output, per further output)
LAYER_BYTES      one kb_layer_* function of a kind (the largest measured) + its call in kb_invoke (a concat: per
                 channel copy; a reshape: when it copies)
STAGE_BYTES      kb_patch_stage: "loop" + per block kind
CODE_BYTES       per (core, kernel set), each family's code with all of its functions linked (the most it adds)
RUNTIME_SYMBOLS  per (core, kernel set), each runtime function / static table ("file:name" when static) -> bytes
RUNTIME_CLOSURES per (core, kernel set), each function -> the symbols its probe firmware links beyond the harness
"""
'''


def _literal(value, indent: int = 0) -> str:
    """A deterministic, line-wrapped Python literal of nested dicts / tuples of str and int."""
    pad = " " * (indent + 4)
    if _short(value):
        return repr(value)
    if isinstance(value, dict):
        if all(_short(v) for v in value.values()):
            items = [f"{k!r}: {v!r}," for k, v in value.items()]
            return "{\n" + _wrap(items, pad) + " " * indent + "}"
        lines = [f"{pad}{k!r}: {_literal(v, indent + 4)}," for k, v in value.items()]
        return "{\n" + "\n".join(lines) + "\n" + " " * indent + "}"
    if isinstance(value, (tuple, list)):
        if not value:
            return "()"
        return "(\n" + _wrap([f"{v!r}," for v in value], pad) + " " * indent + ")"
    return repr(value)


def _short(value) -> bool:
    """A scalar, or a tuple of a few short scalars: written on one line."""
    if isinstance(value, tuple):
        return len(repr(value)) <= 60 and all(isinstance(v, (int, str)) for v in value)
    return not isinstance(value, (dict, list))


def _wrap(items: list[str], pad: str, width: int = 120) -> str:
    lines, line = [], pad
    for item in items:
        if len(line) + len(item) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = pad
        line += item + " "
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def table_source(table: dict) -> str:
    """The text of code_size.py for `table`."""
    parts = [HEADER.format(align=ALIGN_ALLOWANCE)]
    for name, value in table.items():
        parts.append(f"{name} = {_literal(value)}\n")
    return "\n".join(parts)


# -- 4. the held-out models --------------------------------------------------------------------------------------------
def _acceptance_job(args) -> list[dict]:
    """Estimate and measured Flash of one held-out model and kernel set, per core."""
    from kilobyte.codegen import compile_graph
    from kilobyte.schedule.estimate import estimate_resources
    from kilobyte.schedule.plan_types import PlanOptions
    from kilobyte.targets.cortexm import build_firmware, measure

    index, kernels, work = args
    model = acceptance_models()[index]
    options = PlanOptions(kernels=kernels, patch=model.patch)
    result = compile_graph(model.build(), Path(work) / "model", options)
    rows = []
    for core in ACCEPTANCE_CORES:
        build = build_firmware(result.out_dir, core, kernels=kernels, out_dir=Path(work) / core)
        est = estimate_resources(result.graph, options, core=core)
        rows.append({"model": model.name, "kernels": kernels, "core": core, "measured": measure(build)["flash_bytes"],
                     "estimate": est.flash_bytes, "weights": est.weight_bytes})
    return rows


def acceptance(jobs: int) -> list[dict]:
    """Estimate vs measured Flash of every held-out model (tests/targets/test_flash_estimate.py's set)."""
    n = len(acceptance_models())
    with tempfile.TemporaryDirectory(prefix="kb-flashacc-") as tmp, ProcessPoolExecutor(jobs) as pool:
        args = [(i, k, f"{tmp}/a{i}-{k}") for i in range(n) for k in ACCEPTANCE_SETS]
        return [row for rows in pool.map(_acceptance_job, args) for row in rows]


def acceptance_markdown(rows: list[dict]) -> str:
    """The docs table: per model and kernel set, per core estimate / measured / error."""
    head = "| model | kernels | " + " | ".join(f"{c} estimate | measured | error" for c in ACCEPTANCE_CORES) + " |"
    lines = [head, "|---|---|" + "---:|---:|---:|" * len(ACCEPTANCE_CORES)]
    by_key = {(r["model"], r["kernels"], r["core"]): r for r in rows}
    for model, kernels in dict.fromkeys((r["model"], r["kernels"]) for r in rows):
        cells = []
        for core in ACCEPTANCE_CORES:
            r = by_key[(model, kernels, core)]
            err = 100 * (r["estimate"] - r["measured"]) / r["measured"]
            cells.append(f"{r['estimate']:,} | {r['measured']:,} | +{err:.2f} %")
        lines.append(f"| {model} | {kernels} | " + " | ".join(cells) + " |")
    worst = max((r["estimate"] - r["measured"]) / r["measured"] for r in rows)
    worst_bytes = max(r["estimate"] - r["measured"] for r in rows)
    return "\n".join(lines) + f"\n\nLargest error: +{100 * worst:.2f} % (+{worst_bytes:,} bytes at most).\n"


def family_markdown(table: dict) -> str:
    """Docs table: each family's code with all its functions linked, per core and kernel set, and the base."""
    keys = list(table["CODE_BYTES"])
    lines = ["| family | " + " | ".join(f"{c} {k}" for c, k in keys) + " |", "|---|" + "---:|" * len(keys)]
    for family in ENTRY_POINTS:
        lines.append(f"| {family} | " + " | ".join(f"{table['CODE_BYTES'][key][family]:,}" for key in keys) + " |")
    lines.append("| *firmware base* | " + " | ".join(f"{table['BASE_BYTES'][c]:,}" for c, _ in keys) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--derive", action="store_true", help="re-derive the table from the stored measurements")
    parser.add_argument("--acceptance", action="store_true", help="estimate vs measured Flash of the held-out models")
    parser.add_argument("--update", action="store_true",
                        help="measure only the runtime functions and calibration models the stored JSON lacks")
    parser.add_argument("--jobs", type=int, default=2, help="parallel builds (default 2)")
    args = parser.parse_args()
    if args.acceptance:
        rows = acceptance(args.jobs)
        ACCEPTANCE.write_text(json.dumps(rows, indent=1) + "\n")
        print(acceptance_markdown(rows))
        return
    if args.derive:
        data = json.loads(RESULTS.read_text())
    elif args.update:
        data = measure_missing(json.loads(RESULTS.read_text()), args.jobs)
        RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    else:
        data = measure_all(args.jobs)
        RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    table = derive(data)
    check(data, table)
    TABLE.write_text(table_source(table))
    print(family_markdown(table))
    print(f"wrote {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
