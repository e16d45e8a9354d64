"""IR: one shape rule per op, checked against PyTorch's own output shapes (torch imported in those tests only, so
the rest of the file runs on an install without the [torch] extra)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kilobyte.ir import ConvAttrs, Op, PoolAttrs, ReshapeAttrs, ResizeAttrs, ShapeError, TransposeConvAttrs, infer_shape


@given(h=st.integers(7, 30), w=st.integers(7, 30), k=st.sampled_from([1, 3, 5, 7]), s=st.integers(1, 2),
       p=st.integers(0, 3))
def test_conv_shape_matches_torch(h, w, k, s, p):
    import torch

    out = torch.nn.functional.conv2d(torch.zeros(1, 2, h, w), torch.zeros(3, 2, k, k), stride=s, padding=p)
    got = infer_shape(Op.CONV_2D, ConvAttrs((s, s), (p, p, p, p)), [(1, h, w, 2), (3, k, k, 2)])
    assert got == (1, out.shape[2], out.shape[3], 3)


@given(h=st.integers(4, 20), k=st.integers(1, 3), s=st.integers(1, 3))
def test_pool_shape_matches_torch(h, k, s):
    import torch

    out = torch.nn.functional.max_pool2d(torch.zeros(1, 1, h, h + 1), k, s)
    got = infer_shape(Op.MAX_POOL_2D, PoolAttrs((k, k), (s, s)), [(1, h, h + 1, 5)])
    assert got == (1, out.shape[2], out.shape[3], 5)


def test_errors():
    with pytest.raises(ShapeError, match="does not match weight"):
        infer_shape(Op.CONV_2D, ConvAttrs(), [(1, 4, 4, 3), (8, 1, 1, 2)])
    with pytest.raises(ShapeError, match="cannot reshape"):
        infer_shape(Op.RESHAPE, ReshapeAttrs((1, 5)), [(1, 2, 2, 1)])
    with pytest.raises(ShapeError, match="does not fit"):
        infer_shape(Op.CONV_2D, ConvAttrs(), [(1, 2, 2, 3), (8, 3, 3, 3)])


def test_binary_ops_broadcast_like_numpy():
    for op in (Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM):
        assert infer_shape(op, None, [(1, 4, 5, 6), (1, 4, 5, 6)]) == (1, 4, 5, 6)
        assert infer_shape(op, None, [(1, 1, 1, 6), (1, 4, 5, 6)]) == (1, 4, 5, 6)
        assert infer_shape(op, None, [(1, 4, 5, 6), (6,)]) == (1, 4, 5, 6)
        assert infer_shape(op, None, [(1, 4, 1, 6), (1, 1, 5, 1)]) == (1, 4, 5, 6)
        with pytest.raises(ShapeError, match="do not broadcast"):
            infer_shape(op, None, [(1, 4, 5, 6), (1, 4, 5, 3)])
        with pytest.raises(ShapeError, match="two operands"):
            infer_shape(op, None, [(1, 4, 5, 6)])
        assert infer_shape(op, None, [(1,), (1, 4, 5, 6)]) == (1, 4, 5, 6)  # a single value, first


@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_data_movement_shapes_match_numpy(shape, data):
    """TRANSPOSE, STRIDED_SLICE, TILE and REDUCE_MAX give the shapes numpy's transpose, slicing, tile and max give."""
    import numpy as np

    from kilobyte.ir import MeanAttrs, StridedSliceAttrs, TileAttrs, TransposeAttrs

    x = np.zeros(shape)
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    assert infer_shape(Op.TRANSPOSE, TransposeAttrs(perm), [tuple(shape)]) == np.transpose(x, perm).shape
    begin = [data.draw(st.integers(0, d - 1)) for d in shape]
    strides = [data.draw(st.sampled_from([-2, -1, 1, 3])) for _ in shape]
    end = [data.draw(st.integers(b + 1, d)) if s > 0 else data.draw(st.integers(-1, b - 1))
           for b, d, s in zip(begin, shape, strides)]
    want = x[tuple(slice(b, None if e < 0 else e, s) for b, e, s in zip(begin, end, strides))].shape
    assert infer_shape(Op.STRIDED_SLICE, StridedSliceAttrs(tuple(begin), tuple(end), tuple(strides)),
                       [tuple(shape)]) == want
    reps = tuple(data.draw(st.integers(1, 3)) for _ in shape)
    assert infer_shape(Op.TILE, TileAttrs(reps), [tuple(shape)]) == np.tile(x, reps).shape
    axes = tuple(data.draw(st.sets(st.integers(-len(shape), len(shape) - 1), min_size=1)))
    keep = data.draw(st.booleans())
    want = x.max(axis=tuple({a % len(shape) for a in axes}), keepdims=keep).shape
    assert infer_shape(Op.REDUCE_MAX, MeanAttrs(axes, keep), [tuple(shape)]) == want


