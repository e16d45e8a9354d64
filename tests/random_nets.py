"""Random int8 models for the code-generator tests, shared by the host (tests/codegen) and Cortex-M (tests/targets)
acceptance tests: `RandomNet` builds a random float graph from a seed, `quantized` / `inputs_for` make it int8 with
inputs, and `write_bundle` puts many generated projects into ONE compiled-model directory so that a single build (one
gcc or arm-none-eabi-gcc run, one QEMU run) executes all of them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import tflite

from kilobyte.export.tflite import _tensor_order, _Writer
from kilobyte.export.tflite_ops import TflOp, lower_graph
from kilobyte.ir import (
    Activation,
    AddAttrs,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    GeluAttrs,
    GraphBuilder,
    MeanAttrs,
    Node,
    Op,
    PadAttrs,
    PoolAttrs,
    QParams,
    ReshapeAttrs,
    ResizeAttrs,
    StridedSliceAttrs,
    Tensor,
    TileAttrs,
    TransposeAttrs,
    TransposeConvAttrs,
)


def quantized(graph, seed: int, n: int = 3, spread: float = 1.0, mean_as_pool: bool = False):
    """(int8 graph calibrated on n random images, one more random float image of the input shape). A MEAN stays the
    MEAN TFLite runs (kb_mean); with `mean_as_pool` it is first rewritten as the global average pool a full-image
    AvgPool2d gives (`as_global_pools`), so that kernel is exercised too."""
    from kilobyte.quant import quantize

    shape = graph.tensors[graph.inputs[0]].shape
    samples = np.random.default_rng(seed).normal(0.2, spread, (n + 1,) + shape[1:]).astype(np.float32)
    qgraph = quantize(as_global_pools(graph) if mean_as_pool else graph, samples[:n])
    return qgraph, samples[n:]


def as_global_pools(graph):
    """The float `graph` with every MEAN over (1, 2) of an NHWC tensor replaced by an AVG_POOL_2D over the whole
    image (and a RESHAPE when the MEAN drops the unit axes): the same values, computed by kb_avg_pool's rounding."""
    from kilobyte.ir import Node, Tensor

    nodes, tensors = [], dict(graph.tensors)
    for n in graph.nodes:
        x = graph.tensors[n.inputs[0]]
        if n.op is not Op.MEAN or len(x.shape) != 4 or sorted(n.attrs.axes) != [1, 2]:
            nodes.append(n)
            continue
        pool = PoolAttrs(tuple(x.shape[1:3]), (1, 1))
        if n.attrs.keepdims:
            nodes.append(Node(n.name, Op.AVG_POOL_2D, n.inputs, n.outputs, pool, n.origin))
            continue
        pooled = f"{n.name}_pool"
        tensors[pooled] = Tensor(pooled, (x.shape[0], 1, 1, x.shape[3]), x.dtype)
        nodes += [Node(pooled, Op.AVG_POOL_2D, n.inputs, (pooled,), pool, n.origin),
                  Node(n.name, Op.RESHAPE, (pooled,), n.outputs, ReshapeAttrs(graph.tensors[n.outputs[0]].shape),
                       n.origin)]
    return graph.replace(nodes=tuple(nodes), tensors=tensors).verify()


def inputs_for(qgraph, unseen: np.ndarray, seed: int) -> list[np.ndarray]:
    """An image quantised with the model's input qparams and uniformly random int8 values."""
    from kilobyte.quant import quantize_input

    shape = qgraph.tensors[qgraph.inputs[0]].shape
    noise = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
    return [quantize_input(qgraph, unseen).reshape(shape), noise]


