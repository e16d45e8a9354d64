"""Files and folders written whole or not at all: the package's one "temporary beside it, then rename".

Whatever Kilobyte writes that someone may read while it is being written — a report a user opens, a checkpoint a
resumed search loads, an object file a concurrent build links, a generated C library — goes through here, so every
such write has the same semantics, decided once:

- The temporary is hidden, unique and in the target's own folder (`.NAME.<random>.tmp`): the rename stays on one
  filesystem, so it is atomic, and two writers of one path never share a temporary (the last rename wins).
- A file is created with mode 0o666 less the umask, as a plain `open(path, "w")` would (not `mkstemp`'s 0600, which
  would stick to the file after the rename).
- A file's data are fsynced before the rename, so after a crash or a power loss the path holds the old bytes or the
  new ones, never an empty or short file. The folder is not fsynced: a rename lost to a power loss leaves the old
  file, which is still whole. A folder swapped in by `replacing_dir` is not fsynced either (a generated project is
  many files and is made again from its model in seconds).
- An exception (Ctrl-C included) removes the temporary and leaves the old file or folder as it was; only a hard kill
  can leave a hidden temporary behind, never a half-written target.
- The target's folder is created when missing.

Readers therefore see the old content or the new, never a mix. Nothing of Kilobyte is imported here: every stage may
use it.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A new empty temporary file beside `path`, for a writer that wants a file name (a compiler's `-o`, SQLite,
    matplotlib); once the block ends without an exception it is fsynced and renamed to `path`, otherwise removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _hidden_name(path, ".tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # O_EXCL: never another writer's file
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """`data` as the whole content of `path`, atomically; returns the path."""
    with replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """`text` (UTF-8) as the whole content of `path`, atomically; returns the path."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj, indent: int = 1) -> Path:
    """`obj` as indented JSON and a final newline, atomically; returns the path."""
    return write_text(path, json.dumps(obj, indent=indent) + "\n")


def save_torch(obj, path: str | os.PathLike) -> Path:
    """`torch.save(obj)` to `path`, atomically (checkpoints, trained weights); returns the path."""
    import torch  # optional heavy dependency: only the callers that save torch objects need it

    buf = io.BytesIO()
    torch.save(obj, buf)
    return write_bytes(path, buf.getvalue())


@contextmanager
def replacing_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A new empty temporary folder beside `path` to fill; once the block ends without an exception it takes the
    place of `path` (an old `path` is renamed aside, then removed), otherwise it is removed. Between the two renames
    `path` is briefly absent; it is never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _hidden_name(path, ".tmp")
    os.mkdir(tmp)
    try:
        yield tmp
        if path.exists():
            old = _hidden_name(path, ".old")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _hidden_name(path: Path, suffix: str) -> Path:
    """A fresh hidden name beside `path`: 48 random bits, so concurrent writers do not meet."""
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}{suffix}")
