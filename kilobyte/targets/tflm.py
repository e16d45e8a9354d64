"""Targets stage: TensorFlow Lite Micro (the `tflite-micro` wheel) as executor, memory oracle and latency probe.

TFLM is the third executor that must agree bit for bit with the numpy reference and the generated C. `run_tflm`
runs a `.tflite` model with the wheel's `kPreserveAllTensors` interpreter config, under which every tensor keeps its
own buffer and `Interpreter.GetTensor(index, subgraph)` returns it after `invoke()`; tensors are keyed by their
names in the file (the IR names, for files our writer made). The wheel is the `tflm` extra, pinned to
`tflite-micro==0.dev20261023182759`; everything here raises a `KilobyteError` naming that install when it is missing.

Arena size: the figure `print_allocations` reports (the RecordingMicroAllocator's head + tail) is not the arena a
firmware must reserve: it leaves out the temporary allocations kernels make during Prepare (a small model then needs
hundreds of bytes more) and counts some alignment slack (a larger one fits in a few bytes less). `tflm_arena_bytes`
therefore bisects for the smallest `arena_size` with which the interpreter allocates (success is monotone in the
size; each probe builds an interpreter, a few milliseconds for MCU-sized models, and results are cached per model).
`tflm_arena_report` gives the recorded breakdown, parsed from what `print_allocations` writes to fd 2 (captured by
pointing fd 2 at a temporary file around the call).
"""

from __future__ import annotations

import functools
import os
import re
import statistics
import struct
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError, ModelFileError

TFLM_PIN = "tflite-micro==0.dev20261023182759"
# IR ops the pinned wheel registers no (int8) kernel for: verify_project checks them against TFLite's own
# interpreter. TFLM's EXP and LOG take float32 only.
TFLM_MISSING_OPS = frozenset({"GELU", "TILE", "RELU_N1_TO_1", "EXP", "LOG"})
_MAX_ARENA = 1 << 31
_OUT_OF_ARENA = re.compile(r"[Ff]ailed to allocate|too small")  # what TFLM prints when the arena is short


@dataclass(frozen=True)
class TflmResult:
    outputs: dict[str, np.ndarray]  # by output tensor name
    tensors: dict[str, np.ndarray]  # every tensor of the model by name (empty unless preserve_all)
    model_bytes: bytes = b""

    @property
    def arena_bytes(self) -> int:
        """Smallest tensor arena TFLM allocates this model in (see tflm_arena_bytes; measured on first use)."""
        return tflm_arena_bytes(self.model_bytes)


def tflm_missing_ops(graph) -> list[str]:
    """The ops of `graph` TFLite Micro cannot run (sorted names; empty when it runs them all)."""
    return sorted({n.op.value for n in graph.nodes} & TFLM_MISSING_OPS)


def _runtime():
    try:
        from tflite_micro import runtime
    except ImportError:
        raise KilobyteError(f"TensorFlow Lite Micro is not installed: pip install kilobyte[tflm] "
                            f"(pins {TFLM_PIN})") from None
    return runtime


@contextmanager
def _captured_fd2():
    """Send fd 2 (TFLM's C++ code prints there) to a temporary file; the yielded list receives the text."""
    text: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield text
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text.append(tmp.read().decode(errors="replace"))