class RandomNet:
    """A random float graph, block by block, from one seed (no hypothesis: the bundle needs fixed graphs)."""

    def __init__(self, seed: int):
        self.rng, self.b = np.random.default_rng(seed), GraphBuilder(f"random_{seed}")

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def act(self) -> Activation:
        return self.pick([Activation.NONE, Activation.RELU, Activation.RELU6])

    def params(self, w_shape, cout: int) -> dict:
        p = {"weight": self.rng.normal(0, self.pick([0.05, 0.3, 1.0]), w_shape)}
        if self.rng.random() < 0.7:
            p["bias"] = self.rng.normal(0, 0.5, cout)
        return p

    def pads(self, h: int, w: int, k: int, s: int, d: int, asym: bool) -> tuple[int, int, int, int]:
        """SAME, VALID or (asym) random per-side padding that still leaves an output pixel."""
        span = d * (k - 1) + 1
        mode = self.pick(["same", "valid"] + (["asym", "asym"] if asym else []))
        if mode == "valid" and span <= min(h, w):
            return (0, 0, 0, 0)
        if mode == "asym":
            t, b, left, r = (int(v) for v in self.rng.integers(0, k, 4))
            return t, max(b, span - h - t), left, max(r, span - w - left)
        same = [max((-(-n // s) - 1) * s + span - n, 0) for n in (h, w)]
        return same[0] // 2, same[0] - same[0] // 2, same[1] // 2, same[1] - same[1] // 2

    def conv(self, x, cout=None, k=None, stride=None):
        _, h, w, cin = self.b.shape(x)
        k, s = k or self.pick([1, 3, 5, 7]), stride or self.pick([1, 2])
        d = self.pick([1, 1, 2]) if k > 1 and s == 1 else 1
        cout = cout or int(self.rng.integers(1, 10))
        attrs = ConvAttrs((s, s), self.pads(h, w, k, s, d, True), (d, d), self.act())
        return self.b.node(Op.CONV_2D, [x], attrs, params=self.params((cout, k, k, cin), cout))

    def depthwise(self, x):
        _, h, w, c = self.b.shape(x)
        k, s = self.pick([3, 5, 7]), self.pick([1, 2])
        attrs = DepthwiseAttrs((s, s), self.pads(h, w, k, s, 1, True), (1, 1), 1, self.act())
        return self.b.node(Op.DEPTHWISE_CONV_2D, [x], attrs, params=self.params((1, k, k, c), c))

    def pool(self, x):
        _, h, w, _ = self.b.shape(x)
        k, s = self.pick([2, 3]), self.pick([1, 2])
        attrs = PoolAttrs((k, k), (s, s), self.pads(h, w, k, s, 1, False), self.act())
        return self.b.node(self.pick([Op.AVG_POOL_2D, Op.MAX_POOL_2D]), [x], attrs)

    def residual(self, x):
        y = self.conv(x, cout=self.b.shape(x)[3], k=self.pick([1, 3]), stride=1)
        if self.b.shape(y) != self.b.shape(x):  # VALID / asymmetric padding changed the size: no residual
            return y
        return self.b.node(Op.ADD, [x, y], AddAttrs(self.act()))

    def concat(self, x):
        a = self.conv(x, k=1, stride=1)
        other = self.pick(["conv", "self", "pad"])
        if other == "conv":
            other = self.conv(x, k=1, stride=1)
        elif other == "pad":
            other = self.b.node(Op.PAD, [x], PadAttrs(((0, 0), (0, 0), (0, 0), (1, 2))))
        else:
            other = x
        return self.b.node(Op.CONCAT, [a, other, a] if self.rng.random() < 0.5 else [a, other], ConcatAttrs(3))

    def head(self, x):
        kind = self.pick(["none", "mean", "flatten", "flatten"])
        if kind == "none":
            return x
        if kind == "mean":
            x = self.b.node(Op.MEAN, [x], MeanAttrs((1, 2)))
        else:
            x = self.b.node(Op.RESHAPE, [x], ReshapeAttrs((1, int(np.prod(self.b.shape(x))))))
        n_in, n_out = self.b.shape(x)[1], int(self.rng.integers(1, 8))
        y = self.b.node(Op.FULLY_CONNECTED, [x], FullyConnectedAttrs(self.act()),
                        params=self.params((n_out, n_in), n_out))
        return self.b.node(Op.SOFTMAX, [y]) if self.rng.random() < 0.3 else y


def random_graph(seed: int):
    net = RandomNet(seed)
    rng = net.rng
    x = net.b.input((1, int(rng.integers(5, 15)), int(rng.integers(5, 15)), int(rng.integers(1, 6))))
    for _ in range(int(rng.integers(2, 6))):
        block = net.pick(["conv", "conv", "depthwise", "pool", "residual", "concat", "pad"])
        if block == "pad":
            x = net.b.node(Op.PAD, [x], PadAttrs(((0, 0), (1, 0), (0, 2), (0, 0))))
        else:
            x = getattr(net, block)(x)
    return net.b.build([net.head(x)])


# -- MEAN as .tflite files have it ------------------------------------------------------------------------------------
def _int8_weighted(b: GraphBuilder, rng, op: Op, x: str, w_shape, attrs, gain: float) -> str:
    """An int8 CONV_2D / FULLY_CONNECTED node on `x` with random int8 weights, per-channel scales and an int32 bias;
    the output scale puts the accumulator's spread (about 5000 sqrt(fan-in) steps of s_in * s_w) at `gain` times
    the int8 range, with a random zero point."""
    s_in = float(b.tensors[x].qparams.scale[0])
    n_out, fan_in = w_shape[0], int(np.prod(w_shape[1:]))
    s_w = (2.0 ** rng.uniform(-9, -5, n_out)).astype(np.float32)
    bias_scale = (np.float32(s_in) * s_w).astype(np.float32)
    zeros = np.zeros(n_out, np.int64)
    k = len(b.nodes)
    w = b.const(f"w{k}", rng.integers(-127, 128, w_shape).astype(np.int8), QParams(s_w, zeros, 0))
    bias = b.const(f"b{k}", np.round(rng.normal(0, 3000 * np.sqrt(fan_in), n_out)).astype(np.int32),
                   QParams(bias_scale, zeros, 0))
    s_out = s_in * float(s_w.mean()) * 5000 * np.sqrt(fan_in) / (127 * gain)
    return b.node(op, [x, w, bias], attrs, dtype="int8",
                  qparams=QParams.per_tensor(s_out, int(rng.integers(-100, 100))))


def wide_head_model(seed: int = 0):
    """An int8 net too wide for STM32F412 per layer: 128x128x3 -> 3x3 conv to 16 channels (1, 128, 128, 16) = 256 kB
    -> two stride-2 3x3 convs -> mean -> 10 classes. Its per-layer arena (320 kB) is over the part's 256 kB SRAM; a
    patch-based first stage plans it in a few tens of kB (`kilobyte compile`'s fit hints)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("wide_head")
    x = b.input((1, 128, 128, 3), "int8", qparams=QParams.per_tensor(1 / 64, 0))
    x = _int8_weighted(b, rng, Op.CONV_2D, x, (16, 3, 3, 3), ConvAttrs(padding=(1, 1, 1, 1)), 2.0)
    for _ in range(2):  # (1, 64, 64, 16), (1, 32, 32, 16)
        x = _int8_weighted(b, rng, Op.CONV_2D, x, (16, 3, 3, 16), ConvAttrs(stride=(2, 2), padding=(0, 1, 0, 1)), 2.0)
    x = b.node(Op.MEAN, [x], MeanAttrs((1, 2), False), dtype="int8", qparams=b.tensors[x].qparams)
    return b.build([_int8_weighted(b, rng, Op.FULLY_CONNECTED, x, (10, 16), FullyConnectedAttrs(), 0.5)])


def mean_model(seed: int, hw=(7, 7), cin: int = 3, cout: int = 20, axes=(1, 2), keepdims: bool = False,
               head: bool = True, branches: int = 1):
    """An int8 graph with MEAN nodes as .tflite files have them (built int8 directly, with chosen params): per branch a
    3x3 CONV_2D (ReLU6) and a MEAN with its own output scale and zero point; two branches are concatenated on the
    last axis, so the MEANs write straight into their slices; with `head`, a RESHAPE to (1, n) when needed and a
    FULLY_CONNECTED. Returns (graph, two int8 inputs)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"mean_{seed}")
    x = b.input((1, *hw, cin), "int8", qparams=QParams.per_tensor(2.0 ** rng.uniform(-6, -2),
                                                                   int(rng.integers(-128, 128))))
    q_mean = None
    means = []
    for _ in range(branches):
        y = _int8_weighted(b, rng, Op.CONV_2D, x, (cout, 3, 3, cin), ConvAttrs(padding=(1, 1, 1, 1),
                                                                                   activation=Activation.RELU6), 4.0)
        s_y = float(b.tensors[y].qparams.scale[0])
        # a mean of ReLU6 outputs is >= 0 and spreads less than they do: a finer scale, a zero point near -128
        q_mean = q_mean or QParams.per_tensor(s_y * 2.0 ** rng.uniform(-1.5, 0.5), int(rng.integers(-128, -40)))
        means.append(b.node(Op.MEAN, [y], MeanAttrs(tuple(axes), keepdims), dtype="int8", qparams=q_mean))
    if branches > 1:
        y = b.node(Op.CONCAT, means, ConcatAttrs(len(b.shape(means[0])) - 1), dtype="int8", qparams=q_mean)
    else:
        y = means[0]
    if head:
        if len(b.shape(y)) != 2:
            y = b.node(Op.RESHAPE, [y], ReshapeAttrs((1, int(np.prod(b.shape(y))))), dtype="int8", qparams=q_mean)
        y = _int8_weighted(b, rng, Op.FULLY_CONNECTED, y, (10, b.shape(y)[1]), FullyConnectedAttrs(), 0.25)
    graph = b.build([y])
    shape = (1, *hw, cin)
    return graph, [rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2)]


# -- data movement as .tflite files have it (TRANSPOSE, STRIDED_SLICE, TILE, REDUCE_MAX) -------------------------------
_SLICE = StridedSliceAttrs
MOVEMENTS = {  # kind -> (input shape, op, attrs, what follows: "conv", "fc" or "concat")
    "transpose-nchw-head": ((1, 3, 9, 7), Op.TRANSPOSE, TransposeAttrs((0, 2, 3, 1)), "conv"),
    "transpose-hw": ((1, 6, 9, 3), Op.TRANSPOSE, TransposeAttrs((0, 2, 1, 3)), "conv"),
    "transpose-to-nchw": ((1, 5, 6, 3), Op.TRANSPOSE, TransposeAttrs((0, 3, 1, 2)), "conv"),
    "transpose-2d": ((1, 5, 6, 3), Op.TRANSPOSE, TransposeAttrs((1, 0)), "fc"),
    "slice-channels": ((1, 7, 6, 3), Op.STRIDED_SLICE, _SLICE((0, 0, 0, 2), (1, 7, 6, 11), (1, 1, 1, 2)), "conv"),
    "slice-reverse": ((1, 9, 8, 3), Op.STRIDED_SLICE, _SLICE((0, 8, 7, 0), (1, 0, -1, 12), (1, -3, -1, 1)), "conv"),
    "slice-rows": ((1, 9, 8, 3), Op.STRIDED_SLICE, _SLICE((0, 1, 0, 0), (1, 8, 8, 12), (1, 2, 1, 1)), "concat"),
    "tile": ((1, 4, 5, 3), Op.TILE, TileAttrs((1, 2, 1, 3)), "conv"),
    "tile-concat": ((1, 4, 5, 3), Op.TILE, TileAttrs((1, 1, 1, 2)), "concat"),
    "tile-hwc": ((1, 2, 3, 3), Op.TILE, TileAttrs((1, 2, 2, 2)), "conv"),  # six loop axes: split into four calls
    "reduce-max-hw": ((1, 7, 6, 3), Op.REDUCE_MAX, MeanAttrs((1, 2), False), "fc"),
    "reduce-max-keep": ((1, 7, 6, 3), Op.REDUCE_MAX, MeanAttrs((2, 1), True), "concat"),
    "reduce-max-c": ((1, 7, 6, 3), Op.REDUCE_MAX, MeanAttrs((-1,), True), "conv"),
    "reduce-max-hc": ((1, 7, 6, 3), Op.REDUCE_MAX, MeanAttrs((1, 3), True), "conv"),
}


def movement_model(kind: str, seed: int = 0):
    """An int8 graph around one data-movement op (`MOVEMENTS[kind]`): a 3x3 conv (12 channels; none when the op reads
    the graph input, as a PyTorch export's NCHW -> NHWC transpose does), the op (sharing its input's quantisation),
    then a 3x3 conv, or a FULLY_CONNECTED after a flattening RESHAPE, or a last-axis CONCAT with a partner of the
    same quantisation (`_concat_partner`) and a 3x3 conv: the op then writes straight into its slice of the concat."""
    shape, op, attrs, after = MOVEMENTS[kind]
    rng = np.random.default_rng(seed)
    b = GraphBuilder(kind.replace("-", "_"))
    x = b.input(shape, "int8", qparams=QParams.per_tensor(2.0 ** rng.uniform(-6, -3), int(rng.integers(-50, 50))))
    if kind != "transpose-nchw-head":
        x = _int8_weighted(b, rng, Op.CONV_2D, x, (12, 3, 3, shape[-1]), ConvAttrs(padding=(1, 1, 1, 1)), 2.0)
    if kind == "transpose-2d":  # a 2-D matrix (H*W, C) transposed
        x = b.node(Op.RESHAPE, [x], ReshapeAttrs((int(np.prod(b.shape(x)[:-1])), 12)), dtype="int8",
                   qparams=b.tensors[x].qparams)
    q = b.tensors[x].qparams
    y = b.node(op, [x], attrs, dtype="int8", qparams=q)
    if after == "fc":
        flat = (1, int(np.prod(b.shape(y))))
        y = b.node(Op.RESHAPE, [y], ReshapeAttrs(flat), dtype="int8", qparams=q)
        return b.build([_int8_weighted(b, rng, Op.FULLY_CONNECTED, y, (10, flat[1]), FullyConnectedAttrs(), 0.5)])
    if after == "concat":
        y = b.node(Op.CONCAT, [y, _concat_partner(b, kind, x)], ConcatAttrs(3), dtype="int8", qparams=q)
    y = _int8_weighted(b, rng, Op.CONV_2D, y, (6, 3, 3, b.shape(y)[-1]), ConvAttrs(padding=(1, 1, 1, 1)), 2.0)
    return b.build([y])


def _concat_partner(b: GraphBuilder, kind: str, x: str) -> str:
    """The second CONCAT input: the other rows (slice-rows), the tiled tensor itself (tile-concat), the mean of what
    the maximum was taken over (reduce-max-keep)."""
    q = b.tensors[x].qparams
    if kind == "slice-rows":
        return b.node(Op.STRIDED_SLICE, [x], _SLICE((0, 0, 0, 0), (1, 8, 8, 12), (1, 2, 1, 1)), dtype="int8",
                      qparams=q)
    if kind == "reduce-max-keep":
        return b.node(Op.MEAN, [x], MeanAttrs((1, 2), True), dtype="int8", qparams=q)
    return x


# -- upsampling as decoders and segmentation heads have it (RESIZE_*, TRANSPOSE_CONV) and GELU ----------------------
_RZ, _TC = ResizeAttrs, TransposeConvAttrs
UPSAMPLES = {  # kind -> (input shape, op, attrs, what follows: "conv" or "concat")
    "nearest-2x": ((1, 4, 5, 3), Op.RESIZE_NEAREST_NEIGHBOR, _RZ((8, 10)), "conv"),
    "nearest-half-pixel": ((1, 5, 3, 3), Op.RESIZE_NEAREST_NEIGHBOR, _RZ((11, 7), half_pixel_centers=True), "conv"),
    "nearest-align": ((1, 5, 4, 3), Op.RESIZE_NEAREST_NEIGHBOR, _RZ((9, 7), align_corners=True), "concat"),
    "nearest-down": ((1, 9, 8, 3), Op.RESIZE_NEAREST_NEIGHBOR, _RZ((4, 5)), "conv"),
    "bilinear-half-pixel": ((1, 4, 5, 3), Op.RESIZE_BILINEAR, _RZ((8, 10), half_pixel_centers=True), "conv"),
    "bilinear-align": ((1, 4, 6, 3), Op.RESIZE_BILINEAR, _RZ((7, 11), align_corners=True), "conv"),
    "bilinear-plain": ((1, 5, 3, 3), Op.RESIZE_BILINEAR, _RZ((9, 8)), "concat"),
    "tconv-s2-same": ((1, 4, 5, 3), Op.TRANSPOSE_CONV, _TC((2, 2), (0, 1, 0, 1)), "conv"),  # k3: SAME's crop
    "tconv-s2-k2": ((1, 4, 5, 3), Op.TRANSPOSE_CONV, _TC((2, 2)), "conv"),  # VALID, k2: no overlap
    "tconv-torch": ((1, 4, 4, 3), Op.TRANSPOSE_CONV, _TC((2, 2), (1, 0, 1, 0)), "conv"),  # k3 p1 output_padding 1
    "tconv-s1-relu": ((1, 5, 4, 3), Op.TRANSPOSE_CONV, _TC((1, 1), (1, 1, 1, 1), Activation.RELU), "conv"),
    "tconv-s3-wide": ((1, 3, 4, 3), Op.TRANSPOSE_CONV, _TC((3, 2), (0, 0, 0, 0)), "conv"),
    "gelu": ((1, 5, 6, 3), Op.GELU, GeluAttrs(), "conv"),
    "gelu-tanh": ((1, 5, 6, 3), Op.GELU, GeluAttrs(approximate=True), "concat"),
}
TCONV_KERNELS = {"tconv-s2-same": 3, "tconv-s2-k2": 2, "tconv-torch": 3, "tconv-s1-relu": 3, "tconv-s3-wide": 4}


def upsample_model(kind: str, seed: int = 0):
    """An int8 graph around one op of `UPSAMPLES[kind]`: a 3x3 conv (12 channels), the op, then a 3x3 conv or a
    last-axis CONCAT with a resized copy of the conv's output (same params) and a 3x3 conv. A resize shares its
    input's quantisation (TFLite Micro never rescales); a TRANSPOSE_CONV has random int8 per-channel weights and a
    bias (8 output channels); a GELU has its own output scale and zero point."""
    shape, op, attrs, after = UPSAMPLES[kind]
    rng = np.random.default_rng(seed)
    b = GraphBuilder(kind.replace("-", "_"))
    x = b.input(shape, "int8", qparams=QParams.per_tensor(2.0 ** rng.uniform(-6, -3), int(rng.integers(-50, 50))))
    x = _int8_weighted(b, rng, Op.CONV_2D, x, (12, 3, 3, shape[-1]), ConvAttrs(padding=(1, 1, 1, 1)), 2.0)
    q = b.tensors[x].qparams
    if op is Op.TRANSPOSE_CONV:
        k = TCONV_KERNELS[kind]
        y = _int8_weighted(b, rng, op, x, (8, k, k if kind != "tconv-s3-wide" else 3, 12), attrs, 1.5)
    elif op is Op.GELU:
        s = float(q.scale[0]) * 2.0 ** rng.uniform(-1, 0.5)
        y = b.node(op, [x], attrs, dtype="int8", qparams=QParams.per_tensor(s, int(rng.integers(-110, -60))))
    else:
        y = b.node(op, [x], attrs, dtype="int8", qparams=q)
    if after == "concat":
        partner = b.node(Op.RESIZE_NEAREST_NEIGHBOR, [x], ResizeAttrs(b.shape(y)[1:3]), dtype="int8", qparams=q) \
            if b.shape(y)[1:3] != b.shape(x)[1:3] else x
        if b.tensors[y].qparams != q:
            partner = b.node(Op.GELU, [partner], GeluAttrs(), dtype="int8", qparams=b.tensors[y].qparams)
        y = b.node(Op.CONCAT, [y, partner], ConcatAttrs(3), dtype="int8", qparams=b.tensors[y].qparams)
    y = _int8_weighted(b, rng, Op.CONV_2D, y, (6, 3, 3, b.shape(y)[-1]), ConvAttrs(padding=(1, 1, 1, 1)), 2.0)
    return b.build([y])


_B, _T = tflite.BuiltinOperator, tflite.TensorType


# -- shape arithmetic as Keras / PyTorch exports write it (constant-folded at import) ---------------------------------
SHAPE_CHAIN_INPUT = (1, 5, 6, 3)
FEATURES = 5 * 6 * 8


def shape_chain_net():
    """An int8 conv -> RESHAPE (flatten) -> FULLY_CONNECTED graph, whose RESHAPE `with_shape_chain` rewires."""
    rng = np.random.default_rng(11)
    b = GraphBuilder("flatten")
    x = b.input(SHAPE_CHAIN_INPUT, "int8", "x", QParams.per_tensor(0.03, 4))
    y = _int8_weighted(b, rng, Op.CONV_2D, x, (8, 3, 3, 3), ConvAttrs(padding=(1, 1, 1, 1)), 2.0)
    y = b.node(Op.RESHAPE, [y], ReshapeAttrs((1, FEATURES)), dtype="int8", qparams=b.tensors[y].qparams)
    return b.build([_int8_weighted(b, rng, Op.FULLY_CONNECTED, y, (10, FEATURES), FullyConnectedAttrs(), 0.5)])


def i32(name: str, values, shape=None) -> Tensor:
    """An int32 constant (names start with k_ where they could meet the graph's w0, b0, ...)."""
    data = np.array(values, np.int32).reshape(shape if shape is not None else np.shape(values))
    return Tensor(name, data.shape, "int32", data)


def act(name: str, shape, dtype="int32") -> Tensor:
    """A computed (non-constant) tensor."""
    return Tensor(name, tuple(shape), dtype)


def with_shape_chain(chain_ops, chain_tensors) -> bytes:
    """shape_chain_net as a file whose RESHAPE takes its new shape from tensor "newshape", computed by `chain_ops`
    (which may read the conv output "conv_2d_0")."""
    graph = shape_chain_net()
    ops, extra = lower_graph(graph)
    k = next(i for i, op in enumerate(ops) if op.code == _B.RESHAPE)
    ops[k] = TflOp(_B.RESHAPE, (ops[k].inputs[0], "newshape"), ops[k].outputs, {})
    tensors = [t for t in _tensor_order(graph, ops[:k] + ops[k + 1:], extra) if t.name != "reshape_0.shape"]
    writer_graph = SimpleNamespace(name="chain", nodes=(), inputs=graph.inputs, outputs=graph.outputs)
    return _Writer(writer_graph, tensors + chain_tensors, ops[:k] + list(chain_ops) + ops[k:]).serialise()


def keras_chain() -> tuple[list, list]:
    """What Keras writes for Flatten: the batch size out of SHAPE, packed with -1."""
    ops = [TflOp(_B.SHAPE, ("conv_2d_0",), ("shape",), {"OutType": _T.INT32}),
           TflOp(_B.STRIDED_SLICE, ("shape", "k_b0", "k_b1", "k_one"), ("batch",), {"ShrinkAxisMask": 1}),
           TflOp(_B.PACK, ("batch", "minus1"), ("newshape",), {"ValuesCount": 2, "Axis": 0})]
    tensors = [act("shape", (4,)), i32("k_b0", [0]), i32("k_b1", [1]), i32("k_one", [1]), act("batch", ()),
               i32("minus1", -1), act("newshape", (2,))]
    return ops, tensors


def gather_chain() -> tuple[list, list]:
    """The feature count as H * W * C from GATHERed shape entries, concatenated after the batch size."""
    ops = [TflOp(_B.SHAPE, ("conv_2d_0",), ("shape",), {"OutType": _T.INT32}),
           *(TflOp(_B.GATHER, ("shape", f"i{k}"), (f"d{k}",), {"Axis": 0}) for k in range(4)),
           TflOp(_B.MUL, ("d1", "d2"), ("hw",), {}), TflOp(_B.MUL, ("hw", "d3"), ("hwc",), {}),
           TflOp(_B.CONCATENATION, ("d0", "hwc"), ("newshape",), {"Axis": 0})]
    tensors = [act("shape", (4,)), *(i32(f"i{k}", [k]) for k in range(4)), *(act(f"d{k}", (1,)) for k in range(4)),
               act("hw", (1,)), act("hwc", (1,)), act("newshape", (2,))]
    return ops, tensors


def valid_cuts(graph) -> list[tuple[int, tuple[str, ...]]]:
    """(n, stage outputs) of every prefix of the graph's node order that can be a patch stage."""
    from kilobyte.schedule.patch import PatchStageError, stage_nodes

    order = [n.name for n in graph.nodes]
    cuts = []
    for n in range(1, len(order) + 1):
        try:
            cuts.append((n, stage_nodes(graph, order, n)[1]))
        except PatchStageError:
            continue
    return cuts


def stage_side(graph, outputs) -> int:
    """The smallest height or width among a stage's outputs: no patch grid may be finer."""
    return min(min(graph.tensors[t].shape[1:3]) for t in outputs)


def compile_bundle(root: Path, models) -> tuple[list, list[list[np.ndarray]], Path, list]:
    """Compile `models` — (name, int8 graph, plan options, its test inputs) — each into root/<name>, and bundle them
    (`write_bundle`) into root/bundle: (compile results, inputs per model, bundle dir, slices)."""
    from kilobyte.codegen import compile_graph

    results, inputs = [], []
    for name, graph, options, xs in models:
        results.append(compile_graph(graph, root / name, options, model_name=name))
        inputs.append(xs)
    return results, inputs, root / "bundle", write_bundle(root / "bundle", [r.out_dir for r in results])


def pack_inputs(inputs: list[list[np.ndarray]], slices, i: int, size: int) -> np.ndarray:
    """The bundle's packed input: input `i` of every model in its slice (`write_bundle`'s offsets), `size` bytes."""
    x = np.zeros(size, np.int8)
    for (off, n, _, _), xs in zip(slices, inputs):
        x[off:off + n] = xs[i].reshape(-1)
    return x


def _align(n: int, to: int = 16) -> int:
    return -(-n // to) * to


def write_bundle(root: Path, projects: list[Path]) -> list[tuple[int, int, int, int]]:
    """One compiled-model directory (root/src, root/host, root/kilobyte.json) whose kb_invoke runs every project on
    its slice of one packed input and output.

    Each project's model.c is copied as model_<k>.c with `kb_invoke`, `kb_invoke_float`, `kb_arena` and
    `kb_arena_guarded` renamed by #defines, and its own model.h as model_<k>.h; the runtime files are the same for
    every project. Built with KB_ARENA_GUARD (the sanitizer build), the bundle's kb_invoke fills each model's guard
    bytes before its call and aborts naming the model if one changed. The manifest has the packed (flat) input and
    output sizes, so `HostModel(root)` and `build_executable(root)` work as for one model. Returns per project (input
    offset, input bytes, output offset, output bytes); offsets are 16-byte aligned like fw_input.
    """
    from kilobyte.formats.project import manifest

    src = root / "src"
    src.mkdir(parents=True)
    slices, calls, protos, n_in, n_out = [], [], [], 0, 0
    for k, project in enumerate(projects):
        for f in (project / "src").iterdir():
            if f.is_file() and f.name not in ("model.c", "model.h"):  # not src/arm/: the DSP files Arm builds use
                assert not (src / f.name).exists() or (src / f.name).read_text() == f.read_text()
                shutil.copyfile(f, src / f.name)
        shutil.copyfile(project / "src" / "model.h", src / f"model_{k}.h")
        text = (project / "src" / "model.c").read_text()
        assert text.count('#include "model.h"') == 1
        rename = (f"#define kb_arena kb_arena_{k}\n#define kb_arena_guarded kb_arena_guarded_{k}\n"
                  f"#define kb_invoke kb_invoke_{k}\n#define kb_invoke_float kb_invoke_float_{k}\n"
                  f'#include "model_{k}.h"')
        (src / f"model_{k}.c").write_text(text.replace('#include "model.h"', rename))
        m = manifest(project)
        size_in, size_out = int(np.prod(m["input"]["shape"])), int(np.prod(m["output"]["shape"]))
        slices.append((n_in, size_in, n_out, size_out))
        guarded = f"KB_ARENA_GUARD + {m['arena_bytes']} + KB_ARENA_GUARD"
        protos.append(f"void kb_invoke_{k}(const int8_t *input, int8_t *output);\n"
                      f"#if KB_ARENA_GUARD\nextern int8_t kb_arena_guarded_{k}[{guarded}];\n#endif")
        calls.append(f"    GUARD_FILL({k});\n    kb_invoke_{k}(input + {n_in}, output + {n_out});\n"
                     f"    GUARD_CHECK({k}, {m['arena_bytes']});")
        n_in, n_out = _align(n_in + size_in), _align(n_out + size_out)
    _write_bundle_top(root, n_in, n_out, protos, calls)
    shutil.copytree(projects[0] / "host", root / "host", ignore=shutil.ignore_patterns("*.so", "model", "model_*"))
    return slices


BUNDLE_GUARDS = r"""#if KB_ARENA_GUARD
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int8_t kb_arena_guarded[KB_ARENA_GUARD + KB_ARENA_BYTES + KB_ARENA_GUARD];
#define GUARD_FILL(k) memset(kb_arena_guarded_##k, 0x5A, sizeof kb_arena_guarded_##k)
#define GUARD_CHECK(k, n) do { \
    for (int i = 0; i < KB_ARENA_GUARD; i++) \
        if (kb_arena_guarded_##k[i] != 0x5A || kb_arena_guarded_##k[KB_ARENA_GUARD + (n) + i] != 0x5A) { \
            fprintf(stderr, "model %d wrote outside its arena\n", k); abort(); } } while (0)
#else
int8_t kb_arena[KB_ARENA_BYTES];
#define GUARD_FILL(k) (void)0
#define GUARD_CHECK(k, n) (void)0
#endif
"""


def _write_bundle_top(root: Path, n_in: int, n_out: int, protos: list[str], calls: list[str]) -> None:
    src = root / "src"
    (src / "model.h").write_text(
        f"#include <stdint.h>\n#define KB_ARENA_BYTES 16\n#define KB_INPUT_BYTES {n_in}\n"
        f"#define KB_OUTPUT_BYTES {n_out}\n#if KB_ARENA_GUARD\n"
        "extern int8_t kb_arena_guarded[KB_ARENA_GUARD + KB_ARENA_BYTES + KB_ARENA_GUARD];\n#else\n"
        "extern int8_t kb_arena[KB_ARENA_BYTES];\n#endif\nvoid kb_invoke(const int8_t *input, int8_t *output);\n")
    (src / "model.c").write_text('#include "model.h"\n' + BUNDLE_GUARDS + "\n".join(protos)
                                 + "\nvoid kb_invoke(const int8_t *input, int8_t *output)\n{\n"
                                 + "\n".join(calls) + "\n}\n")
    io = {"scale": 1.0, "zero_point": 0, "dtype": "int8"}
    (root / "kilobyte.json").write_text(json.dumps({
        "model": "bundle", "arena_bytes": 16, "input": {"name": "input", "shape": [n_in], **io},
        "output": {"name": "output", "shape": [n_out], **io}}))


def float_edges(q, head: bool, tail: bool):
    """int8 graph `q` as the TFLite converter writes an "int8 model with float interface": a float input and a
    QUANTIZE before the int8 core (`head`), a DEQUANTIZE to a float output after it (`tail`)."""
    tensors, nodes, inputs, outputs = dict(q.tensors), list(q.nodes), q.inputs, q.outputs
    if head:
        x = q.inputs[0]
        tensors["x_float"] = Tensor("x_float", q.tensors[x].shape, "float32", None, None)
        nodes.insert(0, Node(x, Op.QUANTIZE, ("x_float",), (x,), None))
        inputs = ("x_float",)
    if tail:
        y = q.outputs[0]
        tensors["y_float"] = Tensor("y_float", q.tensors[y].shape, "float32", None, None)
        nodes.append(Node("y_float", Op.DEQUANTIZE, (y,), ("y_float",), None))
        outputs = ("y_float",)
    return dataclasses.replace(q, tensors=tensors, nodes=tuple(nodes), inputs=inputs, outputs=outputs).verify()


def with_edges(q, inp: str, outs: list[str]):
    """int8 graph `q` with the edges a converter writes, per kind: the input "int8" (as it is), "uint8" (a uint8
    input, zero point +128 and a scale 1.37 times the int8 one, then a QUANTIZE to the core: the general
    requantisation) or "float" (a float input and a QUANTIZE); each of its outputs "int8", "uint8" (a QUANTIZE to
    uint8, zero point +128), "float" (a DEQUANTIZE) or "uint8>float" (the uint8 one, then a DEQUANTIZE)."""
    assert len(outs) == len(q.outputs)
    tensors, nodes = dict(q.tensors), list(q.nodes)
    x = q.inputs[0]
    qx = q.tensors[x].qparams
    inputs = (x,)
    if inp != "int8":
        dtype = "uint8" if inp == "uint8" else "float32"
        params = QParams((qx.scale * 1.37).astype(np.float32), qx.zero_point + 128) if inp == "uint8" else None
        tensors["x_file"] = Tensor("x_file", q.tensors[x].shape, dtype, None, params)
        nodes.insert(0, Node(x, Op.QUANTIZE, ("x_file",), (x,), None))
        inputs = ("x_file",)
    outputs = []
    for k, (y, kind) in enumerate(zip(q.outputs, outs)):
        if kind == "int8":
            outputs.append(y)
            continue
        qy = q.tensors[y].qparams
        if kind.startswith("uint8"):
            tensors[f"y{k}_u8"] = Tensor(f"y{k}_u8", q.tensors[y].shape, "uint8", None,
                                         QParams(qy.scale, qy.zero_point + 128))
            nodes.append(Node(f"y{k}_u8", Op.QUANTIZE, (y,), (f"y{k}_u8",), None))
            y = f"y{k}_u8"
        if kind.endswith("float"):
            tensors[f"y{k}_f"] = Tensor(f"y{k}_f", tensors[y].shape, "float32", None, None)
            nodes.append(Node(f"y{k}_f", Op.DEQUANTIZE, (y,), (f"y{k}_f",), None))
            y = f"y{k}_f"
        outputs.append(y)
    return dataclasses.replace(q, tensors=tensors, nodes=tuple(nodes), inputs=inputs, outputs=tuple(outputs)).verify()


def heads_graph(n_heads: int, seed: int = 0):
    """A small float backbone (12x12x3) with `n_heads` outputs of different shapes, as a detector's: class scores
    (1x6x6x3), box offsets (1x6x6x4), a pooled feature (1x3x3x8)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"heads{n_heads}")

    def conv(x, cout, k=3, s=1):
        w = rng.normal(size=(cout, k, k, b.shape(x)[3])).astype(np.float32) / k
        return b.node(Op.CONV_2D, [x], ConvAttrs((s, s), (k // 2,) * 4), params={"weight": w})

    f = conv(conv(b.input((1, 12, 12, 3)), 8, s=2), 8)
    heads = [conv(f, 3, k=1), conv(f, 4), b.node(Op.AVG_POOL_2D, [f], PoolAttrs((2, 2), (2, 2)))]
    return b.build(heads[:n_heads])
