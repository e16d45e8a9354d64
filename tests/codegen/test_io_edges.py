"""The model's edges in C, for every interface a converter writes: input int8 / uint8 / float (QUANTIZE head) x
outputs int8 / uint8 (QUANTIZE) / float (DEQUANTIZE), one output or several, mixed. `kb_invoke` is the int8 core
(uint8 where the file has uint8); `kb_invoke_float` is the file's model, typed as the file has it.

Oracles: TensorFlow Lite Micro on the file itself (integers bit for bit, floats within 1 ulp, `verify_project`, with
the host build at -Werror and the sanitizer build through both entry points) and directly here, and numpy for the
header's helpers. The models: tests/edge_models.py; the same on QEMU Cortex-M7: tests/targets/test_qemu_edges.py.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from edge_models import FILE_DTYPE, OUTPUTS, edge_model, file_input

from kilobyte.codegen import HostModel, compile_graph
from kilobyte.codegen.verify import ulp_distance, verify_project
from kilobyte.frontends.tflite import from_tflite
from kilobyte.ops.arith import dequantize_values
from kilobyte.targets.tflm import run_tflm

CTYPE = {"int8": "int8_t", "uint8": "uint8_t", "float": "float", "float32": "float"}


def assert_file_outputs(got: dict, want: dict) -> None:
    """Integers bit for bit, floats within 1 ulp (both by the file's output names)."""
    assert list(got) == list(want)
    for name, y in got.items():
        assert y.dtype == want[name].dtype and y.shape == want[name].shape, name
        if y.dtype == np.float32:
            assert int(ulp_distance(y, want[name]).max()) <= 1, name
        else:
            np.testing.assert_array_equal(y, want[name], err_msg=name)


@pytest.mark.parametrize("inp", ["int8", "uint8", "float"])
def test_every_interface_builds_and_matches_tflm(tmp_path, inp):
    rng = np.random.default_rng(0)
    for k, outs in enumerate(OUTPUTS):
        data = edge_model(inp, outs)
        result = compile_graph(from_tflite(data), tmp_path / f"m{k}")
        m = result.manifest
        files = [FILE_DTYPE[t] for t in outs]
        assert [o["file_dtype"] for o in m["outputs"]] == files
        assert m["float_entry"] == (inp == "float" or "float32" in files)
        header = (result.out_dir / "src" / "model.h").read_text()
        if m["float_entry"]:  # typed as the file has it: a uint8 input stays uint8 (the -Werror build checks it)
            params = [f"const {CTYPE[inp]} *input"] + [
                f"{CTYPE[t]} *{'output' if len(outs) == 1 else o['param']}" for t, o in zip(files, m["outputs"])]
            assert f"void kb_invoke_float({', '.join(params)});" in header
        report = verify_project(result.out_dir, n_random=2, sanitize=True)
        assert report.ok and "tflm" in report.engines and report.sanitizer_runs == 2, (outs, report.mismatches)
        assert (report.float_entry is not None) == m["float_entry"] and "tflm" in (report.float_entry or "tflm")
        if m["float_entry"]:
            host = HostModel(result.out_dir)
            x = file_input(inp, m["input"]["shape"], rng)
            assert_file_outputs(host.float_outputs(x), run_tflm(data, x, preserve_all=False).outputs)


def _helper_lib(project, tmp_path) -> ctypes.CDLL:
    """The header's inline helpers, compiled into a small library (what a user's firmware would call)."""
    import subprocess

    m = HostModel(project).manifest
    names = [o["param"] if len(m["outputs"]) > 1 else "output" for o in m["outputs"]]
    calls = ['#include "model.h"', "void t_quantize(const float *x, void *q) { kb_quantize_input(x, q); }",
             *(f"void t_dequantize_{k}(const void *q, float *y) {{ kb_dequantize_{name}(q, y); }}"
               for k, name in enumerate(names))]
    src = tmp_path / "helpers.c"
    src.write_text("\n".join(calls) + "\n")
    lib = tmp_path / "helpers.so"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", f"-I{project}/src",
                    str(src), f"{project}/src/kb_quantize.c", "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def test_header_helpers_are_right_for_uint8_edges(tmp_path):
    """kb_quantize_input / kb_dequantize_<output> of a uint8 model are TFLite's QUANTIZE / DEQUANTIZE at uint8:
    bytes 0..255 (not int8), checked against TFLM running a float -> uint8 QUANTIZE and the numpy DEQUANTIZE."""
    data = edge_model("uint8", ["uint8", "uint8"])
    result = compile_graph(from_tflite(data), tmp_path / "m")
    m = result.manifest
    lib = _helper_lib(result.out_dir, tmp_path)
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, m["input"]["shape"]).astype(np.float32) * 200 * m["input"]["scale"]
    q = np.empty(x.shape, np.uint8)
    lib.t_quantize(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(q.ctypes.data))
    want = np.clip(np.round(x / np.float32(m["input"]["scale"])) + m["input"]["zero_point"], 0, 255)
    assert q.min() == 0 and q.max() == 255 and np.array_equal(q, want.astype(np.uint8))
    for k, o in enumerate(m["outputs"]):
        assert o["dtype"] == "uint8"
        qy = rng.integers(0, 256, o["shape"]).astype(np.uint8)
        y = np.empty(o["shape"], np.float32)
        getattr(lib, f"t_dequantize_{k}")(ctypes.c_void_p(qy.ctypes.data), ctypes.c_void_p(y.ctypes.data))
        assert np.array_equal(y, dequantize_values(qy, o["scale"], o["zero_point"]))
