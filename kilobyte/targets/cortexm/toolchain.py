"""Targets stage (Cortex-M): the cross toolchain and the QEMU boards that stand in for the hardware.

`BOARDS` maps each supported core to the QEMU machine that emulates it, its memory map (from QEMU 7.2's board
sources, see /work/shared/TARGETS.md), its compiler flags and its linker script in `fw/`. `arm_gcc()` and
`qemu_arm()` find the tools on PATH; when one is missing they raise a one-line `KilobyteError` saying how to install
it, so nothing fails later with a bare `FileNotFoundError`.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kilobyte.errors import KilobyteError
from kilobyte.units import KB

APT_INSTALL = ("apt-get install -y --no-install-recommends "
               "gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")
FW_DIR = Path(__file__).resolve().parent / "fw"
MB = 1024 * KB


@dataclass(frozen=True)
class Board:
    """A QEMU machine emulating one Cortex-M core: where its code (FLASH) and data (RAM) regions are."""

    core: str  # "cortex-m4", ...
    machine: str  # qemu-system-arm -M <machine>
    cpu_flags: tuple[str, ...]
    linker_script: str  # file name in fw/
    flash_origin: int
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    unicorn_cpu: str | None  # unicorn.arm_const name of the CPU model, None when unicorn cannot run the core


BOARDS: dict[str, Board] = {
    # M0+ (ARMv6-M): QEMU's only M0 board is too small (micro:bit: 16 KB of RAM) and its MPS2 boards take no other
    # core, so the AN385 (a Cortex-M3, the AN386's memory map) runs the ARMv6-M build: the M3 executes the same
    # instructions with the same results. unicorn's Cortex-M0 counts it and holds it to ARMv6-M (an unaligned access
    # faults there, as on the part).
    "cortex-m0plus": Board("cortex-m0plus", "mps2-an385", ("-mcpu=cortex-m0plus", "-mthumb", "-mfloat-abi=soft"),
                           "mps2-an386.ld", 0x00000000, 4 * MB, 0x20000000, 4 * MB, "UC_CPU_ARM_CORTEX_M0"),
    "cortex-m4": Board("cortex-m4", "mps2-an386",
                       ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"),
                       "mps2-an386.ld", 0x00000000, 4 * MB, 0x20000000, 4 * MB, "UC_CPU_ARM_CORTEX_M4"),
    "cortex-m7": Board("cortex-m7", "mps2-an500",
                       ("-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"),
                       "mps2-an500.ld", 0x00000000, 4 * MB, 0x20000000, 4 * MB, "UC_CPU_ARM_CORTEX_M7"),
    # M33 (Armv8-M mainline with DSP): the secure aliases of the AN505's SSRAM1 (code) and SSRAM2 (data); the core
    # boots secure from 0x10000000.
    "cortex-m33": Board("cortex-m33", "mps2-an505",
                        ("-mcpu=cortex-m33", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-sp-d16"),
                        "mps2-an505.ld", 0x10000000, 4 * MB, 0x38000000, 2 * MB, "UC_CPU_ARM_CORTEX_M33"),
    # M55: ITCM holds code + vectors, DTCM the data; GCC 12 emits v8.1-M loops (DLS/LE) unicorn cannot run.
    "cortex-m55": Board("cortex-m55", "mps3-an547",
                        ("-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard"),
                        "mps3-an547.ld", 0x00000000, 512 * KB, 0x20000000, 512 * KB, None),
}


def get_board(target: str) -> Board:
    """The QEMU board for a core name such as "cortex-m4" (one-line error naming the supported ones otherwise)."""
    board = BOARDS.get(target.lower().strip())
    if board is None:
        raise KilobyteError(f"unsupported Cortex-M target {target!r}: choose one of {', '.join(BOARDS)}")
    return board


def _find(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise KilobyteError(f"{tool} not found on PATH (Debian package {package}); install the Cortex-M tools "
                            f"with: {APT_INSTALL}")
    return path


@functools.cache
def arm_gcc() -> str:
    """Path of arm-none-eabi-gcc, checked to have newlib's nano.specs (package libnewlib-arm-none-eabi)."""
    gcc = _find("arm-none-eabi-gcc", "gcc-arm-none-eabi")
    found = subprocess.run([gcc, "-print-file-name=nano.specs"], capture_output=True, text=True).stdout.strip()
    if not Path(found).is_file():
        raise KilobyteError(f"{gcc} has no newlib (nano.specs not found; package libnewlib-arm-none-eabi); "
                            f"install it with: {APT_INSTALL}")
    return gcc


@functools.cache
def qemu_arm() -> str:
    """Path of qemu-system-arm."""
    return _find("qemu-system-arm", "qemu-system-arm")


def have_tools() -> bool:
    """True when the compiler, newlib and QEMU are all installed (for tests that may skip locally)."""
    try:
        arm_gcc()
        qemu_arm()
    except KilobyteError:
        return False
    return True
