"""Tests for what `kilobyte.load` does to a `.tflite` file beyond reading it (api._from_tflite).

Explicit PADs before convolutions are folded into the convolutions' padding. The oracles are the int8 reference run
on the graph as the file has it, and TensorFlow Lite Micro on the file itself.
"""

from __future__ import annotations

import numpy as np

from kilobyte.api import compile_model, load
from kilobyte.codegen.verify import verify_project
from kilobyte.export.tflite import to_tflite
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import ConvAttrs, DepthwiseAttrs, GraphBuilder, Op, PadAttrs
from kilobyte.quant import quantize
from kilobyte.schedule import make_plan


def _padded_net():
    """PAD + VALID conv, twice (the way converters write some SAME convs), on a 24x24x3 input."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("padded")
    x = b.node(Op.PAD, [b.input((1, 24, 24, 3))], PadAttrs(((0, 0), (1, 1), (1, 1), (0, 0))))
    w = rng.normal(size=(16, 3, 3, 3)).astype(np.float32) / 3
    y = b.node(Op.CONV_2D, [x], ConvAttrs(), params={"weight": w, "bias": rng.normal(size=16).astype(np.float32)})
    y = b.node(Op.PAD, [y], PadAttrs(((0, 0), (0, 1), (0, 1), (0, 0))))  # asymmetric, as TF's SAME stride 2
    w = rng.normal(size=(1, 3, 3, 16)).astype(np.float32) / 3
    y = b.node(Op.DEPTHWISE_CONV_2D, [y], DepthwiseAttrs(stride=(2, 2)), params={"weight": w})
    return b.build([y])


def test_explicit_pads_are_folded_on_import(tmp_path):
    graph = _padded_net()
    rng = np.random.default_rng(1)
    qgraph = quantize(graph, [rng.normal(size=(1, 24, 24, 3)).astype(np.float32) for _ in range(4)])
    path = tmp_path / "padded.tflite"
    path.write_bytes(to_tflite(qgraph))
    raw = from_tflite(path)
    assert sum(n.op is Op.PAD for n in raw.nodes) == 2  # the file has them
    model = load(str(path))
    assert not any(n.op is Op.PAD for n in model.graph.nodes)
    assert [n.attrs.padding for n in model.graph.nodes] == [(1, 1, 1, 1), (0, 1, 0, 1)]
    x = rng.integers(-128, 128, (1, 24, 24, 3)).astype(np.int8)
    want = run_int8(raw, x)[raw.outputs[0]]
    np.testing.assert_array_equal(run_int8(model.graph, x)[model.graph.outputs[0]], want)
    assert make_plan(model.graph).peak_bytes < make_plan(raw).peak_bytes  # no padded copy held
    result = compile_model(model, tmp_path / "c")
    report = verify_project(result.out_dir, n_random=3, sanitize=False)
    assert report.ok and "tflm" in report.engines, report.mismatches
