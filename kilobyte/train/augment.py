"""Training stage: augmentation of small images, on a whole batch at once in torch.

Each image gets its own random affine map — a shift of up to `MAX_SHIFT` of its side, a rotation of up to
`MAX_ROTATION_DEG` degrees and, optionally, a zoom of up to ±`MAX_SCALE` — all scaled by `strength`, and is
resampled bilinearly with zeros outside (`F.affine_grid` + `F.grid_sample`). One call draws all its random numbers
from the `torch.Generator` it is given, so a seeded generator gives the same batch every run. Grayscale and colour
images are treated alike; labels are unchanged by construction.
"""

from __future__ import annotations

import math

MAX_SHIFT = 0.1  # fraction of the image side: 2.8 px on a 28x28 digit
MAX_ROTATION_DEG = 10.0
MAX_SCALE = 0.1  # zoom in [0.9, 1.1]


def augment_batch(x, generator, strength: float = 1.0, random_scale: bool = True):
    """Randomly shifted, rotated (and zoomed) copies of NCHW images `x`; same shape, same dtype.

    >>> import torch
    >>> x = torch.zeros(4, 1, 8, 8); x[:, :, 3:5, 3:5] = 1
    >>> y = augment_batch(x, torch.Generator().manual_seed(0), strength=2.0)
    >>> y.shape == x.shape, bool((y != x).any())
    (True, True)
    """
    import torch
    import torch.nn.functional as F

    if strength == 0:
        return x
    theta = affine_matrices(x.shape[0], x.shape[2], x.shape[3], generator, strength, random_scale)
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)  # (N, H, W, 2)
    with torch.no_grad():
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def affine_matrices(n: int, h: int, w: int, generator, strength: float = 1.0, random_scale: bool = True):
    """(n, 2, 3) maps from output to input coordinates in affine_grid's normalised [-1, 1] units."""
    import torch

    u = torch.rand(n, 4, generator=generator) * 2 - 1  # (n, 4) uniform in [-1, 1): angle, zoom, dx, dy
    angle = u[:, 0] * math.radians(MAX_ROTATION_DEG) * strength
    zoom = 1 + u[:, 1] * MAX_SCALE * strength if random_scale else torch.ones(n)
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    # a rotation in pixels, written in normalised units: x spans w pixels and y spans h pixels
    row_x = torch.stack([cos, -sin * h / w, u[:, 2] * 2 * MAX_SHIFT * strength], dim=1)
    row_y = torch.stack([sin * w / h, cos, u[:, 3] * 2 * MAX_SHIFT * strength], dim=1)
    return torch.stack([row_x, row_y], dim=1)
