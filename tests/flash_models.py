"""Models the Flash estimate is calibrated on (bench/calibrate_flash.py) and held to (tests/targets/
test_flash_estimate.py): two disjoint sets, each a list of `FlashModel` — a name, a function building its int8 graph,
and the patch stage to plan.

Calibration: zoo models at small widths and resolutions (10 classes), the MLPerf Tiny shapes, random graphs from
`random_nets` with and without a patch stage, searched-space networks, and one small graph per op kind the others
lack (SUB, MUL, MAXIMUM/MINIMUM, ADD / SUB / MUL by a broadcast constant, lookup-table activations, int8 MEAN,
LOG_SOFTMAX, uint8 QUANTIZE edges, a copying RESHAPE, two outputs, each data-movement op of `random_nets.MOVEMENTS`
and upsampling op of `UPSAMPLES`). Acceptance: other widths, resolutions, seeds and architectures.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from random_nets import (
    MOVEMENTS,
    UPSAMPLES,
    movement_model,
    quantized,
    random_graph,
    stage_side,
    upsample_model,
    valid_cuts,
)

from kilobyte.ir import (
    Activation,
    AddAttrs,
    ConvAttrs,
    FullyConnectedAttrs,
    GraphBuilder,
    MeanAttrs,
    Op,
    QParams,
    ReshapeAttrs,
)


@dataclass(frozen=True)
class FlashModel:
    name: str
    build: Callable  # () -> int8 Graph
    patch: object = None  # PlanOptions.patch


def zoo(name: str, width: float = 1.0, resolution: int | None = None, classes: int | None = 10):
    """A zoo model quantised on random inputs (10 classes where the model takes a class count)."""
    def build():
        from kilobyte.api import load

        kwargs = {"num_classes": classes} if classes and name not in MLPERF else {}
        graph = load(name, width=width, resolution=resolution, **kwargs).graph
        return quantized(graph, 0)[0]
    return build


MLPERF = ("kws-dscnn", "vww-mbv1", "ic-resnet8", "ad-autoencoder")


def random_net(seed: int, cut: str | None = None) -> tuple[Callable, object]:
    """(builder, patch) of random graph `seed`; with `cut` ("middle" / "last"), a patch stage on its middle or
    longest valid prefix with a 2x2 grid (None when the graph has no valid cut)."""
    def build():
        return quantized(random_graph(seed), seed)[0]
    if cut is None:
        return build, None
    graph = build()
    cuts = [(n, outs) for n, outs in valid_cuts(graph) if stage_side(graph, outs) >= 2]
    if not cuts:
        return build, None
    n, _ = cuts[len(cuts) // 2] if cut == "middle" else cuts[-1]
    return build, (n, 2)


def searched(seed: int, width: float, resolution: int):
    """A network of the search space (tests/nas): random architecture and weights, calibrated and quantised."""
    def build():
        from latency_nets import random_weights

        from kilobyte.nas.build import build_graph, network
        from kilobyte.nas.space import MBSpace
        from kilobyte.quant.quantize import quantize

        space = MBSpace(num_classes=10, in_channels=1, widths=(width,), resolutions=(resolution,))
        rng = np.random.default_rng(seed)
        arch = space.sample(rng)
        graph = build_graph(space, arch, weights=iter(random_weights(network(space, arch), rng)))
        calib = [rng.standard_normal((1, resolution, resolution, 1)).astype(np.float32) for _ in range(2)]
        return quantize(graph, calib)
    return build


# -- one graph per op kind the zoo lacks ------------------------------------------------------------------------------
def float_ops(seed: int = 0):
    """conv, conv -> SUB -> MUL -> HARD_SWISH -> LEAKY_RELU -> MEAN (int8, as .tflite has it) -> LOG_SOFTMAX,
    quantised."""
    from kilobyte.ir import LeakyReluAttrs

    rng = np.random.default_rng(seed)
    b = GraphBuilder("float_ops")
    x = b.input((1, 8, 8, 4))
    convs = [b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)),
                    params={"weight": rng.normal(0, 0.3, (8, 3, 3, 4))}) for _ in range(2)]
    y = b.node(Op.SUB, convs, AddAttrs())
    y = b.node(Op.MUL, [y, convs[1]], AddAttrs())
    y = b.node(Op.HARD_SWISH, [y])
    y = b.node(Op.LEAKY_RELU, [y], LeakyReluAttrs(0.1))
    y = b.node(Op.MEAN, [y], MeanAttrs((1, 2)))
    y = b.node(Op.LOG_SOFTMAX, [y])
    q = quantized(b.build([y]), seed)[0]  # quantize keeps MEAN as the int8 op .tflite has
    out = dataclasses.replace(q.tensors[y], qparams=QParams.per_tensor(16 / 256, 127))  # TFLite's LOG_SOFTMAX output
    return q.replace(tensors={**q.tensors, y: out}).verify()


def _conv8(b: GraphBuilder, rng, x: str, cout: int, q_out: QParams, k: int = 3) -> str:
    """An int8 kxk SAME conv with random per-channel weights."""
    cin = b.shape(x)[-1]
    s_w = (2.0 ** rng.uniform(-8, -6, cout)).astype(np.float32)
    zeros = np.zeros(cout, np.int64)
    n = len(b.nodes)
    w = b.const(f"w{n}", rng.integers(-127, 128, (cout, k, k, cin)).astype(np.int8), QParams(s_w, zeros, 0))
    bias_scale = (np.float32(b.tensors[x].qparams.scale[0]) * s_w).astype(np.float32)
    bias = b.const(f"b{n}", rng.integers(-3000, 3000, cout).astype(np.int32), QParams(bias_scale, zeros, 0))
    pad = k // 2
    return b.node(Op.CONV_2D, [x, w, bias], ConvAttrs(padding=(pad, pad, pad, pad)), dtype="int8", qparams=q_out)


def int8_edges(seed: int = 0):
    """uint8 input -> QUANTIZE -> conv, conv -> MAXIMUM -> MINIMUM -> LOGISTIC -> conv -> QUANTIZE -> uint8
    output."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("int8_edges")
    x = b.input((1, 8, 8, 3), "uint8", qparams=QParams.per_tensor(0.02, 128))
    q = QParams.per_tensor(0.05, 3)
    x8 = b.node(Op.QUANTIZE, [x], None, dtype="int8", qparams=QParams.per_tensor(0.02, 0))
    a, c = _conv8(b, rng, x8, 8, q), _conv8(b, rng, x8, 8, q)
    y = b.node(Op.MAXIMUM, [a, c], None, dtype="int8", qparams=q)
    y = b.node(Op.MINIMUM, [y, a], None, dtype="int8", qparams=q)
    y = b.node(Op.LOGISTIC, [y], None, dtype="int8", qparams=QParams.per_tensor(1 / 256, -128))
    y = _conv8(b, rng, y, 4, QParams.per_tensor(0.1, -3), k=1)
    out = b.node(Op.QUANTIZE, [y], None, dtype="uint8", qparams=QParams.per_tensor(0.1, 125))
    return b.build([out])


