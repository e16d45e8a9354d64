"""Runtime stage tests: kb_resize_nearest, kb_resize_bilinear (runtime/c/kb_resize.c) and kb_transpose_conv
(runtime/c/kb_transpose_conv.c) against the numpy int8 reference, bit for bit.

Resizes get the int16 table the code generator writes (`resize_table`) and are compared with
`kilobyte.ops.resize`; a transposed convolution is one node of an int8 graph (random per-channel weights, bias
or none, a crop of SAME, VALID or PyTorch's padding + output_padding, a fused activation) compared with
`eval_node_int8`, its parameters as its emitter (`kilobyte.ops.transpose_conv`) writes them. Inputs have random
pixel strides and outputs land in channel slices between sentinel bytes that must survive; test_build.py reruns this
file against an ASan/UBSan build of the kernels.
"""

import ctypes
import math

import numpy as np
from hypothesis import event, given
from hypothesis import strategies as st
from test_kernels import EXAMPLES, I8, I32, Buf, expected, pixels_with_stride, read_slice, slice_layout

import kilobyte.runtime as rt
from kilobyte.errors import KilobyteError
from kilobyte.ir import Activation, GraphBuilder, Op, QParams, ResizeAttrs, TransposeConvAttrs
from kilobyte.ops import arith
from kilobyte.ops.node_params import requant_params
from kilobyte.ops.resize import resize_bilinear_int8, resize_nearest, resize_table

I16 = ctypes.POINTER(ctypes.c_int16)


# -- resizes -------------------------------------------------------------------------------------------------------
def run_resize(lib, bilinear: bool, x: np.ndarray, attrs: ResizeAttrs, layout, rng) -> np.ndarray:
    """x (1, H, W, C) through kb_resize_*; the (Ho, Wo, C) output slice."""
    in_cs, out_cs, c0 = layout
    _, h, w, c = x.shape
    (ho, wo), table = attrs.size, resize_table(bilinear, (h, w), attrs)
    xin = Buf(h * w * in_cs, pixels_with_stride(x, in_cs, rng))
    out = Buf(ho * wo * out_cs)
    p = rt.ResizeParams(w, c, in_cs, ho, wo, out_cs)
    fn = lib.kb_resize_bilinear if bilinear else lib.kb_resize_nearest
    fn(ctypes.byref(p), table.ctypes.data_as(I16), xin.ptr(), out.ptr(c0))
    xin.check()
    return read_slice(out, ho * wo, out_cs, c0, c).reshape(1, ho, wo, c)


@EXAMPLES
@given(hw=st.tuples(st.integers(1, 9), st.integers(1, 9)), out=st.tuples(st.integers(1, 17), st.integers(1, 17)),
       c=st.integers(1, 9), align=st.booleans(), half=st.booleans(), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_resize_nearest(kb_lib, hw, out, c, align, half, seed, data):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, *hw, c)).astype(np.int8)
    got = run_resize(kb_lib, False, x, ResizeAttrs(out, align, half), slice_layout(data.draw, c, c), rng)
    assert np.array_equal(got, resize_nearest(x, out, align, half))


@EXAMPLES
@given(hw=st.tuples(st.integers(1, 9), st.integers(1, 9)), out=st.tuples(st.integers(1, 21), st.integers(1, 21)),
       c=st.integers(1, 9), mode=st.sampled_from([(False, False), (True, False), (False, True)]),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_resize_bilinear(kb_lib, hw, out, c, mode, seed, data):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, *hw, c)).astype(np.int8)
    x.flat[0], x.flat[-1] = -128, 127
    try:
        want = resize_bilinear_int8(x, out, *mode)
    except KilobyteError:  # a size TFLite Micro reads past the input for: the code generator refuses it too
        event("refused")
        return
    got = run_resize(kb_lib, True, x, ResizeAttrs(out, *mode), slice_layout(data.draw, c, c), rng)
    assert np.array_equal(got, want)


def test_resize_bilinear_at_the_int8_ends(kb_lib):
    """-128 next to 127 in every direction: the Q20 sums reach their extremes and round half away from zero."""
    x = np.array([[-128, 127], [127, -128]], np.int8).reshape(1, 2, 2, 1).repeat(3, axis=3)
    rng = np.random.default_rng(0)
    for mode in ((False, False), (True, False), (False, True)):
        got = run_resize(kb_lib, True, x, ResizeAttrs((7, 9), *mode), (3, 3, 0), rng)
        assert np.array_equal(got, resize_bilinear_int8(x, (7, 9), *mode))


