"""Tests for the Cortex-M targets: firmware build, QEMU runs, ELF measurement and instruction counting.

The model is a stand-in with the code generator's contract (model.h / kb_invoke / kb_arena, layers as non-inlined
kb_layer_* functions, const kb_w_* / kb_b_* / kb_mult_* / kb_shift_* arrays, a kernel in kb_conv1x1.c): two int8
1x1 convolutions whose output numpy computes independently. On CI (env CI set) nothing here is skipped: a missing
toolchain fails the tests with the install hint.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kilobyte.errors import DoesNotFitError, KilobyteError
from kilobyte.targets.cortexm import (
    build_firmware,
    count_instructions,
    have_tools,
    measure,
    run_qemu,
    select_sources,
    toolchain,
)
from kilobyte.targets.cortexm import firmware as firmware_module

_HAVE_ALL = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,  # never skipped on CI: fail there
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) or kilobyte[arm] missing")

TARGETS = ("cortex-m4", "cortex-m7", "cortex-m55")
PIXELS, C_IN, C_MID, C_OUT = 16, 8, 16, 4  # (4x4 pixels, channels) through 1x1 conv 8->16, conv 16->4
IN_BYTES, OUT_BYTES, ARENA_BYTES = PIXELS * C_IN, PIXELS * C_OUT, PIXELS * (C_IN + C_MID)

KERNEL_H = """#include <stdint.h>
void kb_conv1x1(const int8_t *in, int8_t *out, int32_t pixels, int32_t in_c, int32_t out_c, const int8_t *w,
                const int32_t *b, const int32_t *mult, const int32_t *shift);
