"""IR: one shape rule per op, checked against PyTorch's own output shapes (torch imported in those tests only, so
the rest of the file runs on an install without the [torch] extra)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kilobyte.ir import ConvAttrs, Op, PoolAttrs, ReshapeAttrs, ShapeError, infer_shape


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
    for op in (Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM):
        assert infer_shape(op, None, [(1, 4, 5, 6), (1, 4, 5, 6)]) == (1, 4, 5, 6)
        assert infer_shape(op, None, [(1, 1, 1, 6), (1, 4, 5, 6)]) == (1, 4, 5, 6)
        assert infer_shape(op, None, [(1, 4, 5, 6), (6,)]) == (1, 4, 5, 6)
        assert infer_shape(op, None, [(1, 4, 1, 6), (1, 1, 5, 1)]) == (1, 4, 5, 6)
        with pytest.raises(ShapeError, match="do not broadcast"):
            infer_shape(op, None, [(1, 4, 5, 6), (1, 4, 5, 3)])
        with pytest.raises(ShapeError, match="two operands"):
            infer_shape(op, None, [(1, 4, 5, 6)])
    with pytest.raises(ShapeError, match="add operands differ"):  # ADD keeps its equal-shapes rule
        infer_shape(Op.ADD, None, [(1, 4, 5, 6), (1, 1, 1, 6)])
