"""Models with more than one output (detection heads, face detectors): every output is computed in C and written to
the one output buffer, back to back in the graph's output order, with per-output offsets in model.h and the manifest.

Oracles: TensorFlow Lite Micro and the numpy reference on the project's model.tflite (`verify_project`, host and
sanitizer builds), and the reference on QEMU Cortex-M4 (`verify_on_target`).
"""

from __future__ import annotations

import numpy as np

from kilobyte.codegen import HostModel, compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.interp import run_int8
from kilobyte.ir import ConvAttrs, GraphBuilder, Op, PoolAttrs
from kilobyte.quant import quantize


def _two_heads():
    """A backbone and two heads of different shapes (class scores and box offsets), plus a pooled feature output."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("heads")

    def conv(x, cout, k=3, s=1):
        w = rng.normal(size=(cout, k, k, b.shape(x)[3])).astype(np.float32) / k
        return b.node(Op.CONV_2D, [x], ConvAttrs((s, s), (k // 2,) * 4), params={"weight": w})

    f = conv(conv(b.input((1, 16, 16, 3)), 8, s=2), 16)
    scores = conv(f, 3, k=1)
    boxes = conv(f, 4, k=3)
    pooled = b.node(Op.AVG_POOL_2D, [f], PoolAttrs((2, 2), (2, 2)))
    return b.build([scores, boxes, pooled])


def test_every_output_compiles_and_matches_tflm(tmp_path):
    graph = _two_heads()
    rng = np.random.default_rng(1)
    q = quantize(graph, [rng.normal(size=(1, 16, 16, 3)).astype(np.float32) for _ in range(4)])
    result = compile_graph(q, tmp_path / "m")
    outs = result.manifest["outputs"]
    assert [o["name"] for o in outs] == list(q.outputs) and [o["offset"] for o in outs] == [0, 192, 448]
    header = (result.out_dir / "src" / "model.h").read_text()
    assert "#define KB_OUTPUT_BYTES 704" in header and "#define KB_OUTPUT_AVG_POOL_2D_0_OFFSET 448" in header
    report = verify_project(result.out_dir, n_random=4, sanitize=True)
    assert report.ok and "tflm" in report.engines and report.sanitizer_runs, report.mismatches
    x = rng.integers(-128, 128, (1, 16, 16, 3)).astype(np.int8)
    got, want = HostModel(result.out_dir).outputs(x), run_int8(q, x)
    assert all(np.array_equal(got[name], want[name]) for name in q.outputs)

    from kilobyte.driver import verify_on_target

    on_m4 = verify_on_target(result.out_dir, "cortex-m4", n_random=2)
    assert on_m4.ok, on_m4.mismatches
