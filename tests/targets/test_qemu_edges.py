"""The model's edges on Cortex-M7 under QEMU: every interface of tests/codegen/test_io_edges.py (input int8 / uint8 /
float x outputs int8 / uint8 / float, one or several, mixed) and float tails, through `verify_on_target`, whose
firmware runs `kb_invoke` and then `kb_invoke_float` on the file's input (`build_firmware(float_entry=True)`).

Oracles: the numpy reference for kb_invoke's bytes, TensorFlow Lite Micro on the model file for the float entry
point's outputs (integers bit for bit, floats within 1 ulp: newlib's expf may round differently from glibc's).
"""

from __future__ import annotations

import pytest
from edge_models import OUTPUTS, TAIL_MODELS, edge_model, tail_model

from kilobyte.codegen import compile_graph
from kilobyte.driver import verify_on_target
from kilobyte.frontends.tflite import from_tflite


def _on_m7(project, n: int = 1) -> None:
    report = verify_on_target(project, "cortex-m7", n_random=n)
    assert report.ok, report.mismatches
    m = report.float_entry
    assert report.engines[0] == "qemu-cortex-m7" and (m is None or ("tflm" in m and "under QEMU" in m))


@pytest.mark.parametrize("inp", ["int8", "uint8", "float"])
def test_every_interface_on_cortex_m7(tmp_path, inp):
    for k, outs in enumerate(OUTPUTS):
        _on_m7(compile_graph(from_tflite(edge_model(inp, outs)), tmp_path / f"m{k}").out_dir)


def test_float_tails_on_cortex_m7(tmp_path):
    for name in TAIL_MODELS:
        result = compile_graph(from_tflite(tail_model(name)), tmp_path / name)
        assert result.tail and result.manifest["float_entry"]
        _on_m7(result.out_dir, n=3)
