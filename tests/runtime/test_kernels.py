"""Runtime stage tests: every C kernel of kilobyte/runtime/c against the numpy int8 reference, bit for bit.

Each case is one node of an int8 graph built with `GraphBuilder` (random int8 weights with per-channel scales,
int32 bias at scale s_in·s_w, random activation scales / zero points, a fused activation); the expected output is
`eval_node_int8`, and the kernel parameters come from the same `requant_params` / `add_node_params` the code
generator uses. Buffers sit between guard bytes, and slice outputs between sentinel channels, that must survive the
call. test_build.py reruns this file in a subprocess against an ASan/UBSan build of the kernels.
"""

import ctypes
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kilobyte.runtime as rt
from kilobyte import ir
from kilobyte.codegen.layers import mean_fields
from kilobyte.errors import UnsupportedOpError
from kilobyte.interp.int8_ref import eval_node_int8
from kilobyte.ir import Activation, GraphBuilder, Op, QParams
from kilobyte.ops import arith
from kilobyte.ops.node_params import add_node_params, requant_params

SANITIZE = os.environ.get("KB_RUNTIME_SANITIZE") == "1"  # set by test_build.py's sanitizer run
EXAMPLES = settings(max_examples=8 if SANITIZE else 40)
GUARD, SENTINEL = 32, 0x5A
I8, I32 = ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int32)


# -- buffers -----------------------------------------------------------------------------------------------------------
class Buf:
    """n int8 bytes between guard bytes; untouched bytes hold SENTINEL unless `fill` is given."""

    def __init__(self, n: int, fill=None):
        self.n = n
        self.raw = np.full(n + 2 * GUARD, SENTINEL, np.int8)
        self.body = self.raw[GUARD:GUARD + n]
        if fill is not None:
            self.body[:] = np.asarray(fill, np.int8).reshape(-1)

    def ptr(self, offset: int = 0):
        return ctypes.cast(self.raw.ctypes.data + GUARD + offset, I8)

    def check(self):
        assert (self.raw[:GUARD] == SENTINEL).all() and (self.raw[GUARD + self.n:] == SENTINEL).all(), \
            "kernel wrote outside its buffer"


def pixels_with_stride(x, cstride: int, rng) -> np.ndarray:
    """(..., c) activations -> (pixels, cstride) bytes: x's channels first in each pixel, random bytes after."""
    x = x.reshape(-1, x.shape[-1])
    out = rng.integers(-128, 128, (x.shape[0], cstride)).astype(np.int8)
    out[:, :x.shape[1]] = x
    return out


def read_slice(buf: Buf, pixels: int, cstride: int, c0: int, c: int) -> np.ndarray:
    """The (pixels, c) slice at channel c0 of a (pixels, cstride) output; every other byte must be untouched."""
    buf.check()
    grid = buf.body[:pixels * cstride].reshape(pixels, cstride)
    rest = np.delete(grid, np.s_[c0:c0 + c], axis=1)
    assert (rest == SENTINEL).all() and (buf.body[pixels * cstride:] == SENTINEL).all(), "wrote outside its slice"
    return grid[:, c0:c0 + c]


# -- graphs ------------------------------------------------------------------------------------------------------------
def per_tensor(scale, zp) -> QParams:
    return QParams.per_tensor(float(scale), int(zp))


def weighted_graph(op, x_shape, w, bias, attrs, s_in, z_in, s_w, s_out, z_out):
    """A one-node int8 CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED graph with per-channel (or per-tensor) weights."""
    b = GraphBuilder()
    x = b.input(x_shape, "int8", qparams=per_tensor(s_in, z_in))
    s_w = np.asarray(s_w, np.float32)
    axis = (3 if op is Op.DEPTHWISE_CONV_2D else 0) if s_w.size > 1 else None
    wq = QParams(s_w, np.zeros(s_w.size, np.int64), axis)
    bq = QParams((np.float32(s_in) * s_w).astype(np.float32), np.zeros(s_w.size, np.int64), 0 if axis is not None
                 else None)
    y = b.node(op, [x, b.const("w", w, wq), b.const("b", bias, bq)], attrs, dtype="int8",
               qparams=per_tensor(s_out, z_out))
    return b.build([y])


def random_weighted(rng, op, x_shape, w_shape, attrs, per_channel=True, big_bias=False):
    """Random weights, bias, scales and zero points for a weighted node; returns (graph, x)."""
    n_out = w_shape[3] if op is Op.DEPTHWISE_CONV_2D else w_shape[0]
    fan_in = int(np.prod(w_shape)) // n_out
    w = rng.integers(-127, 128, w_shape).astype(np.int8)
    s_in = 2.0 ** rng.uniform(-8, 0)
    s_w = 2.0 ** rng.uniform(-9, -4, n_out if per_channel else 1)
    # accumulators have a std of about 7000·sqrt(fan_in): outputs range from saturated to a few steps wide,
    # and some multipliers exceed 1 (a positive shift)
    s_out = s_in * float(s_w.mean()) * math.sqrt(fan_in) * 2.0 ** rng.uniform(-2, 12)
    if big_bias:
        bias = rng.integers(-2**31, 2**31, n_out)
    else:
        bias = np.round(rng.normal(0, 6000 * math.sqrt(fan_in), n_out))
    zi, zo = (int(v) for v in rng.integers(-128, 128, 2))
    g = weighted_graph(op, x_shape, w, bias.astype(np.int32), attrs, s_in, zi, s_w, s_out, zo)
    return g, rng.integers(-128, 128, x_shape).astype(np.int8)


