"""int8 TRANSPOSE, STRIDED_SLICE, TILE and REDUCE_MAX: the numpy reference (`kilobyte.ops.movement`) against
TensorFlow Lite Micro, bit for bit — and TILE, which TFLite Micro does not register, against TFLite's own interpreter.

TRANSPOSE, TILE and REDUCE_MAX are one-op graphs written by Kilobyte's `.tflite` writer. STRIDED_SLICE files are
crafted raw, with random begin / end / strides (negative, out of range, negative strides) and begin, end and shrink
masks, so the oracle resolves the masks itself: TFLite Micro runs the crafted file, Kilobyte imports it (resolving the
masks at import) and runs the reference. A slice TFLite Micro would leave empty (or could not prepare) is refused at
import with a one-line error; so are ellipsis / new-axis masks and the offset flag, which TFLite Micro refuses.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import tflite
from hypothesis import event, given, settings
from hypothesis import strategies as st
from litert_oracle import run_litert

from kilobyte.errors import UnsupportedOpError
from kilobyte.export.tflite import _Writer, to_tflite
from kilobyte.export.tflite_ops import TflOp
from kilobyte.frontends.tflite import from_tflite
from kilobyte.frontends.tflite_index import slice_bounds
from kilobyte.interp import run_int8
from kilobyte.ir import GraphBuilder, MeanAttrs, Op, QParams, StridedSliceAttrs, Tensor, TileAttrs, TransposeAttrs
from kilobyte.targets import tflm

B = tflite.BuiltinOperator
Q = QParams.per_tensor(0.07, -5)


def one_op(op: Op, shape, attrs, q: QParams = Q, q_out: QParams | None = None):
    b = GraphBuilder(op.value.lower())
    x = b.input(shape, "int8", "x", q)
    return b.build([b.node(op, [x], attrs, dtype="int8", qparams=q_out or q)])


def random_input(shape, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)
    x.flat[0], x.flat[-1] = -128, 127
    return x


def assert_same(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    differ = np.flatnonzero(ours != theirs)
    assert differ.size == 0, f"{differ.size} of {ours.size} values differ, first at {differ[0]}"


def bit_exact_with_tflm(graph, x: np.ndarray) -> np.ndarray:
    ours = run_int8(graph, x)[graph.outputs[0]]
    theirs = tflm.run_tflm(to_tflite(graph), x, preserve_all=False).outputs[graph.outputs[0]]
    assert_same(ours, theirs)
    return ours


# -- TRANSPOSE -----------------------------------------------------------------------------------------------------
PERMS = [p for r in (2, 3, 4) for p in itertools.permutations(range(r))]


@pytest.mark.parametrize("perm", PERMS, ids=["".join(map(str, p)) for p in PERMS])
def test_transpose_every_permutation(perm):
    shape = (1, 3, 4, 5)[-len(perm):] if len(perm) < 4 else (2, 3, 4, 5)
    x = random_input(shape, len(perm))
    y = bit_exact_with_tflm(one_op(Op.TRANSPOSE, shape, TransposeAttrs(perm)), x)
    assert np.array_equal(y, np.transpose(x, perm))


def test_transpose_nchw_to_nhwc():
    """What a PyTorch export starts with: (1, C, H, W) -> (1, H, W, C)."""
    x = random_input((1, 3, 7, 9), 0)
    y = bit_exact_with_tflm(one_op(Op.TRANSPOSE, x.shape, TransposeAttrs((0, 2, 3, 1))), x)
    assert y.shape == (1, 7, 9, 3) and np.array_equal(y[0, 2, 5], x[0, :, 2, 5])


# -- STRIDED_SLICE (crafted files: masks resolved by TFLite Micro itself) -------------------------------------------
def craft(tensors, ops, inputs, outputs) -> bytes:
    """A .tflite with exactly these tensors and operators, through the writer's serialiser."""
    graph = SimpleNamespace(name="crafted", nodes=(), inputs=tuple(inputs), outputs=tuple(outputs))
    return _Writer(graph, tensors, ops).serialise()


def crafted_slice(shape, begin, end, strides, masks: dict, out_shape) -> bytes:
    ints = {k: np.array(v, np.int32) for k, v in (("begin", begin), ("end", end), ("strides", strides))}
    tensors = [Tensor("x", tuple(shape), "int8", None, Q),
               *(Tensor(k, (len(shape),), "int32", v, None) for k, v in ints.items()),
               Tensor("y", tuple(out_shape), "int8", None, Q)]
    op = TflOp(B.STRIDED_SLICE, ("x", "begin", "end", "strides"), ("y",), masks)
    return craft(tensors, [op], ["x"], ["y"])


