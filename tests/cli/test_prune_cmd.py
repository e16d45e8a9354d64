"""`kilobyte prune` (kilobyte/cli/prune_cmd.py): the JSON report's documented keys, consistent with the files it
writes, and the one-line errors of a bad request."""

from __future__ import annotations

import json

import pytest

from kilobyte.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prune_json_report_and_files(capsys, tmp_path):
    code, out, _ = run(capsys, "prune", "vgg-small", "--width", "0.25", "--resolution", "16", "--data", "digits",
                       "--sparsity", "0.4", "--epochs", "1", "--retrain-epochs", "1", "--out", str(tmp_path),
                       "--json")
    assert code == 0
    report = json.loads(out)
    for key in ("method", "sparsity", "weight_bytes", "index_bytes", "flash_bytes", "accuracy_before",
                "accuracy_after", "layers"):
        assert key in report
    assert report["method"] == "filterlet" and report["sparsity"] == pytest.approx(0.4, abs=0.01)
    assert report["weight_bytes"] == sum(layer["weight_bytes"] for layer in report["layers"])
    assert all({"name", "ratio", "weight_bytes", "index_bytes"} <= set(layer) for layer in report["layers"])
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert (tmp_path / "model.tflite").stat().st_size > report["weight_bytes"]
    assert (tmp_path / "pruned.pt").is_file()


BASE = ["prune", "vgg-small", "--width", "0.25", "--resolution", "16", "--data", "digits", "--epochs", "0"]


@pytest.mark.parametrize("argv, needle", [
    (["--device", "f410", "--method", "channel"], "give a sparsity"),
    (["--sparsity", "1.5"], "[0, 1)"),
    (["--sparsity", "0.5", "--method", "channel", "--resolution", "8"], "minimum of 16 px"),
])
def test_bad_requests_are_one_line_errors(capsys, tmp_path, argv, needle):
    code, _, err = run(capsys, *BASE, "--out", str(tmp_path), *argv)
    assert code == 1 and needle in err and err.count("\n") == 1
    assert not (tmp_path / "report.json").exists()


def test_sparsity_and_device_exclude_each_other(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main([*BASE, "--out", str(tmp_path), "--sparsity", "0.5", "--device", "f410"])
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err
