"""Targets stage: Kilobyte's QEMU TCG plugin (`kb_icount.c`), which counts the instructions a guest executes from
one address to another, for cores the unicorn counter cannot run (Cortex-M55's v8.1-M code; later RISC-V) and as
its cross-check on the ones it can (tests/targets/test_qemu_icount.py: equal counts on Cortex-M4 and M7 firmware).

`plugin_path()` builds the plugin with the host C compiler once per process (about 0.1 s) into a temporary
directory; QEMU loads it with `-plugin PATH,start=ADDR,stop=ADDR,out=FILE` (`plugin_args`) and the plugin writes
the count to FILE when execution reaches `stop` ("-1" if the guest exits first). The plugin API it uses is declared
in `kb_qemu_plugin.h` (Debian ships no qemu-plugin.h); QEMU 7.2 (`qemu-system-arm` in Debian 12) implements it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

from kilobyte.errors import KilobyteError

PLUGIN_DIR = Path(__file__).parent
PLUGIN_SOURCE = PLUGIN_DIR / "kb_icount.c"
PLUGIN_FLAGS = ("-shared", "-fPIC", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden")

__all__ = ["PLUGIN_SOURCE", "plugin_args", "plugin_path", "read_count"]


@functools.cache
def plugin_path(cc: str = "gcc") -> Path:
    """The built plugin (a shared object in this process's temporary directory); a `KilobyteError` naming the
    compiler when there is none or the build fails."""
    if shutil.which(cc) is None:
        raise KilobyteError(f"the QEMU instruction-count plugin needs a host C compiler: '{cc}' not found "
                            "(apt-get install --no-install-recommends gcc)")
    out = Path(tempfile.mkdtemp(prefix="kilobyte-qemu-plugin-")) / "kb_icount.so"
    cmd = [cc, *PLUGIN_FLAGS, f"-I{PLUGIN_DIR}", str(PLUGIN_SOURCE), "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise KilobyteError(f"building the QEMU plugin failed: {' '.join(cmd)}\n{res.stderr.strip()}")
    return out


def plugin_args(start: int, stop: int, out: Path) -> list[str]:
    """QEMU arguments that load the plugin to count from address `start` (counted) until `stop` (not) into `out`."""
    return ["-plugin", f"{plugin_path()},start={start:#x},stop={stop:#x},out={out}"]


def read_count(out: Path, where: str) -> int:
    """The count the plugin wrote to `out`; a `KilobyteError` (naming `where`) if it wrote none or the guest never
    reached the stop address."""
    try:
        text = out.read_text().strip()
    except FileNotFoundError:
        raise KilobyteError(f"{where}: the QEMU plugin wrote no count (was it loaded?)") from None
    if text == "-1":
        raise KilobyteError(f"{where}: the guest exited without reaching the counted call's return")
    return int(text)
