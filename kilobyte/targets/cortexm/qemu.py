"""Targets stage (Cortex-M): run a built firmware under QEMU on one input, for bit-exactness and the stack.

`run_qemu` writes the input to `input.bin` in a fresh temporary directory, starts `qemu-system-arm` on the board
of the build's core with semihosting serving files from that directory, and reads back `output.bin` and the stack
high-water mark from `stats.txt`. With `count=True` it also loads Kilobyte's TCG plugin (`targets/qemu`) to count
the instructions of the invoke call, from the invoke function's first instruction to the one after main's call of
it, per kb_layer_* function (`invoke_marks`): what the unicorn counter counts (`icount.py`), on any core QEMU runs,
Cortex-M55 included.
Every way a run can go wrong becomes a one-line `KilobyteError`: a fault (the
firmware's handler reports it and exits with FW_EXIT_FAULT), a CPU lock-up (QEMU aborts), a timeout (QEMU is
killed), missing files.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kilobyte.errors import KilobyteError
from kilobyte.ops.detect_post import DETECTION_DTYPE

from ..qemu import ProfileRow, plugin_args, read_profile
from .cycles import bl_target, cycle_model, decode, thumb_instructions
from .helium import vector_insns
from .measure import CLONE_SUFFIX, elf_bytes, elf_contents, elf_symbols
from .toolchain import qemu_arm

FW_EXIT_IO = 2  # fw/fw.h
FALL_THROUGH_CHAIN = 4  # profile_totals: fall-through blocks priced together
FW_EXIT_FAULT = 3
FW_EXIT_STACK = 4
# Configurable Fault Status Register bits (Armv7-M / v8-M ARM), named in fault messages.
CFSR_BITS = {0: "IACCVIOL", 1: "DACCVIOL", 3: "MUNSTKERR", 4: "MSTKERR", 8: "IBUSERR", 9: "PRECISERR",
             10: "IMPRECISERR", 11: "UNSTKERR", 12: "STKERR", 16: "UNDEFINSTR", 17: "INVSTATE", 18: "INVPC",
             19: "NOCP", 20: "STKOF", 24: "UNALIGNED", 25: "DIVBYZERO"}


@dataclass(frozen=True)
class QemuResult:
    output: np.ndarray  # (KB_OUTPUT_BYTES,) int8
    stack_bytes: int  # measured stack high-water mark of the whole firmware run (painted stack)
    exit_code: int
    seconds: float  # wall time of the QEMU process
    file_output: bytes | None = None  # a float-entry build's file_output.bin (host.unpack_file_outputs reads it)
    detections: np.ndarray | None = None  # a detector's boxes (ops.detect_post.DETECTION_DTYPE), best first
    instructions: int | None = None  # with count=True: executed by the invoke call (the QEMU plugin's count)
    per_layer: dict[str, int] | None = None  # with count=True: by kb_layer_* function, in call order
    cycles: int | None = None  # with count=True, on a core with a cycle model (cycles.py): the run's modelled cycles
    per_layer_cycles: dict[str, int] | None = None  # as per_layer


def qemu_command(build, kernel: Path) -> list[str]:
    """The qemu-system-arm command line that runs `kernel` (an ELF) on the build's board."""
    return [qemu_arm(), "-M", build.board.machine, "-display", "none", "-monitor", "none", "-serial", "none",
            "-semihosting-config", "enable=on,target=native", "-kernel", str(kernel)]


def as_input_bytes(build, input: np.ndarray) -> bytes:
    """The raw bytes of one int8 (or uint8) input the firmware reads; a `KilobyteError` if its type or size is not
    the model's."""
    data = np.asarray(input)
    if data.dtype not in (np.int8, np.uint8):
        raise KilobyteError(f"{build.model_dir}: input must be int8 (or uint8 for a uint8 model), got {data.dtype}")
    if data.size != build.input_bytes:
        raise KilobyteError(f"{build.model_dir}: input has {data.size} bytes, the model takes "
                            f"KB_INPUT_BYTES = {build.input_bytes}")
    return np.ascontiguousarray(data).tobytes()


def decode_cfsr(value: int) -> str:
    """Names of the fault status bits set in a CFSR value.

    >>> decode_cfsr(0x8200)
    'PRECISERR'
    >>> decode_cfsr(0x100000)
    'STKOF'
    """
    return "+".join(name for bit, name in CFSR_BITS.items() if value >> bit & 1) or "none"


