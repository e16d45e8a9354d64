"""CLI on Cortex-M targets: `verify/bench/run --target`, and `compile --device` reporting MEASURED memory.

Everything goes through `kilobyte.cli.main([...])` on the mnist-cnn zoo model compiled once per module (per xdist
worker). On CI (env CI set) nothing here is skipped: a missing toolchain fails with the install hint.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import cli

from kilobyte.cli import main
from kilobyte.driver.verify import reference_graph
from kilobyte.interp import run_int8
from kilobyte.targets.cortexm import have_tools

_HAVE_ALL = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,  # never skipped on CI: fail there
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) or kilobyte[arm] missing")

BENCH_KEYS = {"flash_bytes", "sram_bytes", "stack_bytes", "instructions", "macs", "instructions_per_mac",
              "per_layer_instructions", "flash", "sram", "planned", "target", "kernels", "device", "cycles",
              "cycles_per_mac", "per_layer_cycles", "cycle_model"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """mnist-cnn (width 0.35: 0.4 M MACs) compiled for STM32F412 (Cortex-M4).

    Returns (directory, its manifest, the --json fit report).
    """
    out_dir = tmp_path_factory.mktemp("cli") / "mnist"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(["compile", "mnist-cnn", "-w", "0.35", "--data", "digits", "--samples", "4", "--out",
                     str(out_dir), "--device", "stm32f412", "--json"])
    assert code == 0
    return out_dir, json.loads((out_dir / "kilobyte.json").read_text()), json.loads(out.getvalue())


@pytest.fixture()
def tampered(compiled, tmp_path):
    """A copy of the compiled project whose model.c the test edits (`edit(old, new)`)."""
    project = tmp_path / "tampered"
    shutil.copytree(compiled[0], project, ignore=shutil.ignore_patterns("firmware", "host"))
    (project / "host").mkdir()

    def edit(old: str, new: str):
        model_c = project / "src" / "model.c"
        text = model_c.read_text()
        assert text.count(old) == 1
        model_c.write_text(text.replace(old, new))
        return project
    return edit


def test_compile_reports_measured_memory(compiled):
    report = compiled[2]
    fw = report["firmware"]
    assert report["memory"] == "measured" and report["fits"] and report["verdict"].endswith("(measured)")
    assert fw["target"] == "cortex-m4" and report["flash_bytes"] == fw["flash_bytes"]
    assert report["sram_bytes"] == fw["sram_bytes"] == sum(fw["sram"].values())
    assert fw["sram"]["arena"] == report["arena_bytes"] and fw["flash"]["weights"] > 0
    assert report["flash_estimate_bytes"] == report["weight_bytes"] + report["code_bytes"]


def test_compile_human_says_measured_or_estimate(capsys, tmp_path):
    code, out, _ = cli(capsys, "compile", "mnist-cnn", "--data", "digits", "--samples", "4", "--out", tmp_path / "a",
                       "--device", "stm32f412")
    assert code == 0 and "measured (cortex-m4 firmware: arena" in out and "fits STM32F412" in out
    code, out, _ = cli(capsys, "compile", "mnist-cnn", "--data", "digits", "--samples", "4", "--out", tmp_path / "b",
                       "--device", "rp2040")  # a Cortex-M0+ (issue 31): built and measured on its own board too
    assert code == 0 and "measured (cortex-m0plus firmware: arena" in out and "fits RP2040" in out
    devices = tmp_path / "devices.toml"
    devices.write_text('[device.M3PART]\ncore = "cortex-m3"\nsram_kb = 64\nflash_kb = 256\nclock_mhz = 72\n')
    code, out, _ = cli(capsys, "compile", "mnist-cnn", "--data", "digits", "--samples", "4", "--out", tmp_path / "c",
                       "--device", "M3PART", "--devices-file", devices)  # no firmware target: the plan's estimate
    assert code == 0 and "(estimate)" in out and "measured" not in out


def test_verify_target_json(capsys, compiled):
    code, out, err = cli(capsys, "verify", compiled[0], "--target", "cortex-m4", "--samples", "2", "--json")
    assert code == 0, err
    v = json.loads(out)
    assert v["ok"] and v["inputs"] == 2 and v["engines"] == ["qemu-cortex-m4", "c-host", "reference"]
    assert set(v["not_run"]) == {"tflm", "sanitizer"} and v["not_run"]["tflm"].startswith("a host check")
    assert v["target"] == "cortex-m4" and v["kernels"] == "portable" and v["stack_bytes"] > 0


@pytest.mark.parametrize("target,kernels", [("cortex-m7", "dsp"), ("cortex-m55", "portable")])
def test_verify_target_human(capsys, compiled, target, kernels):
    code, out, err = cli(capsys, "verify", compiled[0], "--target", target, "--kernels", kernels, "--samples", "1",
                         "--data", "digits")
    assert code == 0, err
    assert out.startswith(f"OK: bit-exact on 5 inputs (qemu-{target} == c-host == reference; stack high-water mark")


def test_verify_target_mismatch_exits_1(capsys, compiled, tampered):
    text = (Path(compiled[0]) / "src" / "model.c").read_text()
    last = re.search(r"memcpy\(\(int8_t \*\)output \+ 0, [^;]*\);\n}", text).group(0)  # kb_invoke's last copy
    project = tampered(last, last[:-1] + "    output[0] ^= 1;\n}")  # one wrong bit
    code, out, _ = cli(capsys, "verify", project, "--target", "cortex-m4", "--samples", "2")
    assert code == 1
    assert out.startswith("MISMATCH input 0: qemu-cortex-m4 differs from the reference") and "FAILED" in out


def test_verify_target_fault_is_one_line(capsys, tampered):
    project = tampered("void kb_invoke(const int8_t *raw_input, int8_t *output)\n{\n",
                       "void kb_invoke(const int8_t *raw_input, int8_t *output)\n{\n"
                       "    output[0] = *(volatile int8_t *)0xF0000000u;\n")
    code, _, err = cli(capsys, "verify", project, "--target", "cortex-m7", "--samples", "1", "--json")
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("kilobyte: error: ") and "faulted [PRECISERR]" in err


def test_bench_json(capsys, compiled):
    code, out, err = cli(capsys, "bench", compiled[0], "--target", "cortex-m7", "--json")
    assert code == 0, err
    b = json.loads(out)
    assert BENCH_KEYS <= set(b) and b["target"] == "cortex-m7"
    assert b["macs"] == compiled[1]["macs"] and b["instructions"] > b["macs"]
    assert b["instructions_per_mac"] == pytest.approx(b["instructions"] / b["macs"], rel=1e-3)
    assert 0 < sum(b["per_layer_instructions"].values()) <= b["instructions"]
    # modelled M7 cycles: dual issue can halve the instructions, no instruction costs more than 12
    assert b["instructions"] / 2 <= b["cycles"] < 12 * b["instructions"] and "cortex-m7" in b["cycle_model"]
    assert b["per_layer_cycles"].keys() == b["per_layer_instructions"].keys()
    assert 0 < sum(b["per_layer_cycles"].values()) <= b["cycles"]
    assert sum(v for k, v in b["flash"].items() if k != "limit") == b["flash_bytes"]
    assert sum(v for k, v in b["sram"].items() if k != "limit") == b["sram_bytes"]
    assert 0 < b["stack_bytes"] < b["sram"]["stack_reserve"]


def test_bench_m55_counts_instructions_under_qemu(capsys, compiled):
    """unicorn cannot run v8.1-M code: on the M55 the QEMU plugin counts, per layer, priced by the beat model."""
    code, out, err = cli(capsys, "bench", compiled[0], "--target", "cortex-m55", "--json")
    assert code == 0, err
    b = json.loads(out)
    assert b["instructions"] > b["macs"] and "beat model" in b["cycle_model"] and b["cycles"] > 0
    assert b["instructions_per_mac"] == pytest.approx(b["instructions"] / b["macs"], rel=1e-3)
    assert 0 < sum(b["per_layer_instructions"].values()) <= b["instructions"]
    assert b["per_layer_cycles"].keys() == b["per_layer_instructions"].keys()
    assert 0 < sum(b["per_layer_cycles"].values()) <= b["cycles"]
    assert b["stack_bytes"] > 0 and b["flash_bytes"] > 0 and b["sram_bytes"] > 0
    code, out, _ = cli(capsys, "bench", compiled[0], "--target", "cortex-m55")
    assert code == 0 and "per MAC, beat model)" in out and "stack used" in out
    assert "per layer (instructions, modelled cycles, share of the cycles)" in out


def test_bench_human_table(capsys, compiled):
    code, out, err = cli(capsys, "bench", compiled[0], "--target", "cortex-m4", "--device", "stm32f412")
    assert code == 0, err
    assert out.startswith("bench mnist-cnn on cortex-m4 (mps2-an386), portable kernels, STM32F412")
    assert "per MAC" in out and "per layer (instructions, modelled cycles" in out and "of 256.0 kB" in out
    cycles = next(line for line in out.splitlines() if line.strip().startswith("cycles"))
    assert "per MAC, modelled" in cycles and int(cycles.split()[1].replace(",", "")) > 0
    layer0 = next(line for line in out.splitlines() if "kb_layer_0_" in line).split()
    assert len(layer0) == 5 and layer0[-1] == "%"  # name, instructions, cycles, share of the cycles, %


def test_run_target_matches_reference_and_host(capsys, compiled, tmp_path):
    core, out_name = reference_graph(compiled[0])
    x = np.random.default_rng(3).integers(-128, 128, compiled[1]["input"]["shape"]).astype(np.int8)
    np.save(tmp_path / "in.npy", x)
    code, out, err = cli(capsys, "run", compiled[0], "--target", "cortex-m4", "--input", tmp_path / "in.npy",
                         "--out", tmp_path / "m4.npy")
    assert code == 0, err
    assert "cortex-m4 under QEMU" in out
    code, _, err = cli(capsys, "run", compiled[0], "--input", tmp_path / "in.npy", "--out", tmp_path / "host.npy")
    assert code == 0, err
    y = np.load(tmp_path / "m4.npy")
    assert y.shape == tuple(compiled[1]["output"]["shape"]) and y.dtype == np.int8
    assert np.array_equal(y, np.load(tmp_path / "host.npy")) and np.array_equal(y, run_int8(core, x)[out_name])


@pytest.mark.parametrize("command", ["verify", "bench", "run"])
def test_bad_target_is_one_line(capsys, compiled, tmp_path, command):
    extra = ["--input", tmp_path / "in.npy", "--out", tmp_path / "o.npy"] if command == "run" else []
    np.save(tmp_path / "in.npy", np.zeros(compiled[1]["input"]["shape"], np.int8))
    code, out, err = cli(capsys, command, compiled[0], "--target", "cortex-m3", *extra)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err == ("kilobyte: error: unsupported Cortex-M target 'cortex-m3': choose one of cortex-m0plus, cortex-m4, "
                   "cortex-m7, cortex-m33, cortex-m55\n")


def test_device_and_target_disagree(capsys, compiled):
    code, _, err = cli(capsys, "bench", compiled[0], "--target", "cortex-m7", "--device", "stm32f412")
    assert code == 1 and err.count("\n") == 1 and "STM32F412 has a cortex-m4 core" in err


def test_bench_without_target_or_device(capsys, compiled):
    code, _, err = cli(capsys, "bench", compiled[0])
    assert code == 1 and err.count("\n") == 1 and "give --target" in err


def test_over_budget_device_exits_2(capsys, compiled, tmp_path):
    devices = tmp_path / "devices.toml"
    devices.write_text('[device.TINY]\ncore = "cortex-m4"\nsram_kb = 8\nflash_kb = 64\nclock_mhz = 48\n')
    for command in ("bench", "verify"):  # the target comes from the device's core
        code, _, err = cli(capsys, command, compiled[0], "--device", "tiny", "--devices-file", devices)
        assert code == 2 and err.count("\n") == 1
        assert err.startswith("kilobyte: error: ") and "does not fit TINY (cortex-m4): region RAM (8192 bytes) " \
            "overflowed by" in err
