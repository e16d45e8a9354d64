"""report.memory_plot and report.tables: smoke tests (PNG written atomically, table has one row per layer)."""

import os

import pytest

from kilobyte.analysis import profile
from kilobyte.report.tables import format_profile_table

from .test_blocks import mini_mobilenet

pytest.importorskip("matplotlib")

from kilobyte.report.memory_plot import plot_memory_profile  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plot_is_a_png_and_no_temp_file_is_left(tmp_path):
    path = tmp_path / "memory.png"
    out = plot_memory_profile(profile(mini_mobilenet()), path, sram_bytes=2048, title="mini")
    assert out == str(path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert os.listdir(tmp_path) == ["memory.png"]


def test_plot_overwrites_and_fails_cleanly(tmp_path):
    path = tmp_path / "memory.png"
    path.write_bytes(b"old")
    plot_memory_profile(profile(mini_mobilenet()), str(path))
    assert path.read_bytes()[:8] == PNG_MAGIC
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(OSError):  # its folder cannot be made (a missing one would be: kilobyte.atomic)
        plot_memory_profile(profile(mini_mobilenet()), tmp_path / "a-file" / "memory.png")
    assert sorted(os.listdir(tmp_path)) == ["a-file", "memory.png"]
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_table_rows():
    p = profile(mini_mobilenet())
    lines = format_profile_table(p).splitlines()
    assert lines[0].split() == ["idx", "name", "op", "out", "shape", "MACs", "params", "live", "kB", "RF"]
    assert len(lines) == 1 + len(p.layers) + 1
    assert lines[1].split()[:4] == ["0", "conv_2d_0", "CONV_2D", "1x8x8x8"]
    assert lines[-1].split()[0] == "total" and f"{p.macs:,}" in lines[-1]
