"""Targets stage: Kilobyte's QEMU TCG plugin (`kb_icount.c`), which counts the instructions a guest executes, split
by address marks into buckets, for cores the unicorn counter cannot run (Cortex-M55's v8.1-M code; later RISC-V)
and as its cross-check on the ones it can (tests/targets/test_qemu_icount.py: equal counts on Cortex-M4 and M7).

`plugin_path()` builds the plugin with the host C compiler once per process (about 0.1 s) into a temporary
directory. `plugin_args(marks, work)` writes the marks (address -> bucket: executing the address makes that bucket
the one counted into; bucket 0 stops and writes the counts) and returns QEMU's `-plugin PATH,marks=...,out=...`;
`read_profile` reads back what ran, per (block, bucket): how often, and how often left by a taken branch ("-1": the
guest exited before bucket 0); `read_counts` adds it up into instructions per bucket. The plugin API it uses is
declared in `kb_qemu_plugin.h` (Debian ships no qemu-plugin.h); QEMU 7.2 (`qemu-system-arm` in Debian 12)
implements it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kilobyte.errors import KilobyteError

PLUGIN_DIR = Path(__file__).parent
PLUGIN_SOURCE = PLUGIN_DIR / "kb_icount.c"
PLUGIN_FLAGS = ("-shared", "-fPIC", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden")

__all__ = ["PLUGIN_SOURCE", "ProfileRow", "plugin_args", "plugin_path", "read_counts", "read_profile"]

MAX_MARKS = 4096  # kb_icount.c's MAX_MARKS and MAX_BUCKETS


@dataclass(frozen=True)
class ProfileRow:
    """One block of guest code that ran in one bucket (kb_icount.c's profile line)."""

    bucket: int
    start: int  # address of its first instruction
    end: int  # address just past its last instruction
    instructions: int
    execs: int  # times it ran in this bucket
    taken: int  # times the block that ran next did not start at `end`


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


def plugin_args(marks: dict[int, int], work: Path) -> list[str]:
    """QEMU arguments that load the plugin with `marks` (address -> bucket, written to work/marks.txt) and its counts
    going to work/count.txt."""
    if not 0 < len(marks) <= MAX_MARKS or not all(0 <= b < MAX_MARKS for b in marks.values()):
        raise KilobyteError(f"the QEMU plugin takes 1-{MAX_MARKS} marks with buckets 0-{MAX_MARKS - 1}, "
                            f"got {len(marks)}")
    (work / "marks.txt").write_text("".join(f"{a:#x} {b}\n" for a, b in sorted(marks.items())))
    return ["-plugin", f"{plugin_path()},marks={work / 'marks.txt'},out={work / 'count.txt'}"]


def read_profile(work: Path, where: str) -> list[ProfileRow]:
    """The plugin's profile (work/count.txt); a `KilobyteError` naming `where` if it wrote none, the guest exited
    before reaching a bucket-0 mark, or its counter table overflowed."""
    try:
        text = (work / "count.txt").read_text().split()
    except FileNotFoundError:
        raise KilobyteError(f"{where}: the QEMU plugin wrote no counts (was it loaded?)") from None
    if text[:1] == ["-1"]:
        raise KilobyteError(f"{where}: the guest exited without returning from the counted call")
    if text[:1] == ["-2"]:
        raise KilobyteError(f"{where}: the QEMU plugin's counter table overflowed (more than 512 Ki blocks x "
                            f"buckets)")
    fields = [int(t, 0) for t in text]
    return [ProfileRow(*fields[i:i + 6]) for i in range(0, len(fields), 6)]


def read_counts(work: Path, where: str) -> dict[int, int]:
    """Instructions per bucket (buckets that counted any), from the plugin's profile (`read_profile`)."""
    counts: dict[int, int] = {}
    for row in read_profile(work, where):
        counts[row.bucket] = counts.get(row.bucket, 0) + row.instructions * row.execs
    return counts
