"""CLI: real invocations through `kilobyte.cli.main` and one through a subprocess (the installed console script)."""

import json
import shutil
import subprocess
import sys

import pytest

from kilobyte.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_devices_table_and_json(capsys):
    code, out, _ = run(capsys, "devices")
    assert code == 0 and "STM32F746" in out and "nRF52840" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()}
    assert rows["name"][-2:] == ["emulated", "on"]  # where each device's firmware runs under QEMU (issue 31)
    assert rows["RP2040"][-1] == "mps2-an385" and rows["nRF5340"][-1] == "mps2-an505"
    assert rows["Corstone-300"][-1] == "mps3-an547" and rows["STM32F746"][-1] == "mps2-an500"
    code, out, _ = run(capsys, "devices", "--json")
    names = {d["name"] for d in json.loads(out)}
    assert {"STM32F412", "STM32H743", "RP2040"} <= names


def test_profile_json_has_the_documented_keys(capsys):
    code, out, _ = run(capsys, "profile", "vgg-small", "--json", "--device", "stm32f746")
    assert code == 0
    d = json.loads(out)
    for key in ("macs", "params", "flash_bytes", "peak_bytes", "input_shape", "layers"):
        assert key in d
    layer_keys = {"name", "op", "macs", "params", "in_bytes", "out_bytes", "live_bytes", "receptive_field"}
    assert d["layers"] and all(layer_keys <= set(layer) for layer in d["layers"])
    assert sum(layer["macs"] for layer in d["layers"]) == d["macs"]
    assert max(layer["live_bytes"] for layer in d["layers"]) == d["peak_bytes"]


def test_profile_does_not_fit_exits_2(capsys):
    code, out, _ = run(capsys, "profile", "mobilenetv2", "--device", "stm32f410")
    assert code == 2
    assert "DOES NOT FIT STM32F410" in out


def test_profile_plot_writes_png(capsys, tmp_path):
    png = tmp_path / "mem.png"
    code, _, _ = run(capsys, "profile", "mobilenetv2", "-w", "0.35", "-r", "96", "--plot", str(png))
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mem.png"]


@pytest.mark.parametrize("argv, needle", [
    (["profile", "no-such-model"], "model 'no-such-model': not a zoo name"),
    (["profile", "missing.onnx"], "missing.onnx: no such file"),
    (["profile", "vgg-small", "--device", "nope"], "nope"),
    (["quantize", "vgg-small", "--data", "nowhere.npz", "--out", "x.tflite"], "dataset 'nowhere.npz'"),
])
def test_user_mistakes_are_one_line_errors(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 1
    assert err.startswith("kilobyte: error: ") and needle in err
    assert err.count("\n") == 1


def test_garbage_onnx_is_a_one_line_error(capsys, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not an onnx file at all")
    code, _, err = run(capsys, "profile", str(bad))
    assert code == 1 and str(bad) in err and err.count("\n") == 1


def test_console_script_help():
    exe = shutil.which("kilobyte")
    cmd = [exe] if exe else [sys.executable, "-m", "kilobyte"]
    res = subprocess.run(cmd + ["--help"], capture_output=True, text=True, check=False)
    assert res.returncode == 0
    for sub in ("profile", "quantize", "run", "plan", "devices"):
        assert sub in res.stdout


def test_a_closed_pipe_is_a_quiet_exit(monkeypatch, capsys):
    """`kilobyte devices | head -0`: the reader is gone; no traceback, no error line, the shell's 128 + SIGPIPE."""
    import io

    class ClosedPipe(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["devices"]) == 141
    assert capsys.readouterr().err == ""
