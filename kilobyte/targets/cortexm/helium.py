"""Targets stage (Cortex-M55): the Helium (MVE) and low-overhead-loop instructions of a v8.1-M image, by address,
as the beat model prices them (`cycles.py`, Cortex-M55).

`cycles.decode` knows the Thumb-2 scalar encodings; the vector ones it would call coprocessor instructions. Rather
than a second decoder, this reads `arm-none-eabi-objdump -d -m armv8.1-m.main`'s mnemonics, once per ELF: an
instruction naming a Q register (or VPST/VPNOT/VCTP) is a vector instruction, put on its unit by its mnemonic; LE and
LETP end a low-overhead loop. Scalar floating point (S/D registers) stays scalar.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from kilobyte.errors import KilobyteError

from .cycles import LOOP_END, VINT, VMEM, VMUL, VPRED, Insn
from .toolchain import arm_gcc

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
_QREG = re.compile(r"\bq[0-7]\b")
_MULTIPLY = ("vmul", "vml", "vqdm", "vqrdm", "vrml", "vrmulh", "vabav", "vfm", "vcmul", "vcmla")
_MEMORY = ("vldr", "vld2", "vld4", "vstr", "vst2", "vst4")

__all__ = ["classify", "vector_insns"]


def classify(mnemonic: str, operands: str) -> str | None:
    """The beat model's class of one disassembled instruction, None for a scalar one.

    >>> classify("vmlava.s8", "r0, q0, q1"), classify("vldrb.u8", "q0, [r0], #16"), classify("vadd.i32", "q0, q0, q1")
    ('vmul', 'vmem', 'vint')
    >>> classify("vldr", "s0, [r0]"), classify("le", "lr, 38 <x>"), classify("vctp.8", "r3")
    (None, 'loop-end', 'vpred')
    """
    base = mnemonic.lower().split(".")[0]
    if base in ("le", "letp"):
        return LOOP_END
    if base in ("vpst", "vpnot") or base.startswith("vctp"):
        return VPRED
    if not _QREG.search(operands.lower()):
        return None
    if base.startswith(_MEMORY):
        return VMEM
    return VMUL if base.startswith(_MULTIPLY) else VINT


@functools.cache
def _disassembly(elf: Path, mtime: float) -> dict[int, Insn]:
    objdump = str(Path(arm_gcc()).with_name("arm-none-eabi-objdump"))
    res = subprocess.run([objdump, "-d", "-m", "armv8.1-m.main", "--no-show-raw-insn", str(elf)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise KilobyteError(f"{elf}: arm-none-eabi-objdump failed: {res.stderr.strip()[:200]}")
    found = {}
    for line in res.stdout.splitlines():
        m = _LINE.match(line)
        if m:
            kind = classify(m.group(2), m.group(3))
            if kind is not None:
                found[int(m.group(1), 16)] = Insn(kind, 4)
    return found


def vector_insns(elf: Path) -> dict[int, Insn]:
    """Address -> timing class of every Helium / loop-end instruction in the ELF's code (all 32-bit)."""
    path = Path(elf).resolve()
    return _disassembly(path, path.stat().st_mtime)