"""
KERNEL_C = """#include "kb_standin.h"
void kb_conv1x1(const int8_t *in, int8_t *out, int32_t pixels, int32_t in_c, int32_t out_c, const int8_t *w,
                const int32_t *b, const int32_t *mult, const int32_t *shift)
{
    for (int32_t p = 0; p < pixels; p++) {
        for (int32_t o = 0; o < out_c; o++) {
            int32_t acc = b[o];
            for (int32_t i = 0; i < in_c; i++) {
                acc += (int32_t)in[p * in_c + i] * w[o * in_c + i];
            }
            int32_t v = (acc * mult[o]) >> shift[o];
            out[p * out_c + o] = (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v));
        }
    }
}
"""


def make_weights(seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    layers = []
    for c_in, c_out in ((C_IN, C_MID), (C_MID, C_OUT)):
        layers.append({"w": rng.integers(-128, 128, (c_out, c_in)).astype(np.int8),
                       "b": rng.integers(-2000, 2000, c_out).astype(np.int32),
                       "mult": rng.integers(1, 100, c_out).astype(np.int32),
                       "shift": rng.integers(8, 14, c_out).astype(np.int32)})
    return layers


def reference(x: np.ndarray, layers: list[dict[str, np.ndarray]]) -> np.ndarray:
    """numpy: each layer is out = clip(((b + x @ w.T) * mult) >> shift, -128, 127) per pixel."""
    a = x.reshape(PIXELS, C_IN).astype(np.int64)
    for layer in layers:
        acc = layer["b"] + a @ layer["w"].T.astype(np.int64)  # (pixels, c_out)
        a = np.clip((acc * layer["mult"]) >> layer["shift"], -128, 127)
    return a.astype(np.int8).reshape(-1)


def _c_array(ctype: str, name: str, values: np.ndarray) -> str:
    return f"static const {ctype} {name}[{values.size}] = {{{', '.join(str(int(v)) for v in values.ravel())}}};\n"


def write_model(root: Path, layers, *, extra_defs: str = "", invoke_prefix: str = "", arena_extra: int = 0) -> Path:
    """Write a stand-in compiled model directory (root/src/...) and return root."""
    src = root / "src"
    src.mkdir(parents=True)
    (src / "model.h").write_text(
        f"#include <stdint.h>\n#define KB_ARENA_BYTES {ARENA_BYTES + arena_extra}\n#define KB_INPUT_BYTES "
        f"{IN_BYTES}\n#define KB_OUTPUT_BYTES {OUT_BYTES}\nextern int8_t kb_arena[KB_ARENA_BYTES];\n"
        "void kb_invoke(const int8_t *input, int8_t *output);\n")
    (src / "kb_standin.h").write_text(KERNEL_H)
    (src / "kb_conv1x1.c").write_text(KERNEL_C)
    arrays = "".join(_c_array("int8_t" if key == "w" else "int32_t", f"kb_{key}_{k}", layer[key])
                     for k, layer in enumerate(layers) for key in ("w", "b", "mult", "shift"))
    calls = [f"kb_arena, kb_arena + {IN_BYTES}, {PIXELS}, {C_IN}, {C_MID}",
             f"kb_arena + {IN_BYTES}, kb_arena, {PIXELS}, {C_MID}, {C_OUT}"]
    layer_fns = "".join(
        f"__attribute__((noinline)) static void kb_layer_{k}_conv(void)\n{{\n    kb_conv1x1({call}, kb_w_{k}, "
        f"kb_b_{k}, kb_mult_{k}, kb_shift_{k});\n}}\n" for k, call in enumerate(calls))
    (src / "model.c").write_text(
        '#include "model.h"\n#include "kb_standin.h"\n'
        f"int8_t kb_arena[KB_ARENA_BYTES] __attribute__((aligned(8)));\n{arrays}{extra_defs}{layer_fns}"
        "void kb_invoke(const int8_t *input, int8_t *output)\n{\n"
        f"{invoke_prefix}"
        "    for (int32_t i = 0; i < KB_INPUT_BYTES; i++) kb_arena[i] = input[i];\n"
        "    kb_layer_0_conv();\n    kb_layer_1_conv();\n"
        "    for (int32_t i = 0; i < KB_OUTPUT_BYTES; i++) output[i] = kb_arena[i];\n}\n")
    (root / "host").mkdir()  # the lead's host harness lives here; the firmware build ignores it
    return root


@pytest.fixture(scope="module")
def layers():
    return make_weights()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, layers) -> Path:
    return write_model(tmp_path_factory.mktemp("standin"), layers)


@pytest.fixture(scope="module")
def builds(model_dir):
    return {target: build_firmware(model_dir, target) for target in TARGETS}


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.random.default_rng(1).integers(-128, 128, IN_BYTES).astype(np.int8)


# --- QEMU: bit-exact output and the stack --------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_qemu_output_matches_numpy(builds, layers, x, target):
    build = builds[target]
    result = run_qemu(build, x)
    np.testing.assert_array_equal(result.output, reference(x, layers))
    assert result.exit_code == 0
    assert 0 < result.stack_bytes < build.stack_reserve_bytes


def test_qemu_rejects_wrong_input(builds):
    with pytest.raises(KilobyteError, match="KB_INPUT_BYTES = 128"):
        run_qemu(builds["cortex-m4"], np.zeros(5, np.int8))
    with pytest.raises(KilobyteError, match="must be int8"):
        run_qemu(builds["cortex-m4"], np.zeros(IN_BYTES, np.float32))


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m55"])
def test_fault_is_reported_not_hung(tmp_path, layers, x, target):
    bad = write_model(tmp_path, layers, invoke_prefix="    output[0] = *(volatile int8_t *)0xF0000000u;\n")
    build = build_firmware(bad, target)
    with pytest.raises(KilobyteError, match=r"faulted \[PRECISERR\].*BFAR=0xf0000000"):
        run_qemu(build, x, timeout=20)


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m55"])
def test_stack_overflow_is_reported(tmp_path, layers, x, target):
    deep = ("__attribute__((noinline)) static int deep(const int8_t *in, int n)\n{\n    volatile int8_t big[512];\n"
            "    for (int i = 0; i < 512; i++) big[i] = in[i % 16];\n"
            "    return n == 0 ? big[5] : deep(in, n - 1) + big[n];\n}\n")
    bad = write_model(tmp_path, layers, extra_defs=deep, invoke_prefix="    kb_arena[0] = (int8_t)deep(input, 40);\n")
    with pytest.raises(KilobyteError, match="stack overflow|STKOF"):
        run_qemu(build_firmware(bad, target, stack_bytes=2048), x, timeout=20)


def test_endless_loop_times_out(tmp_path, layers, x):
    bad = write_model(tmp_path, layers, invoke_prefix="    for (;;) { __asm__ volatile(\"\"); }\n")
    with pytest.raises(KilobyteError, match=r"no exit within 1 s"):
        run_qemu(build_firmware(bad, "cortex-m4"), x, timeout=1)


# --- device budgets ----------------------------------------------------------------------------------------------

def test_over_budget_flash_is_a_readable_error(tmp_path, layers):
    big = "static const int8_t kb_w_big[200000] = {1};\n"  # 200 KB of weights; the STM32F410 has 128 KB Flash
    model = write_model(tmp_path, layers, extra_defs=big, invoke_prefix="    kb_arena[0] = kb_w_big[input[0] + 128];\n")
    with pytest.raises(DoesNotFitError) as err:
        build_firmware(model, "cortex-m4", device="stm32f410")
    message = str(err.value)
    assert "\n" not in message
    assert "STM32F410" in message and "region FLASH (131072 bytes) overflowed by" in message


def test_over_budget_arena_is_a_readable_error(tmp_path, layers):
    model = write_model(tmp_path, layers, arena_extra=40 * 1024)  # the STM32F410 has 32 KB SRAM
    with pytest.raises(DoesNotFitError, match=r"STM32F410 \(cortex-m4\): region RAM \(32768 bytes\) overflowed by "
                                              r"\d+ bytes$"):
        build_firmware(model, "cortex-m4", device="stm32f410")


def test_fits_device_and_records_its_budget(model_dir, layers, x, tmp_path):
    build = build_firmware(model_dir, "cortex-m4", device="stm32f410", out_dir=tmp_path / "fw")
    assert (build.flash_limit_bytes, build.ram_limit_bytes) == (128 * 1024, 32 * 1024)
    np.testing.assert_array_equal(run_qemu(build, x).output, reference(x, layers))
    sizes = measure(build)
    assert sizes["device"] == "STM32F410" and sizes["sram_bytes"] <= sizes["sram_limit_bytes"]


def test_device_core_must_match_target(model_dir):
    with pytest.raises(KilobyteError, match="STM32F410 has a cortex-m4 core"):
        build_firmware(model_dir, "cortex-m7", device="stm32f410")


def test_unknown_target_and_missing_model(tmp_path, model_dir):
    with pytest.raises(KilobyteError, match="choose one of cortex-m0plus, cortex-m4"):
        build_firmware(model_dir, "cortex-m3")
    with pytest.raises(KilobyteError, match="not a compiled model directory"):
        build_firmware(tmp_path, "cortex-m4")


def test_compile_error_is_one_line(tmp_path, layers):
    model = write_model(tmp_path, layers, invoke_prefix="    this is not C;\n")
    with pytest.raises(KilobyteError, match="firmware build for mps2-an386 \\(cortex-m4\\) failed: .*error"):
        build_firmware(model, "cortex-m4")


# --- measurement ---------------------------------------------------------------------------------------------------

def _size_tool(elf: Path) -> dict[str, int]:
    """`arm-none-eabi-size -A -d`: section name -> size."""
    text = subprocess.run(["arm-none-eabi-size", "-A", "-d", str(elf)], capture_output=True, text=True,
                          check=True).stdout
    rows = [line.split() for line in text.splitlines()[2:]]
    return {row[0]: int(row[1]) for row in rows if len(row) == 3}


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m55"])
def test_measure_agrees_with_size_tool(builds, target):
    build = builds[target]
    tool = _size_tool(build.elf)
    sizes = measure(build)
    flash_sections = [".text", ".ARM.exidx", ".rodata", ".data"]
    assert sizes["flash_bytes"] == sum(tool.get(name, 0) for name in flash_sections)
    assert sizes["sram_bytes"] == sum(tool.get(name, 0) for name in (".stack", ".data", ".bss"))
    assert sizes["sram_stack_bytes"] == tool[".stack"] == build.stack_reserve_bytes
    assert sizes["sram_arena_bytes"] == ARENA_BYTES
    weights = C_IN * C_MID + C_MID * C_OUT + 3 * 4 * (C_MID + C_OUT)  # int8 weights + int32 bias/mult/shift
    assert sizes["flash_weights_bytes"] == weights
    assert 0 < sizes["flash_kernel_bytes"] < sizes["flash_bytes"] - weights
    assert sizes["flash_other_bytes"] > 0 and sizes["sram_other_bytes"] >= IN_BYTES + OUT_BYTES


# --- instruction counts --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_icount_is_deterministic_and_matches_qemu(builds, layers, x, target):
    build = builds[target]
    first, second = count_instructions(build, x), count_instructions(build, x)
    assert first.total == second.total and first.per_function == second.per_function
    assert first.per_layer == second.per_layer
    assert list(first.per_layer) == ["kb_layer_0_conv", "kb_layer_1_conv"]
    assert sum(first.per_layer.values()) <= first.total == sum(first.per_function.values())
    # The kernel dominates: 16 pixels x (8x16 + 16x4) multiply-accumulates, at least one instruction each.
    assert first.per_function["kb_conv1x1"] > PIXELS * (C_IN * C_MID + C_MID * C_OUT)
    np.testing.assert_array_equal(first.output, run_qemu(build, x).output)
    np.testing.assert_array_equal(first.output, reference(x, layers))


def test_modelled_cycles_follow_the_instructions(builds, x):
    """The stand-in's kernel loads bytes in its inner loop: on the M4 (loads 2 cycles, taken branches 1 + 2) its
    cycles exceed its instructions; the M7's dual issue brings them below the M4's. Layers split the cycles as they
    split the instructions."""
    m4, m7 = count_instructions(builds["cortex-m4"], x), count_instructions(builds["cortex-m7"], x)
    assert m4.cycles > m4.total and m7.cycles < m4.cycles
    for c in (m4, m7):
        assert c.per_layer_cycles.keys() == c.per_layer.keys()
        assert sum(c.per_layer_cycles.values()) <= c.cycles == sum(c.per_function_cycles.values())
        assert c.per_layer_cycles["kb_layer_0_conv"] > c.per_layer_cycles["kb_layer_1_conv"]


def test_icount_depends_on_work(builds, x):
    """A layer with 4x the multiply-accumulates of another costs more instructions."""
    counts = count_instructions(builds["cortex-m4"], x).per_layer
    assert counts["kb_layer_0_conv"] > counts["kb_layer_1_conv"]


def test_icount_refuses_m55(builds, x):
    with pytest.raises(KilobyteError, match="not available for cortex-m55"):
        count_instructions(builds["cortex-m55"], x)


def test_icount_reports_a_fault(tmp_path, layers, x):
    bad = write_model(tmp_path, layers, invoke_prefix="    output[0] = *(volatile int8_t *)0xF0000000u;\n")
    with pytest.raises(KilobyteError, match=r"stopped at pc 0x[0-9a-f]+ \(kb_invoke\)"):
        count_instructions(build_firmware(bad, "cortex-m4"), x)


# --- kernel selection, toolchain errors ----------------------------------------------------------------------------

def test_dsp_kernels_swap_same_named_files(tmp_path, model_dir, layers, x, monkeypatch):
    arm = tmp_path / "arm"
    arm.mkdir()
    # An "optimised" kernel: same contract, a different body (and a helper header only the arm kernels have, which
    # includes the header of an assembly function: its .S comes along; an assembly file no header leads to stays out).
    (arm / "kb_arm_helpers.h").write_text('#include "kb_arm_one.h"\n#define KB_ARM_VARIANT kb_arm_one()\n')
    (arm / "kb_arm_one.h").write_text("int kb_arm_one(void);\n")
    (arm / "kb_arm_one.S").write_text(".syntax unified\n.thumb\n.section .text.kb_arm_one, \"ax\", %progbits\n"
                                      ".global kb_arm_one\n.thumb_func\n.type kb_arm_one, %function\n"
                                      "kb_arm_one:\n    movs r0, #1\n    bx lr\n.size kb_arm_one, . - kb_arm_one\n")
    (arm / "kb_arm_unused.h").write_text("int kb_arm_unused(void);\n")
    (arm / "kb_arm_unused.S").write_text('.error "not used by this model"\n')
    (arm / "kb_conv1x1.c").write_text('#include "kb_arm_helpers.h"\n' + KERNEL_C.replace("i++", "i += KB_ARM_VARIANT"))
    (arm / "kb_unused.c").write_text("#error not used by this model\n")
    chosen = select_sources(model_dir / "src", "dsp", arm_dir=arm)
    assert arm / "kb_conv1x1.c" in chosen and arm / "kb_arm_helpers.h" in chosen and arm / "kb_arm_one.S" in chosen
    assert model_dir / "src" / "model.c" in chosen and arm / "kb_unused.c" not in chosen
    assert arm / "kb_arm_unused.S" not in chosen
    assert select_sources(model_dir / "src", "portable", arm_dir=arm) == sorted(
        p for p in (model_dir / "src").iterdir())
    monkeypatch.setattr(firmware_module, "ARM_KERNEL_DIR", arm)
    build = build_firmware(model_dir, "cortex-m7", kernels="dsp", out_dir=tmp_path / "fw")
    assert (build.out_dir / "src" / "kb_conv1x1.c").read_text() == (arm / "kb_conv1x1.c").read_text()
    np.testing.assert_array_equal(run_qemu(build, x).output, reference(x, layers))


def test_missing_toolchain_names_the_apt_command(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    toolchain.arm_gcc.cache_clear()
    toolchain.qemu_arm.cache_clear()
    try:
        with pytest.raises(KilobyteError, match="apt-get install -y --no-install-recommends gcc-arm-none-eabi"):
            toolchain.arm_gcc()
        with pytest.raises(KilobyteError, match="qemu-system-arm not found"):
            toolchain.qemu_arm()
    finally:
        toolchain.arm_gcc.cache_clear()
        toolchain.qemu_arm.cache_clear()
