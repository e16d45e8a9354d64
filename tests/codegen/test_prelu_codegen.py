"""int8 PRELU in generated C: conv -> PRELU -> conv compiled, the alpha per channel (one `kb_lut` per channel's
table, in a loop) or single (one call); a second shape writes two PRELUs straight into a CONCAT's slices (pixel
stride 12, six channels each). Oracles: the numpy reference and TFLite Micro on the project's model.tflite, and the
host C build (`verify_project`, one ASan/UBSan run).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from random_nets import _int8_weighted

from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.ir import ConcatAttrs, ConvAttrs, GraphBuilder, Op, QParams
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.plan_types import PlanOptions


def prelu_model(seed: int, per_channel: bool = True, concat: bool = False):
    """int8 input -> 3x3 conv (6 channels) -> PRELU -> 1x1 conv; with `concat`, two such branches -> CONCAT, the
    PRELUs' outputs quantised alike."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"prelu_{seed}")
    x = b.input((1, 9, 7, 3), "int8", qparams=QParams.per_tensor(0.05, int(rng.integers(-50, 50))))
    ys, qp = [], None
    for k in range(2 if concat else 1):
        y = _int8_weighted(b, rng, Op.CONV_2D, x, (6, 3, 3, 3), ConvAttrs(padding=(1, 1, 1, 1)), 2.0)
        qp = qp or QParams.per_tensor(float(b.tensors[y].qparams.scale[0]) * 1.3, int(rng.integers(-30, 30)))
        alphas = rng.integers(-128, 128, 6 if per_channel else 1).astype(np.int8)
        a = b.const(f"alpha{k}", alphas, QParams.per_tensor(1 / 64, int(rng.integers(-20, 20))))
        ys.append(b.node(Op.PRELU, [y, a], None, dtype="int8", qparams=qp))
    y = b.node(Op.CONCAT, ys, ConcatAttrs(3), dtype="int8", qparams=b.tensors[ys[0]].qparams) if concat else ys[0]
    y = _int8_weighted(b, rng, Op.CONV_2D, y, (4, 1, 1, b.shape(y)[-1]), ConvAttrs(), 1.0)
    return b.build([y])


@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "single"])
def test_conv_prelu_conv_c_equals_reference_equals_tflm(tmp_path, per_channel):
    graph = prelu_model(seed=7, per_channel=per_channel)
    result = compile_graph(graph, tmp_path / "m", PlanOptions())
    text = (result.out_dir / "src" / "model.c").read_text()
    assert text.count("kb_lut(") == 1 and ("for (int32_t c = 0; c < 6; ++c)" in text) == per_channel
    assert re.search(rf"static const int8_t kb_lut_\w+\[{256 * (6 if per_channel else 1)}\]", text)
    est = estimate_resources(result.graph, PlanOptions())
    arrays = re.findall(r"^static const (int8_t|int32_t) kb_\w+\[(\d+)\]", text, re.M)
    assert est.weight_bytes == sum(int(n) * (1 if t == "int8_t" else 4) for t, n in arrays)  # the tables, no alpha
    report = verify_project(result.out_dir, n_random=4, sanitize=per_channel)
    assert report.ok and report.engines == ("c-host", "reference", "tflm"), report.mismatches


def test_prelus_write_into_concat_slices(tmp_path):
    result = compile_graph(prelu_model(seed=8, concat=True), tmp_path / "m", PlanOptions())
    text = (result.out_dir / "src" / "model.c").read_text()
    assert "kb_copy_channels" not in text
    assert len(re.findall(r"kb_lut\(63, 1, kb_lut_\w+ \+ 256 \* c, \(KB_ARENA \+ \d+\) \+ c, 6, "
                          r"\(KB_ARENA \+ \d+\) \+ c, 12\);", text)) == 2
    report = verify_project(result.out_dir, n_random=3)
    assert report.ok and report.engines == ("c-host", "reference", "tflm"), report.mismatches
