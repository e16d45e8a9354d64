"""Codegen stage: build a generated project for the host with gcc and run it.

Two builds: a shared library loaded with ctypes (fast, used for many inputs) and an executable, optionally under
AddressSanitizer/UBSan with guard bytes around the arena (`make asan`), run as a subprocess.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..errors import KilobyteError
from ..runtime import C_DIR, include_closure

# -O3, not -O2: gcc 12 vectorises the kernels' int8 dot products (pmaddwd) only at -O3 (-O2's "very cheap" cost
# model refuses loops that need a scalar tail), which makes the host build 2-3x faster. Still strict C99.
STRICT = ("-std=c99", "-O3", "-Wall", "-Wextra", "-Werror")
SANITIZE = ("-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-DKB_ARENA_GUARD=64")


def manifest(project: str | Path) -> dict:
    path = Path(project) / "kilobyte.json"
    if not path.is_file():
        raise KilobyteError(f"{project}: not a compiled Kilobyte project (no kilobyte.json)")
    return json.loads(path.read_text())


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
    name, then renamed, so concurrent builds never see half an object."""
    h = hashlib.sha256(repr(tuple(flags)).encode())
    for path in include_closure(source, include_dir):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    obj = cache / f"{source.stem}-{h.hexdigest()[:24]}.o"
    if not obj.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = obj.with_name(f"{obj.stem}.{os.getpid()}.tmp.o")
        try:
            _gcc(["gcc", *flags, f"-I{include_dir}", "-c", str(source), "-o", str(tmp)], source)
        except KilobyteError:
            tmp.unlink(missing_ok=True)
            raise
        tmp.replace(obj)
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
    _gcc(["gcc", *flags, *extra, f"-I{src}", *srcs, "-o", str(out)], project)
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

    def invoke_float(self, x: np.ndarray) -> np.ndarray:
        """`kb_invoke_float`: the model as its file defines it, float where the file has float (io_edges.py)."""
        if not self.manifest.get("float_entry"):
            raise KilobyteError(f"{self.project}: the model's input and output are int8; call it with int8")
        in_t = np.float32 if self.manifest.get("float_head") else np.int8
        out_t = np.float32 if self.manifest.get("float_tail") == ["DEQUANTIZE"] else np.int8
        x = np.ascontiguousarray(x, dtype=in_t).reshape(self.in_shape)
        y = np.empty(self.out_shape, out_t)
        fn = getattr(self.lib, f"{self.prefix}_invoke_float")
        fn(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data))
        return y

    def outputs(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Every output of one run, by name and in its shape."""
        flat = self(x).reshape(-1)
        return {o["name"]: flat[o.get("offset", 0):o.get("offset", 0) + int(np.prod(o["shape"]))].reshape(o["shape"])
                for o in self.manifest.get("outputs", [self.manifest["output"]])}

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=self.manifest["input"]["dtype"])
        if x.shape != self.in_shape:
            raise KilobyteError(f"{self.project}: input shape {x.shape}, the model wants {self.in_shape}")
        y = np.empty(self.out_shape, self.manifest["output"]["dtype"])
        self._invoke(x.ctypes.data, *(y.ctypes.data + offset for offset in self._offsets))
        return y


def run_executable(exe: str | Path, x: np.ndarray, out_shape, out_dtype=np.int8) -> np.ndarray:
    """Run a host executable on one input via files; a sanitizer report or guard failure raises."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        src.write_bytes(np.ascontiguousarray(x).tobytes())  # one byte per value: int8 or uint8
        res = subprocess.run([str(exe), str(src), str(dst)], capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise KilobyteError(f"{exe}: exit {res.returncode}: {res.stderr.strip()[:400]}")
        return np.frombuffer(dst.read_bytes(), out_dtype).reshape(out_shape)


def run_compiled(project: str | Path, x: np.ndarray) -> np.ndarray:
    """`kilobyte run DIR`: the host build's int8 output (the float tail, if any, is not part of the C model)."""
    return HostModel(project)(x)
