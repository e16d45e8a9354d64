"""Codegen stage: build a generated project for the host with gcc and run it.

Two builds: a shared library loaded with ctypes (fast, used for many inputs) and an executable, optionally under
AddressSanitizer/UBSan with guard bytes around the arena (`make asan`), run as a subprocess.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..atomic import replacing
from ..errors import KilobyteError
from ..formats.project import manifest
from ..ops.detect_post import DETECTION_DTYPE, manifest_spec
from ..runtime import C_DIR, include_closure

# -O3, not -O2: gcc 12 vectorises the kernels' int8 dot products (pmaddwd) only at -O3 (-O2's "very cheap" cost
# model refuses loops that need a scalar tail), which makes the host build 2-3x faster. Still strict C99.
STRICT = ("-std=c99", "-O3", "-Wall", "-Wextra", "-Werror")
SANITIZE = ("-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-DKB_ARENA_GUARD=64")


def cache_dir() -> Path | None:
    """Where compiled runtime objects are kept between host builds: `$KILOBYTE_BUILD_CACHE`, else a per-user folder
    in the system's temporary directory; None when `$KILOBYTE_BUILD_CACHE` is "off"."""
    env = os.environ.get("KILOBYTE_BUILD_CACHE")
    if env == "off":
        return None
    return Path(env) if env else Path(tempfile.gettempdir()) / f"kilobyte-build-cache-{os.getuid()}"


def _object(source: Path, include_dir: Path, flags, cache: Path) -> Path:
    """`source` compiled with `flags` (-c) into `cache`, named by a hash of the flags and of the source and every
    header it includes: a runtime file shared by many generated projects is compiled once. Written to a temporary
    name, then renamed (`kilobyte.atomic.replacing`), so concurrent builds never see half an object."""
    h = hashlib.sha256(repr(tuple(flags)).encode())
    for path in include_closure(source, include_dir):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    obj = cache / f"{source.stem}-{h.hexdigest()[:24]}.o"
    if not obj.exists():
        with replacing(obj) as tmp:
            _gcc(["gcc", *flags, f"-I{include_dir}", "-c", str(source), "-o", str(tmp)], source)
    return obj


def _gcc(cmd: list[str], what) -> None:
    """Run a gcc command; a failure is a one-line error naming `what`, gcc's first message and the command."""
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        first = res.stderr.strip().splitlines()[0] if res.stderr else ""
        raise KilobyteError(f"{what}: host build failed: {first} (command: {' '.join(cmd)})")


def _compile(project: Path, out: Path, flags, shared: bool) -> Path:
    src = project / "src"
    files = sorted(src.glob("*.c"))
    runtime = [p for p in files if (C_DIR / p.name).is_file()]  # runtime kernels: the same in every project
    srcs = [str(p) for p in files if p not in runtime]  # the model (<prefix>_model.c with --prefix)
    # an --arena-extern library's arena, defined as a user would (not in sanitizer builds: the model's guarded one)
    srcs += [str(project / s) for s in manifest(project).get("host_sources", [])]
    if not shared:
        srcs.append(str(project / "host" / "main.c"))
    extra = ["-fPIC", "-shared"] if shared else []
    cache = cache_dir()
    if cache is None:
        srcs = [str(p) for p in runtime] + srcs
    else:
        compile_flags = [*flags, *(["-fPIC"] if shared else [])]
        srcs += [str(_object(p, src, compile_flags, cache)) for p in runtime]
    _gcc(["gcc", *flags, *extra, f"-I{src}", *srcs, "-o", str(out), "-lm"], project)  # -lm: a float tail's expf
    return out


def build_executable(project: str | Path, *, sanitize: bool = False) -> Path:
    project = Path(project)
    name = "model_asan" if sanitize else "model"
    return _compile(project, project / "host" / name, STRICT + (SANITIZE if sanitize else ()), shared=False)