def slice_case(draw_ints, shape):
    rank = len(shape)
    begin = [draw_ints(-d - 2, d + 2) for d in shape]
    end = [draw_ints(-d - 2, d + 2) for d in shape]
    strides = [draw_ints(1, 3) * (1 if draw_ints(0, 3) else -1) for _ in shape]
    masks = {"BeginMask": draw_ints(0, 2**rank - 1), "EndMask": draw_ints(0, 2**rank - 1),
             "ShrinkAxisMask": draw_ints(0, 2**rank - 1) if draw_ints(0, 1) == 0 else 0}
    return begin, end, strides, masks


@settings(max_examples=300, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple), data=st.data())
def test_strided_slice_with_masks_bit_exact(shape, data):
    begin, end, strides, masks = slice_case(lambda lo, hi: data.draw(st.integers(lo, hi)), shape)
    try:
        bounds = slice_bounds(shape, begin, end, strides, masks["BeginMask"], masks["EndMask"], masks["ShrinkAxisMask"])
    except ValueError:  # empty, or a shrink axis TFLite Micro would write nothing for: refused on one line
        event("refused at import")
        out = tuple(max(d, 1) for d in shape)
        with pytest.raises(UnsupportedOpError) as err:
            from_tflite(crafted_slice(shape, begin, end, strides, masks, out))
        assert "\n" not in str(err.value) and "STRIDED_SLICE" in str(err.value)
        return
    event("run by TFLite Micro" + (" with shrink axes" if bounds.shrink else ""))
    model = crafted_slice(shape, begin, end, strides, masks, bounds.out_shape)
    graph = from_tflite(model)
    x = random_input(shape, len(begin) + sum(map(abs, strides)))
    ours = run_int8(graph, x)["y"]
    theirs = tflm.run_tflm(model, x, preserve_all=False).outputs["y"]  # TFLite Micro checks the shape too
    assert_same(ours, theirs)
    assert [n.op for n in graph.nodes] == [Op.STRIDED_SLICE] + [Op.RESHAPE] * bool(bounds.shrink)


@pytest.mark.parametrize("case", ["channels", "reverse-w", "every-second-row", "shrink-h"])
def test_strided_slice_typical_exports(case):
    """The slices converters write: x[..., 2:5], x[:, :, ::-1], x[:, 1::2], x[:, 0]."""
    shape = (1, 6, 5, 8)
    begin, end, strides, masks, out = {
        "channels": ([0, 0, 0, 2], [0, 0, 0, 5], [1, 1, 1, 1], {"BeginMask": 7, "EndMask": 7}, (1, 6, 5, 3)),
        "reverse-w": ([0, 0, -1, 0], [0, 0, -6, 0], [1, 1, -1, 1], {"BeginMask": 11, "EndMask": 11}, (1, 6, 5, 8)),
        "every-second-row": ([0, 1, 0, 0], [0, 0, 0, 0], [1, 2, 1, 1], {"BeginMask": 13, "EndMask": 15},
                             (1, 3, 5, 8)),
        "shrink-h": ([0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1], {"BeginMask": 13, "EndMask": 13, "ShrinkAxisMask": 2},
                     (1, 5, 8)),
    }[case]
    model = crafted_slice(shape, begin, end, strides, masks, out)
    x = random_input(shape, 3)
    ours = run_int8(from_tflite(model), x)["y"]
    assert_same(ours, tflm.run_tflm(model, x, preserve_all=False).outputs["y"])
    want = {"channels": x[..., 2:5], "reverse-w": x[:, :, ::-1], "every-second-row": x[:, 1::2],
            "shrink-h": x[:, 0]}[case]
    assert np.array_equal(ours, want)


@pytest.mark.parametrize("masks", [{"EllipsisMask": 1}, {"NewAxisMask": 2}, {"Offset": True}])
def test_strided_slice_masks_tflm_refuses_are_one_line_errors(masks):
    model = crafted_slice((1, 4, 4, 2), [0] * 4, [1, 2, 2, 2], [1] * 4, masks, (1, 2, 2, 2))
    with pytest.raises(UnsupportedOpError) as err:
        from_tflite(model)
    assert "\n" not in str(err.value) and "TFLite Micro ignores" in str(err.value)


