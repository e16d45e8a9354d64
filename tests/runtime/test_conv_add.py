"""Runtime stage tests of kb_conv_add.c: `kb_conv_1x1_add` (a 1x1 conv fused with the residual ADD reading its
output, `Plan.fused`) against the numpy reference of the two nodes, bit for bit.

Each case is a two-node int8 graph built with `GraphBuilder` — CONV_2D 1x1 (per-channel weights, random bias,
scales, zero points and fused activation) then ADD(conv, residual) or ADD(residual, conv) with its own qparams and
activation; the expected result is `eval_node_int8` of the conv, then of the ADD. The residual lives in a buffer
with a pixel stride >= its channels and a row pitch >= its width (a tile of a wider map), between guard bytes;
every byte that is not one of its values must survive. `test_sanitizers` reruns this file against an ASan/UBSan
build of the kernels, as test_build.py does for test_kernels.py.
"""

import ctypes
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels import GUARD, SENTINEL, Buf, per_tensor

import kilobyte.runtime as rt
from kilobyte import ir
from kilobyte.interp.int8_ref import eval_node_int8
from kilobyte.ir import Activation, GraphBuilder, Op, QParams
from kilobyte.ops.node_params import add_node_params, requant_params

SANITIZE = os.environ.get("KB_RUNTIME_SANITIZE") == "1"
EXAMPLES = settings(max_examples=10 if SANITIZE else 60, deadline=None)
I8, I32 = ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int32)
ACTS = [Activation.NONE, Activation.RELU, Activation.RELU6]


def pair_graph(rng, hw, cin, cout, conv_first: bool, acts):
    """x (1,H,W,cin) -> 1x1 conv -> ADD with the residual r (1,H,W,cout), operands in the order asked."""
    s_in, s_res = 2.0 ** rng.uniform(-8, 0, 2)
    s_w = 2.0 ** rng.uniform(-9, -4, cout)
    s_conv = s_in * float(s_w.mean()) * math.sqrt(cin) * 2.0 ** rng.uniform(4, 12)
    s_add = max(s_conv, s_res) * 2.0 ** rng.uniform(-1, 2)
    z_in, z_res, z_conv, z_add = (int(v) for v in rng.integers(-128, 128, 4))
    b = GraphBuilder("pair")
    x = b.input((1, *hw, cin), "int8", "x", per_tensor(s_in, z_in))
    r = b.input((1, *hw, cout), "int8", "r", per_tensor(s_res, z_res))
    w = b.const("w", rng.integers(-127, 128, (cout, 1, 1, cin)).astype(np.int8),
                QParams(s_w.astype(np.float32), np.zeros(cout, np.int64), 0))
    bias = b.const("b", np.round(rng.normal(0, 6000 * math.sqrt(cin), cout)).astype(np.int32),
                   QParams((np.float32(s_in) * s_w).astype(np.float32), np.zeros(cout, np.int64), 0))
    y = b.node(Op.CONV_2D, [x, w, bias], ir.ConvAttrs(activation=acts[0]), dtype="int8",
               qparams=per_tensor(s_conv, z_conv))
    out = b.node(Op.ADD, [y, r] if conv_first else [r, y], ir.AddAttrs(acts[1]), dtype="int8",
                 qparams=per_tensor(s_add, z_add))
    return b.build([out])


def expected(g, x, r):
    conv, add = g.nodes
    y = eval_node_int8(g, conv, [x, *(g.tensors[t].data for t in conv.inputs[1:])])
    return eval_node_int8(g, add, [y if t == conv.outputs[0] else r for t in add.inputs])