def expected(g, x_args):
    node = g.nodes[0]
    consts = [g.tensors[t].data for t in node.inputs[len(x_args):]]
    return eval_node_int8(g, node, [*x_args, *consts])


def conv_params(g, in_cstride=None, out_cstride=None) -> rt.ConvParams:
    """kb_conv_params of a CONV_2D / DEPTHWISE_CONV_2D / pool node (what the code generator emits)."""
    node, a = g.nodes[0], g.nodes[0].attrs
    _, h, w, c = g.tensors[node.inputs[0]].shape
    _, ho, wo, co = g.tensors[node.outputs[0]].shape
    if node.op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        (kh, kw), zi, zo, dil = a.kernel, 0, 0, (1, 1)
    else:
        p = requant_params(g, node)
        kh, kw = g.tensors[node.inputs[1]].shape[1:3]
        zi, zo, dil = p.input_zp, p.output_zp, a.dilation
    q = g.tensors[node.outputs[0]].qparams
    lo, hi = arith.activation_range(a.activation, q.scale[0], q.zero_point[0])
    return rt.ConvParams(h, w, c, in_cstride or c, ho, wo, co, out_cstride or co, kh, kw, *a.stride, *dil,
                         *a.padding, -zi, zo, lo, hi, w, wo)


def weight_args(g) -> list:
    """ctypes pointers to the weights, bias, multipliers and shifts of a weighted node (`data_as` keeps the arrays
    alive); a per-tensor FC multiplier arrives broadcast to one entry per output, as codegen emits it."""
    node = g.nodes[0]
    p = requant_params(g, node)
    w = np.ascontiguousarray(g.tensors[node.inputs[1]].data, np.int8)
    rest = [np.ascontiguousarray(a, np.int32) for a in (g.tensors[node.inputs[2]].data, p.multiplier, p.shift)]
    return [w.ctypes.data_as(I8), *(a.ctypes.data_as(I32) for a in rest)]


# -- CONV_2D -----------------------------------------------------------------------------------------------------------
@st.composite
def window_cases(draw, ks=(1, 3, 5, 7), dilation=True, channels=True):
    """Window geometry: kernel, stride 1/2, dilation, asymmetric padding (< kernel), non-square input."""
    kh = draw(st.sampled_from(ks))
    kw = draw(st.sampled_from(ks)) if draw(st.booleans()) else kh
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation and draw(st.booleans()) else (1, 1)
    pad = (draw(st.integers(0, kh - 1)), draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)),
           draw(st.integers(0, kw - 1)))
    h_min = max(1, dil[0] * (kh - 1) + 1 - pad[0] - pad[1])
    w_min = max(1, dil[1] * (kw - 1) + 1 - pad[2] - pad[3])
    hw = (draw(st.integers(h_min, h_min + 7)), draw(st.integers(w_min, w_min + 7)))
    c = (draw(st.integers(1, 13)), draw(st.integers(1, 13))) if channels else None
    return dict(k=(kh, kw), stride=stride, dil=dil, pad=pad, hw=hw, c=c)


def slice_layout(draw, c_in, c_out):
    """(in_cstride, out_cstride, c0): a strided input and an output written into a channel slice, or dense."""
    if not draw(st.booleans()):
        return c_in, c_out, 0
    extra_in, c0, extra_out = draw(st.integers(0, 3)), draw(st.integers(0, 3)), draw(st.integers(0, 3))
    return c_in + extra_in, c0 + c_out + extra_out, c0


def conv_variants(k, stride, dil, pad):
    names = ["kb_conv"]
    if k == (3, 3) and dil == (1, 1):
        names.append("kb_conv_3x3")
    if k == (1, 1) and stride == (1, 1) and pad == (0, 0, 0, 0):
        names.append("kb_conv_1x1")
    return names