def const_operands(seed: int = 0):
    """conv -> ADD of a (C,) constant -> MUL by one value -> SUB from a (1,1,W,1) constant (kb_add_const,
    kb_mul_const), a fused ReLU on the first."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("const_operands")
    x = b.input((1, 8, 8, 3), "int8", qparams=QParams.per_tensor(0.02, 0))
    y = _conv8(b, rng, x, 8, QParams.per_tensor(0.05, 3))
    for op, shape, act in ((Op.ADD, (8,), Activation.RELU), (Op.MUL, (1,), Activation.NONE),
                           (Op.SUB, (1, 1, 8, 1), Activation.NONE)):
        k = b.const(f"k{len(b.nodes)}", rng.integers(-128, 128, shape).astype(np.int8), QParams.per_tensor(0.02, -3))
        y = b.node(op, [k, y] if op is Op.SUB else [y, k], AddAttrs(act), dtype="int8",
                   qparams=QParams.per_tensor(0.06, 1))
    return b.build([y])


def two_outputs(seed: int = 0):
    """A RESHAPE of the (caller-owned) input, which must copy, into a FULLY_CONNECTED; and a conv head: two outputs."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("two_outputs")
    x = b.input((1, 6, 6, 2), "int8", qparams=QParams.per_tensor(0.02, 5))
    flat = b.node(Op.RESHAPE, [x], ReshapeAttrs((1, 72)), dtype="int8", qparams=QParams.per_tensor(0.02, 5))
    s_w = np.full(10, 2.0 ** -7, np.float32)
    w = b.const("w_fc", rng.integers(-127, 128, (10, 72)).astype(np.int8), QParams(s_w, np.zeros(10, np.int64), 0))
    fc = b.node(Op.FULLY_CONNECTED, [flat, w], FullyConnectedAttrs(Activation.NONE), dtype="int8",
                qparams=QParams.per_tensor(0.1, 0))
    conv = _conv8(b, rng, x, 4, QParams.per_tensor(0.1, 1))
    return b.build([fc, conv])


