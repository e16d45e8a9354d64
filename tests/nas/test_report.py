"""The searches' one report path: files written whole (no temporary left behind, an old file replaced only by a
complete new one) and the one Pareto figure both strategies draw."""

from __future__ import annotations

import json

import pytest

import kilobyte.atomic
from kilobyte.nas import report


def test_atomic_files_replace_whole_and_leave_no_temporary(tmp_path, monkeypatch):
    path = report.write_report(tmp_path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}

    def crash(src, dst):  # a kill between writing the temporary and renaming it
        raise KeyboardInterrupt
    monkeypatch.setattr(kilobyte.atomic.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        report.write_report(tmp_path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}  # the old report, whole
    monkeypatch.undo()
    kilobyte.atomic.save_torch({"w": 3}, tmp_path / "x.pt")
    report.write_report(tmp_path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "x.pt"]


def test_pareto_png_draws_every_panel_or_nothing(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    empty = [report.Panel("peak SRAM (KB)", {"evolution": []}, 32.0)]
    assert report.pareto_png(tmp_path / "none.png", empty, "accuracy (%)") is False
    assert not (tmp_path / "none.png").exists()
    panels = [report.Panel("peak SRAM (KB)", {"evolution": [(10, 90), (20, 95)], "random": [(15, 80)]}, 32.0),
              report.Panel("Flash (KB)", {"evolution": [(50, 90)]}, 128.0, log=True),
              report.Panel("MACs (M)", {"evolution": [(1, 90)]})]
    assert report.pareto_png(tmp_path / "p.png", panels, "accuracy (%)", "title") is True
    w, h = Image.open(tmp_path / "p.png").size
    assert w > 2 * h  # three panels side by side
