"""Driver stage: prove a generated project right — host C == numpy reference == TFLite Micro, bit for bit.

The project's `model.tflite` is read back with our own `.tflite` reader; the numpy int8 interpreter and TFLM run it;
the host C build (ctypes) runs the same inputs; a sanitizer build (ASan/UBSan, guard bytes around the arena) runs a
few of them. A model with an op TFLite Micro has no kernel for (GELU, TILE) is checked against TFLite's own
interpreter instead (`kilobyte.targets.litert`, engine "tflite") when it is installed, else without a TFLite engine.
The report names every oracle that ran (`engines`) and every one that did not, with the reason (`not_run`): a
report never claims a check that did not run. Any differing byte is a failure with the input index and the number of
differing values. A model with a float entry point (`<prefix>_invoke_float`: a float input, float outputs, float
tails after the int8 core) has that checked too, against the TFLite engine's run of the file itself: integer
outputs bit for bit, float ones within 1 ulp (the report's `float_entry` says what ran). The same checks on a
Cortex-M board under QEMU live in `verify_target.py` (`kilobyte verify DIR --target ...`).

It sits in the driver, above codegen and targets, because it runs both: the C that codegen wrote, against the
TFLite engines of `targets/` and images of `data/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..codegen import split_float_head, split_float_tail
from ..codegen.host import HostModel, build_executable, run_executable, unpack_file_outputs
from ..codegen.project import TFLITE_FILE
from ..errors import KilobyteError
from ..formats.project import manifest
from ..interp import run_int8
from ..ops.arith import dequantize_values
from ..ops.detect_post import manifest_spec, postprocess
from ..targets.litert import litert_available, run_litert
from ..targets.tflm import run_tflm, tflm_missing_ops
from .load import calibration_inputs

# How a report names its oracles to people (an engine not listed here, e.g. "qemu-cortex-m7", is shown as is).
ENGINE_LABELS = {"c-host": "host C", "reference": "numpy reference", "tflm": "TFLM", "tflite": "TFLite interpreter",
                 "sanitizer": "ASan/UBSan build"}


@dataclass
class VerifyReport:
    """What a verification compared, and what it could not: `engines` ran on every input and agreed byte for byte
    unless `mismatches` says otherwise; `not_run` maps each oracle that did not run to why ("no kernel for GELU",
    "--no-tflm given", ...), so no printer can claim a check that never happened."""

    inputs: int = 0
    engines: tuple[str, ...] = ()
    mismatches: list[str] = field(default_factory=list)
    sanitizer_runs: int = 0
    target: str | None = None  # a Cortex-M core when the firmware ran under QEMU, None for host-only checks
    stack_bytes: int | None = None  # highest stack high-water mark over the QEMU runs
    not_run: dict[str, str] = field(default_factory=dict)  # oracle -> the reason it did not run
    float_entry: str | None = None  # what checked <prefix>_invoke_float, if the model has one (`float_entry_note`)
    detections: str | None = None  # what checked a detector's <prefix>_detections (`detection_mismatches`)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def checked(self) -> str:
        """The oracles that ran, as the equation they satisfied: "c-host == reference == tflm"."""
        return " == ".join(self.engines)

    def not_run_text(self) -> str:
        """One clause per oracle that did not run: "TFLM: not run (no kernel for GELU)"; "" when all ran."""
        return "; ".join(f"{ENGINE_LABELS.get(k, k)}: not run ({why})" for k, why in self.not_run.items())

    def summary(self) -> str:
        """One line for people: "OK: bit-exact on 8 inputs (c-host == reference == tflm)" plus what did not run.

        >>> VerifyReport(2, ("c-host", "reference"), not_run={"tflm": "no kernel for GELU"}).summary()
        'OK: bit-exact on 2 inputs (c-host == reference); TFLM: not run (no kernel for GELU)'
        """
        status = "OK: bit-exact" if self.ok else "FAILED"
        extra = [f"stack high-water mark {self.stack_bytes} B"] if self.target else \
            [f"{self.sanitizer_runs} sanitizer runs"] if self.sanitizer_runs else []
        line = f"{status} on {self.inputs} inputs ({'; '.join([self.checked(), *extra])})"
        return f"{line}; {self.not_run_text()}" if self.not_run else line

    def to_json(self) -> dict:
        """The report as JSON: the oracles that ran (`engines`) and those that did not with the reason (`not_run`)."""
        return {"ok": self.ok, "inputs": self.inputs, "engines": list(self.engines), "not_run": dict(self.not_run),
                "sanitizer_runs": self.sanitizer_runs, "mismatches": list(self.mismatches), "target": self.target,
                "stack_bytes": self.stack_bytes, "float_entry": self.float_entry, "detections": self.detections}

    @classmethod
    def from_json(cls, d: dict) -> VerifyReport:
        """The report back from `to_json`'s dict (a search's or a pruning's report.json), to print its summary."""
        return cls(d["inputs"], tuple(d["engines"]), list(d["mismatches"]), d["sanitizer_runs"], d.get("target"),
                   d.get("stack_bytes"), dict(d["not_run"]), d.get("float_entry"), d.get("detections"))


