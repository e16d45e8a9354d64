"""Tests for what `kilobyte.load` does to a `.tflite` file beyond reading it (api._from_tflite).

Explicit PADs before convolutions are folded into the convolutions' padding. The oracles are the int8 reference run
on the graph as the file has it, and TensorFlow Lite Micro on the file itself.
"""

from __future__ import annotations

import numpy as np

from kilobyte.api import compile_model, load
from kilobyte.driver.verify import verify_project
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


def _const_add_net():
    """int8: conv -> ADD of a (C,) constant (a pre-activation ResNet's folded BatchNorm) -> ADD of a (1,) constant
    given first (a TinyEngine MCUNetV2 model's) -> MUL by a (C,) constant -> RELU-fused SUB of a (1, 1, W, 1) one."""
    from kilobyte.ir import Activation, AddAttrs, QParams

    rng = np.random.default_rng(3)
    b = GraphBuilder("const_adds")
    x = b.input((1, 6, 5, 3), "int8", qparams=QParams.per_tensor(0.02, -4))
    s_w = np.full(8, 0.004, np.float32)
    w = b.const("w", rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8), QParams(s_w, np.zeros(8, np.int64), 0))
    y = b.node(Op.CONV_2D, [x, w], ConvAttrs(padding=(1, 1, 1, 1)), dtype="int8",
               qparams=QParams.per_tensor(0.05, 6))
    for op, shape, first, act in ((Op.ADD, (8,), False, Activation.NONE), (Op.ADD, (1,), True, Activation.RELU),
                                  (Op.MUL, (8,), False, Activation.NONE), (Op.SUB, (1, 1, 5, 1), False,
                                                                           Activation.RELU)):
        k = b.const(f"k{len(b.nodes)}", rng.integers(-128, 128, shape).astype(np.int8), QParams.per_tensor(0.03, 7))
        y = b.node(op, [k, y] if first else [y, k], AddAttrs(act), dtype="int8",
                   qparams=QParams.per_tensor(0.1 if op is Op.MUL else 0.06, -20))
    return b.build([y])


def test_broadcast_constant_operands_load_compile_and_verify(tmp_path):
    """A `.tflite` file with ADD / SUB / MUL by (C,), (1,) and (1, 1, W, 1) constants (refused as "add operands differ
    in shape" before): read with the constants in their own shapes, compiled, C == reference == TFLite Micro."""
    graph = _const_add_net()
    path = tmp_path / "const_adds.tflite"
    path.write_bytes(to_tflite(graph))
    model = load(str(path))
    shapes = [model.graph.tensors[t].shape for n in model.graph.nodes for t in n.inputs
              if n.op is not Op.CONV_2D and model.graph.tensors[t].is_const]
    assert shapes == [(8,), (1,), (8,), (1, 1, 5, 1)]
    x = np.random.default_rng(4).integers(-128, 128, (1, 6, 5, 3)).astype(np.int8)
    want = run_int8(graph, x)[graph.outputs[0]]
    np.testing.assert_array_equal(run_int8(model.graph, x)[model.graph.outputs[0]], want)
    result = compile_model(model, tmp_path / "c")
    report = verify_project(result.out_dir, n_random=3, sanitize=False)
    assert report.ok and "tflm" in report.engines, report.mismatches
