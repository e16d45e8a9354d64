"""Data stage: `letters`, 26 classes of 32×32 grayscale letters rendered from the fonts inside matplotlib.

A second built-in task that is neither MNIST nor 8×8 and needs no download (issue 26: users search on 26 classes
of 32×32 grayscale images). Each image is one of the capitals A–Z, drawn from the outline matplotlib's font
machinery gives (`matplotlib.textpath.TextPath`) in one of `FONTS` (DejaVu Sans / Serif / Mono and their bold /
oblique faces, STIX, Computer Modern — all shipped in matplotlib's mpl-data), with random
- height (45–85 % of the image) and aspect (0.8–1.2), rotation (±15°) and shear (±0.2), offset (±3 px);
- stroke thickness: the 64×64 (2× supersampled) mask eroded by 1 px, kept, or dilated by 1–2 px;
- ink and paper levels (ink 0.55–1, paper 0–0.25), Gaussian noise (σ 0–0.12), clipped to [0, 1];
rasterised by even-odd point-in-path tests (`Path.contains_points`) on the 64×64 grid and averaged 2×2 down to
32×32. Every draw comes from `numpy.random.default_rng(seed)`, so `make_letters(n, seed)` is deterministic; labels
are balanced (image i has label i mod 26 before the shuffle). 8,000 images take a few seconds, so they are made on
the fly, not cached.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from ..errors import KilobyteError

FONTS = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSansMono.ttf",
         "DejaVuSansMono-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf",
         "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "cmr10.ttf", "cmss10.ttf", "cmtt10.ttf",
         "cmb10.ttf")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
SIZE = 32  # output side, pixels
SUPER = 2  # supersampling factor of the rasterisation
N_IMAGES = 8000  # the built-in set's size (the user had 8,000 images)


@functools.cache
def _outline(font: str, letter: str):
    """The closed contours ((V, 2) arrays, centred and scaled to unit height) of `letter` in matplotlib's `font`."""
    try:
        import matplotlib
        from matplotlib.font_manager import FontProperties
        from matplotlib.textpath import TextPath
    except ImportError:
        raise KilobyteError("dataset 'letters' needs matplotlib: pip install 'kilobyte[plot]'") from None
    path = TextPath((0, 0), letter, size=1, prop=FontProperties(
        fname=os.path.join(matplotlib.get_data_path(), "fonts", "ttf", font)))
    polygons = [np.asarray(p, np.float64) for p in path.to_polygons(closed_only=True)]  # curves flattened
    v = np.concatenate(polygons)
    lo, hi = v.min(0), v.max(0)
    return tuple((p - (lo + hi) / 2) / (hi[1] - lo[1]) for p in polygons)


def _render(font: str, letter: str, rng: np.random.Generator, grid: np.ndarray) -> np.ndarray:
    """One SIZE×SIZE float image of `letter` with the random transform, stroke and noise of the module doc."""
    from matplotlib.path import Path

    contours = _outline(font, letter)
    side = SIZE * SUPER
    height = rng.uniform(0.45, 0.85) * side
    aspect, shear, angle = rng.uniform(0.8, 1.2), rng.uniform(-0.2, 0.2), np.deg2rad(rng.uniform(-15, 15))
    c, s = np.cos(angle), np.sin(angle)
    m = np.array([[c, -s], [s, c]]) @ np.array([[aspect, shear], [0.0, 1.0]]) * height  # (2, 2)
    centre = side / 2 + rng.uniform(-3, 3, 2) * SUPER
    mask = np.zeros(side * side, bool)
    for v in contours:  # even-odd fill (each contour toggles what it covers): the holes of A, B, O stay open
        pts = v @ m.T * np.array([1.0, -1.0]) + centre  # font y points up, image rows down
        mask ^= Path(pts, closed=True).contains_points(grid)
    mask = mask.reshape(side, side)
    mask = _stroke(mask, int(rng.integers(-1, 3)))
    img = mask.reshape(SIZE, SUPER, SIZE, SUPER).mean((1, 3))  # (SIZE, SIZE) coverage in [0, 1]
    ink, paper = rng.uniform(0.55, 1.0), rng.uniform(0.0, 0.25)
    img = paper + (ink - paper) * img + rng.normal(0, rng.uniform(0, 0.12), img.shape)
    return np.clip(img, 0, 1)


def _stroke(mask: np.ndarray, pixels: int) -> np.ndarray:
    """`mask` dilated by `pixels` (> 0) or eroded by -`pixels` (< 0) with a 3×3 cross, once per pixel."""
    for _ in range(abs(pixels)):
        p = np.pad(mask, 1, constant_values=pixels < 0)
        shifted = (p[1:-1, 1:-1], p[:-2, 1:-1], p[2:, 1:-1], p[1:-1, :-2], p[1:-1, 2:])
        mask = np.logical_or.reduce(shifted) if pixels > 0 else np.logical_and.reduce(shifted)
    return mask


def make_letters(n: int = N_IMAGES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` letter images (n, 32, 32, 1) float32 in [0, 1] and labels (n,) int64 0..25, balanced and shuffled."""
    side = SIZE * SUPER
    centres = (np.arange(side) + 0.5)
    grid = np.stack(np.meshgrid(centres, centres), -1).reshape(-1, 2)  # (side², 2) (x, y) of each sub-pixel
    rng = np.random.default_rng(seed)
    y = np.arange(n, dtype=np.int64) % len(LETTERS)
    fonts = rng.integers(len(FONTS), size=n)
    x = np.stack([_render(FONTS[f], LETTERS[label], rng, grid) for f, label in zip(fonts, y)])
    order = rng.permutation(n)
    return x[order, :, :, None].astype(np.float32), y[order]