def sparse_convs(seed: int = 0):
    """Three filterlet-pruned convs, their weights stored FWCS, CSR and FWCS (kb_sparse_conv.c)."""
    from sparse_nets import prune_filterlets

    from kilobyte.transforms import set_weight_format

    rng = np.random.default_rng(seed)
    b = GraphBuilder("sparse_convs")
    x = b.input((1, 8, 8, 8), "int8", qparams=QParams.per_tensor(0.02, 5))
    q = QParams.per_tensor(0.05, 3)
    y = _conv8(b, rng, _conv8(b, rng, _conv8(b, rng, x, 16, q), 16, q), 8, QParams.per_tensor(0.1, -3), k=1)
    g = b.build([y])
    tensors = dict(g.tensors)
    for n in g.nodes:
        w = tensors[n.inputs[1]]
        tensors[w.name] = dataclasses.replace(w, data=prune_filterlets(rng, w.data, 0.8))
    g = g.replace(tensors=tensors)
    return set_weight_format(g, dict(zip((n.name for n in g.nodes), ("fwcs", "csr", "fwcs"))))


def calibration_models() -> list[FlashModel]:
    """The calibration set (module doc)."""
    models = [FlashModel("mnist-cnn", zoo("mnist-cnn", 1.0, 28)),
              FlashModel("resnet-small w0.5 r32", zoo("resnet-small", 0.5, 32)),
              FlashModel("vgg-small w0.5 r32", zoo("vgg-small", 0.5, 32)),
              *(FlashModel(f"{m} w0.25 r64", zoo(m, 0.25, 64))
                for m in ("mobilenetv2", "mbv2-rd", "mnasnet", "proxyless-mobile")),
              FlashModel("mbv2-rd w0.25 r96 patch", zoo("mbv2-rd", 0.25, 96), "auto"),
              FlashModel("mobilenetv2 w0.25 r96 patch", zoo("mobilenetv2", 0.25, 96), "auto"),
              *(FlashModel(m, zoo(m)) for m in MLPERF),
              *(FlashModel(f"searched s{s}", searched(s, 0.3, 32)) for s in range(3)),
              FlashModel("float-ops", float_ops), FlashModel("int8-edges", int8_edges),
              FlashModel("two-outputs", two_outputs), FlashModel("sparse-convs", sparse_convs),
              FlashModel("const-operands", const_operands),
              *(FlashModel(f"movement {kind}", functools.partial(movement_model, kind)) for kind in MOVEMENTS),
              *(FlashModel(f"upsample {kind}", functools.partial(upsample_model, kind)) for kind in UPSAMPLES)]
    models += [FlashModel(f"random {s}", random_net(s)[0]) for s in range(16)]
    for s in range(16, 40):
        build, patch = random_net(s, "middle" if s % 2 else "last")
        if patch is not None:
            models.append(FlashModel(f"random {s} patch {patch[0]}", build, patch))
    return models


def acceptance_models() -> list[FlashModel]:
    """The held-out set of tests/targets/test_flash_estimate.py (none of it is in the calibration set)."""
    models = [FlashModel("mnist-cnn r32", zoo("mnist-cnn", 1.0, 32)),
              FlashModel("vgg-small w0.35 r32", zoo("vgg-small", 0.35, 32)),
              FlashModel("resnet-small w0.35 r24", zoo("resnet-small", 0.35, 24)),
              FlashModel("mobilenetv2 w0.2 r48", zoo("mobilenetv2", 0.2, 48)),
              FlashModel("mnasnet w0.2 r48", zoo("mnasnet", 0.2, 48)),
              FlashModel("proxyless-mobile w0.2 r48 patch", zoo("proxyless-mobile", 0.2, 48), "auto"),
              FlashModel("searched s7", searched(7, 0.4, 28))]
    models += [FlashModel(f"random {s}", random_net(s)[0]) for s in (101, 102)]
    return models
