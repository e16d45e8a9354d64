"""`kilobyte search --strategy unas` end to end on bundled digits with a tiny budget (issue #15 items 6–7): the JSON
report's promised keys, a front that really is non-dominated, held-out accuracies that the exported `.tflite`
reproduces, the chosen member compiled and bit-exact with TFLite Micro; a search SIGKILLed at three points that
resumes to exactly the uninterrupted run (no finished evaluation lost or computed twice); one-line errors."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from process_helpers import wait_until

from kilobyte.nas.aging import dominates

BOUNDS = "error=0.9,peak=4KB,size=300K,macs=5M"  # loose: the chosen member is compiled and verified
# a 1 MB-Flash device: the loose bounds' members fit its Flash (a member over the device's Flash is never chosen)
ARGS = ["search", "--strategy", "unas", "--device", "stm32f765", "--data", "digits", "--evaluations", "14",
        "--population", "6",
        "--epochs", "2", "--workers", "1", "--bounds", BOUNDS, "--prune", "none",
        "--finalists", "3", "--finalist-epochs", "3", "--final-epochs", "2", "--json"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
MEMBER_KEYS = {"int8_accuracy", "float_accuracy", "peak_bytes", "input_bytes", "flash_bytes", "weight_bytes", "macs",
               "sparsity", "architecture"}
OBJ = ("val_error", "peak_bytes", "weight_bytes", "macs")


def _cmd(out, *extra):
    return [sys.executable, "-m", "kilobyte", *ARGS, "--out", str(out), *extra]


def _rows(out):
    db = sqlite3.connect(f"file:{out / 'search.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        rows = db.execute("SELECT phase, generation, idx, arch, accuracy FROM evaluations "
                          "ORDER BY generation").fetchall()
        meta = dict(db.execute("SELECT key, value FROM meta"))
        return rows, meta
    finally:
        db.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("unas") / "s"
    run = subprocess.run(_cmd(out), capture_output=True, text=True, timeout=600, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    return out, json.loads(run.stdout)


def test_report_front_and_deployment(reference):
    out, report = reference
    assert {"pareto", "evaluations", "out_dir"} <= set(report) and report["evaluations"] == 14
    front = report["pareto"]
    assert front and all(MEMBER_KEYS <= set(m) for m in front)
    for a in front:  # non-dominated among themselves, and no trained evaluation dominates a member
        assert not any(dominates({k: b[k] for k in OBJ}, {k: a[k] for k in OBJ}, OBJ) for b in front)
        assert 0.0 <= a["int8_accuracy"] <= 1.0 and a["peak_bytes"] > 0 and a["weight_bytes"] > 0
    rows, meta = _rows(out)
    assert len(rows) == 14 and int(meta.get("repeated", 0)) == 0
    best_val = max(r[4] for r in rows)
    assert min(m["val_error"] for m in front) == pytest.approx(1.0 - best_val)  # the most accurate is on the front
    deployed = report["deployed"]
    assert deployed["bit_exact"] is True and deployed["verified"]["engines"] == ["c-host", "reference", "tflm"]
    chosen = front[report["chosen"]]
    assert chosen["within_bounds"] and report["final"]["index"] == chosen["index"]
    assert deployed["int8_accuracy"] == pytest.approx(report["final"]["int8_accuracy"])  # the C == the reference
    assert 0.0 <= report["resource_share"] < 0.5
    for name in ("report.json", "pareto.png", "model/src/model.c"):
        assert (out / name).exists(), name
    assert {p.stem for p in (out / "weights").glob("*.pt")} == {str(m["index"]) for m in front}


def test_evaluate_on_the_held_out_split_gives_the_deployed_accuracy(reference):
    """`kilobyte evaluate DIR --split test`: the library's host C build on the images held_out.json names equals
    the int8 accuracy the search reported for it."""
    out, report = reference
    run = subprocess.run([sys.executable, "-m", "kilobyte", "evaluate", str(out), "--split", "test", "--json"],
                         capture_output=True, text=True, timeout=300, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["same_images_as_report"] and got["host"]["images"] == report["deployed"]["held_out"]["images"]
    assert got["accuracy"] == report["deployed"]["int8_accuracy"] > 0.5


def test_chosen_after_a_second_evaluation_of_the_finalists(reference):
    """The finalists are the 3 members inside the bounds with the lowest search validation error; the chosen one is
    the finalist with the lowest error after the longer training, and every finalist's score is in the store."""
    out, report = reference
    front = report["pareto"]
    inside = sorted((i for i, m in enumerate(front) if m["within_bounds"]),
                    key=lambda i: (front[i]["val_error"], front[i]["weight_bytes"], front[i]["peak_bytes"]))
    assert len(inside) >= 3, "the loose bounds leave at least 3 members inside"
    assert report["finalists"] == inside[:3]
    scores = {i: front[i]["finalist_val_error"] for i in report["finalists"]}
    assert report["chosen"] == min(scores, key=lambda i: (scores[i], front[i]["weight_bytes"], front[i]["peak_bytes"]))
    assert not any("finalist_val_error" in m for i, m in enumerate(front) if i not in scores)
    db = sqlite3.connect(f"file:{out / 'search.sqlite'}?mode=ro", uri=True)
    try:
        stored = {name: json.loads(r) for name, r in db.execute("SELECT name, result FROM phases")}
    finally:
        db.close()
    for i in scores:
        assert stored[f"finalist-{front[i]['index']}-3"]["val_error"] == pytest.approx(scores[i])


