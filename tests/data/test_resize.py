"""`data.resize_images`, the one resize of training, evaluation, calibration and the search's libraries: the numpy
path against PyTorch's `F.interpolate` (bilinear without align_corners; "nearest"), the tensor path equal to it, and
the op the library runs — TFLite Micro's int8 RESIZE_BILINEAR with half-pixel centres — within its quantisation
of it, so float training sees what the int8 library computes up to quantisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kilobyte.data.resize import resize_images
from kilobyte.export.tflite import to_tflite
from kilobyte.ir import GraphBuilder, Op, QParams, ResizeAttrs
from kilobyte.ops.arith import quantize_values
from kilobyte.targets import tflm

SIZES = [((8, 8), 12), ((8, 8), 5), ((28, 28), 40), ((7, 10), (13, 4)), ((32, 32), 32), ((5, 3), 1)]


def _torch(x: np.ndarray, size, mode: str) -> np.ndarray:
    hw = (size, size) if isinstance(size, int) else size
    t = torch.from_numpy(x.transpose(0, 3, 1, 2))
    kw = {"align_corners": False} if mode == "bilinear" else {}
    return F.interpolate(t, size=hw, mode=mode, **kw).numpy().transpose(0, 2, 3, 1)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("hw,size", SIZES)
def test_numpy_and_tensor_paths_are_pytorchs_interpolate(hw, size, mode):
    x = np.random.default_rng(0).random((3, *hw, 2), dtype=np.float32)
    want = _torch(x, size, mode)
    got = resize_images(x, size, mode)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    t = resize_images(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()), size, mode)
    np.testing.assert_allclose(t.numpy().transpose(0, 2, 3, 1), want, rtol=0, atol=0)


@pytest.mark.parametrize("hw,size", [((8, 8), 12), ((8, 8), 5), ((28, 28), 40), ((7, 10), (13, 4))])
def test_tflm_int8_resize_bilinear_is_it_up_to_quantisation(hw, size):
    """[0, 1] images quantised as a search's library input is (scale 1/255, zero point -128) through TFLite
    Micro's RESIZE_BILINEAR (half-pixel centres, the op `nn.Upsample(bilinear)` lowers to): the int8 op rounds its
    result and takes source coordinates in Q10 (28 -> 40: scale 717/1024 for 0.7), so a value may be one step off,
    rarely two on a steep edge — never more."""
    out = (size, size) if isinstance(size, int) else size
    q = QParams.per_tensor(1 / 255, -128)
    b = GraphBuilder("resize")
    xin = b.input((1, *hw, 1), "int8", "x", q)
    y = b.node(Op.RESIZE_BILINEAR, [xin], ResizeAttrs(out, align_corners=False, half_pixel_centers=True),
               dtype="int8", qparams=q)
    graph = b.build([y])
    x = np.random.default_rng(1).random((1, *hw, 1), dtype=np.float32)
    xq = quantize_values(x, 1 / 255, -128)
    lib = tflm.run_tflm(to_tflite(graph), xq, preserve_all=False).outputs[graph.outputs[0]].astype(int)
    ours = quantize_values(resize_images((xq.astype(np.float32) + 128) / 255, size), 1 / 255, -128)
    diff = np.abs(lib - ours.astype(int))
    assert diff.max() <= 2 and (diff <= 1).mean() > 0.98


def test_same_size_and_none_are_unchanged_and_a_bad_mode_is_refused():
    x = np.zeros((1, 4, 4, 1), np.float32)
    assert resize_images(x, 4) is x and resize_images(x, None) is x
    with pytest.raises(ValueError, match="resize mode 'bicubic'"):
        resize_images(x, 8, "bicubic")
