"""kilobyte.atomic: a file or folder is the old one or the whole new one — never partial, no temporary left behind
after a failure, created with the umask's mode, its folder made when missing."""

from __future__ import annotations

import json
import os
import threading

import pytest

from kilobyte import atomic


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_write_bytes_text_json_replace_whole_files(tmp_path):
    path = tmp_path / "sub" / "deeper" / "f.bin"  # the folder is made when missing
    assert atomic.write_bytes(path, b"\x00\x01old") == path
    assert path.read_bytes() == b"\x00\x01old"
    atomic.write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
    atomic.write_text(tmp_path / "t.txt", "µ-law\n")
    assert (tmp_path / "t.txt").read_bytes() == b"\xc2\xb5-law\n"
    atomic.write_json(tmp_path / "r.json", {"a": [1, 2]})
    assert (tmp_path / "r.json").read_text() == '{\n "a": [\n  1,\n  2\n ]\n}\n'
    atomic.write_json(tmp_path / "r2.json", {"a": 1}, indent=2)
    assert (tmp_path / "r2.json").read_text() == '{\n  "a": 1\n}\n'
    assert _names(tmp_path) == ["r.json", "r2.json", "sub", "t.txt"]
    assert _names(path.parent) == ["f.bin"]


def test_a_failing_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    atomic.write_json(path, {"v": 1})

    def killed(src, dst):  # interrupted between writing the temporary and renaming it
        raise KeyboardInterrupt
    monkeypatch.setattr(atomic.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_json(path, {"v": 2})
    monkeypatch.undo()
    with pytest.raises(TypeError):  # fails while producing the bytes: nothing is touched
        atomic.write_json(path, {"v": object()})
    with pytest.raises(RuntimeError), atomic.replacing(path) as tmp:
        tmp.write_text('{"v": 3')  # half written, then the writer fails
        raise RuntimeError("writer failed")
    assert json.loads(path.read_text()) == {"v": 1}
    assert _names(tmp_path) == ["report.json"]


def test_replacing_hands_a_writer_a_fresh_name_beside_the_target(tmp_path):
    path = tmp_path / "m.o"
    with atomic.replacing(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".m.o.") and tmp.name.endswith(".tmp")
        assert tmp.exists() and tmp.stat().st_size == 0 and not path.exists()
        tmp.write_bytes(b"object")
    assert path.read_bytes() == b"object" and _names(tmp_path) == ["m.o"]


def test_files_get_the_umask_mode_not_mkstemp_0600(tmp_path):
    old = os.umask(0o022)
    try:
        atomic.write_bytes(tmp_path / "a", b"x")
        with atomic.replacing(tmp_path / "b") as tmp:
            tmp.write_bytes(b"y")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o644


def test_data_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (events.append("rename"), real_replace(a, b))[1])
    atomic.write_bytes(tmp_path / "f", b"data")
    assert events == ["fsync", "rename"]


def test_a_concurrent_reader_sees_the_old_or_the_new_file_never_a_mix(tmp_path):
    path = tmp_path / "big.bin"
    old, new = b"A" * 1_000_000, b"B" * 1_000_000
    atomic.write_bytes(path, old)
    seen, stop = set(), threading.Event()

    def read():
        while not stop.is_set():
            seen.add(path.read_bytes())
    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(20):
            atomic.write_bytes(path, new if i % 2 == 0 else old)
    finally:
        stop.set()
        reader.join()
    assert seen <= {old, new} and seen
    assert _names(tmp_path) == ["big.bin"]


def test_concurrent_writers_of_one_path_do_not_share_a_temporary(tmp_path):
    path = tmp_path / "shared.json"
    errors = []

    def write(k):
        try:
            for _ in range(20):
                atomic.write_json(path, {"writer": k, "pad": "x" * 10_000})
        except Exception as e:  # noqa: BLE001  (recorded and asserted below)
            errors.append(e)
    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(path.read_text())["writer"] in range(4)
    assert _names(tmp_path) == ["shared.json"]


def test_save_torch_writes_a_loadable_file(tmp_path):
    torch = pytest.importorskip("torch")
    path = atomic.save_torch({"w": torch.arange(3)}, tmp_path / "ck" / "x.pt")
    assert torch.load(path)["w"].tolist() == [0, 1, 2]
    assert _names(tmp_path / "ck") == ["x.pt"]


def test_replacing_dir_swaps_a_whole_folder_in(tmp_path):
    out = tmp_path / "lib"
    with atomic.replacing_dir(out) as d:
        assert d.parent == tmp_path and d.is_dir() and not out.exists()
        (d / "a.c").write_text("old")
    with atomic.replacing_dir(out) as d:
        assert (out / "a.c").read_text() == "old"  # the old folder stays whole while the new one is filled
        (d / "b.c").write_text("new")
    assert _names(out) == ["b.c"] and _names(tmp_path) == ["lib"]


def test_replacing_dir_keeps_the_old_folder_when_filling_fails(tmp_path):
    out = tmp_path / "lib"
    with atomic.replacing_dir(out) as d:
        (d / "a.c").write_text("old")
    with pytest.raises(RuntimeError), atomic.replacing_dir(out) as d:
        (d / "half.c").write_text("half")
        raise RuntimeError("generator failed")
    assert _names(out) == ["a.c"] and (out / "a.c").read_text() == "old"
    assert _names(tmp_path) == ["lib"]
