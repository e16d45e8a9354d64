"""Batch augmentation: shapes, dtype and sample order kept, pixels really moved, moves within the configured bounds,
and the same generator seed gives the same batch."""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.train.augment import MAX_SCALE, MAX_SHIFT, affine_matrices, augment_batch

torch = pytest.importorskip("torch")


def _gen(seed: int):
    return torch.Generator().manual_seed(seed)


def _blobs(n: int = 32, side: int = 28, channels: int = 1):
    """(n, channels, side, side): one bright Gaussian blob per image, at the centre."""
    yy, xx = np.mgrid[:side, :side] - (side - 1) / 2
    blob = np.exp(-(xx ** 2 + yy ** 2) / 8).astype(np.float32)
    return torch.from_numpy(np.broadcast_to(blob, (n, channels, side, side)).copy())


def _centre_of_mass(x) -> np.ndarray:
    """(n, 2) centre of mass (row, column) of each image's first channel."""
    a = x[:, 0].numpy()
    side = a.shape[-1]
    idx = np.arange(side, dtype=np.float64)
    mass = a.sum(axis=(1, 2))
    return np.stack([(a.sum(2) * idx).sum(1) / mass, (a.sum(1) * idx).sum(1) / mass], axis=1)


@pytest.mark.parametrize("channels", [1, 3])
def test_shapes_dtype_and_pixels_moved(channels):
    x = torch.rand(16, channels, 20, 24)
    y = augment_batch(x, _gen(0))
    assert y.shape == x.shape and y.dtype == x.dtype
    assert all(float((y[i] - x[i]).abs().mean()) > 0.05 for i in range(len(x)))  # every image changed


def test_each_output_comes_from_its_own_input():
    """Labels stay valid: image i of the output is a transform of image i of the input, not of another one."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((12, 1, 28, 28), dtype=np.float32))
    x = torch.nn.functional.avg_pool2d(x, 5, 1, 2)  # smooth, so a small move keeps an image close to itself
    y = augment_batch(x, _gen(1), strength=0.5)
    flat_x = (x - x.mean((1, 2, 3), keepdim=True)).flatten(1)
    flat_y = (y - y.mean((1, 2, 3), keepdim=True)).flatten(1)
    corr = (flat_y @ flat_x.T) / (flat_y.norm(dim=1)[:, None] * flat_x.norm(dim=1)[None])  # (12, 12)
    assert (corr.argmax(1) == torch.arange(12)).all()


def test_a_centred_blob_lands_where_the_affine_map_says():
    """The maps are in the right units: a blob at the centre lands at -A^-1 t (rotation and zoom turn about the
    centre), and that is within the shift bound times the largest zoom."""
    x = _blobs()
    for strength in (0.5, 1.0, 2.0):
        theta = affine_matrices(len(x), 28, 28, _gen(2), strength).double()  # (n, 2, 3), as augment_batch draws it
        landing = -torch.linalg.solve(theta[:, :, :2], theta[:, :, 2:])[..., 0].numpy() * 14  # (n, 2) x, y pixels
        moved = _centre_of_mass(augment_batch(x, _gen(2), strength)) - _centre_of_mass(x)  # (n, 2) row, column
        np.testing.assert_allclose(moved, landing[:, ::-1], atol=0.05)
        bound = MAX_SHIFT * 28 * strength * (1 + MAX_SCALE * strength) * np.sqrt(2)
        assert np.linalg.norm(moved, axis=1).max() <= bound
        assert np.abs(moved).max() > MAX_SHIFT * 28 * strength / 2  # the shifts do use their range


def test_same_seed_same_batch_other_seed_other_batch():
    x = _blobs(8)
    assert torch.equal(augment_batch(x, _gen(3)), augment_batch(x, _gen(3)))
    assert not torch.equal(augment_batch(x, _gen(3)), augment_batch(x, _gen(4)))


def test_strength_zero_is_identity():
    x = torch.rand(4, 1, 8, 8)
    assert torch.equal(augment_batch(x, _gen(0), strength=0.0), x)