def _failure(build, rc: int, console: str) -> KilobyteError:
    last = console.strip().splitlines()[-1] if console.strip() else "(no output)"
    where = f"{build.elf} on {build.board.machine}"
    if rc == FW_EXIT_FAULT:
        cfsr = re.search(r"CFSR=0x([0-9a-f]+)", last)
        kind = f" [{decode_cfsr(int(cfsr.group(1), 16))}]" if cfsr else ""
        return KilobyteError(f"{where}: the firmware faulted{kind}: {last}")
    if rc == FW_EXIT_STACK:
        return KilobyteError(f"{where}: stack overflow: the run used all {build.stack_reserve_bytes} bytes of "
                             f"stack reserve; build with a larger stack_bytes")
    if rc == FW_EXIT_IO:
        return KilobyteError(f"{where}: semihosting file I/O failed: {last}")
    if rc < 0 or rc == 134:
        return KilobyteError(f"{where}: QEMU aborted (rc {rc}; a CPU lock-up, e.g. a fault while the stack is "
                             f"unusable): {last}")
    return KilobyteError(f"{where}: QEMU exited with code {rc}: {last}")


def _bl_calls(code: bytes, start: int) -> list[tuple[int, int]]:
    """(address, target) of every Thumb-2 BL in `code` (loaded at `start`)."""
    calls = []
    for i, first, second in thumb_instructions(code):
        target = None if second is None else bl_target(start + i, first, second)
        if target is not None:
            calls.append((start + i, target))
    return calls


def invoke_marks(build) -> tuple[dict[int, int], dict[int, str]]:
    """The plugin's marks for counting one invoke call as the unicorn counter does, and the layer of each bucket:
    the invoke function's entry (bucket 1: its own code), each kb_layer_* function's entry (its own bucket, 2 on,
    in call order) and the instruction after each BL to it in the invoke function (1 again), and the instruction
    after main's BL to the invoke function (0: stop). A `KilobyteError` if main never calls it."""
    funcs = {s.name: s for s in elf_symbols(build.elf) if s.kind == "func"}  # Thumb bit already cleared
    invoke = f"{build.prefix}_invoke"
    if invoke not in funcs or "main" not in funcs:
        raise KilobyteError(f"{build.elf}: no {invoke} / main symbol; is this a kilobyte firmware?")
    entry, main = funcs[invoke].address, funcs["main"]
    stops = [a + 4 for a, t in _bl_calls(elf_bytes(build.elf, main.address, main.size), main.address) if t == entry]
    if not stops:
        raise KilobyteError(f"{build.elf}: main never calls {invoke} with BL; is this a kilobyte firmware?")
    layers = {s.address: CLONE_SUFFIX.sub("", name) for name, s in funcs.items()
              if name.startswith(f"{build.prefix}_layer_")}
    marks, names = {entry: 1, stops[0]: 0}, {}
    code = elf_bytes(build.elf, entry, funcs[invoke].size)
    for address, target in _bl_calls(code, entry):
        if target in layers:
            bucket = next((b for b, n in names.items() if n == layers[target]), len(names) + 2)
            names[bucket] = layers[target]
            marks[target], marks[address + 4] = bucket, 1
    return marks, names


