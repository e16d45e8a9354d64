"""CLI: `kilobyte demo` — the README's main job — end to end (one epoch to keep the suite fast)."""

import json

from kilobyte.cli import main


def test_demo_end_to_end(capsys, tmp_path):
    code = main(["demo", "--epochs", "1", "--out", str(tmp_path / "demo"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    s = json.loads(out)
    assert s["bit_exact"] is True and s["verified_inputs"] >= 8
    assert s["float_accuracy"] > 0.5  # one epoch on 4,000 images already learns MNIST
    # the 1 %-of-float acceptance lives in tests/quant/test_mnist_accuracy.py; here only a sanity bound
    assert abs(s["int8_accuracy"] - s["float_accuracy"]) < 0.05
    assert s["fits"] and s["device"] == "STM32F412"
    assert 0 < s["arena_bytes"] < s["tflm_arena_bytes"]
    assert (tmp_path / "demo" / "src" / "model.c").is_file()
    assert not list(tmp_path.glob(".calib-*.npz"))  # the calibration file is cleaned up