@dataclass(frozen=True)
class _ModelInfo:
    names: tuple[str, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def _model_info(model_bytes: bytes) -> _ModelInfo:
    """Tensor names and graph edges of subgraph 0, read with the schema package (any op, not only ours)."""
    import tflite

    from ..formats.tflite_schema import unique_tensor_names  # defers tflite

    if len(model_bytes) < 8 or model_bytes[4:8] != b"TFL3":
        raise ModelFileError("<tflite bytes>: not a .tflite model (missing TFL3 identifier)")
    try:
        sg = tflite.Model.GetRootAs(model_bytes, 0).Subgraphs(0)
        names = tuple(unique_tensor_names((sg.Tensors(i).Name() or b"").decode() for i in range(sg.TensorsLength())))
        inputs = tuple(int(i) for i in sg.InputsAsNumpy())
        outputs = tuple(int(i) for i in sg.OutputsAsNumpy())
    except (struct.error, IndexError, ValueError, TypeError, AttributeError) as e:
        raise ModelFileError(f"<tflite bytes>: corrupt flatbuffer ({type(e).__name__}: {e})") from None
    return _ModelInfo(names, inputs, outputs)


def _interpreter(model_bytes: bytes, arena_size: int, preserve_all: bool):
    """(interpreter or None when `arena_size` is too small, what TFLM printed while allocating)."""
    rt = _runtime()
    config = rt.InterpreterConfig.kPreserveAllTensors if preserve_all else rt.InterpreterConfig.kAllocationRecording
    with _captured_fd2() as log:
        try:
            interp = rt.Interpreter.from_bytes(model_bytes, arena_size=arena_size, intrepreter_config=config)
        except RuntimeError:
            interp = None
    return interp, log[0]


def _working_interpreter(model_bytes: bytes, preserve_all: bool, start: int | None = None):
    """(interpreter, arena size): the first size that allocates, doubling from `start`."""
    size = start or max(10 * len(model_bytes), 64 * 1024)
    while True:
        interp, log = _interpreter(model_bytes, size, preserve_all)
        if interp is not None:
            return interp, size
        if not _OUT_OF_ARENA.search(log):  # a kernel refused the model: more memory will not help
            raise KilobyteError(f"TFLM cannot prepare the model: {_last_line(log)}")
        if size >= _MAX_ARENA:
            raise KilobyteError(f"TFLM cannot allocate the model even in a {size}-byte arena: {_last_line(log)}")
        size = min(2 * size, _MAX_ARENA)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-3:]) if lines else "no message"


def _feeds(interp, info: _ModelInfo, inputs) -> list[np.ndarray]:
    """One array per model input, in input order, checked against the model's shape and dtype."""
    names = [info.names[i] for i in info.inputs]
    if not isinstance(inputs, dict):
        if len(names) != 1:
            raise KilobyteError(f"the model has {len(names)} inputs {names}: pass a dict name -> array")
        inputs = {names[0]: inputs}
    unknown = set(inputs) - set(names)
    if unknown or len(inputs) != len(names):
        raise KilobyteError(f"inputs {sorted(inputs)} do not match the model inputs {names}")
    feeds = []
    for k, name in enumerate(names):
        details = interp.get_input_details(k)
        want, shape = np.dtype(details["dtype"]), tuple(int(d) for d in details["shape"])
        x = np.asarray(inputs[name])
        if x.shape != shape:
            raise KilobyteError(f"input '{name}': shape {x.shape}, the model expects {shape}")
        if x.dtype != want:
            cast = x.astype(want)
            if not np.array_equal(cast, x):
                raise KilobyteError(f"input '{name}': {x.dtype} values do not fit the model's {want}")
            x = cast
        feeds.append(np.ascontiguousarray(x))
    return feeds


def _invoke(interp) -> None:
    with _captured_fd2() as log:
        try:
            interp.invoke()
        except RuntimeError as e:
            failure = e
        else:
            failure = None
    if failure is not None:
        raise KilobyteError(f"TFLM invoke failed: {failure} ({_last_line(log[0])})")


def run_tflm(model_bytes: bytes, inputs, *, preserve_all: bool = True) -> TflmResult:
    """Run a `.tflite` model in TFLite Micro; return its outputs, every tensor (with `preserve_all`) and the arena.

    `inputs` is one array (single-input models) or a dict input name -> array, in the model's dtype (int8 for
    integer models; integer-valued arrays of another dtype are accepted when the values fit).
    """
    model_bytes = bytes(model_bytes)
    info = _model_info(model_bytes)
    # Start big: this wheel segfaults on some too-small arenas, so never probe small sizes in this process.
    interp, _ = _working_interpreter(model_bytes, preserve_all, _preserve_guess(model_bytes))
    for k, x in enumerate(_feeds(interp, info, inputs)):
        interp.set_input(x, k)
    _invoke(interp)
    outputs = {info.names[i]: np.array(interp.get_output(k)) for k, i in enumerate(info.outputs)}
    tensors = {}
    if preserve_all:  # GetTensor only works in this config, and an index past the last tensor crashes the process
        tensors = {name: np.array(interp.GetTensor(i, 0)["tensor_data"]) for i, name in enumerate(info.names)}
    return TflmResult(outputs, tensors, model_bytes)