def verification_line(report: dict) -> str:
    """The verification line of a stored report (a search's, a demo's, a pruning's): its `verified` record's
    summary, or for a report written before the record existed only what it kept — the bit-exact flag, without
    naming oracles it cannot vouch for."""
    if report.get("verified") is not None:
        return VerifyReport.from_json(report["verified"]).summary()
    return ("bit-exact" if report.get("bit_exact") else "FAILED") + " (an older report: which oracles ran is not " \
        "recorded; run `kilobyte verify DIR`)"


def verify_inputs(project: Path, n_random: int, data: str | None, seed: int = 0) -> list[np.ndarray]:
    """Random int8 inputs plus (optionally) dataset images quantised with the model's input qparams."""
    m = manifest(project)
    shape, scale, zp = tuple(m["input"]["shape"]), m["input"]["scale"], m["input"]["zero_point"]
    dtype = np.dtype(m["input"].get("dtype", "int8"))  # int8, or uint8 before a QUANTIZE
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    rng = np.random.default_rng(seed)
    xs = [rng.integers(lo, hi + 1, shape, dtype=np.int64).astype(dtype) for _ in range(n_random)]
    if data:
        for img in calibration_inputs(data, shape, n=max(n_random, 4), seed=seed + 1):
            xs.append(np.clip(np.round(img / scale) + zp, lo, hi).astype(dtype))
    return xs


def project_tflite(project: str | Path) -> bytes:
    """The project's `model.tflite` bytes; a one-line `KilobyteError` when it was compiled without them."""
    path = Path(project) / TFLITE_FILE
    if not path.is_file():
        manifest(project)  # not a project at all: say that instead
        raise KilobyteError(f"{project}: no {TFLITE_FILE} (compiled without the [tflite] extra); "
                            "pip install 'kilobyte[tflite]' and compile again")
    return path.read_bytes()


def reference_graph(project: str | Path):
    """The int8 graph the project's C code implements (read back from its model.tflite) and its output name."""
    project = Path(project)
    out_name = manifest(project)["output"]["name"]
    data = project_tflite(project)  # before importing the reader, which needs the [tflite] extra too

    from ..frontends.tflite import from_tflite  # defers tflite (the [tflite] extra): once the file is known to exist

    core, _ = split_float_tail(split_float_head(from_tflite(data))[0])
    if core.outputs[0] != out_name:
        raise KilobyteError(f"{project}: model.tflite output '{core.outputs[0]}' differs from the manifest's")
    return core, out_name


def flat_outputs(values: dict[str, np.ndarray], names) -> np.ndarray:
    """The outputs `names` of one run, flattened and back to back: the bytes the C model writes to `output` (a mix of
    int8 and uint8 outputs as the first one's type, byte for byte, as the host build's buffer holds them)."""
    first = np.asarray(values[names[0]]).dtype
    return np.concatenate([np.ascontiguousarray(values[n]).reshape(-1).view(first) for n in names])


