"""bench/bench_vs_hand.py, without its hours of training: the search command is `kilobyte search` with its defaults
(checked by the CLI's own parser), the table's mean +- standard error comes from the stored rows (checked against
the `statistics` module), each seed's baseline is chosen by validation accuracy (never test accuracy), and a killed
benchmark re-run skips the runs it finished (the runners replaced by counting fakes)."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_vs_hand as bvh  # noqa: E402

from kilobyte.cli import build_parser  # noqa: E402


def _search_args(cmd: list[str]) -> dict:
    assert cmd[1:4] == ["-m", "kilobyte", "search"]
    return vars(build_parser().parse_args(cmd[3:]))


@pytest.mark.parametrize("budget", list(bvh.BUDGETS))
def test_search_command_is_the_defaults(tmp_path, budget):
    """Only device, budget, data, seed, output and --json differ from what `kilobyte search` does by default; the
    quick smoke run's extra flags are ones the CLI accepts; an existing search directory is resumed."""
    out = tmp_path / "search"
    args = _search_args(bvh.search_command(budget, "letters", 2, out, None, quick=False))
    defaults = _search_args([sys.executable, "-m", "kilobyte", "search"])
    changed = {k for k in defaults if args[k] != defaults[k]}
    assert changed <= {"device", "data", "seed", "out", "json", "max_sram", "max_flash"}, changed
    assert (args["data"], args["seed"], args["out"], args["json"]) == ("letters", 2, str(out), True)
    sram, flash = bvh.BUDGETS[budget]
    assert (args["max_sram"], args["max_flash"]) == (sram, flash)
    assert _search_args(bvh.search_command(budget, "mnist", 0, out, 15.0, quick=True))["minutes"] == 15.0
    out.mkdir()
    (out / "search.sqlite").write_bytes(b"")
    assert _search_args(bvh.search_command(budget, "mnist", 0, out, None, quick=False))["resume"] is True


def test_search_row_reads_both_strategies():
    held = {"seed": 0, "images": 1000, "digest": "abc"}
    tinynas = {"int8_accuracy": 0.98, "sram_bytes": 1, "flash_bytes": 2, "fits": True, "held_out": held}
    unas = {"pareto": [], "deployed": dict(tinynas, int8_accuracy=0.97)}
    assert bvh.search_row(tinynas)["strategy"] == "tinynas"
    row = bvh.search_row(unas)
    assert (row["strategy"], row["int8_accuracy"], row["test_digest"]) == ("unas", 0.97, "abc")
    assert "error" in bvh.search_row({"pareto": [], "deployed": None})


@pytest.mark.parametrize("values", [[0.981, 0.975, 0.99], [0.5, 0.7], [12000.0, 16384.0, 9000.0, 15000.0]])
def test_mean_se_against_statistics(values):
    mean, se = bvh.mean_se(values)
    assert mean == pytest.approx(statistics.fmean(values))
    assert se == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)))
    assert bvh.mean_se([0.9]) == (pytest.approx(0.9), None)


def _results() -> dict:
    """3 seeds of a search, mnist-cnn with two variants per seed (the better-validated one has the LOWER test
    accuracy), MobileNetV2 with none that fits, the head-scaled one with one variant."""
    rng = np.random.default_rng(0)
    runs, cands = {}, [{"model": "mnist-cnn", "fits": True}, {"model": "mobilenetv2", "fits": False},
                       {"model": "mobilenetv2-head", "fits": True}]
    for seed in range(3):
        def row(acc, val=None, **kw):
            return {"int8_accuracy": acc, "sram_bytes": float(rng.integers(9000, 16000)),
                    "flash_bytes": float(rng.integers(20000, 60000)), "fits": True, "seed": seed,
                    **({} if val is None else {"val_accuracy": val}), **kw}
        runs[f"16k/mnist/{seed}/search"] = row(0.97 + 0.01 * seed, strategy="tinynas")
        runs[f"16k/mnist/{seed}/mnist-cnn/w1.0-r28"] = row(0.96 + 0.005 * seed, 0.97, width=1.0, resolution=28)
        runs[f"16k/mnist/{seed}/mnist-cnn/w0.75-r28"] = row(0.99, 0.95, width=0.75, resolution=28)
        runs[f"16k/mnist/{seed}/mobilenetv2-head/w0.1-r32"] = row(0.9, 0.9, width=0.1, resolution=32)
    runs["16k/mnist/0/mobilenetv2-head/w0.15-r32"] = {"error": "compile failed"}
    return {"settings": {}, "runs": runs, "candidates": {"16k/mnist": cands}, "summary": []}