# -- TRANSPOSE_CONV ------------------------------------------------------------------------------------------------
@st.composite
def transpose_cases(draw):
    """Kernel 1-5, stride 1-3, a crop before of at most k - 1 and after of at least -(stride - 1) (PyTorch's
    output_padding beyond its padding), and an input whose output is not empty."""
    k = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = []
    for kk, s in zip(k, stride):
        before = draw(st.integers(0, kk - 1))
        pad += [before, draw(st.integers(-(s - 1), kk - 1))]
    hw = tuple(draw(st.integers(1, 6)) for _ in range(2))
    if any((n - 1) * s + kk - pad[2 * i] - pad[2 * i + 1] < 1 for i, (n, s, kk) in enumerate(zip(hw, stride, k))):
        hw = (6, 6)
    return dict(k=k, stride=stride, pad=(pad[0], pad[1], pad[2], pad[3]), hw=hw,
                c=(draw(st.integers(1, 13)), draw(st.integers(1, 13))))


def transpose_conv_graph(rng, case, act: Activation, bias: bool):
    (cin, cout), (kh, kw) = case["c"], case["k"]
    s_in, s_w = 2.0 ** rng.uniform(-8, 0), (2.0 ** rng.uniform(-9, -4, cout)).astype(np.float32)
    fan_in = math.ceil(kh / case["stride"][0]) * math.ceil(kw / case["stride"][1]) * cin
    s_out = s_in * float(s_w.mean()) * math.sqrt(fan_in) * 2.0 ** rng.uniform(-2, 12)
    zi, zo = (int(v) for v in rng.integers(-128, 128, 2))
    zeros = np.zeros(cout, np.int64)
    b = GraphBuilder()
    x = b.input((1, *case["hw"], cin), "int8", qparams=QParams.per_tensor(s_in, zi))
    inputs = [x, b.const("w", rng.integers(-127, 128, (cout, kh, kw, cin)).astype(np.int8), QParams(s_w, zeros, 0))]
    if bias:
        values = np.round(rng.normal(0, 6000 * math.sqrt(fan_in), cout)).astype(np.int32)
        inputs.append(b.const("b", values, QParams((np.float32(s_in) * s_w).astype(np.float32), zeros, 0)))
    attrs = TransposeConvAttrs(case["stride"], case["pad"], act)
    return b.build([b.node(Op.TRANSPOSE_CONV, inputs, attrs, dtype="int8", qparams=QParams.per_tensor(s_out, zo))])


def transpose_params(g, in_cs: int, out_cs: int) -> rt.ConvParams:
    """kb_conv_params of a TRANSPOSE_CONV node, as its emitter fills them (pad_t / pad_l = the crop)."""
    node, a = g.nodes[0], g.nodes[0].attrs
    _, h, w, c = g.tensors[node.inputs[0]].shape
    _, ho, wo, co = g.tensors[node.outputs[0]].shape
    p = requant_params(g, node)
    q = g.tensors[node.outputs[0]].qparams
    lo, hi = arith.activation_range(a.activation, q.scale[0], q.zero_point[0])
    kh, kw = g.tensors[node.inputs[1]].shape[1:3]
    return rt.ConvParams(h, w, c, in_cs, ho, wo, co, out_cs, kh, kw, *a.stride, 1, 1, *a.padding,
                         -p.input_zp, p.output_zp, lo, hi, w, wo)


def transpose_weight_args(g) -> list:
    """ctypes pointers to the weights, bias (zeros when the node has none, as the code generator emits), multipliers
    and shifts of a TRANSPOSE_CONV node (`data_as` keeps the arrays alive)."""
    node = g.nodes[0]
    p = requant_params(g, node)
    w = np.ascontiguousarray(g.tensors[node.inputs[1]].data, np.int8)
    bias = g.tensors[node.inputs[2]].data if len(node.inputs) > 2 else np.zeros(len(p.multiplier))
    rest = [np.ascontiguousarray(a, np.int32) for a in (bias, p.multiplier, p.shift)]
    return [w.ctypes.data_as(I8), *(a.ctypes.data_as(I32) for a in rest)]


@EXAMPLES
@given(case=transpose_cases(), act=st.sampled_from(list(Activation)), bias=st.booleans(),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_transpose_conv(kb_lib, case, act, bias, seed, data):
    rng = np.random.default_rng(seed)
    g = transpose_conv_graph(rng, case, act, bias)
    x = rng.integers(-128, 128, (1, *case["hw"], case["c"][0])).astype(np.int8)
    want = expected(g, [x])[0]  # (Ho, Wo, Cout)
    ho, wo, co = want.shape
    in_cs, out_cs, c0 = slice_layout(data.draw, *case["c"])
    xin = Buf(x.size // x.shape[-1] * in_cs, pixels_with_stride(x, in_cs, rng))
    out = Buf(ho * wo * out_cs)
    p = transpose_params(g, in_cs, out_cs)
    kb_lib.kb_transpose_conv(ctypes.byref(p), xin.ptr(), *transpose_weight_args(g), out.ptr(c0))
    xin.check()
    assert np.array_equal(read_slice(out, ho * wo, out_cs, c0, co).reshape(want.shape), want)