class HostModel:
    """The generated C model as a ctypes shared library: `HostModel(dir)(x_int8) -> y_int8`."""

    def __init__(self, project: str | Path):
        self.project = Path(project)
        self.manifest = manifest(self.project)
        lib = _compile(self.project, self.project / "host" / "libmodel.so", STRICT, shared=True)
        self.lib = ctypes.CDLL(str(lib))
        self.prefix = self.manifest.get("prefix", "kb")
        self.in_shape = tuple(self.manifest["input"]["shape"])
        outputs = self.manifest.get("outputs", [self.manifest["output"]])
        self._invoke = getattr(self.lib, f"{self.prefix}_invoke")
        self._invoke.argtypes = [ctypes.c_void_p] * (1 + len(outputs))  # the input, then one pointer per output
        self._invoke.restype = None
        self._offsets = [o.get("offset", 0) for o in outputs]
        # one output: its shape; several: the flat buffer they are written to, back to back (see `outputs`)
        self.out_shape = tuple(outputs[0]["shape"]) if len(outputs) == 1 else (sum(
            int(np.prod(o["shape"])) for o in outputs),)
        self.arena_bytes = ctypes.sizeof(ctypes.c_int8 * self.manifest["arena_bytes"])

    def symbol_sizes(self) -> dict[str, int]:
        """Sizes of the symbols of the library as built (`nm -S`), by name."""
        out = subprocess.run(["nm", "-S", str(self.project / "host" / "libmodel.so")], capture_output=True,
                             text=True).stdout
        return {p[3]: int(p[1], 16) for p in (line.split() for line in out.splitlines()) if len(p) == 4}

    def arena_symbol_bytes(self) -> int:
        """Size of the `<prefix>_arena` symbol as built (read back from the library, not from the manifest)."""
        sizes, name = self.symbol_sizes(), f"{self.prefix}_arena"
        if name not in sizes:
            raise KilobyteError(f"{self.project}: no {name} symbol in the host build")
        return sizes[name]

    def float_outputs(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """`<prefix>_invoke_float`: the model as its file defines it, float where the file has float (io_edges.py):
        every output by its name in the file, in its shape and the file's dtype."""
        m = self.manifest
        if not m.get("float_entry"):
            raise KilobyteError(f"{self.project}: the model's input and outputs are integers; call it with those")
        x = np.ascontiguousarray(x, dtype=np.float32 if m.get("float_head") else m["input"]["dtype"])
        x = x.reshape(self.in_shape)
        outs = m["outputs"]
        ys = [np.empty(o["file_shape"], o["file_dtype"]) for o in outs]
        fn = getattr(self.lib, f"{self.prefix}_invoke_float")
        fn.argtypes = [ctypes.c_void_p] * (1 + len(outs))
        fn.restype = None
        fn(x.ctypes.data, *(y.ctypes.data for y in ys))
        return {o["file_name"]: y for o, y in zip(outs, ys)}

    def invoke_float(self, x: np.ndarray) -> np.ndarray:
        """`float_outputs` of a model with one output: that output."""
        ys = self.float_outputs(x)
        if len(ys) != 1:
            raise KilobyteError(f"{self.project}: the model has {len(ys)} outputs; use float_outputs")
        return next(iter(ys.values()))

    def detections(self, x: np.ndarray) -> np.ndarray:
        """A detector library's boxes for one input: `<prefix>_invoke`, then `<prefix>_detections` over the head
        outputs it wrote; an `ops.detect_post.DETECTION_DTYPE` array, best first."""
        spec = manifest_spec(self.manifest)
        if spec is None:
            raise KilobyteError(f"{self.project}: not a detector library (compiled without --detect)")
        outs = self.manifest["outputs"]
        heads = [np.ascontiguousarray(self.outputs(x)[o["name"]]) for o in outs]
        found = np.zeros(spec.max_detections, DETECTION_DTYPE)
        fn = getattr(self.lib, f"{self.prefix}_detections")
        fn.argtypes, fn.restype = [ctypes.c_void_p] * (len(outs) + 1), ctypes.c_int32
        n = fn(*(h.ctypes.data for h in heads), found.ctypes.data)
        return found[:n].copy()

    def outputs(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Every output of one run, by name and in its shape."""
        flat = self(x).reshape(-1)
        return {o["name"]: flat[o.get("offset", 0):o.get("offset", 0) + int(np.prod(o["shape"]))].reshape(o["shape"])
                for o in self.manifest.get("outputs", [self.manifest["output"]])}

    def run_batch(self, xs: np.ndarray) -> np.ndarray:
        """`<prefix>_invoke` on each of `xs` (N, *input shape; the input's leading batch of 1 may be left out) in
        turn, into one (N, *output shape) array: for thousands of inputs, no per-call conversion, check or
        allocation (about 1 µs of Python per input)."""
        xs = np.ascontiguousarray(xs, dtype=self.manifest["input"]["dtype"])
        if xs.shape[1:] not in (self.in_shape, self.in_shape[1:]) or self.in_shape[:1] != (1,):
            raise KilobyteError(f"{self.project}: inputs {xs.shape[1:]}, the model wants {self.in_shape}")
        ys = np.empty((len(xs), *self.out_shape), self.manifest["output"]["dtype"])
        x0, y0 = xs.ctypes.data, ys.ctypes.data
        x_step, y_step = xs[0].nbytes if len(xs) else 0, ys[0].nbytes if len(ys) else 0
        invoke, offsets = self._invoke, self._offsets
        for i in range(len(xs)):
            invoke(x0 + i * x_step, *(y0 + i * y_step + offset for offset in offsets))
        return ys

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=self.manifest["input"]["dtype"])
        if x.shape != self.in_shape:
            raise KilobyteError(f"{self.project}: input shape {x.shape}, the model wants {self.in_shape}")
        y = np.empty(self.out_shape, self.manifest["output"]["dtype"])
        self._invoke(x.ctypes.data, *(y.ctypes.data + offset for offset in self._offsets))
        return y


def run_executable(exe: str | Path, x: np.ndarray, out_shape, out_dtype=np.int8, *, float_entry: bool = False):
    """Run a host executable on one input via files; a sanitizer report or guard failure raises. `float_entry`:
    through `<prefix>_invoke_float` (`--float`): `x` as the file takes it, the outputs' bytes back to back at their
    file offsets (read them with `out_dtype` uint8 and `unpack_file_outputs`)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        src.write_bytes(np.ascontiguousarray(x).tobytes())  # int8 / uint8 bytes, or the file's floats
        cmd = [str(exe), *(["--float"] if float_entry else []), str(src), str(dst)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise KilobyteError(f"{exe}: exit {res.returncode}: {res.stderr.strip()[:400]}")
        return np.frombuffer(dst.read_bytes(), out_dtype).reshape(out_shape)


def unpack_file_outputs(m: dict, data: bytes) -> dict[str, np.ndarray]:
    """The outputs of a `--float` run (or the firmware's float run) from its bytes: each at its file offset, by its
    name in the file, in its shape and dtype (manifest `m`)."""
    return {o["file_name"]: np.frombuffer(data, o["file_dtype"], int(np.prod(o["file_shape"])), o["file_offset"])
            .reshape(o["file_shape"]) for o in m["outputs"]}


def run_compiled(project: str | Path, x: np.ndarray) -> np.ndarray:
    """`kilobyte run DIR`: the host build's int8 output (`kb_invoke`; a float tail runs in `float_outputs`)."""
    return HostModel(project)(x)