def run_weighted(lib, name, g, x, layout, rng):
    """Call a conv / depthwise kernel on disjoint buffers with the given layout; return the output slice."""
    in_cs, out_cs, c0 = layout
    node = g.nodes[0]
    _, ho, wo, co = g.tensors[node.outputs[0]].shape
    xin = Buf(x.size // x.shape[-1] * in_cs, pixels_with_stride(x, in_cs, rng))
    out = Buf(ho * wo * out_cs)
    p = conv_params(g, in_cs, out_cs)
    args = [ctypes.byref(p), xin.ptr(), *weight_args(g), out.ptr(c0)]
    if "inplace" in name:
        scratch = Buf((p.in_h + p.pad_t + p.pad_b) * (p.in_w + p.pad_l + p.pad_r))
        getattr(lib, name)(*args, scratch.ptr())
        scratch.check()
    elif name.startswith("kb_conv"):  # the conv kernels' im2col scratch (KB_CONV_SCRATCH bytes), or NULL
        scratch = Buf(4 * p.k_h * p.k_w * p.in_c)
        getattr(lib, name)(*args, scratch.ptr() if rng.random() < 0.5 else None)
        scratch.check()
    else:
        getattr(lib, name)(*args)
    xin.check()
    return read_slice(out, ho * wo, out_cs, c0, co).reshape(ho, wo, co)


@EXAMPLES
@given(case=window_cases(), act=st.sampled_from(list(Activation)), big_bias=st.booleans(), seed=st.integers(0, 2**32),
       data=st.data())
def test_conv(kb_lib, case, act, big_bias, seed, data):
    rng = np.random.default_rng(seed)
    (cin, cout), (kh, kw) = case["c"], case["k"]
    attrs = ir.ConvAttrs(case["stride"], case["pad"], case["dil"], act)
    g, x = random_weighted(rng, Op.CONV_2D, (1, *case["hw"], cin), (cout, kh, kw, cin), attrs, big_bias=big_bias)
    want = expected(g, [x])[0]
    layout = slice_layout(data.draw, cin, cout)
    for name in conv_variants(case["k"], case["stride"], case["dil"], case["pad"]):
        assert np.array_equal(run_weighted(kb_lib, name, g, x, layout, rng), want), name


# -- DEPTHWISE_CONV_2D -------------------------------------------------------------------------------------------------
def dw_graph(rng, case, act, c, big_bias=False):
    attrs = ir.DepthwiseAttrs(case["stride"], case["pad"], case["dil"], 1, act)
    return random_weighted(rng, Op.DEPTHWISE_CONV_2D, (1, *case["hw"], c), (1, *case["k"], c), attrs,
                           big_bias=big_bias)


def dw_variants(case):
    names = ["kb_depthwise", "kb_depthwise_inplace"]
    if case["k"][0] == case["k"][1] and case["k"][0] in (3, 5, 7) and case["dil"] == (1, 1):
        names.append(f"kb_depthwise_inplace_{case['k'][0]}x{case['k'][1]}")
    return names


@EXAMPLES
@given(case=window_cases(ks=(1, 3, 5, 7), channels=False), c=st.integers(1, 11),
       act=st.sampled_from(list(Activation)), big_bias=st.booleans(), seed=st.integers(0, 2**32), data=st.data())
def test_depthwise_disjoint(kb_lib, case, c, act, big_bias, seed, data):
    """All depthwise variants writing to a separate buffer, with strided input and slice output."""
    rng = np.random.default_rng(seed)
    g, x = dw_graph(rng, case, act, c, big_bias)
    want = expected(g, [x])[0]
    layout = slice_layout(data.draw, c, c)
    for name in dw_variants(case):
        assert np.array_equal(run_weighted(kb_lib, name, g, x, layout, rng), want), name


@EXAMPLES
@given(case=window_cases(ks=(3, 5, 7), channels=False), c=st.integers(1, 11), extra=st.integers(0, 2),
       act=st.sampled_from(list(Activation)), seed=st.integers(0, 2**32))
def test_depthwise_in_place(kb_lib, case, c, extra, act, seed):
    """Input and output share one buffer (same base pointer and pixel stride): TinyEngine's in-place depthwise."""
    rng = np.random.default_rng(seed)
    g, x = dw_graph(rng, case, act, c)
    want = expected(g, [x])[0]
    ho, wo = want.shape[:2]
    cs = c + extra
    h, w = case["hw"]
    p, weights = conv_params(g, cs, cs), weight_args(g)
    for name in dw_variants(case)[1:]:
        buf = Buf(max(h * w, ho * wo) * cs)  # the arena slot holds the larger of input and output
        buf.body[:h * w * cs] = pixels_with_stride(x, cs, rng).reshape(-1)
        scratch = Buf((h + p.pad_t + p.pad_b) * (w + p.pad_l + p.pad_r))
        getattr(kb_lib, name)(ctypes.byref(p), buf.ptr(), *weights, buf.ptr(), scratch.ptr())
        buf.check()
        scratch.check()
        got = buf.body[:ho * wo * cs].reshape(ho * wo, cs)[:, :c].reshape(ho, wo, c)
        assert np.array_equal(got, want), name


# -- FULLY_CONNECTED ---------------------------------------------------------------------------------------------------
@EXAMPLES
@given(n_in=st.integers(1, 64), n_out=st.integers(1, 24), per_channel=st.booleans(),
       act=st.sampled_from(list(Activation)), big_bias=st.booleans(), seed=st.integers(0, 2**32))
def test_fully_connected(kb_lib, n_in, n_out, per_channel, act, big_bias, seed):
    rng = np.random.default_rng(seed)
    g, x = random_weighted(rng, Op.FULLY_CONNECTED, (1, n_in), (n_out, n_in), ir.FullyConnectedAttrs(act),
                           per_channel=per_channel, big_bias=big_bias)
    want = expected(g, [x])[0]
    rq = requant_params(g, g.nodes[0])
    p = rt.FcParams(n_in, n_out, -rq.input_zp, rq.output_zp, rq.act_min, rq.act_max)
    xin, out = Buf(n_in, x), Buf(n_out)
    kb_lib.kb_fully_connected(ctypes.byref(p), xin.ptr(), *weight_args(g), out.ptr())
    xin.check()
    out.check()
    assert np.array_equal(out.body, want)


# -- ADD ---------------------------------------------------------------------------------------------------------------
@EXAMPLES
@given(hw=st.tuples(st.integers(1, 5), st.integers(1, 5)), c=st.integers(1, 11),
       mode=st.sampled_from(["separate", "into_a", "into_b"]), act=st.sampled_from(list(Activation)),
       seed=st.integers(0, 2**32), data=st.data())
def test_add(kb_lib, hw, c, mode, act, seed, data):
    rng = np.random.default_rng(seed)
    s1, s2 = 2.0 ** rng.uniform(-8, 0, 2)
    s_out = max(s1, s2) * 2.0 ** rng.uniform(-1, 2)
    z1, z2, zo = (int(v) for v in rng.integers(-128, 128, 3))
    b = GraphBuilder()
    a_in = b.input((1, *hw, c), "int8", "a", per_tensor(s1, z1))
    b_in = b.input((1, *hw, c), "int8", "b", per_tensor(s2, z2))
    g = b.build([b.node(Op.ADD, [a_in, b_in], ir.AddAttrs(act), dtype="int8", qparams=per_tensor(s_out, zo))])
    xa, xb = (rng.integers(-128, 128, (1, *hw, c)).astype(np.int8) for _ in range(2))
    want = expected(g, [xa, xb])[0].reshape(-1, c)
    ap = add_node_params(g, g.nodes[0])
    pixels = hw[0] * hw[1]
    if mode == "separate":
        cs_a, cs_b = c + data.draw(st.integers(0, 2)), c + data.draw(st.integers(0, 2))
        cs_out, c0 = slice_layout(data.draw, c, c)[1:]
    else:
        cs_a = cs_b = cs_out = c + data.draw(st.integers(0, 2))
        c0 = 0
    bufs = {"a": Buf(pixels * cs_a, pixels_with_stride(xa, cs_a, rng)),
            "b": Buf(pixels * cs_b, pixels_with_stride(xb, cs_b, rng))}
    out = {"separate": Buf(pixels * cs_out), "into_a": bufs["a"], "into_b": bufs["b"]}[mode]
    p = rt.AddParams(pixels, c, cs_a, cs_b, cs_out, ap.input1_offset, ap.input2_offset, ap.left_shift,
                     ap.input1_multiplier, ap.input1_shift, ap.input2_multiplier, ap.input2_shift,
                     ap.output_multiplier, ap.output_shift, ap.output_offset, ap.act_min, ap.act_max)
    kb_lib.kb_add(ctypes.byref(p), bufs["a"].ptr(), bufs["b"].ptr(), out.ptr(c0))
    for buf in bufs.values():
        buf.check()
    if mode == "separate":
        got = read_slice(out, pixels, cs_out, c0, c)
    else:
        got = out.body.reshape(pixels, cs_out)[:, :c]
    assert np.array_equal(got, want)


# -- SUB, MUL, MAXIMUM, MINIMUM ------------------------------------------------------------------------------------
BINARY_KERNELS = {Op.SUB: ("kb_sub", rt.AddParams), Op.MUL: ("kb_mul", rt.MulParams),
                  Op.MAXIMUM: ("kb_maximum", rt.MinMaxParams), Op.MINIMUM: ("kb_minimum", rt.MinMaxParams)}


def binary_graph(op, hw, c, broadcast, act, rng):
    """A one-node int8 binary graph; `broadcast` names the operand ("a" / "b") shaped (1,1,1,c), or None.
    MAXIMUM / MINIMUM share one quantisation (TFLite compares raw values); SUB / MUL get three random ones, MUL's
    output scale near s1 * s2 * 2^[-2, 9] (so its multiplier is above and below one)."""
    s1, s2 = 2.0 ** rng.uniform(-8, 0, 2)
    z1, z2, zo = (int(v) for v in rng.integers(-128, 128, 3))
    if op in (Op.MAXIMUM, Op.MINIMUM):
        q1 = q2 = qo = per_tensor(s1, z1)
    else:
        s_out = s1 * s2 * 2.0 ** rng.uniform(-2, 9) if op is Op.MUL else max(s1, s2) * 2.0 ** rng.uniform(-1, 2)
        q1, q2, qo = per_tensor(s1, z1), per_tensor(s2, z2), per_tensor(s_out, zo)
    shapes = {k: (1, 1, 1, c) if broadcast == k else (1, *hw, c) for k in "ab"}
    b = GraphBuilder()
    a_in, b_in = b.input(shapes["a"], "int8", "a", q1), b.input(shapes["b"], "int8", "b", q2)
    attrs = None if op in (Op.MAXIMUM, Op.MINIMUM) else ir.AddAttrs(act)
    g = b.build([b.node(op, [a_in, b_in], attrs, dtype="int8", qparams=qo)])
    return g, [rng.integers(-128, 128, shapes[k]).astype(np.int8) for k in "ab"]


def binary_params(g, strides, pixels):
    from kilobyte.kernels.contracts import add_fields, mul_fields

    node = g.nodes[0]
    fn, struct = BINARY_KERNELS[node.op]
    if node.op is Op.SUB:
        fields = add_fields(g, node, strides, pixels)
    elif node.op is Op.MUL:
        fields = mul_fields(g, node, strides, pixels)
    else:
        fields = dict(pixels=pixels, c=g.tensors[node.outputs[0]].shape[-1], in1_cstride=strides[0],
                      in2_cstride=strides[1], out_cstride=strides[2])
    return fn, struct(**fields)


@EXAMPLES
@given(op=st.sampled_from(list(BINARY_KERNELS)), hw=st.tuples(st.integers(1, 5), st.integers(1, 5)),
       c=st.integers(1, 11), broadcast=st.sampled_from([None, "a", "b"]), act=st.sampled_from(list(Activation)),
       seed=st.integers(0, 2**32), data=st.data())
def test_binary(kb_lib, op, hw, c, broadcast, act, seed, data):
    """kb_sub / kb_mul / kb_maximum / kb_minimum == the reference: strided operands, an output in a channel slice,
    and a (1,1,1,c) operand read with pixel stride 0."""
    rng = np.random.default_rng(seed)
    g, (xa, xb) = binary_graph(op, hw, c, broadcast, act, rng)
    want = expected(g, [xa, xb]).reshape(-1, c)
    pixels = hw[0] * hw[1]
    strides, bufs = [], {}
    for k, x in (("a", xa), ("b", xb)):
        if broadcast == k:
            strides.append(0)
            bufs[k] = Buf(c, x)
        else:
            strides.append(c + data.draw(st.integers(0, 2)))
            bufs[k] = Buf(pixels * strides[-1], pixels_with_stride(x, strides[-1], rng))
    cs_out, c0 = slice_layout(data.draw, c, c)[1:]
    out = Buf(pixels * cs_out)
    fn, p = binary_params(g, (*strides, cs_out), pixels)
    getattr(kb_lib, fn)(ctypes.byref(p), bufs["a"].ptr(), bufs["b"].ptr(), out.ptr(c0))
    for buf in bufs.values():
        buf.check()
    assert np.array_equal(read_slice(out, pixels, cs_out, c0, c), want)


@pytest.mark.parametrize("op", [Op.SUB, Op.MUL])
def test_binary_extremes(kb_lib, op):
    """Every pair of int8 values, at scales that drive the output to both clamps, dense and in one row."""
    rng = np.random.default_rng(7)
    grid = np.arange(-128, 128, dtype=np.int8)
    seen = set()
    for _ in range(6):
        g, _ = binary_graph(op, (256, 256), 1, None, Activation.NONE, rng)
        xa, xb = (v.reshape(1, 256, 256, 1) for v in np.meshgrid(grid, grid, indexing="ij"))
        want = expected(g, [xa, xb]).reshape(-1)
        a, b, out = Buf(xa.size, xa), Buf(xb.size, xb), Buf(want.size)  # kept alive across the call
        fn, p = binary_params(g, (1, 1, 1), want.size)
        getattr(kb_lib, fn)(ctypes.byref(p), a.ptr(), b.ptr(), out.ptr())
        out.check()
        assert np.array_equal(out.body, want)
        seen |= set(want.tolist())
    assert {-128, 127} <= seen, "no case reached both clamps"


# -- pooling -----------------------------------------------------------------------------------------------------------
def pool_graph(op, hw, c, kernel, stride, pad, act, rng):
    q = per_tensor(2.0 ** rng.uniform(-8, 0), int(rng.integers(-128, 128)))
    b = GraphBuilder()
    x = b.input((1, *hw, c), "int8", qparams=q)
    g = b.build([b.node(op, [x], ir.PoolAttrs(kernel, stride, pad, act), dtype="int8", qparams=q)])
    return g, rng.integers(-128, 128, (1, *hw, c)).astype(np.int8)


def run_pool(lib, name, g, x, layout, rng):
    in_cs, out_cs, c0 = layout
    _, ho, wo, c = g.tensors[g.nodes[0].outputs[0]].shape
    xin = Buf(x.size // x.shape[-1] * in_cs, pixels_with_stride(x, in_cs, rng))
    out = Buf(ho * wo * out_cs)
    getattr(lib, name)(ctypes.byref(conv_params(g, in_cs, out_cs)), xin.ptr(), out.ptr(c0))
    xin.check()
    return read_slice(out, ho * wo, out_cs, c0, c).reshape(ho, wo, c)


@EXAMPLES
@given(case=window_cases(ks=(1, 2, 3, 4), dilation=False, channels=False), c=st.integers(1, 11),
       op=st.sampled_from([Op.AVG_POOL_2D, Op.MAX_POOL_2D]), act=st.sampled_from(list(Activation)),
       seed=st.integers(0, 2**32), data=st.data())
def test_pool(kb_lib, case, c, op, act, seed, data):
    rng = np.random.default_rng(seed)
    g, x = pool_graph(op, case["hw"], c, case["k"], case["stride"], case["pad"], act, rng)
    name = "kb_avg_pool" if op is Op.AVG_POOL_2D else "kb_max_pool"
    got = run_pool(kb_lib, name, g, x, slice_layout(data.draw, c, c), rng)
    assert np.array_equal(got, expected(g, [x])[0])


@EXAMPLES
@given(hw=st.tuples(st.integers(1, 10), st.integers(1, 10)), c=st.integers(1, 11), seed=st.integers(0, 2**32))
def test_global_average_pool(kb_lib, hw, c, seed):
    """AVG_POOL_2D with the whole image as the window (a full-image AvgPool2d; a MEAN stays kb_mean)."""
    rng = np.random.default_rng(seed)
    g, x = pool_graph(Op.AVG_POOL_2D, hw, c, hw, (1, 1), (0, 0, 0, 0), Activation.NONE, rng)
    got = run_pool(kb_lib, "kb_avg_pool", g, x, (c, c, 0), rng)
    assert np.array_equal(got, expected(g, [x])[0])


# -- PAD, CONCAT -------------------------------------------------------------------------------------------------------
@EXAMPLES
@given(hw=st.tuples(st.integers(1, 5), st.integers(1, 5)), c=st.integers(1, 7),
       pads=st.lists(st.integers(0, 3), min_size=6, max_size=6), seed=st.integers(0, 2**32), data=st.data())
def test_pad(kb_lib, hw, c, pads, seed, data):
    rng = np.random.default_rng(seed)
    q = per_tensor(0.05, int(rng.integers(-128, 128)))
    t, bo, left, r, c0, c1 = pads
    b = GraphBuilder()
    attrs = ir.PadAttrs(((0, 0), (t, bo), (left, r), (c0, c1)))
    g = b.build([b.node(Op.PAD, [b.input((1, *hw, c), "int8", qparams=q)], attrs, dtype="int8", qparams=q)])
    x = rng.integers(-128, 128, (1, *hw, c)).astype(np.int8)
    want = expected(g, [x])[0]
    (ho, wo, co), (in_cs, out_cs, s0) = want.shape, slice_layout(data.draw, c, want.shape[-1])
    p = rt.PadParams(*hw, c, in_cs, t, bo, left, r, c0, c1, out_cs, int(q.zero_point[0]), hw[1], wo)
    xin, out = Buf(hw[0] * hw[1] * in_cs, pixels_with_stride(x, in_cs, rng)), Buf(ho * wo * out_cs)
    kb_lib.kb_pad(ctypes.byref(p), xin.ptr(), out.ptr(s0))
    xin.check()
    assert np.array_equal(read_slice(out, ho * wo, out_cs, s0, co).reshape(want.shape), want)


@EXAMPLES
@given(hw=st.tuples(st.integers(1, 5), st.integers(1, 5)), cs=st.lists(st.integers(1, 7), min_size=1, max_size=4),
       seed=st.integers(0, 2**32), data=st.data())
def test_concat_by_slices(kb_lib, hw, cs, seed, data):
    """CONCAT as one kb_copy_channels per (possibly strided) input into its channel slice of the output."""
    rng = np.random.default_rng(seed)
    q = per_tensor(0.1, int(rng.integers(-128, 128)))
    b = GraphBuilder()
    names = [b.input((1, *hw, c), "int8", f"x{i}", q) for i, c in enumerate(cs)]
    g = b.build([b.node(Op.CONCAT, names, ir.ConcatAttrs(3), dtype="int8", qparams=q)])
    xs = [rng.integers(-128, 128, (1, *hw, c)).astype(np.int8) for c in cs]
    want = expected(g, xs)[0]
    total, pixels = sum(cs), hw[0] * hw[1]
    out, offset = Buf(pixels * total), 0
    for x, c in zip(xs, cs):
        in_cs = c + data.draw(st.integers(0, 2))
        xin = Buf(pixels * in_cs, pixels_with_stride(x, in_cs, rng))
        kb_lib.kb_copy_channels(pixels, c, xin.ptr(), in_cs, out.ptr(offset), total)
        xin.check()
        offset += c
    out.check()
    assert np.array_equal(out.body.reshape(want.shape), want)


# -- QUANTIZE / DEQUANTIZE ---------------------------------------------------------------------------------------------
@EXAMPLES
@given(n=st.integers(1, 64), seed=st.integers(0, 2**32))
def test_quantize_dequantize(kb_lib, n, seed):
    rng = np.random.default_rng(seed)
    scale, zp = np.float32(2.0 ** rng.uniform(-10, 2)), int(rng.integers(-128, 128))
    ties = ((rng.integers(-200, 200, n) + 0.5) * scale).astype(np.float32)  # exact halves hit the rounding rule
    x = np.where(rng.random(n) < 0.5, ties, (rng.normal(0, 100, n) * scale).astype(np.float32)).astype(np.float32)
    x[: n // 8] = rng.choice(np.float32([0.0, -0.0, 1e30, -1e30, 3e9, -3e9]), n // 8)
    b = GraphBuilder()
    g = b.build([b.node(Op.QUANTIZE, [b.input((1, n))], dtype="int8", qparams=per_tensor(scale, zp))])
    q = Buf(n)
    xf = np.ascontiguousarray(x)
    kb_lib.kb_quantize(n, xf.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), float(scale), zp, q.ptr())
    q.check()
    assert np.array_equal(q.body, expected(g, [x[None]])[0])

    b = GraphBuilder()
    xi = b.input((1, n), "int8", qparams=per_tensor(scale, zp))
    g = b.build([b.node(Op.DEQUANTIZE, [xi], dtype="float32")])
    got = np.zeros(n, np.float32)
    kb_lib.kb_dequantize(n, q.ptr(), float(scale), zp, got.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    assert np.array_equal(got.view(np.int32), expected(g, [q.body[None].copy()])[0].view(np.int32))



@EXAMPLES
@given(n=st.integers(1, 64), seed=st.integers(0, 2**32))
def test_quantize_dequantize_uint8(kb_lib, n, seed):
    """The header's helpers at a uint8 edge (kb_quantize_u8 / kb_dequantize_u8): TFLite's QUANTIZE / DEQUANTIZE with
    uint8 values, clamped to 0..255 — the int8 reference with the zero point 128 lower, plus 128."""
    from kilobyte.ops.arith import dequantize_values, quantize_values

    rng = np.random.default_rng(seed)
    scale, zp = np.float32(2.0 ** rng.uniform(-10, 2)), int(rng.integers(0, 256))
    x = (rng.normal(0, 150, n) * scale).astype(np.float32)
    x[: n // 4] = ((rng.integers(-200, 200, n // 4) + 0.5) * scale).astype(np.float32)  # exact halves
    q = np.zeros(n, np.uint8)
    kb_lib.kb_quantize_u8(n, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), float(scale), zp, q.ctypes.data)
    assert np.array_equal(q.astype(np.int16), quantize_values(x, scale, zp - 128).astype(np.int16) + 128)
    got = np.zeros(n, np.float32)
    kb_lib.kb_dequantize_u8(n, q.ctypes.data, float(scale), zp, got.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    assert np.array_equal(got.view(np.int32), dequantize_values(q, scale, zp).view(np.int32))
    y = rng.integers(0, 256, n).astype(np.uint8)
    assert kb_lib.kb_argmax_u8(n, y.ctypes.data) == int(np.argmax(y))


@EXAMPLES
@given(n=st.integers(1, 300), seed=st.integers(0, 2**32))
def test_argmax(kb_lib, n, seed):
    """kb_argmax_i8 (the generated NAME_argmax) is numpy's argmax: the first index of the largest value, ties too."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, n).astype(np.int8)
    if n > 2:  # a tie for the maximum: the first one wins
        x[rng.integers(0, n, 2)] = 127
    assert kb_lib.kb_argmax_i8(n, Buf(n, x).ptr()) == int(np.argmax(x))

# -- requantisation helpers --------------------------------------------------------------------------------------------
INT32 = st.one_of(st.integers(-2**31, 2**31 - 1), st.sampled_from([-2**31, -2**31 + 1, -1, 0, 1, 2**31 - 1]))


@EXAMPLES
@given(vals=st.lists(st.tuples(INT32, INT32, st.integers(0, 31), st.integers(-31, 30)), min_size=1, max_size=64))
def test_requant_helpers(kb_lib, vals):
    """SaturatingRoundingDoublingHighMul, RoundingDivideByPOT, MultiplyByQuantizedMultiplier vs quant.arith."""
    x, b, e, s = (np.array(v, np.int32) for v in zip(*vals))
    n = len(vals)
    outs = [np.zeros(n, np.int32) for _ in range(3)]
    kb_lib.kbt_requant(n, *(a.ctypes.data_as(I32) for a in (x, b, e, s, *outs)))
    assert np.array_equal(outs[0], arith.saturating_rounding_doubling_high_mul(x, b))
    assert np.array_equal(outs[1], arith.rounding_divide_by_pot(x, e))
    want = arith.multiply_by_quantized_multiplier(x, b, s)
    assert np.array_equal(outs[2], want)


# -- MEAN --------------------------------------------------------------------------------------------------------------
def mean_graph(shape, axes, keepdims, rng, ratio=None):
    """A one-node int8 MEAN (as .tflite files have it) with random zero points; s_in / s_out is `ratio` or random
    in [1/16, 16] (large ratios saturate)."""
    s_in = 2.0 ** rng.uniform(-8, 0)
    ratio = 2.0 ** rng.uniform(-4, 4) if ratio is None else ratio
    q_in, q_out = per_tensor(s_in, rng.integers(-128, 128)), per_tensor(s_in / ratio, rng.integers(-128, 128))
    b = GraphBuilder()
    x = b.input(shape, "int8", qparams=q_in)
    g = b.build([b.node(Op.MEAN, [x], ir.MeanAttrs(tuple(axes), keepdims), dtype="int8", qparams=q_out)])
    return g, rng.integers(-128, 128, shape).astype(np.int8)


def run_mean(lib, g, x, layout, rng):
    """kb_mean with the code generator's parameters (`mean_fields`) for pixel strides / output slice `layout`."""
    in_cs, out_cs, c0 = layout
    node = g.nodes[0]
    y_shape = g.tensors[node.outputs[0]].shape
    y_last = y_shape[-1] if y_shape else 1
    p = rt.MeanParams(**mean_fields(g, node, (in_cs, out_cs)))
    xin = Buf(x.size // x.shape[-1] * in_cs, pixels_with_stride(x, in_cs, rng))
    pixels = int(np.prod(y_shape)) // y_last
    out = Buf(pixels * out_cs)
    lib.kb_mean(ctypes.byref(p), xin.ptr(), out.ptr(c0))
    xin.check()
    return read_slice(out, pixels, out_cs, c0, y_last).reshape(y_shape)


def mean_layout(draw, g):
    """A strided input and a slice output where kb_mean takes them (no channel reduced), else dense ones (an output
    whose last axis is 1 may still be a slice)."""
    node = g.nodes[0]
    x_shape, y_shape = (g.tensors[t].shape for t in (node.inputs[0], node.outputs[0]))
    c = x_shape[-1]
    if (len(x_shape) - 1) not in {a % len(x_shape) for a in node.attrs.axes}:
        return slice_layout(draw, c, c)
    y_last = y_shape[-1] if y_shape else 1
    return (c, *slice_layout(draw, 1, 1)[1:]) if y_last == 1 else (c, y_last, 0)


def contiguous_run(shape, axes) -> bool:
    """Whether the reduced axes of size > 1 have no kept axis of size > 1 between them (what kb_mean can do)."""
    axes = {a % len(shape) for a in axes}
    red = [a for a in axes if shape[a] > 1]
    return not red or all(a in axes or shape[a] == 1 for a in range(red[0], red[-1] + 1))


@st.composite
def mean_cases(draw):
    """NHWC (mostly), (1, T, C) or (1, N) inputs, any non-empty axis set (some negative), channels across the
    kernel's 64-channel passes and kb_rq_row's 16-value groups."""
    rank = draw(st.sampled_from([4, 4, 4, 3, 2]))
    shape = (1, *(draw(st.integers(1, 9)) for _ in range(rank - 2)), draw(st.integers(1, 80)))
    axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    return shape, tuple(a - rank if draw(st.booleans()) else a for a in axes)


@EXAMPLES
@given(case=mean_cases(), keepdims=st.booleans(), seed=st.integers(0, 2**32), data=st.data())
def test_mean_any_axes(kb_lib, case, keepdims, seed, data):
    """kb_mean == mean_int8 (TFLM's QuantizedMeanOrSum) for every axis set that is one contiguous run; codegen
    refuses exactly the others."""
    rng = np.random.default_rng(seed)
    shape, axes = case
    g, x = mean_graph(shape, axes, keepdims, rng)
    if not contiguous_run(shape, axes):
        with pytest.raises(UnsupportedOpError, match="MEAN over axes .* contiguous run"):
            mean_fields(g, g.nodes[0], (shape[-1], g.tensors[g.outputs[0]].shape[-1]))
        return
    got = run_mean(kb_lib, g, x, mean_layout(data.draw, g), rng)
    assert np.array_equal(got, expected(g, [x]))


MEAN_SHAPES = [(1, 1, 1, 7), (1, 7, 7, 1280), (1, 7, 7, 1), (1, 5, 5, 33), (1, 1, 3, 16), (1, 3, 1, 65),
               (1, 112, 112, 3)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape", MEAN_SHAPES, ids=lambda s: "x".join(map(str, s[1:])))
def test_mean_spatial(kb_lib, shape, keepdims):
    """Global average pooling as Keras exports it (MEAN over H, W): 1x1, MobileNet's 7x7x1280, odd pixel counts (49,
    25, 3), 112x112 (n = 12544: 13 bits folded out of the multiplier), with strided input and a slice output; plus
    the tiny s_in / s_out for which the fold is capped at 31 + shift, and inputs at both int8 ends."""
    rng = np.random.default_rng(sum(shape) + keepdims)
    c = shape[-1]
    for ratio in (None, None, 2.0 ** -22):
        g, x = mean_graph(shape, (1, 2), keepdims, rng, ratio)
        if ratio is not None and shape[1] * shape[2] >= 2**10:
            assert mean_fields(g, g.nodes[0], (c, c))["shift"] == -31  # k = 31 + shift, not floor(log2 n)
        for data in (x, np.full(shape, 127, np.int8), np.full(shape, -128, np.int8)):
            for layout in ((c, c, 0), (c + 3, c + 5, 2)):
                got = run_mean(kb_lib, g, data, layout, rng)
                assert np.array_equal(got, expected(g, [data])), (ratio, layout)
