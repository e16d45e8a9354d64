"""CLI: the int8 pipeline end to end — quantize -> run (reference == tflm) -> plan -> compile -> verify -> run DIR."""

import json

import numpy as np
import pytest
from cli_helpers import cli

from kilobyte.cli import main
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_int8


@pytest.fixture(scope="module")
def tflite_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "mnist.tflite"
    assert main(["quantize", "mnist-cnn", "--data", "mnist", "--samples", "16", "--out", str(path)]) == 0
    return path


def test_quantize_writes_a_loadable_int8_tflite(tflite_model):
    g = from_tflite(tflite_model)
    assert g.tensors[g.inputs[0]].dtype == "int8"
    assert not list(tflite_model.parent.glob(".*.tmp"))  # nothing half-written left behind


def test_run_reference_and_tflm_agree(capsys, tflite_model, tmp_path):
    g = from_tflite(tflite_model)
    x = np.random.default_rng(0).integers(-128, 128, g.tensors[g.inputs[0]].shape).astype(np.int8)
    np.save(tmp_path / "in.npy", x)
    outs = {}
    for engine in ("reference", "tflm"):
        code, _, err = cli(capsys, "run", tflite_model, "--input", tmp_path / "in.npy", "--out",
                           tmp_path / f"{engine}.npy", "--engine", engine)
        assert code == 0, err
        outs[engine] = np.load(tmp_path / f"{engine}.npy")
    assert np.array_equal(outs["reference"], outs["tflm"])
    assert np.array_equal(outs["reference"], run_int8(g, x)[g.outputs[0]])


def test_run_rejects_wrong_input_shape(capsys, tflite_model, tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((1, 5, 5, 1), np.int8))
    code, _, err = cli(capsys, "run", tflite_model, "--input", tmp_path / "bad.npy", "--out", tmp_path / "o.npy")
    assert code == 1 and "the model wants int8[1, 28, 28, 1]" in err


def test_plan_json_keys_and_patch(capsys):
    code, out, _ = cli(capsys, "plan", "mobilenetv2", "-w", "0.35", "-r", "96", "--json", "--patch", "5-blocks,2x2")
    assert code == 0
    d = json.loads(out)
    for key in ("peak_bytes", "arena_bytes", "scratch_bytes", "macs", "input_bytes", "mac_overhead", "optimal",
                "order", "patch"):
        assert key in d
    assert set(d["patch"]) >= {"n_nodes", "grid", "input_patch", "stage_output_bytes"}
    assert d["patch"]["grid"] == 2 and d["mac_overhead"] > 0
    assert d["arena_bytes"] >= d["peak_bytes"]
    code, out, _ = cli(capsys, "plan", "mobilenetv2", "-w", "0.35", "-r", "96", "--json")
    assert json.loads(out)["patch"] is None and json.loads(out)["peak_bytes"] > d["peak_bytes"]


def test_plan_no_inplace_is_never_smaller(capsys):
    peaks = []
    for extra in ([], ["--no-inplace"]):
        code, out, _ = cli(capsys, "plan", "mnist-cnn", "--json", *extra)
        peaks.append(json.loads(out)["peak_bytes"])
    assert peaks[0] <= peaks[1]


def test_plan_wide_conv_columns_trades_sram_for_columns(capsys):
    """--conv-columns wide: mnist-cnn's peak conv gets six columns too, so its peak rises (by 1,152 B: 12*3*3*16 minus
    the two columns it had, 4*3*3*16)."""
    plans = {}
    for mode in ("free", "wide"):
        code, out, _ = cli(capsys, "plan", "mnist-cnn", "--json", "--kernels", "dsp", "--conv-columns", mode)
        assert code == 0
        plans[mode] = json.loads(out)
    assert plans["wide"]["peak_bytes"] - plans["free"]["peak_bytes"] == (12 - 4) * 3 * 3 * 16


def test_plan_bad_patch_spec(capsys):
    code, _, err = cli(capsys, "plan", "mnist-cnn", "--patch", "lots")
    assert code == 1 and "--patch 'lots'" in err


def test_compile_verify_and_run_dir(capsys, tmp_path, tflite_model):
    out_dir = tmp_path / "c"
    code, out, err = cli(capsys, "compile", tflite_model, "--out", out_dir, "--device", "stm32f412", "--json")
    assert code == 0, err
    report = json.loads(out)
    manifest = json.loads((out_dir / "kilobyte.json").read_text())
    assert report["arena_bytes"] == manifest["arena_bytes"] and report["fits"] is True
    assert f"#define KB_ARENA_BYTES  {manifest['arena_bytes']}" in (out_dir / "src" / "model.h").read_text()
    code, out, err = cli(capsys, "verify", out_dir, "--samples", "3", "--data", "mnist", "--json")
    assert code == 0, err
    v = json.loads(out)
    assert v["ok"] and v["inputs"] >= 7 and v["engines"] == ["c-host", "reference", "tflm"]
    g = from_tflite(tflite_model)
    x = np.random.default_rng(1).integers(-128, 128, g.tensors[g.inputs[0]].shape).astype(np.int8)
    np.save(tmp_path / "in.npy", x)
    code, _, err = cli(capsys, "run", out_dir, "--input", tmp_path / "in.npy", "--out", tmp_path / "y.npy")
    assert code == 0, err
    assert np.array_equal(np.load(tmp_path / "y.npy"), run_int8(g, x)[g.outputs[0]])


def test_compile_float_model_needs_data(capsys, tmp_path):
    code, _, err = cli(capsys, "compile", "mnist-cnn", "--out", tmp_path / "c")
    assert code == 1 and "give calibration data with --data" in err
    assert not (tmp_path / "c").exists()


def test_compile_too_big_for_device_exits_2(capsys, tmp_path):
    code, out, _ = cli(capsys, "compile", "vgg-small", "--data", "digits", "--samples", "8", "--out", tmp_path / "c",
                       "--device", "stm32f410", "--json")
    assert code == 2 and json.loads(out)["fits"] is False


def test_verify_checks_and_names_the_float_entry_point(capsys, tmp_path):
    """A detector file (uint8 input, two float outputs with tails, one int8): `kilobyte compile FILE` then
    `kilobyte verify DIR` checks `kb_invoke_float` against TFLM too, and says so in text and JSON."""
    from edge_models import tail_model

    path = tmp_path / "det.tflite"
    path.write_bytes(tail_model("detector"))
    assert cli(capsys, "compile", path, "--out", tmp_path / "c")[0] == 0
    code, out, _ = cli(capsys, "verify", tmp_path / "c", "--samples", "2", "--no-sanitize")
    assert code == 0 and "kb_invoke_float: 3 output(s) (float32, int8) compared with tflm on 2 inputs" in out
    code, out, _ = cli(capsys, "verify", tmp_path / "c", "--samples", "2", "--no-sanitize", "--json")
    assert code == 0 and "compared with tflm" in json.loads(out)["float_entry"]