def test_exported_member_reproduces_its_reported_accuracy(reference, tmp_path):
    """`--export N` writes an int8 .tflite whose accuracy on the held-out split (run by the int8 reference) is the
    report's; `kilobyte compile` accepts it."""
    from kilobyte.data import load_dataset
    from kilobyte.frontends.tflite import from_tflite
    from kilobyte.train import int8_accuracy

    out, report = reference
    n = len(report["pareto"]) - 1
    path = tmp_path / "m.tflite"
    run = subprocess.run([sys.executable, "-m", "kilobyte", "search", "--resume", str(out), "--export", str(n),
                          "--out", str(path), "--json"], capture_output=True, text=True, timeout=300, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["member"] == n
    ds = load_dataset("digits", seed=0)
    test = ds.split(int(len(ds.x) * 0.8))[1]
    graph = from_tflite(path)
    assert int8_accuracy(graph, test.x, test.y) == pytest.approx(report["pareto"][n]["int8_accuracy"])
    run = subprocess.run([sys.executable, "-m", "kilobyte", "compile", str(path), "--out", str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=300, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]




def test_sigkill_at_three_points_then_resume(reference, tmp_path):
    ref_out, ref_report = reference
    out = tmp_path / "s"
    points = [lambda: len(_rows(out)[0]) >= 2, lambda: len(_rows(out)[0]) >= 6, lambda: len(_rows(out)[0]) >= 10]
    hits = []
    for i, condition in enumerate(points):  # in the initial population, at its end, during breeding
        proc = subprocess.Popen(_cmd(out, *(["--resume"] if i else [])), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=ENV)
        hits.append(wait_until(proc, condition, poll=0.02))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert all(hits), hits
    assert len(_rows(out)[0]) < 14
    run = subprocess.run(_cmd(out, "--resume"), capture_output=True, text=True, timeout=600, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    rows, meta = _rows(out)
    assert rows == _rows(ref_out)[0]  # every evaluation, same order, same result, none lost
    assert int(meta.get("repeated", 0)) == 0  # none computed twice
    strip = ("seconds",)
    assert [{k: v for k, v in m.items() if k not in strip} for m in report["pareto"]] == \
        [{k: v for k, v in m.items() if k not in strip} for m in ref_report["pareto"]]


def test_a_finished_search_extended_with_resume_equals_the_longer_search(reference, tmp_path):
    """A search of 10 evaluations, then `--resume --evaluations 14`: the same 14 evaluations as the reference search
    asked for 14 from the start (one in flight: the order is deterministic); fewer than stored is refused. Both runs
    let torch use 2 threads (the reference: 1), and the finalists' second evaluation and the final training still
    give the reference's numbers: they run on one thread, as every evaluation does."""
    ref_out, ref_report = reference
    out = tmp_path / "s"
    two = {**ENV, "OMP_NUM_THREADS": "2"}
    shorter = [a if a != "14" else "10" for a in ARGS]
    run = subprocess.run([sys.executable, "-m", "kilobyte", *shorter, "--out", str(out)], capture_output=True,
                         text=True, timeout=600, env=two)
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(_rows(out)[0]) == 10
    run = subprocess.run(_cmd(out, "--resume"), capture_output=True, text=True, timeout=600, env=two)
    assert run.returncode == 0, run.stderr[-2000:]
    rows, meta = _rows(out)
    assert rows == _rows(ref_out)[0] and json.loads(meta["settings"])["evaluations"] == 14
    report = json.loads(run.stdout)
    assert (report["chosen"], report["finalists"], report["final"]) == (
        ref_report["chosen"], ref_report["finalists"], ref_report["final"])
    assert [m.get("finalist_val_error") for m in report["pareto"]] == \
        [m.get("finalist_val_error") for m in ref_report["pareto"]]
    run = subprocess.run([sys.executable, "-m", "kilobyte", *shorter, "--out", str(out), "--resume"],
                         capture_output=True, text=True, timeout=600, env=ENV)
    assert run.returncode != 0 and "evaluations=14" in run.stderr and "grow, not shrink" in run.stderr


def test_one_line_errors(reference, tmp_path):
    out, report = reference
    cases = [
        (["--bounds", "speed=3"], "--bounds 'speed=3'"),
        (["--sparsity", "0.9,0.1", "--prune", "structured"], "--sparsity 0.9,0.1"),
    ]
    for extra, message in cases:
        run = subprocess.run(_cmd(tmp_path / "x", *extra), capture_output=True, text=True, timeout=120, env=ENV)
        assert run.returncode == 1 and run.stderr.count("\n") == 1 and message in run.stderr, run.stderr[-2000:]
    n = len(report["pareto"])
    run = subprocess.run([sys.executable, "-m", "kilobyte", "search", "--resume", str(out), "--export", str(n),
                          "--out", str(tmp_path / "m.tflite")], capture_output=True, text=True, timeout=120, env=ENV)
    assert run.returncode == 1 and f"has members 0..{n - 1}" in run.stderr and run.stderr.count("\n") == 1
    assert not (tmp_path / "m.tflite").exists()
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "search.sqlite").write_bytes(b"garbage" * 1000)
    run = subprocess.run(_cmd(bad, "--resume"), capture_output=True, text=True, timeout=120, env=ENV)
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and "not a readable search store" in run.stderr
    run = subprocess.run(_cmd(out, "--resume", "--epochs", "3"), capture_output=True, text=True, timeout=120,
                         env=ENV)
    assert run.returncode == 1 and "resume with the same settings" in run.stderr


def test_random_candidates_are_drawn_inside_the_bounds():
    """At a budget most random networks miss (MNIST-sized input, 4 KB SRAM / 16 KB Flash), every random candidate is
    inside the bounds, where plain draws mostly are not; with bounds nothing meets, the closest draw is taken."""
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.unas_eval import GenomeSpace, UnasConfig, excess
    from kilobyte.nas.unas_space import UnasSpace

    space = UnasSpace(input_shape=(28, 28, 1))
    evaluator = ResourceEvaluator(space)
    bounds = {"peak_bytes": 3300.0, "weight_bytes": 9000.0}
    genomes = GenomeSpace(space, UnasConfig(data="mnist", prune="none", bounds=bounds), evaluator)
    rng = np.random.default_rng(0)
    plain = [excess(evaluator.evaluate(space.sample(rng)), bounds) for _ in range(40)]
    drawn = [excess(evaluator.evaluate(genomes.sample(rng).arch), bounds) for _ in range(8)]
    assert sum(r <= 1 for r in plain) < len(plain) / 2 and all(r <= 1 for r in drawn)
    impossible = GenomeSpace(space, UnasConfig(data="mnist", prune="none", bounds={"peak_bytes": 1.0}), evaluator)
    closest = excess(evaluator.evaluate(impossible.sample(np.random.default_rng(1)).arch), {"peak_bytes": 1.0})
    again = np.random.default_rng(1)
    draws = [excess(evaluator.evaluate(space.sample(again)), {"peak_bytes": 1.0}) for _ in range(200)]
    assert closest == min(draws) > 1


def test_a_flash_budget_bounds_the_whole_firmware_of_drawn_and_chosen_candidates():
    """The model-size bound leaves room for the least kernel code; a candidate linking more kernels passed a 16 KB
    budget (20.4 kB measured). With `flash_bytes`, the draws' Flash estimate (weights + kernels + the rest) is inside
    it, where draws inside the other bounds alone pass it."""
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.unas_eval import GenomeSpace, UnasConfig
    from kilobyte.nas.unas_space import UnasSpace

    space = UnasSpace(input_shape=(28, 28, 1))
    evaluator = ResourceEvaluator(space)
    bounds = {"peak_bytes": 3300.0, "weight_bytes": 9000.0}
    flash = lambda genomes, seed: [evaluator.evaluate(genomes.sample(rng).arch).flash_bytes  # noqa: E731
                                   for rng in [np.random.default_rng(seed)] for _ in range(10)]
    loose = flash(GenomeSpace(space, UnasConfig(data="mnist", prune="none", bounds=bounds), evaluator), 0)
    config = UnasConfig(data="mnist", prune="none", bounds=bounds, flash_bytes=14_000)
    assert config.limits == {**bounds, "flash_bytes": 14_000.0} and config.bounds == bounds
    assert max(loose) > 14_000 and max(flash(GenomeSpace(space, config, evaluator), 0)) <= 14_000


def test_evaluation_is_the_same_on_every_worker():
    """One candidate evaluated in this process and in a 2-process pool: identical objectives and weights (so local,
    pool and Ray searches agree)."""
    from dataclasses import asdict

    from kilobyte.nas.core import load_split
    from kilobyte.nas.parallel import open_pool
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.unas_eval import EvalSpec, GenomeSpace, UnasConfig, make_worker
    from kilobyte.nas.unas_space import UnasSpace

    config = UnasConfig(data="digits", epochs=1, prune="none", bounds={"peak_bytes": 4096.0})
    fit, val, _ = load_split(config)
    space = UnasSpace(input_shape=(8, 8, 1))
    genomes = GenomeSpace(space, config, ResourceEvaluator(space))
    rng = np.random.default_rng(3)
    payloads = [(i, genomes.sample(rng).dumps()) for i in range(3)]
    spec = EvalSpec(asdict(space), config.settings(), fit.x, fit.y, val.x, val.y)
    results = {}
    for workers in (1, 2):
        with open_pool(make_worker, spec, workers) as pool:
            for p in payloads:
                pool.submit(p[0], p)
            results[workers] = dict(pool.collect() for _ in payloads)
    for i, _ in payloads:
        a, b = results[1][i], results[2][i]
        assert {k: v for k, v in a.items() if not k.startswith("seconds")} == \
            {k: v for k, v in b.items() if not k.startswith("seconds")}


# --minutes as a budget (issue 26 item 5; nas/unas_budget.py): no --evaluations, --finalist-epochs, --final-epochs
MINUTES = 1.5
BUDGET_ARGS = ["search", "--strategy", "unas", "--data", "digits", "--minutes", str(MINUTES), "--workers", "1",
               "--prune", "none", "--epochs", "1", "--train-images", "200", "--finalists", "3",
               "--bounds", "error=0.9,peak=4KB,size=50K,macs=2M", "--json"]


def _budget_checks(out, report) -> None:
    """What a search under --minutes must show (shared by the uninterrupted and the resumed run)."""
    budget = MINUTES * 60
    times = report["phase_times"]
    assert report["minutes"] == MINUTES and list(times) == ["evolution", "finalists", "final", "deploy"]
    assert times["evolution"]["planned"] == pytest.approx(0.6 * (budget - 30))
    assert all(times[p]["spent"] is not None for p in ("evolution", "final", "deploy"))
    assert times["final"]["planned"] is not None  # its epochs were sized, not the preset's 100
    db = sqlite3.connect(f"file:{out / 'search.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        settings = json.loads(dict(db.execute("SELECT key, value FROM meta"))["settings"])
        seconds = [s for (s,) in db.execute("SELECT seconds FROM evaluations")]
    finally:
        db.close()
    # stopped by the deadline, not by a count: far below the cap, and it kept issuing until the next candidate
    # would have ended past the deadline (the mean of an evaluation is at most the longest one)
    assert settings["evaluations"] == 2000 and len(seconds) == report["evaluations"] < 2000
    assert times["evolution"]["spent"] + max(seconds) >= times["evolution"]["planned"]
    # the whole search on the budget's clock, on a loaded 2-core machine: within 0.5x-1.6x, the lower bound not
    # counting what the deploy phase's fixed 30 s reserve did not need (a third of this 90 s budget; about 1 s spent)
    unused_reserve = times["deploy"]["planned"] - times["deploy"]["spent"]
    assert 0.5 * (budget - unused_reserve) <= report["seconds"] <= 1.6 * budget, report["phase_times"]


def test_minutes_is_a_budget_the_search_keeps(tmp_path):
    out = tmp_path / "b"
    run = subprocess.run([sys.executable, "-m", "kilobyte", *BUDGET_ARGS, "--out", str(out)], capture_output=True,
                         text=True, timeout=900, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    _budget_checks(out, report)
    assert report["final"]["epochs"] >= 1


def test_killed_budgeted_search_resumes_on_its_clock(tmp_path):
    """SIGKILLed after its second evaluation and resumed: the resumed search's clock counts the time the first run
    stored, it still stops at the evolution's deadline and keeps the budget."""
    out = tmp_path / "b"
    cmd = [sys.executable, "-m", "kilobyte", *BUDGET_ARGS, "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    hit = wait_until(proc, lambda: len(_rows(out)[0]) >= 2, poll=0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert hit
    db = sqlite3.connect(f"file:{out / 'search.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        stored = json.loads(db.execute("SELECT result FROM phases WHERE name='clock'").fetchone()[0])["seconds"]
    finally:
        db.close()
    run = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=900, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["seconds"] > stored > 0
    assert report["phase_times"]["evolution"]["spent"] >= stored  # the first run's evaluations are the evolution's
    _budget_checks(out, report)
