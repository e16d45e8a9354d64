"""Codegen stage: prove a generated project right — host C == numpy reference == TFLite Micro, bit for bit.

The project's `model.tflite` is read back with our own `.tflite` reader; the numpy int8 interpreter and TFLM run it;
the host C build (ctypes) runs the same inputs; a sanitizer build (ASan/UBSan, guard bytes around the arena) runs a
few of them. A model with an op TFLite Micro has no kernel for (GELU, TILE) is checked against TFLite's own
interpreter instead (`kilobyte.targets.litert`, engine "tflite") when it is installed, else without a TFLite engine.
The report names every oracle that ran (`engines`) and every one that did not, with the reason (`not_run`): a
report never claims a check that did not run. Any differing byte is a failure with the input index and the number of
differing values. The same checks on a Cortex-M board under QEMU live in `kilobyte.targets.cortexm.verify`
(`kilobyte verify DIR --target ...`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..errors import KilobyteError
from .host import HostModel, build_executable, manifest, run_executable

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
                "stack_bytes": self.stack_bytes}

    @classmethod
    def from_json(cls, d: dict) -> VerifyReport:
        """The report back from `to_json`'s dict (a search's or a pruning's report.json), to print its summary."""
        return cls(d["inputs"], tuple(d["engines"]), list(d["mismatches"]), d["sanitizer_runs"], d.get("target"),
                   d.get("stack_bytes"), dict(d["not_run"]))


def verify_inputs(project: Path, n_random: int, data: str | None, seed: int = 0) -> list[np.ndarray]:
    """Random int8 inputs plus (optionally) dataset images quantised with the model's input qparams."""
    m = manifest(project)
    shape, scale, zp = tuple(m["input"]["shape"]), m["input"]["scale"], m["input"]["zero_point"]
    dtype = np.dtype(m["input"].get("dtype", "int8"))  # int8, or uint8 before a QUANTIZE
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    rng = np.random.default_rng(seed)
    xs = [rng.integers(lo, hi + 1, shape, dtype=np.int64).astype(dtype) for _ in range(n_random)]
    if data:
        from ..api import calibration_inputs

        for img in calibration_inputs(data, shape, n=max(n_random, 4), seed=seed + 1):
            xs.append(np.clip(np.round(img / scale) + zp, lo, hi).astype(dtype))
    return xs


def project_tflite(project: str | Path) -> bytes:
    """The project's `model.tflite` bytes; a one-line `KilobyteError` when it was compiled without them."""
    from .project import TFLITE_FILE

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

    from ..frontends.tflite import from_tflite
    from . import split_float_head, split_float_tail

    core, _ = split_float_tail(split_float_head(from_tflite(data))[0])
    if core.outputs[0] != out_name:
        raise KilobyteError(f"{project}: model.tflite output '{core.outputs[0]}' differs from the manifest's")
    return core, out_name


def flat_outputs(values: dict[str, np.ndarray], names) -> np.ndarray:
    """The outputs `names` of one run, flattened and back to back: the bytes the C model writes to `output`."""
    return np.concatenate([np.asarray(values[n]).reshape(-1) for n in names])


def _file_input(m: dict, x: np.ndarray) -> np.ndarray:
    """What the model file takes for the int8 core input `x`: `x` itself, or for a float input (a QUANTIZE head) the
    floats TFLite's DEQUANTIZE gives for `x`, which its QUANTIZE maps back to exactly `x`."""
    from ..quant.arith import dequantize_values

    return dequantize_values(x, m["input"]["scale"], m["input"]["zero_point"]) if m.get("float_head") else x


def _tflite_engine(core, wanted: bool = True) -> tuple[str | None, dict[str, str]]:
    """The TFLite oracle for `core` and why the others do not run: ("tflm", {}) when TFLite Micro runs every op,
    else ("tflite", {"tflm": why}) when TFLite's interpreter is installed, else (None, {...both, with why})."""
    from importlib.util import find_spec

    from ..targets.litert import litert_available
    from ..targets.tflm import tflm_missing_ops

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


def verify_project(project, *, n_random: int = 8, data: str | None = None, tflm: bool = True,
                   sanitize: bool = True, progress: bool = False) -> VerifyReport:
    """Host C == numpy reference == TFLite Micro (or TFLite's interpreter) on `n_random` random inputs and images
    of `data`, plus an ASan/UBSan build on two of them; `tflm=False` / `sanitize=False` skip those, and the report's
    `not_run` says so (as it says why a TFLite oracle could not run)."""
    from ..interp import run_int8

    project = Path(project)
    m = manifest(project)
    tfl = project_tflite(project)
    core, _ = reference_graph(project)
    host = HostModel(project)
    xs = verify_inputs(project, n_random, data)
    oracle, not_run = _tflite_engine(core, wanted=tflm)
    if not sanitize:
        not_run["sanitizer"] = "--no-sanitize given"
    report = VerifyReport(len(xs), ("c-host", "reference") + ((oracle,) if oracle else ()), not_run=not_run)
    for i, x in enumerate(tqdm(xs, desc="verify", unit="input", disable=not progress, leave=False)):
        got = {"c-host": host(x).reshape(-1), "reference": flat_outputs(run_int8(core, x), core.outputs)}
        feed = _file_input(m, x)  # a float-input file takes the float values whose QUANTIZE is x
        if oracle == "tflm":
            from ..targets.tflm import run_tflm

            got["tflm"] = flat_outputs(run_tflm(tfl, feed, preserve_all=True).tensors, core.outputs)
        elif oracle == "tflite":
            from ..targets.litert import run_litert

            got["tflite"] = flat_outputs(run_litert(tfl, feed, core.outputs), core.outputs)
        for name, y in got.items():
            if name != "reference" and not np.array_equal(y, got["reference"]):
                n = int(np.sum(y != got["reference"]))
                report.mismatches.append(f"input {i}: {name} differs from the reference in {n} values")
    if sanitize:
        exe = build_executable(project, sanitize=True)
        for i, x in enumerate(xs[:2]):
            y = run_executable(exe, x, (-1,), np.dtype(m["output"].get("dtype", "int8")))
            report.sanitizer_runs += 1
            if not np.array_equal(y, flat_outputs(run_int8(core, x), core.outputs)):
                report.mismatches.append(f"input {i}: sanitizer build differs from the reference")
    return report