def test_summary_is_mean_and_se_of_the_stored_rows():
    results = _results()
    summary = {r["network"]: r for r in bvh.summarize(results)}
    runs = results["runs"]
    for network, variant in (("search", ""), ("mnist-cnn", "/w1.0-r28"), ("mobilenetv2-head", "/w0.1-r32")):
        rows = [runs[f"16k/mnist/{s}/{network}{variant}"] for s in range(3)]
        for name, key in (("int8", "int8_accuracy"), ("sram", "sram_bytes"), ("flash", "flash_bytes")):
            values = [r[key] for r in rows]
            assert summary[network][f"{name}_mean"] == pytest.approx(statistics.fmean(values)), (network, name)
            assert summary[network][f"{name}_se"] == pytest.approx(statistics.stdev(values) / math.sqrt(3))
        assert summary[network]["seeds"] == 3
    assert summary["mnist-cnn"]["ran"] == "w1.0 r28 x3"  # chosen by validation, though w0.75 tests at 99 %
    assert summary["mobilenetv2"]["seeds"] == 0 and summary["mobilenetv2"]["any_fits"] is False
    assert summary["search"]["beats_all"] is True  # 98.0 > 96.5 and 90.0; no MobileNetV2 fits
    table = bvh.markdown(bvh.summarize(results))
    assert "| 16 KB / 64 KB | mnist | search | tinynas x3 | 3 | 98.0 ± 0.6 % |" in table
    assert "| mobilenetv2 | none fits | 0 | — |" in table


def test_search_below_a_baseline_does_not_beat_it():
    results = _results()
    for s in range(3):
        results["runs"][f"16k/mnist/{s}/search"]["int8_accuracy"] = 0.95
    search = next(r for r in bvh.summarize(results) if r["network"] == "search")
    assert search["beats_all"] is False
    del results["candidates"]["16k/mnist"]  # baselines not run yet: no verdict
    for k in [k for k in results["runs"] if "/search" not in k]:
        del results["runs"][k]
    assert next(r for r in bvh.summarize(results) if r["network"] == "search")["beats_all"] is None


def test_a_search_that_does_not_fit_beats_nothing():
    results = _results()
    results["runs"]["16k/mnist/1/search"]["fits"] = False  # the most accurate mean, but one seed over the budget
    search = next(r for r in bvh.summarize(results) if r["network"] == "search")
    assert search["fits_all"] is False and search["beats_all"] is False
    assert "(NOT all fit the budget!)" in bvh.markdown(bvh.summarize(results))


def test_a_search_over_the_budgets_flash_beats_nothing():
    """The device's verdict is not enough at 16k / 4k: the firmware's measured Flash must be within the budget's."""
    results = _results()
    results["runs"]["16k/mnist/2/search"]["flash_bytes"] = 64 * 1024 + 1  # fits the device, not 64 KB
    search = next(r for r in bvh.summarize(results) if r["network"] == "search")
    assert search["fits_all"] is False and search["beats_all"] is False
    results["runs"]["16k/mnist/2/search"]["flash_bytes"] = 64 * 1024
    assert next(r for r in bvh.summarize(results) if r["network"] == "search")["fits_all"] is True


class Killed(Exception):
    pass


def _fake_bench(monkeypatch, calls: list, kill_after: int | None):
    """Replace the search, the data, the planning and the training by fakes that count their calls."""
    def finished():
        calls.append(1)
        if kill_after is not None and len(calls) > kill_after:
            raise Killed
        return {"int8_accuracy": 0.9, "val_accuracy": 0.9, "sram_bytes": 1.0, "flash_bytes": 2.0, "fits": True}

    y = np.arange(10)
    data = (SimpleNamespace(x=np.zeros((10, 28, 28, 1)), y=y),) * 3
    cands = [{"model": m, "width": w, "resolution": 28, "macs": w, "fits": True}
             for m in bvh.FAMILIES for w in (1.0, 0.5, 0.25)]
    monkeypatch.setattr(bvh, "run_search", lambda cmd: {**finished(), "strategy": "tinynas", "split_seed": 0})
    monkeypatch.setattr(bvh.Bench, "data", lambda self, task, seed: data)
    monkeypatch.setattr(bvh.Bench, "candidates", lambda self, budget, task, fit, classes: cands)
    monkeypatch.setattr(bvh.Bench, "train", lambda self, cand, data, classes, out, seed: finished())


