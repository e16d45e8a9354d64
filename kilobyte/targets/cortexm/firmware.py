"""Targets stage (Cortex-M): generate and build the firmware project that runs one compiled model under QEMU.

A compiled model directory has `src/` (model.h, model.c and the runtime kb_*.c/.h files it uses). The project
written to `out_dir` is self-contained and rebuildable by hand (`sh build.sh`):

    out_dir/src/       the model sources; with kernels="dsp", every kb_*.c that has a same-named file in
                       kilobyte/runtime/c/arm/ is replaced by that one (a file swap, never an #ifdef); the arm/
                       headers are added, and each arm/ assembly file X.S whose header X.h the sources include
    out_dir/fw/        startup.c, semihosting.c, main.c, fw.h and the board's linker script (from fw/)
    out_dir/build.sh   the exact arm-none-eabi-gcc command (.c and .S files, the .S through the C preprocessor);
                       build.log its output
    out_dir/firmware.elf, firmware.map, *.su (-fstack-usage)

With a `device`, the FLASH and RAM regions are shrunk to that part's Flash and SRAM, so a model over budget fails
the link; the linker's "region `RAM' overflowed by N bytes" becomes a one-line `DoesNotFitError`.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kilobyte.errors import DoesNotFitError, KilobyteError
from kilobyte.formats.project import float_call, invoke_call
from kilobyte.kernels import check_kernel_set, kernel_sets
from kilobyte.ops.detect_post import DETECTION_DTYPE
from kilobyte.runtime import ARM_DIR, MVE_DIR, assembly_for
from kilobyte.targets.devices import Device, get_device

from .measure import elf_sections, elf_symbols
from .toolchain import FW_DIR, Board, arm_gcc, get_board

ARM_KERNEL_DIR = ARM_DIR
DEFAULT_STACK_BYTES = 4096
COMMON_FLAGS = ("-O2", "-g", "-Wall", "-ffunction-sections", "-fdata-sections", "-fstack-usage", "-nostartfiles",
                "--specs=nano.specs", "--specs=nosys.specs", "-Wl,--gc-sections", "-Wl,--print-memory-usage")
_OVERFLOW = re.compile(r"region `(\w+)' overflowed by (\d+) bytes")


@dataclass(frozen=True)
class FirmwareBuild:
    """A linked firmware: where it is, what it was built for, and its section sizes in bytes."""

    elf: Path
    map: Path  # the linker's map file
    out_dir: Path  # where the build ran
    model_dir: Path  # the compiled library it links (`kilobyte compile`'s output)
    board: Board
    device: Device | None
    kernels: str
    prefix: str  # the library's prefix: its symbols are <prefix>_invoke, <prefix>_arena
    flash_limit_bytes: int  # the FLASH region it was linked into (the device's Flash, or the board's)
    ram_limit_bytes: int
    stack_reserve_bytes: int
    input_bytes: int  # KB_INPUT_BYTES, read back from the ELF (size of fw_input)
    output_bytes: int
    sizes: dict[str, int] = field(default_factory=dict)  # allocated section -> bytes (.text, .rodata, .bss, ...)
    file_output_bytes: int | None = None  # built with the float entry point: its outputs' bytes (fw_file_output)
    max_detections: int | None = None  # a detector's library: the boxes fw_detections holds after its count

    @property
    def target(self) -> str:
        return self.board.core


def select_sources(src_dir: Path, kernels: str = "portable", arm_dir: Path | None = None,
                   mve_dir: Path = MVE_DIR) -> list[Path]:
    """The .c and .h files of `src_dir` to build, with kb_*.c swapped for arm_dir's same-named file under "dsp", and
    under "mve" for mve_dir's (Cortex-M55 Helium) where it has one, else arm_dir's.

    Under "dsp" and "mve" also arm_dir's (and mve_dir's) headers (unless src_dir has a same-named one) and each
    assembly file X.S of arm_dir whose header X.h a chosen .c file includes, directly or through other chosen headers
    (`runtime.assembly_for`).

    >>> select_sources(Path("/nonexistent"), kernels="fast")
    Traceback (most recent call last):
    ...
    kilobyte.errors.KilobyteError: unknown kernel set 'fast': choose 'portable', 'dsp', 'mve'
    """
    check_kernel_set(kernels)
    arm_dir = ARM_KERNEL_DIR if arm_dir is None else arm_dir
    dirs = {"portable": (), "dsp": (arm_dir,), "mve": (mve_dir, arm_dir)}[kernels]
    chosen = []
    for path in sorted(src_dir.iterdir()):
        if path.suffix not in (".c", ".h"):
            continue
        swap = next((d / path.name for d in dirs if (d / path.name).is_file()), None)
        use = path.suffix == ".c" and path.name.startswith("kb_") and swap is not None
        chosen.append(swap if use else path)
    for d in dirs:  # headers the swapped kernels include, unless the model has its own
        if d.is_dir():
            have = {p.name for p in chosen}
            chosen += [h for h in sorted(d.glob("*.h")) if h.name not in have]
    for d in dirs:
        chosen += assembly_for(chosen, d)
    return chosen


def planned_kernel_set(model_dir: Path) -> str:
    """The kernel set a compiled model was planned for ("portable" for projects that do not say)."""
    manifest = Path(model_dir) / "kilobyte.json"
    try:
        return json.loads(manifest.read_text()).get("kernel_set", "portable")
    except (OSError, ValueError):
        return "portable"


def _resolve_device(device: str | Device | None, board: Board) -> Device | None:
    if device is None or isinstance(device, Device):
        dev = device
    else:
        dev = get_device(device)
    if dev is not None and dev.core != board.core:
        raise KilobyteError(f"device {dev.name} has a {dev.core} core; build it for target {dev.core!r}, "
                            f"not {board.core!r}")
    return dev


def model_interface(model_dir: Path) -> dict:
    """The library's names from kilobyte.json: prefix, header and source (defaults `kb`, src/model.h, src/model.c
    for directories without a manifest, e.g. the Flash probes), and its outputs."""
    try:
        m = json.loads((Path(model_dir) / "kilobyte.json").read_text())
    except (OSError, ValueError):
        m = {}
    return {"prefix": m.get("prefix", "kb"), "header": m.get("header", "src/model.h"),
            "source": m.get("source", "src/model.c"), "outputs": m.get("outputs", [{"offset": 0}]),
            "host_sources": m.get("host_sources", []), "float_entry": bool(m.get("float_entry")),
            "detect": bool(m.get("detect"))}


def _check_model_dir(model_dir: Path) -> Path:
    names = model_interface(model_dir)
    for name in (names["header"], names["source"]):
        if not (model_dir / name).is_file():
            raise KilobyteError(f"{model_dir}: not a compiled model directory ({model_dir / name} is missing)")
    return model_dir / "src"


def fw_model_h(model_dir: Path, float_entry: bool = False) -> str:
    """fw/fw_model.h: what the test firmware's main.c needs of the model, under the library's prefix; with
    `float_entry`, its `<prefix>_invoke_float` too (FW_INVOKE_FLOAT, the file's interface)."""

    names = model_interface(model_dir)
    u = names["prefix"].upper()
    m = {"prefix": names["prefix"], "outputs": names["outputs"]}
    text = (f"/* Generated by kilobyte.targets.cortexm: the model as main.c calls it. */\n"
            f'#include "{Path(names["header"]).name}"\n'
            f"#define FW_INPUT_BYTES {u}_INPUT_BYTES\n#define FW_OUTPUT_BYTES {u}_OUTPUT_BYTES\n"
            f"#define FW_INVOKE(in, out) {invoke_call(m, 'in', 'out')}\n")
    if names["detect"]:  # a detector: main.c decodes the boxes too (codegen/detect_c.py)
        heads = ", ".join(f"(const int8_t *)(out) + {o.get('offset', 0)}" for o in names["outputs"])
        text += (f"#define FW_MAX_DETECTIONS {u}_MAX_DETECTIONS\n"
                 f"#define FW_DETECT(out, det) {names['prefix']}_detections({heads}, det)\n")
    if not float_entry:
        return text
    if not names["float_entry"]:
        raise KilobyteError(f"{model_dir}: the model has no float entry point (its input and outputs are integers)")
    return text + (f"#define FW_FILE_INPUT_BYTES {u}_FILE_INPUT_BYTES\n"
                   f"#define FW_FILE_OUTPUT_BYTES {u}_FILE_OUTPUT_BYTES\n"
                   f"#define FW_INVOKE_FLOAT(in, out) {float_call(m, 'in', 'out')}\n")


def _linker_script(board: Board, flash_bytes: int, ram_bytes: int) -> str:
    """The board's linker script with its FLASH and RAM LENGTHs set to the given sizes."""
    text = (FW_DIR / board.linker_script).read_text()
    for region, size in (("FLASH", flash_bytes), ("RAM", ram_bytes)):
        text, n = re.subn(rf"(\n\s*{region}\s*\([^)]*\)\s*:\s*ORIGIN\s*=\s*\w+\s*,\s*LENGTH\s*=\s*)\w+",
                          rf"\g<1>{size}", text)
        if n != 1:
            raise KilobyteError(f"{FW_DIR / board.linker_script}: no single {region} region to resize")
    return text


def _write_project(out_dir: Path, sources: list[Path], script: str, board: Board) -> list[str]:
    """Copy model and firmware sources into out_dir; returns the .c and .S files to compile, relative to out_dir."""
    for sub in ("src", "fw"):
        shutil.rmtree(out_dir / sub, ignore_errors=True)
        (out_dir / sub).mkdir(parents=True)
    for path in sources:
        shutil.copy2(path, out_dir / "src" / path.name)
    for path in FW_DIR.iterdir():
        if path.suffix in (".c", ".h") or path.name == "kb_sections.ld":
            shutil.copy2(path, out_dir / "fw" / path.name)
    (out_dir / "fw" / board.linker_script).write_text(script)
    return [f"src/{p.name}" for p in sources if p.suffix in (".c", ".S")] + \
        sorted(f"fw/{p.name}" for p in FW_DIR.glob("*.c"))


def _command(board: Board, c_files: list[str], stack_bytes: int) -> list[str]:
    return [arm_gcc(), *board.cpu_flags, *COMMON_FLAGS, f"-Wl,--defsym=__kb_stack_bytes={stack_bytes}",
            "-Lfw", f"-Tfw/{board.linker_script}", "-Wl,-Map=firmware.map", "-Isrc", "-Ifw",
            *c_files, "-o", "firmware.elf", "-lm"]  # -lm: expf / logf of a float tail (newlib's libm)


def _link_error(log: str, model_dir: Path, board: Board, device: Device | None, limits: dict[str, int]) -> None:
    """Raise DoesNotFitError for region overflows, else KilobyteError with the first error line."""
    overflows = _OVERFLOW.findall(log)
    where = f"{device.name} ({board.core})" if device else f"{board.machine} ({board.core})"
    if overflows:
        parts = [f"region {region} ({limits.get(region, 0)} bytes) overflowed by {n} bytes"
                 for region, n in dict(overflows).items()]
        raise DoesNotFitError(f"{model_dir}: does not fit {where}: {'; '.join(parts)}")
    first = next((line for line in log.splitlines() if "error" in line.lower()), log.strip()[-200:])
    raise KilobyteError(f"{model_dir}: firmware build for {where} failed: {first.strip()}")


def build_firmware(model_dir: str | Path, target: str, device: str | Device | None = None,
                   kernels: str | None = None, out_dir: str | Path | None = None,
                   stack_bytes: int = DEFAULT_STACK_BYTES, float_entry: bool = False) -> FirmwareBuild:
    """Generate the firmware project for a compiled model and link it for `target` (optionally `device`'s budget).

    `float_entry`: the firmware also runs the model's `<prefix>_invoke_float` (`run_qemu`'s `file_input`); off for
    measurements, so Flash and SRAM are those of the int8 invoke alone. `kernels` defaults to the kernel set the
    model was planned for (`kilobyte.json`'s "kernel_set"). `out_dir` defaults to
    `model_dir/firmware/<target>-<kernels>[-<device>][-float]`. Raises `DoesNotFitError` when the model (plus
    firmware and `stack_bytes` of stack) overflows the device's Flash or SRAM.
    """
    model_dir = Path(model_dir)
    board = get_board(target)
    usable = kernel_sets(board.core)
    if kernels is None:  # the planned set, or the best this core runs (any set is exact; the plan's extra scratch
        kernels = planned_kernel_set(model_dir)  # is then unused)
        if kernels not in usable:
            kernels = "dsp" if "dsp" in usable else "portable"
    if kernels not in usable:
        why = "Helium (cortex-m55)" if kernels == "mve" else "the DSP extension"
        raise KilobyteError(f"{model_dir}: the {kernels} kernels need {why}, which {board.core} lacks; build with "
                            f"--kernels {' or '.join(usable)}")
    dev = _resolve_device(device, board)
    sources = select_sources(_check_model_dir(model_dir), kernels)
    if stack_bytes < 256 or stack_bytes % 8:
        raise KilobyteError(f"stack_bytes={stack_bytes}: give a multiple of 8, at least 256")
    flash = min(dev.flash_bytes, board.flash_bytes) if dev else board.flash_bytes
    ram = min(dev.sram_bytes, board.ram_bytes) if dev else board.ram_bytes
    name = f"{board.core}-{kernels}" + (f"-{dev.name}" if dev else "") + ("-float" if float_entry else "")
    out = Path(out_dir) if out_dir is not None else model_dir / "firmware" / name
    c_files = _write_project(out, sources, _linker_script(board, flash, ram), board)
    (out / "fw" / "fw_model.h").write_text(fw_model_h(model_dir, float_entry))
    for extra in model_interface(model_dir)["host_sources"]:  # an --arena-extern arena, defined as a user would
        shutil.copy2(model_dir / extra, out / "fw" / Path(extra).name)
        c_files.append(f"fw/{Path(extra).name}")
    cmd = _command(board, c_files, stack_bytes)
    (out / "build.sh").write_text(f"#!/bin/sh\n# generated by kilobyte.targets.cortexm\ncd \"$(dirname \"$0\")\"\n"
                                  f"{shlex.join(cmd)}\n")
    (out / "firmware.elf").unlink(missing_ok=True)
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        _link_error(proc.stdout + proc.stderr, model_dir, board, dev, {"FLASH": flash, "RAM": ram})
    return _finish(out, model_dir, board, dev, kernels, flash, ram, stack_bytes, float_entry)


def _finish(out: Path, model_dir: Path, board: Board, dev: Device | None, kernels: str,
            flash: int, ram: int, stack_bytes: int, float_entry: bool) -> FirmwareBuild:
    elf = out / "firmware.elf"
    symbols = {s.name: s for s in elf_symbols(elf)}
    return FirmwareBuild(elf=elf, map=out / "firmware.map", out_dir=out, model_dir=model_dir, board=board,
                         device=dev, kernels=kernels, prefix=model_interface(model_dir)["prefix"],
                         flash_limit_bytes=flash, ram_limit_bytes=ram,
                         stack_reserve_bytes=stack_bytes, input_bytes=symbols["fw_input"].size,
                         output_bytes=symbols["fw_output"].size,
                         sizes={s.name: s.size for s in elf_sections(elf)},
                         file_output_bytes=symbols["fw_file_output"].size if float_entry else None,
                         max_detections=(symbols["fw_detections"].size - 4) // DETECTION_DTYPE.itemsize
                         if "fw_detections" in symbols else None)
