"""The functions a runtime C file really defines, read from its object file rather than from its text (some are
defined through a macro, e.g. the in-place depthwise entry points of kilobyte.h's KB_DEPTHWISE_INPLACE_KXK)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from kilobyte.runtime import C_DIR


def defined_functions(path: Path) -> set[str]:
    """The global `kb_` functions `path` (a file of the runtime, portable or arm/) defines, compiled for Cortex-M4."""
    assert shutil.which("arm-none-eabi-gcc"), "arm-none-eabi-gcc is needed to read the runtime's symbols"
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "kernel.o"
        subprocess.run(["arm-none-eabi-gcc", "-O2", "-mthumb", "-mcpu=cortex-m4", "-c", f"-I{C_DIR}",
                        f"-I{C_DIR / 'arm'}", str(path), "-o", str(obj)], check=True, capture_output=True)
        table = subprocess.run(["arm-none-eabi-nm", "-g", "--defined-only", str(obj)], check=True,
                               capture_output=True, text=True).stdout
    rows = [line.split() for line in table.splitlines()]
    return {row[2] for row in rows if len(row) == 3 and row[1] == "T" and row[2].startswith("kb_")}
