"""Tests for codegen/project.py: the generated C project as a user receives it.

- Deterministic: the same int8 graph and options give the same bytes in every file, wherever it is written.
- Only the runtime files of the kernels the model uses are copied (no depthwise code in a model without depthwise).
- The generated Makefile builds with the strict flags (`make`, gcc -Wall -Wextra -Werror) and `make asan`, and
  both executables give the reference's output (oracle: `run_int8`).
- Writing over a directory that is not a Kilobyte project is refused and leaves it untouched.
- The core install (no flatbuffers/tflite, torch or onnx) compiles: the project is byte-identical minus
  `model.tflite`, whose absence the manifest records; `kilobyte verify`'s reader then fails in one line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kilobyte
from kilobyte.codegen import compile_graph, run_executable
from kilobyte.errors import KilobyteError
from kilobyte.interp import run_int8
from kilobyte.ir import Activation, ConvAttrs, GraphBuilder, Op, PoolAttrs
from kilobyte.quant import quantize


def _conv_pool_graph():
    rng = np.random.default_rng(5)
    b = GraphBuilder("convpool")
    x = b.input((1, 10, 10, 3))
    y = b.node(Op.CONV_2D, [x], ConvAttrs((1, 1), (1, 1, 1, 1), activation=Activation.RELU),
               params={"weight": rng.normal(0, 0.5, (6, 3, 3, 3)), "bias": rng.normal(0, 0.1, 6)})
    g = b.build([b.node(Op.MAX_POOL_2D, [y], PoolAttrs((2, 2), (2, 2)))])
    return quantize(g, [rng.normal(0, 1, (1, 10, 10, 3)).astype(np.float32) for _ in range(3)])


def _files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_generation_is_deterministic(tmp_path):
    q = _conv_pool_graph()
    a = _files(compile_graph(q, tmp_path / "a").out_dir)
    b = _files(compile_graph(_conv_pool_graph(), tmp_path / "elsewhere" / "b").out_dir)
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), [k for k in a if a[k] != b.get(k)]


def test_only_used_kernels_are_copied(tmp_path):
    result = compile_graph(_conv_pool_graph(), tmp_path / "m")
    sources = {p.name for p in (result.out_dir / "src").glob("kb_*.c")}
    assert {"kb_conv.c", "kb_pool.c"} <= sources
    assert not sources & {"kb_depthwise.c", "kb_add.c", "kb_fc.c", "kb_concat.c", "kb_conv_add.c"}
    assert result.manifest["kernels"] == sorted(result.manifest["kernels"]) and "depthwise" not in \
        result.manifest["kernels"]


@pytest.mark.parametrize("goal,exe", [("all", "model"), ("asan", "model_asan")])
def test_generated_makefile_builds_and_runs(tmp_path, goal, exe):
    q = _conv_pool_graph()
    result = compile_graph(q, tmp_path / "m")
    res = subprocess.run(["make", "-s", "-C", str(result.out_dir), goal], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    x = np.random.default_rng(9).integers(-128, 128, (1, 10, 10, 3)).astype(np.int8)
    out = result.graph.outputs[0]
    y = run_executable(result.out_dir / "host" / exe, x, result.graph.tensors[out].shape)
    np.testing.assert_array_equal(y, run_int8(result.graph, x)[out])


def test_refuses_to_overwrite_a_foreign_directory(tmp_path):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"meow")
    with pytest.raises(KilobyteError, match="not a Kilobyte project"):
        compile_graph(_conv_pool_graph(), foreign)
    assert _files(foreign) == {"cat.jpg": b"meow"}
    assert [p.name for p in tmp_path.iterdir()] == ["photos"]  # no temporary directory left behind


CORE_ONLY = """
import json, sys
for name in ("flatbuffers", "tflite", "torch", "onnx", "onnxruntime"):
    sys.modules[name] = None  # importing them now fails, as on a core install (numpy, tqdm)
sys.path.insert(0, sys.argv[1])
from test_project import _conv_pool_graph
from kilobyte.api import LoadedModel, compile_model
from kilobyte.driver.verify import reference_graph
from kilobyte.errors import KilobyteError
manifest = compile_model(LoadedModel("convpool", _conv_pool_graph()), sys.argv[2]).manifest
try:
    reference_graph(sys.argv[2])  # what kilobyte verify reads first
    error = None
except KilobyteError as e:
    error = str(e)
print(json.dumps({"manifest": manifest, "verify_error": error}))
"""


def test_the_core_install_compiles_without_the_tflite_copy(tmp_path):
    root = str(Path(kilobyte.__file__).parents[1])  # this checkout, not whatever else is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-c", CORE_ONLY, str(Path(__file__).parent), str(tmp_path / "core")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["manifest"]["tflite"] is None
    assert re.fullmatch(r".*/core: no model\.tflite \(compiled without the \[tflite\] extra\); pip install .*",
                        out["verify_error"])
    core = _files(tmp_path / "core")
    full = _files(compile_graph(_conv_pool_graph(), tmp_path / "full", model_name="convpool").out_dir)
    assert full.pop("model.tflite")[4:8] == b"TFL3" and "model.tflite" not in core
    manifest_core, manifest_full = (json.loads(files.pop("kilobyte.json")) for files in (core, full))
    assert manifest_core.pop("tflite") is None and manifest_full.pop("tflite") == "model.tflite"
    assert manifest_core == manifest_full and core == full