def kernel_params(g, in_cstride, in_row, out_cstride, out_row):
    """(kb_conv_params, kb_add_params) as the code generator emits them: in1 = the conv's output, in2 = the
    residual, whatever the IR's operand order (the two operands' parameters are swapped for ADD(r, conv))."""
    conv, add = g.nodes
    _, h, w, cin = g.tensors[conv.inputs[0]].shape
    cout = g.tensors[conv.outputs[0]].shape[3]
    p = requant_params(g, conv)
    cp = rt.ConvParams(h, w, cin, in_cstride, h, w, cout, out_cstride, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0,
                       -p.input_zp, p.output_zp, p.act_min, p.act_max, in_row, out_row)
    a = add_node_params(g, add)
    conv_op = (a.input1_offset, a.input1_multiplier, a.input1_shift)
    res_op = (a.input2_offset, a.input2_multiplier, a.input2_shift)
    if add.inputs[0] != conv.outputs[0]:
        conv_op, res_op = res_op, conv_op
    ap = rt.AddParams(h * w, cout, cout, out_cstride, out_cstride, conv_op[0], res_op[0], a.left_shift,
                      conv_op[1], conv_op[2], res_op[1], res_op[2], a.output_multiplier, a.output_shift,
                      a.output_offset, a.act_min, a.act_max)
    return cp, ap


def strided(values, row: int, cstride: int, fill: int = SENTINEL) -> np.ndarray:
    """(1, H, W, C) values laid out with a row pitch of `row` pixels and a pixel stride of `cstride` bytes."""
    _, h, w, c = values.shape
    grid = np.full((h, row, cstride), fill, np.int8)
    grid[:, :w, :c] = values[0]
    return grid


@EXAMPLES
@given(st.integers(0, 2 ** 32 - 1), st.tuples(st.integers(1, 5), st.integers(1, 6)), st.integers(1, 12),
       st.integers(1, 12), st.booleans(), st.tuples(st.sampled_from(ACTS), st.sampled_from(ACTS)),
       st.integers(0, 3), st.integers(0, 2), st.integers(0, 3), st.integers(0, 2))
def test_conv_1x1_add_matches_the_reference(kb_lib, seed, hw, cin, cout, conv_first, acts, in_pad, in_extra,
                                             out_pad, out_extra):
    rng = np.random.default_rng(seed)
    g = pair_graph(rng, hw, cin, cout, conv_first, acts)
    x = rng.integers(-128, 128, (1, *hw, cin)).astype(np.int8)
    r = rng.integers(-128, 128, (1, *hw, cout)).astype(np.int8)
    want = expected(g, x, r)
    in_cs, in_row, out_cs, out_row = cin + in_pad, hw[1] + in_extra, cout + out_pad, hw[1] + out_extra
    xin = strided(x, in_row, in_cs)
    res = strided(r, out_row, out_cs)
    xbuf, rbuf = Buf(xin.size, xin), Buf(res.size, res)
    cp, ap = kernel_params(g, in_cs, in_row, out_cs, out_row)
    conv = g.nodes[0]
    p = requant_params(g, conv)
    w = np.ascontiguousarray(g.tensors[conv.inputs[1]].data, np.int8)
    consts = [np.ascontiguousarray(v, np.int32) for v in (g.tensors[conv.inputs[2]].data, p.multiplier, p.shift)]
    kb_lib.kb_conv_1x1_add(ctypes.byref(cp), xbuf.ptr(), w.ctypes.data_as(I8), *(v.ctypes.data_as(I32)
                           for v in consts), ctypes.byref(ap), rbuf.ptr())
    xbuf.check()
    rbuf.check()
    assert np.array_equal(xbuf.body, xin.reshape(-1)), "the kernel wrote into its input"
    got = rbuf.body.reshape(res.shape)
    assert np.array_equal(got[:, :hw[1], :cout], want[0])
    untouched = np.ones(res.shape, bool)
    untouched[:, :hw[1], :cout] = False
    assert (got[untouched] == SENTINEL).all(), "the kernel wrote between the residual's pixels or rows"


def test_header_and_family():
    assert rt.KERNEL_FILES["conv_add"] == "kb_conv_add.c"
    assert "kb_conv_1x1_add" in rt.SIGNATURES and GUARD > 0
    assert "kb_conv_1x1_add(" in (rt.C_DIR / "kilobyte.h").read_text()


@pytest.mark.skipif(SANITIZE, reason="already the sanitizer run")
def test_sanitizers():
    """Rerun this file against kernels built with -fsanitize=address,undefined (libasan preloaded)."""
    env = {**os.environ, **rt.sanitizer_env(), "KB_RUNTIME_SANITIZE": "1"}
    here = Path(__file__).parent
    cmd = [sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-x", "-p", "no:cacheprovider"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=here.parents[1], timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert " passed" in res.stdout
