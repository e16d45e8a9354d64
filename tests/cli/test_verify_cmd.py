"""`kilobyte verify DIR`: the report names each oracle that ran and each that did not, with why, in text and JSON.

Models: tests/random_nets.movement_model — "tile" (TILE, which TFLite Micro has no kernel for) and "transpose-hw"
(every op in TFLite Micro). With TFLite's interpreter made unavailable, the TILE project is checked by the host C
build and the numpy reference only: the text must say "TFLM: not run" and never "yes"; the JSON lists the oracles
run and those not run with the reason. The all-TFLM project lists tflm as run.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli
from random_nets import movement_model

from kilobyte.codegen import compile_graph


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    return {kind: compile_graph(movement_model(kind, seed=3), root / kind).out_dir for kind in ("tile", "transpose-hw")}


@pytest.fixture
def no_litert(monkeypatch):
    import kilobyte.driver.verify as verify  # the name the verification calls

    monkeypatch.setattr(verify, "litert_available", lambda: False)


def test_op_tflm_lacks_without_litert_says_tflm_did_not_run(capsys, projects, no_litert):
    code, out, err = cli(capsys, "verify", projects["tile"], "--samples", "2", "--no-sanitize")
    assert code == 0, err
    line = out.strip().splitlines()[-1]
    assert line.startswith("OK: bit-exact on 2 inputs (c-host == reference)")
    assert "TFLM: not run (no kernel for TILE)" in line and "TFLite interpreter: not run (not installed" in line
    assert "tflm" not in line.split(";")[0] and "yes" not in out.lower()
    code, out, err = cli(capsys, "verify", projects["tile"], "--samples", "2", "--no-sanitize", "--json")
    assert code == 0, err
    v = json.loads(out)
    assert v["ok"] and v["engines"] == ["c-host", "reference"]
    assert v["not_run"]["tflm"] == "no kernel for TILE" and "not installed" in v["not_run"]["tflite"]
    assert v["not_run"]["sanitizer"] == "--no-sanitize given" and v["sanitizer_runs"] == 0


def test_op_tflm_lacks_with_litert_names_the_stand_in(capsys, projects):
    code, out, err = cli(capsys, "verify", projects["tile"], "--samples", "2", "--no-sanitize", "--json")
    assert code == 0, err
    v = json.loads(out)
    assert v["engines"] == ["c-host", "reference", "tflite"] and v["not_run"]["tflm"] == "no kernel for TILE"
    assert "tflite" not in v["not_run"]


def test_every_op_in_tflm_lists_tflm_as_run(capsys, projects):
    code, out, err = cli(capsys, "verify", projects["transpose-hw"], "--samples", "2", "--json")
    assert code == 0, err
    v = json.loads(out)
    assert v["ok"] and v["engines"] == ["c-host", "reference", "tflm"] and v["not_run"] == {}
    assert v["sanitizer_runs"] == 2
    code, out, err = cli(capsys, "verify", projects["transpose-hw"], "--samples", "2", "--no-sanitize")
    assert code == 0, err
    assert "(c-host == reference == tflm)" in out and "TFLM: not run" not in out


def test_no_tflm_flag_is_named_as_the_reason(capsys, projects):
    code, out, err = cli(capsys, "verify", projects["transpose-hw"], "--samples", "2", "--no-tflm", "--no-sanitize")
    assert code == 0, err
    assert "TFLM: not run (--no-tflm given)" in out and "== tflm" not in out


def test_a_stored_report_without_its_verification_record_names_no_oracle():
    """A search / demo report written before `verified` existed prints its flag alone, never "tflm"."""
    from kilobyte.driver.verify import VerifyReport, verification_line

    old = verification_line({"bit_exact": True})
    assert old.startswith("bit-exact") and "tflm" not in old.lower() and "older report" in old
    assert verification_line({"bit_exact": False}).startswith("FAILED")
    rep = VerifyReport(3, ("c-host", "reference"), not_run={"tflm": "--no-tflm given"})
    assert verification_line({"bit_exact": True, "verified": rep.to_json()}) == rep.summary()