def test_strided_slice_ir_round_trip_with_negative_stride():
    """A resolved end of -1 (down to index 0) is written with its end_mask bit and read back equal."""
    graph = one_op(Op.STRIDED_SLICE, (1, 5, 6, 4), StridedSliceAttrs((0, 4, 5, 3), (1, -1, 0, -1), (1, -2, -3, -1)))
    assert from_tflite(to_tflite(graph)) == graph
    x = random_input((1, 5, 6, 4), 9)
    assert np.array_equal(bit_exact_with_tflm(graph, x), x[:, 4::-2, 5:0:-3, ::-1])


# -- REDUCE_MAX ----------------------------------------------------------------------------------------------------
AXES = [(1, 2), (2, 1), (1,), (2,), (3,), (-1,), (1, 3), (0, 1, 2, 3), (2, 3), (-3, -2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axes", AXES, ids=[str(a) for a in AXES])
def test_reduce_max_bit_exact(axes, keepdims):
    shape = (1, 5, 7, 6)
    x = random_input(shape, len(axes))
    y = bit_exact_with_tflm(one_op(Op.REDUCE_MAX, shape, MeanAttrs(axes, keepdims)), x)
    assert np.array_equal(y, x.max(axis=tuple(a % 4 for a in axes), keepdims=keepdims))


def test_reduce_max_over_h_w_of_constant_planes():
    """Every plane at one value, -128 and 127 included: the maximum is exact at both ends."""
    x = np.broadcast_to(np.array([-128, 127, 0, -1], np.int8), (1, 4, 4, 4)).copy()
    for keep in (False, True):
        y = bit_exact_with_tflm(one_op(Op.REDUCE_MAX, x.shape, MeanAttrs((1, 2), keep)), x)
        assert y.reshape(-1).tolist() == [-128, 127, 0, -1]


# -- TILE (TFLite's interpreter: TFLite Micro has no TILE) -------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple), data=st.data())
def test_tile_bit_exact_with_tflite(shape, data):
    multiples = tuple(data.draw(st.integers(1, 3)) for _ in shape)
    graph = one_op(Op.TILE, shape, TileAttrs(multiples))
    x = random_input(shape, sum(multiples))
    ours = run_int8(graph, x)[graph.outputs[0]]
    assert_same(ours, run_litert(to_tflite(graph), {"x": x})[graph.outputs[0]])
    assert np.array_equal(ours, np.tile(x, multiples))


def test_tflm_has_no_tile():
    """Why TILE is checked against TFLite instead: TFLite Micro cannot prepare a model with it."""
    graph = one_op(Op.TILE, (1, 2, 2, 3), TileAttrs((1, 2, 1, 1)))
    with pytest.raises(Exception, match="TILE|builtin|opcode|prepare"):
        tflm.run_tflm(to_tflite(graph), random_input((1, 2, 2, 3), 0), preserve_all=False)


# -- quantisation --------------------------------------------------------------------------------------------------
CASES = [(Op.TRANSPOSE, TransposeAttrs((0, 2, 1, 3))),
         (Op.STRIDED_SLICE, StridedSliceAttrs((0, 0, 0, 0), (1, 2, 2, 3), (1, 1, 1, 1))),
         (Op.TILE, TileAttrs((1, 1, 2, 1))), (Op.REDUCE_MAX, MeanAttrs((1, 2), True))]


@pytest.mark.parametrize("op,attrs", CASES, ids=[c[0].value for c in CASES])
def test_other_output_params_are_one_line_errors(op, attrs):
    """The kernels move raw values: an output quantised differently from the input is refused, naming the node."""
    graph = one_op(op, (1, 2, 2, 3), attrs, Q, QParams.per_tensor(0.1, -5))
    with pytest.raises(UnsupportedOpError) as err:
        run_int8(graph, random_input((1, 2, 2, 3), 0))
    msg = str(err.value)
    assert "\n" not in msg and f"'{graph.nodes[0].name}'" in msg and "quantisation params" in msg


def test_n_samples_at_once_equal_single_runs():
    """run_int8 with a leading axis of N: ops that leave the batch axis alone give N single results."""
    xs = random_input((3, 4, 5, 6), 1)
    for op, attrs in [(Op.TRANSPOSE, TransposeAttrs((0, 3, 1, 2))),
                      (Op.STRIDED_SLICE, StridedSliceAttrs((0, 3, 0, 1), (1, -1, 5, 6), (1, -1, 2, 2))),
                      (Op.TILE, TileAttrs((1, 2, 1, 2))), (Op.REDUCE_MAX, MeanAttrs((1, 2), False))]:
        graph = one_op(op, (1, 4, 5, 6), attrs)
        batch = run_int8(graph, xs)[graph.outputs[0]]
        assert np.array_equal(batch, np.concatenate([run_int8(graph, x[None])[graph.outputs[0]] for x in xs]))