def _preserve_guess(model_bytes: bytes) -> int:
    """Arena to try first when every tensor is kept: twice the model, plus room for the activations."""
    import tflite

    sg = tflite.Model.GetRootAs(model_bytes, 0).Subgraphs(0)
    act = sum(4 * int(np.prod(sg.Tensors(i).ShapeAsNumpy(), dtype=np.int64)) for i in range(sg.TensorsLength()))
    return 2 * len(model_bytes) + act + 64 * 1024


def tflm_arena_bytes(model_bytes: bytes) -> int:
    """Smallest `arena_size` (bytes) for which TFLM allocates the model: bisection, see the module docstring."""
    return _arena_search(bytes(model_bytes))


@functools.lru_cache(maxsize=16)
def _arena_search(model_bytes: bytes) -> int:
    hi = max(10 * len(model_bytes), 64 * 1024)
    while not _allocates_isolated(model_bytes, hi):
        if hi >= _MAX_ARENA:
            _working_interpreter(model_bytes, preserve_all=False, start=_preserve_guess(model_bytes))  # raises why
            raise KilobyteError("TFLM cannot allocate the model")
        hi = min(2 * hi, _MAX_ARENA)
    lo = 0  # the recorded total is no bound either way (temporary allocations above, alignment slack below)
    while hi - lo > 1:  # invariant: lo fails, hi allocates
        mid = (lo + hi) // 2
        if _allocates_isolated(model_bytes, mid):
            hi = mid
        else:
            lo = mid
    return hi


def _allocates_isolated(model_bytes: bytes, size: int) -> bool:
    """Does TFLM allocate the model in `size` bytes? Probed in a forked child: this wheel's allocator segfaults on
    some too-small arenas (seen with MnasNet at 50 kB), which must read as "does not fit", not kill the caller."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child: answer through the exit code only
        try:
            ok = _interpreter(model_bytes, size, preserve_all=False)[0] is not None
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def tflm_arena_report(model_bytes: bytes) -> dict[str, int]:
    """What TFLM's RecordingMicroAllocator prints: 'total', 'head', 'tail' and bytes per allocation kind."""
    model_bytes = bytes(model_bytes)
    _, size = _working_interpreter(model_bytes, preserve_all=False)
    return _recorded(model_bytes, size)


def _recorded(model_bytes: bytes, arena_size: int) -> dict[str, int]:
    interp, _ = _interpreter(model_bytes, arena_size, preserve_all=False)
    with _captured_fd2() as log:
        interp.print_allocations()
    return parse_allocations(log[0])


def parse_allocations(text: str) -> dict[str, int]:
    """Parse `print_allocations` output.

    >>> parse_allocations("[RecordingMicroAllocator] Arena allocation total 1536 bytes\\n"
    ...                   "[RecordingMicroAllocator] 'TfLiteEvalTensor data' used 240 bytes with alignment")
    {'total': 1536, 'TfLiteEvalTensor data': 240}
    """
    report = {m[1]: int(m[2]) for m in re.finditer(r"Arena allocation (\w+) (\d+) bytes", text)}
    report.update({m[1]: int(m[2]) for m in re.finditer(r"'([^']+)' used (\d+) bytes", text)})
    return report


def tflm_invoke_latency(model_bytes: bytes, inputs, repeats: int = 20) -> float:
    """Median wall-clock seconds of one TFLM `invoke()` on this host (after one warm-up run)."""
    model_bytes = bytes(model_bytes)
    info = _model_info(model_bytes)
    interp, _ = _working_interpreter(model_bytes, preserve_all=False)
    for k, x in enumerate(_feeds(interp, info, inputs)):
        interp.set_input(x, k)
    _invoke(interp)
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        interp.invoke()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
