"""kb_add_const (kb_add.c) and kb_mul_const (kb_elementwise.c) against the int8 reference, bit for bit: ADD, SUB and
MUL of an activation and a constant of every broadcast shape over (1, H, W, C) — each of H, W, C kept or 1, with
fewer axes too (a (C,) bias, a single value) — first or second, each fused activation, the activation broadcast too
at times; the activation read with a
pixel stride and the output written into a channel slice, or the output over the activation (in place); nothing
written outside the output. The terms come from `const_fields` (`constant_terms`), as the code generator emits them.
"""

from __future__ import annotations

import ctypes

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels import SANITIZE, Buf, pixels_with_stride, read_slice, slice_layout

import kilobyte.runtime as rt
from kilobyte.interp.int8_ref import eval_node_int8
from kilobyte.ir import Activation, AddAttrs, GraphBuilder, Op, QParams
from kilobyte.ops.binary import const_fields

I32 = ctypes.POINTER(ctypes.c_int32)


@st.composite
def const_shapes(draw, hw, c):
    """A shape that broadcasts to (1, *hw, c): each axis kept or 1, leading axes dropped at random."""
    shape = tuple(d if draw(st.booleans()) else 1 for d in (1, *hw, c))
    return shape[draw(st.integers(0, 3)):]


def const_graph(op, x_shape, shape, first, act, rng):
    """`op` of graph input "x" of `x_shape` and a random int8 constant of `shape`, with random quantisation (MUL's
    output scale near s1 * s2 * 2^[-2, 9], so its multiplier is above and below one)."""
    s1, s2 = 2.0 ** rng.uniform(-8, 0, 2)
    z1, z2, zo = (int(v) for v in rng.integers(-128, 128, 3))
    s_out = s1 * s2 * 2.0 ** rng.uniform(-2, 9) if op is Op.MUL else max(s1, s2) * 2.0 ** rng.uniform(-1, 2)
    b = GraphBuilder()
    x = b.input(x_shape, "int8", "x", QParams.per_tensor(s1, z1))
    k = b.const("k", rng.integers(-128, 128, shape).astype(np.int8), QParams.per_tensor(s2, z2))
    y = b.node(op, [k, x] if first else [x, k], AddAttrs(act), dtype="int8", qparams=QParams.per_tensor(s_out, zo))
    return b.build([y])


@settings(max_examples=12 if SANITIZE else 80, deadline=None)
@given(op=st.sampled_from([Op.ADD, Op.SUB, Op.MUL]), hw=st.tuples(st.integers(1, 5), st.integers(1, 5)),
       c=st.integers(1, 11), first=st.booleans(), in_place=st.booleans(), act=st.sampled_from(list(Activation)),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_const_kernel_equals_reference(kb_lib, op, hw, c, first, in_place, act, seed, data):
    """Mostly a constant broadcast over the activation; sometimes the activation broadcast too ((1,1,1,C) against a
    (H,W,1) constant), then never in place."""
    rng = np.random.default_rng(seed)
    shape = data.draw(const_shapes(hw, c))
    x_shape = (1, *hw, c) if data.draw(st.integers(0, 3)) else (1, *data.draw(const_shapes(hw, c))[-3:])
    x_shape = (1,) * (4 - len(x_shape)) + x_shape
    out_shape = tuple(np.broadcast_shapes(x_shape, shape))
    g = const_graph(op, x_shape, shape, first, act, rng)
    node = g.nodes[0]
    x = rng.integers(-128, 128, x_shape).astype(np.int8)
    const = g.tensors["k"].data
    c_out, c_in = out_shape[-1], x_shape[-1]
    want = eval_node_int8(g, node, [const, x] if first else [x, const]).reshape(-1, c_out)
    pixels, in_pixels = want.shape[0], x.size // c_in
    in_place = in_place and x_shape == out_shape
    if in_place:
        cs_in = cs_out = c_out + data.draw(st.integers(0, 2))
        c0 = 0
    else:
        cs_in, cs_out, c0 = slice_layout(data.draw, c_in, c_out)
    fields, terms = const_fields(g, node, cs_in, cs_out)
    assert terms.size == int(np.prod(shape))  # one term per constant value, never the broadcast map
    src = Buf(in_pixels * cs_in, pixels_with_stride(x, cs_in, rng))
    out = src if in_place else Buf(pixels * cs_out)
    table = np.ascontiguousarray(terms, np.int32)
    fn = kb_lib.kb_mul_const if op is Op.MUL else kb_lib.kb_add_const
    fn(ctypes.byref(rt.ConstParams(**fields)), src.ptr(), table.ctypes.data_as(I32), out.ptr(c0))
    src.check()
    got = out.body.reshape(pixels, cs_out)[:, :c_out] if in_place else read_slice(out, pixels, cs_out, c0, c_out)
    assert np.array_equal(got, want)
