"""A throwaway local Ray cluster for tests, stopped by killing only the processes it started.

`ray stop --force` kills every Ray process on the machine (it matches process names such as `raylet` and
`default_worker.py`), so a test run that used it stopped the cluster of a second test run on the same machine (two
xdist workers, two pytest processes, another user's cluster). Here each `ray start` runs in a session of its own:
the daemons it launches (GCS, raylet, monitors, agents) stay in its process group, and the Ray workers, which make
groups of their own, are children of a raylet. Stopping kills those groups and their descendants, nothing else.
A process group id is not reused while any member lives, so killing by group cannot reach a stranger.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

# one CPU and 100 MB of object store per node: the tests need two nodes, not capacity
NODE_ARGS = ["--num-cpus", "1", "--object-store-memory", str(100 * 1024 ** 2), "--disable-usage-stats"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(args: list[str], env: dict) -> int:
    """Run `ray start ARGS` in a new session; its process group id (the `ray start` pid), which the daemons keep."""
    ray = shutil.which("ray", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.Popen([ray, "start", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        kill_groups({proc.pid})
        raise
    if proc.returncode != 0:
        kill_groups({proc.pid})
        raise AssertionError(f"ray start {' '.join(args)} failed:\n{err[-2000:]}")
    return proc.pid


def _processes() -> dict[int, tuple[int, int, str]]:
    """Every live process on the machine: pid -> (parent pid, process group id, state letter), from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited while we looked
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        table[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def group_members(groups: set[int]) -> set[int]:
    """The live (non-zombie) processes in `groups` and all their descendants."""
    table = {pid: row for pid, row in _processes().items() if row[2] != "Z"}
    found = {pid for pid, (_, pgrp, _) in table.items() if pgrp in groups}
    frontier = set(found)
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def kill_groups(groups: set[int], timeout: float = 30.0) -> None:
    """SIGKILL the processes of `groups` and their descendants (as `ray stop --force` would, but only these), and
    wait until they are gone. The tree is read before anything dies: a dead raylet's workers are re-parented."""
    deadline = time.time() + timeout
    while (pids := group_members(groups)) and time.time() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    assert not pids, f"Ray processes {sorted(pids)} outlived SIGKILL for {timeout} s"


@contextmanager
def local_cluster(nodes: int = 2):
    """A head node plus `nodes - 1` nodes joining it, on a free port; yields (address, process group ids).
    On exit exactly those processes are killed and the cluster's temp dir removed."""
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="kbray", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    groups: set[int] = set()
    try:
        groups.add(_ray_start(["--head", "--port", str(port), "--include-dashboard=false", "--temp-dir", tmp,
                               *NODE_ARGS], env))
        for _ in range(nodes - 1):
            groups.add(_ray_start(["--address", f"127.0.0.1:{port}", *NODE_ARGS], env))
        yield f"127.0.0.1:{port}", groups
    finally:
        kill_groups(groups)
        shutil.rmtree(tmp, ignore_errors=True)