def test_a_killed_run_resumes_where_it_stopped(tmp_path, monkeypatch):
    """Per seed: 1 search + 2 variants x 3 families. Killed during the 5th run, the file holds the 4 finished runs;
    re-run, only the other runs happen."""
    argv = ["--budgets", "4k", "--tasks", "mnist", "--seeds", "0", "1", "--out", str(tmp_path),
            "--results", str(tmp_path / "vs_hand.json")]
    calls = []
    _fake_bench(monkeypatch, calls, kill_after=4)
    with pytest.raises(Killed):
        bvh.main(argv)
    stored = json.loads((tmp_path / "vs_hand.json").read_text())
    assert len(stored["runs"]) == 4 and "4k/mnist/0/search" in stored["runs"]
    assert {k.split("/")[3] for k in stored["runs"]} == {"search", "mnist-cnn", "mobilenetv2"}
    stored["runs"]["4k/mnist/0/mnist-cnn/w1.0-r28"] = {"error": "stopped"}  # a failed run is tried again
    (tmp_path / "vs_hand.json").write_text(json.dumps(stored))
    calls.clear()
    _fake_bench(monkeypatch, calls, kill_after=None)
    bvh.main(argv)
    total = 2 * (1 + 2 * len(bvh.FAMILIES))
    assert len(calls) == total - 4 + 1
    stored = json.loads((tmp_path / "vs_hand.json").read_text())
    assert len(stored["runs"]) == total and not any("error" in r for r in stored["runs"].values())
    assert {r["network"]: r["seeds"] for r in stored["summary"]} == dict.fromkeys(bvh.NETWORKS, 2)


def test_results_of_other_settings_are_refused(tmp_path, monkeypatch):
    _fake_bench(monkeypatch, [], kill_after=None)
    argv = ["--budgets", "4k", "--tasks", "mnist", "--seeds", "0", "--only", "search", "--results",
            str(tmp_path / "r.json"), "--out", str(tmp_path)]
    bvh.main(argv)
    with pytest.raises(SystemExit, match="give another --results file"):
        bvh.main([*argv, "--epochs", "3"])


def test_other_test_images_and_failed_searches_show_in_the_table():
    results = _results()
    for key, row in results["runs"].items():
        row["test_digest"] = "b" if key == "16k/mnist/1/mnist-cnn/w1.0-r28" else "a"
    summary = {r["network"]: r for r in bvh.summarize(results)}
    assert summary["mnist-cnn"]["same_test_images"] is False  # seed 1's search was scored on other images
    assert summary["mobilenetv2-head"]["same_test_images"] is True
    assert "w1.0 r28 x3 (other test images!)" in bvh.markdown(bvh.summarize(results))
    results["runs"]["16k/mnist/2/search"]["fits"] = False  # measured over the budget (the search's exit code 2)
    assert "| tinynas x3 (NOT all fit the budget!) |" in bvh.markdown(bvh.summarize(results))
    for s in range(3):
        results["runs"][f"16k/mnist/{s}/search"] = {"error": "kilobyte: error: nothing fits"}
    search = next(r for r in bvh.summarize(results) if r["network"] == "search")
    assert search["seeds"] == 0 and search["failed"] == "kilobyte: error: nothing fits"
    assert "| search | failed: kilobyte: error: nothing fits | 0 | — |" in bvh.markdown(bvh.summarize(results))


def test_saving_keeps_the_runs_another_invocation_stored(tmp_path):
    path = tmp_path / "vs_hand.json"
    one = {"settings": {}, "runs": {"16k/mnist/0/search": {"error": "x"}}, "candidates": {}, "summary": []}
    other = {"settings": {}, "runs": {"16k/mnist/1/search": {"error": "y"}}, "candidates": {"16k/mnist": []},
             "summary": []}
    bvh.save_results(path, one)
    bvh.save_results(path, other)
    stored = json.loads(path.read_text())
    assert set(stored["runs"]) == {"16k/mnist/0/search", "16k/mnist/1/search"} and "16k/mnist" in stored["candidates"]