def test_data_movement_errors():
    from kilobyte.ir import MeanAttrs, StridedSliceAttrs, TileAttrs, TransposeAttrs

    with pytest.raises(ShapeError, match="not a permutation"):
        infer_shape(Op.TRANSPOSE, TransposeAttrs((0, 1, 1, 2)), [(1, 2, 3, 4)])
    with pytest.raises(ShapeError, match="empty or out of range"):
        infer_shape(Op.STRIDED_SLICE, StridedSliceAttrs((0, 2, 0, 0), (1, 2, 3, 4), (1, 1, 1, 1)), [(1, 2, 3, 4)])
    with pytest.raises(ShapeError, match="empty or out of range"):
        infer_shape(Op.STRIDED_SLICE, StridedSliceAttrs((0, 0, 0, 0), (1, -1, 3, 4), (1, 1, 1, 1)), [(1, 2, 3, 4)])
    with pytest.raises(ShapeError, match="one entry per axis"):
        infer_shape(Op.STRIDED_SLICE, StridedSliceAttrs((0,), (1,), (1,)), [(1, 2)])
    with pytest.raises(ShapeError, match="positive count"):
        infer_shape(Op.TILE, TileAttrs((1, 0)), [(1, 2)])
    with pytest.raises(ShapeError, match="out of range"):
        infer_shape(Op.REDUCE_MAX, MeanAttrs((4,), False), [(1, 2, 3, 4)])


@given(h=st.integers(1, 9), w=st.integers(1, 9), k=st.tuples(st.integers(1, 5), st.integers(1, 5)),
       s=st.tuples(st.integers(1, 3), st.integers(1, 3)), data=st.data())
def test_transpose_conv_shape_matches_torch(h, w, k, s, data):
    """PyTorch's padding p and output_padding op (< stride) are the crop (p, p - op) on each axis."""
    import torch

    p = [data.draw(st.integers(0, kk - 1)) for kk in k]
    op = [data.draw(st.integers(0, ss - 1)) for ss in s]
    if any((n - 1) * ss + kk - 2 * pp + oo < 1 for n, ss, kk, pp, oo in zip((h, w), s, k, p, op)):
        return  # PyTorch refuses an empty output (so does the rule: test_upsampling_errors)
    out = torch.nn.functional.conv_transpose2d(torch.zeros(1, 2, h, w), torch.zeros(2, 3, *k), stride=s, padding=p,
                                               output_padding=op)
    attrs = TransposeConvAttrs(s, (p[0], p[0] - op[0], p[1], p[1] - op[1]))
    assert infer_shape(Op.TRANSPOSE_CONV, attrs, [(1, h, w, 2), (3, *k, 2)]) == (1, out.shape[2], out.shape[3], 3)


@pytest.mark.parametrize("op", [Op.RESIZE_NEAREST_NEIGHBOR, Op.RESIZE_BILINEAR])
def test_resize_shape_is_the_size(op):
    assert infer_shape(op, ResizeAttrs((7, 3), align_corners=True), [(2, 4, 5, 6)]) == (2, 7, 3, 6)


def test_upsampling_errors():
    with pytest.raises(ShapeError, match="both align_corners and half_pixel_centers"):
        infer_shape(Op.RESIZE_BILINEAR, ResizeAttrs((8, 8), True, True), [(1, 4, 4, 3)])
    infer_shape(Op.RESIZE_NEAREST_NEIGHBOR, ResizeAttrs((8, 8), True, True), [(1, 4, 4, 3)])  # TFLite allows it
    with pytest.raises(ShapeError, match="two positive sizes"):
        infer_shape(Op.RESIZE_NEAREST_NEIGHBOR, ResizeAttrs((0, 8)), [(1, 4, 4, 3)])
    with pytest.raises(ShapeError, match="not NHWC"):
        infer_shape(Op.RESIZE_BILINEAR, ResizeAttrs((8, 8)), [(1, 4, 3)])
    with pytest.raises(ShapeError, match="does not match weight"):
        infer_shape(Op.TRANSPOSE_CONV, TransposeConvAttrs(), [(1, 4, 4, 3), (8, 3, 3, 2)])
    with pytest.raises(ShapeError, match="leaves no output"):
        infer_shape(Op.TRANSPOSE_CONV, TransposeConvAttrs((1, 1), (2, 1, 0, 0)), [(1, 1, 4, 3), (8, 3, 3, 3)])
    with pytest.raises(ShapeError, match="leaves no output"):
        infer_shape(Op.TRANSPOSE_CONV, TransposeConvAttrs((1, 1), (-1, 0, 0, 0)), [(1, 4, 4, 3), (8, 3, 3, 3)])