def file_input(m: dict, x: np.ndarray) -> np.ndarray:
    """What the model file takes for the int8 core input `x`: `x` itself, or for a float input (a QUANTIZE head) the
    floats TFLite's DEQUANTIZE gives for `x`, which its QUANTIZE maps back to exactly `x`."""
    return dequantize_values(x, m["input"]["scale"], m["input"]["zero_point"]) if m.get("float_head") else x


def tflite_engine(core, wanted: bool = True) -> tuple[str | None, dict[str, str]]:
    """The TFLite oracle for `core` and why the others do not run: ("tflm", {}) when TFLite Micro runs every op,
    else ("tflite", {"tflm": why}) when TFLite's interpreter is installed, else (None, {...both, with why})."""
    missing = tflm_missing_ops(core)
    if not wanted:
        return None, {"tflm": "--no-tflm given"}
    if not missing and find_spec("tflite_micro") is not None:
        return "tflm", {}
    why = {"tflm": f"no kernel for {', '.join(missing)}" if missing else
           "not installed: pip install 'kilobyte[tflm]'"}
    if litert_available():
        return "tflite", why
    return None, {**why, "tflite": "not installed: pip install 'kilobyte[litert]'"}


def oracle_run(oracle: str | None, tfl: bytes, feed: np.ndarray, names) -> dict[str, np.ndarray] | None:
    """Tensors `names` (the core's outputs and the file's) of one run of the file by the TFLite engine `oracle`."""
    if oracle == "tflm":
        run = run_tflm(tfl, feed, preserve_all=True)
        return {n: run.outputs[n] if n in run.outputs else run.tensors[n] for n in names}
    if oracle == "tflite":
        return run_litert(tfl, feed, names)
    return None


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float32 units in the last place (0 for equal values, +0 == -0; NaN against NaN is 0)."""
    def ordered(x):
        i = np.ascontiguousarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    d = np.abs(ordered(a) - ordered(b))
    return np.where(np.isnan(a) & np.isnan(b), 0, d)


def file_output_mismatches(m: dict, got: dict[str, np.ndarray], want: dict[str, np.ndarray], who: str,
                           i: int) -> list[str]:
    """The float entry point's outputs `got` against the engine's `want` (both by the file's output names):
    int8 / uint8 outputs bit for bit, float ones within 1 ulp (TFLite's float kernels and ours may round exp
    differently in the last place)."""
    bad = []
    for o in m["outputs"]:
        name = o["file_name"]
        y, ref = np.asarray(got[name]).reshape(-1), np.asarray(want[name]).reshape(-1)
        if o["file_dtype"] == "float32":
            d = ulp_distance(y, ref)
            if int(d.max(initial=0)) > 1:
                bad.append(f"input {i}: {who} float output '{name}' differs by up to {int(d.max())} ulp in "
                           f"{int(np.sum(d > 1))} values")
        elif not np.array_equal(y, ref):
            bad.append(f"input {i}: {who} output '{name}' differs in {int(np.sum(y != ref))} values")
    return bad


def float_entry_note(m: dict, oracle: str | None, inputs: int) -> str | None:
    """The report's line about `<prefix>_invoke_float`: what it was compared with, or why it was not."""
    if not m.get("float_entry"):
        return None
    fn = f"{m.get('prefix', 'kb')}_invoke_float"
    if oracle is None:
        return f"{fn}: not checked (no TFLite engine ran the model file: turned off, or none installed)"
    kinds = sorted({o["file_dtype"] for o in m["outputs"]})
    return (f"{fn}: {len(m['outputs'])} output(s) ({', '.join(kinds)}) compared with {oracle} on {inputs} inputs "
            "(integers bit for bit, floats within 1 ulp)")


def detection_mismatches(m: dict, reference_flat: np.ndarray, found: np.ndarray, engine: str, i: int) -> list[str]:
    """A detector library's boxes (`found`, from `engine`) against `ops.detect_post.postprocess` of the reference
    outputs (`reference_flat`: every output back to back at its manifest offset); [] when equal."""
    spec = manifest_spec(m)
    heads = [reference_flat[o["offset"]:o["offset"] + int(np.prod(o["shape"]))].reshape(o["shape"][1:])
             for o in m["outputs"]]
    want = postprocess(spec, heads)
    if len(found) == len(want) and np.array_equal(found, want):
        return []
    return [f"input {i}: {engine} detections differ from the reference post-processing ({len(found)} boxes, "
            f"expected {len(want)})"]


def detections_note(m: dict, engines: str, inputs: int) -> str | None:
    """What checked `<prefix>_detections`, for the report (None for a model without it)."""
    if not m.get("detect"):
        return None
    return f"boxes: {engines} == reference post-processing on {inputs} inputs"


def verify_project(project, *, n_random: int = 8, data: str | None = None, tflm: bool = True,
                   sanitize: bool = True, progress: bool = False) -> VerifyReport:
    """Host C == numpy reference == TFLite Micro (or TFLite's interpreter) on `n_random` random inputs and images
    of `data`, plus an ASan/UBSan build on two of them; `tflm=False` / `sanitize=False` skip those, and the report's
    `not_run` says so (as it says why a TFLite oracle could not run). For a model with a float
    entry point, its outputs are compared with the TFLite engine's on the file itself (`file_output_mismatches`)."""
    project = Path(project)
    m = manifest(project)
    tfl = project_tflite(project)
    core, _ = reference_graph(project)
    host = HostModel(project)
    xs = verify_inputs(project, n_random, data)
    oracle, not_run = tflite_engine(core, wanted=tflm)
    if not sanitize:
        not_run["sanitizer"] = "--no-sanitize given"
    report = VerifyReport(len(xs), ("c-host", "reference") + ((oracle,) if oracle else ()), not_run=not_run)
    report.float_entry = float_entry_note(m, oracle, len(xs))
    files = [o["file_name"] for o in m["outputs"]] if m.get("float_entry") else []
    for i, x in enumerate(tqdm(xs, desc="verify", unit="input", disable=not progress, leave=False)):
        got = {"c-host": host(x).reshape(-1), "reference": flat_outputs(run_int8(core, x), core.outputs)}
        feed = file_input(m, x)  # a float-input file takes the float values whose QUANTIZE is x
        ran = oracle_run(oracle, tfl, feed, list(core.outputs) + files)
        if ran is not None:
            got[oracle] = flat_outputs(ran, core.outputs)
        for name, y in got.items():
            if name != "reference" and not np.array_equal(y, got["reference"]):
                n = int(np.sum(y != got["reference"]))
                report.mismatches.append(f"input {i}: {name} differs from the reference in {n} values")
        if files and ran is not None:
            report.mismatches += file_output_mismatches(m, host.float_outputs(feed), ran, "c-host float entry", i)
        if m.get("detect"):
            report.mismatches += detection_mismatches(m, got["reference"], host.detections(x), "c-host", i)
    report.detections = detections_note(m, "c-host", len(xs))
    if sanitize:
        _sanitizer_runs(project, m, core, xs, oracle, tfl, report)
    return report


def _sanitizer_runs(project: Path, m: dict, core, xs, oracle, tfl: bytes, report: VerifyReport) -> None:
    """Two inputs through the sanitizer build (ASan/UBSan, arena guard bytes): kb_invoke, and the float entry."""
    exe = build_executable(project, sanitize=True)
    for i, x in enumerate(xs[:2]):
        y = run_executable(exe, x, (-1,), np.dtype(m["output"].get("dtype", "int8")))
        report.sanitizer_runs += 1
        if not np.array_equal(y, flat_outputs(run_int8(core, x), core.outputs)):
            report.mismatches.append(f"input {i}: sanitizer build differs from the reference")
        if m.get("float_entry") and oracle is not None:
            feed = file_input(m, x)
            raw = run_executable(exe, feed, (-1,), np.uint8, float_entry=True).tobytes()
            want = oracle_run(oracle, tfl, feed, [o["file_name"] for o in m["outputs"]])
            report.mismatches += file_output_mismatches(m, unpack_file_outputs(m, raw), want,
                                                        "sanitizer float entry", i)