def run_qemu(build, input: np.ndarray, timeout: float = 30, file_input: np.ndarray | None = None,
             count: bool = False) -> QemuResult:
    """Run the firmware of `build` (a FirmwareBuild) on `input` (int8, KB_INPUT_BYTES elements) under QEMU; a build
    with the float entry point (`build_firmware(float_entry=True)`) also runs that on `file_input` (the file's
    input: floats for a float input). `count`: also count the invoke call's instructions (`QemuResult.instructions`)
    with Kilobyte's QEMU plugin."""
    data = as_input_bytes(build, input)
    if (file_input is None) != (build.file_output_bytes is None):
        raise KilobyteError(f"{build.elf}: give file_input exactly when the firmware runs the float entry point")
    with tempfile.TemporaryDirectory(prefix="kilobyte-qemu-") as tmp:
        work = Path(tmp)
        (work / "input.bin").write_bytes(data)
        if file_input is not None:
            (work / "file_input.bin").write_bytes(np.ascontiguousarray(file_input).tobytes())
        command = qemu_command(build, build.elf.resolve())
        if count:
            marks, layer_of = invoke_marks(build)
            command += plugin_args(marks, work)
        start = time.perf_counter()
        try:
            proc = subprocess.run(command, cwd=work, capture_output=True, text=True, errors="replace",
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise KilobyteError(f"{build.elf} on {build.board.machine}: no exit within {timeout:g} s (killed); "
                                f"the model may loop forever") from None
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise _failure(build, proc.returncode, proc.stdout + proc.stderr)
        output = (work / "output.bin").read_bytes()
        file_output = (work / "file_output.bin").read_bytes() if file_input is not None else None
        stats = dict(line.split() for line in (work / "stats.txt").read_text().splitlines() if line.strip())
        detections = _detections(build, work / "detections.bin") if build.max_detections is not None else None
        profile = read_profile(work, f"{build.elf} on {build.board.machine}") if count else None
    if len(output) != build.output_bytes:
        raise KilobyteError(f"{build.elf}: output.bin has {len(output)} bytes, expected {build.output_bytes}")
    if file_output is not None and len(file_output) != build.file_output_bytes:
        raise KilobyteError(f"{build.elf}: file_output.bin has {len(file_output)} bytes, expected "
                            f"{build.file_output_bytes}")
    instructions = per_layer = cycles = per_layer_cycles = None
    if profile is not None:
        counts, costs = profile_totals(build, profile)
        instructions = sum(counts.values())
        per_layer = {layer_of[b]: counts.get(b, 0) for b in sorted(layer_of)}
        if costs is not None:
            cycles = sum(costs.values())
            per_layer_cycles = {layer_of[b]: costs.get(b, 0) for b in sorted(layer_of)}
    return QemuResult(np.frombuffer(output, dtype=np.int8).copy(), int(stats["stack_bytes"]), proc.returncode,
                      seconds, file_output, detections, instructions, per_layer, cycles, per_layer_cycles)


def profile_totals(build, profile: list[ProfileRow]) -> tuple[dict[int, int], dict[int, int] | None]:
    """Instructions and modelled cycles (None without a model for the core) per bucket of the plugin's profile:
    each block decoded once from the ELF (its Helium instructions classified by `helium.vector_insns` on a v8.1-M
    core) and priced by the core's model, times its executions, plus the refill of each taken exit.

    QEMU also ends translation blocks where the code crosses a guest page, so a loop body can arrive as two blocks.
    A block never left by a taken branch (it always falls into the block that starts where it ends) is priced as
    itself and the blocks it falls into (up to FALL_THROUGH_CHAIN) together, less their own price: the chain then
    costs what it would as one block, whatever the code's placement."""
    model = cycle_model(build.target)
    counts: dict[int, int] = {}
    for row in profile:
        counts[row.bucket] = counts.get(row.bucket, 0) + row.instructions * row.execs
    if model is None:
        return counts, None
    sections = elf_contents(build.elf)
    known = vector_insns(build.elf) if build.target == "cortex-m55" else {}
    decoded: dict[tuple[int, int], list] = {}

    def insns_of(start: int, end: int) -> list:
        if (start, end) not in decoded:
            code = next((data[start - at:end - at] for at, data in sections
                         if at <= start and end <= at + len(data)), None)
            if code is None:
                raise KilobyteError(f"{build.elf}: the profiled block 0x{start:08x}-0x{end:08x} is in no section")
            decoded[start, end] = decode(code, start, known)
        return decoded[start, end]

    ends_at = {}  # block start -> its end (the successor a fall-through block runs into)
    taken: dict[tuple[int, int], int] = {}
    for row in profile:
        ends_at.setdefault(row.start, row.end)
        taken[row.start, row.end] = taken.get((row.start, row.end), 0) + row.taken
    priced: dict[tuple[int, int], tuple[int, int]] = {}
    costs: dict[int, int] = {}
    for row in profile:
        key = (row.start, row.end)
        if key not in priced:
            insns = insns_of(row.start, row.end)
            follow, at, falls = [], row.end, taken[key] == 0
            for _ in range(FALL_THROUGH_CHAIN):  # the blocks this one runs into, while each falls through
                if not falls or at not in ends_at:
                    break
                follow += insns_of(at, ends_at[at])
                falls, at = taken[at, ends_at[at]] == 0, ends_at[at]
            per_pass = model.block(insns)
            if follow:
                per_pass = max(0, model.block(insns + follow) - model.block(follow))
            priced[key] = (per_pass, model.exit_refill(insns))
        per_pass, refill = priced[key]
        costs[row.bucket] = costs.get(row.bucket, 0) + per_pass * row.execs + refill * row.taken
    return counts, costs


def _detections(build, path: Path) -> np.ndarray:
    """detections.bin (fw/main.c): the count, then max_detections entries; the first `count` of them."""
    raw = path.read_bytes()
    if len(raw) != 4 + build.max_detections * DETECTION_DTYPE.itemsize:
        raise KilobyteError(f"{build.elf}: detections.bin has {len(raw)} bytes, expected "
                            f"{4 + build.max_detections * DETECTION_DTYPE.itemsize}")
    count = int(np.frombuffer(raw[:4], "<i4")[0])
    if not 0 <= count <= build.max_detections:
        raise KilobyteError(f"{build.elf}: detections.bin counts {count} boxes of at most {build.max_detections}")
    return np.frombuffer(raw[4:], DETECTION_DTYPE)[:count].copy()
