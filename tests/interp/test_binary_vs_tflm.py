"""int8 ADD, SUB, MUL, MAXIMUM and MINIMUM: the numpy reference (`add_int8`, `sub_int8`, `mul_int8`, raw-value
max/min) against TensorFlow Lite Micro, bit for bit.

Each case is a one-op int8 graph with two graph inputs, written by Kilobyte's `.tflite` writer and run by TFLM:
random int8 values plus every extreme pair, scales over several octaves and random zero points (MUL's output scale
puts its multiplier both below and above one), each fused activation, and the shapes real models use — equal shapes,
and a per-channel (1,1,1,C) operand (first or second) against (1,H,W,C), as in squeeze-excite. A constant operand of
ADD / SUB / MUL of every shape that broadcasts — (C,) as a folded batch norm's bias, a single value, (1,1,W,1),
(1,H,1,C), (H,W,C), a full map — first or second (TFLite Micro's broadcast kernels), and the table the C kernels
read it from (`constant_terms`) gives the reference's result.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.errors import KilobyteError
from kilobyte.export.tflite import to_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import Activation, AddAttrs, GraphBuilder, Op, QParams
from kilobyte.ops.arith import multiply_by_quantized_multiplier
from kilobyte.ops.node_params import activation_range_of, add_node_params, constant_terms, mul_node_params
from kilobyte.targets import tflm

OPS = [Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM]
SHARED_QPARAMS = (Op.MAXIMUM, Op.MINIMUM)  # TFLite compares raw int8 values: one quantisation for all three


def qp(scale, zero_point) -> QParams:
    return QParams.per_tensor(float(scale), int(zero_point))


def binary_graph(op: Op, shapes, act: Activation, rng):
    """One `op` node over graph inputs "a" and "b" of the given shapes, with random quantisation."""
    s1, s2 = 2.0 ** rng.uniform(-9, 1, 2)
    z1, z2, zo = rng.integers(-128, 128, 3)
    if op in SHARED_QPARAMS:
        q1 = q2 = qo = qp(s1, z1)
    elif op is Op.MUL:
        q1, q2, qo = qp(s1, z1), qp(s2, z2), qp(s1 * s2 * 2.0 ** rng.uniform(-3, 9), zo)
    else:
        q1, q2, qo = qp(s1, z1), qp(s2, z2), qp(max(s1, s2) * 2.0 ** rng.uniform(-1, 3), zo)
    b = GraphBuilder(op.value.lower())
    a_in, b_in = b.input(shapes[0], "int8", "a", q1), b.input(shapes[1], "int8", "b", q2)
    attrs = None if op in SHARED_QPARAMS else AddAttrs(act)
    return b.build([b.node(op, [a_in, b_in], attrs, dtype="int8", qparams=qo)])


def inputs(shapes, rng) -> dict[str, np.ndarray]:
    """Random int8 values, with both extremes planted in each operand."""
    xs = {}
    for name, shape in zip("ab", shapes):
        x = rng.integers(-128, 128, shape).astype(np.int8)
        x.flat[0], x.flat[-1] = -128, 127
        xs[name] = x
    return xs


def assert_bit_exact(graph, xs) -> np.ndarray:
    ours = run_int8(graph, xs)[graph.outputs[0]]
    theirs = tflm.run_tflm(to_tflite(graph), xs, preserve_all=False).outputs[graph.outputs[0]].reshape(ours.shape)
    differ = np.flatnonzero(ours != theirs)
    assert differ.size == 0, (f"{differ.size} of {ours.size} values differ, first at {differ[0]}: "
                              f"ours {ours.flat[differ[0]]}, TFLM {theirs.flat[differ[0]]}")
    return ours


LAYOUTS = {"equal": lambda hw, c: ((1, *hw, c), (1, *hw, c)),
           "per-channel second": lambda hw, c: ((1, *hw, c), (1, 1, 1, c)),
           "per-channel first": lambda hw, c: ((1, 1, 1, c), (1, *hw, c))}


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(OPS), layout=st.sampled_from(list(LAYOUTS)), act=st.sampled_from(list(Activation)),
       hw=st.tuples(st.integers(1, 6), st.integers(1, 6)), c=st.integers(1, 17), seed=st.integers(0, 2**32 - 1))
def test_random_cases_bit_exact(op, layout, act, hw, c, seed):
    rng = np.random.default_rng(seed)
    shapes = LAYOUTS[layout](hw, c)
    graph = binary_graph(op, shapes, act, rng)
    ours = assert_bit_exact(graph, inputs(shapes, rng))
    assert ours.shape == (1, *hw, c)


@pytest.mark.parametrize("act", list(Activation))
@pytest.mark.parametrize("op", OPS)
def test_every_value_pair_bit_exact(op, act):
    """All 65536 (a, b) int8 pairs at three quantisations each: every rounding case and both clamps."""
    grid = np.arange(-128, 128, dtype=np.int8)
    a, b = (v.reshape(1, 256, 256, 1) for v in np.meshgrid(grid, grid, indexing="ij"))
    rng = np.random.default_rng(len(op.value) * 10 + len(act.value))
    seen = set()
    for _ in range(3):
        graph = binary_graph(op, (a.shape, b.shape), act, rng)
        seen |= set(assert_bit_exact(graph, {"a": a, "b": b}).reshape(-1).tolist())
    assert len(seen) > 20  # the cases really spread over the int8 range


def test_maximum_minimum_refuse_different_qparams():
    """The reference refuses what it cannot compute by comparing raw values."""
    b = GraphBuilder()
    x, y = b.input((1, 2, 2, 3), "int8", "a", qp(0.1, 0)), b.input((1, 2, 2, 3), "int8", "b", qp(0.2, 0))
    graph = b.build([b.node(Op.MAXIMUM, [x, y], dtype="int8", qparams=qp(0.1, 0))])
    with pytest.raises(KilobyteError, match="share quantisation params"):
        run_int8(graph, {"a": np.zeros((1, 2, 2, 3), np.int8), "b": np.zeros((1, 2, 2, 3), np.int8)})


CONST_SHAPES = [(6,), (1,), (1, 1, 1, 6), (1, 1, 5, 1), (1, 4, 1, 6), (4, 5, 6), (1, 4, 5, 6), (5, 1)]


def const_graph(op: Op, shape, first: bool, act: Activation, rng):
    """`op` of graph input "a" (1,4,5,6) and an int8 constant of `shape` (the first operand with `first`)."""
    s1, s2 = 2.0 ** rng.uniform(-9, 1, 2)
    z1, z2, zo = rng.integers(-128, 128, 3)
    so = s1 * s2 * 2.0 ** rng.uniform(-3, 9) if op is Op.MUL else max(s1, s2) * 2.0 ** rng.uniform(-1, 3)
    b = GraphBuilder(f"{op.value.lower()}_const")
    x = b.input((1, 4, 5, 6), "int8", "a", qp(s1, z1))
    values = rng.integers(-128, 128, shape).astype(np.int8)
    values.flat[0] = -128
    k = b.const("k", values, qp(s2, z2))
    return b.build([b.node(op, [k, x] if first else [x, k], AddAttrs(act), dtype="int8", qparams=qp(so, zo))])


@pytest.mark.parametrize("first", [False, True], ids=["const-second", "const-first"])
@pytest.mark.parametrize("shape", CONST_SHAPES, ids=[str(s) for s in CONST_SHAPES])
@pytest.mark.parametrize("op", [Op.ADD, Op.SUB, Op.MUL])
def test_constant_operand_bit_exact(op, shape, first):
    """TFLite Micro's broadcast ADD / SUB / MUL with a constant operand == the reference, for each fused activation;
    and the reference == the same formula with the constant's share of each element taken from `constant_terms`."""
    rng = np.random.default_rng(CONST_SHAPES.index(shape) * 4 + 2 * first + len(op.value))
    x = rng.integers(-128, 128, (1, 4, 5, 6)).astype(np.int8)
    x.flat[0], x.flat[-1] = -128, 127
    for act in Activation:
        graph = const_graph(op, shape, first, act, rng)
        ours = assert_bit_exact(graph, {"a": x})
        assert ours.shape == (1, 4, 5, 6)
        assert np.array_equal(ours, from_terms(graph, x))


def from_terms(graph, x) -> np.ndarray:
    """What kb_add_const / kb_mul_const compute: the activation's share plus (times) the constant's prepared terms."""
    node = graph.nodes[0]
    k = 0 if graph.tensors[node.inputs[0]].is_const else 1
    terms = constant_terms(graph, node, k)
    lo, hi = activation_range_of(graph, node)
    xi = x.astype(np.int64)
    if node.op is Op.MUL:
        p = mul_node_params(graph, node)
        raw = multiply_by_quantized_multiplier((xi + (p.input1_offset, p.input2_offset)[1 - k]) * terms,
                                               p.output_multiplier, p.output_shift)
    else:
        p = add_node_params(graph, node)
        off, m, s = ((p.input1_offset, p.input1_multiplier, p.input1_shift),
                     (p.input2_offset, p.input2_multiplier, p.input2_shift))[1 - k]
        sx = multiply_by_quantized_multiplier((xi + off) << p.left_shift, m, s)
        sx = -sx if node.op is Op.SUB and k == 0 else sx
        raw = multiply_by_quantized_multiplier(sx + terms, p.output_multiplier, p.output_shift)
    return np.clip(raw + p.output_offset, lo, hi).astype(np.int8)
