"""Training stage: the accuracy of a compiled C library on labelled images (`kilobyte evaluate`).

What the user will ship is the library, not the float model: this runs the library's own host build (`HostModel`,
the C code through ctypes) — and, with a target, its firmware under QEMU — on a test set and counts, per class,
which label the int8 scores pick. The images are prepared exactly as the search and the demo prepare the held-out
images whose int8 accuracy they report (`nas.search.deploy_module`, `cli.demo_cmd`), so on those images the
numbers are equal:

1. the reading of the data that fits the library's input (`data.choose_reading`), values as loaded ([0, 1]);
2. a resize to the input's size when it differs — `data.resize_images`, bilinear with half-pixel centres, the one
   resize of training, calibration and the RESIZE_BILINEAR a search puts at the front of its library (so a search's
   library takes the data's images and nothing is resized here; `resize="nearest"` only when asked) — and one
   channel repeated to the input's channels;
3. TFLite's QUANTIZE with the input's scale and zero point (`ops.arith.quantize_values`);
4. the class = argmax of the one int8 output (1, ..., N) (the first on ties, as numpy and the search do).

Images run in chunks (memory stays bounded for large inputs), one ctypes call each without per-call allocation
(`HostModel.run_batch`). The firmware is built once and each image is one QEMU run (~0.1 s).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..codegen import HostModel
from ..codegen.library import is_classifier
from ..data import choose_reading, load_dataset
from ..data.held_out import HELD_OUT_FILE, load_held_out, read_held_out
from ..data.resize import MODES, fit_to_input
from ..errors import KilobyteError
from ..formats.project import manifest
from ..ops.arith import quantize_values, round_half_away
from ..targets import cortexm  # called as cortexm.run_qemu: a test replaces it there
from ..targets.cortexm.verify import resolve_target

CHUNK = 256  # images prepared and run at a time
RESIZES = MODES  # `data.resize_images` modes; bilinear unless the user asks


def confusion_matrix(labels, predictions, n_classes: int) -> np.ndarray:
    """(n_classes, n_classes) counts: entry [i, j] = images of label i predicted as class j.

    >>> confusion_matrix([0, 1, 1, 2], [0, 2, 1, 2], 3).tolist()
    [[1, 0, 0], [0, 1, 1], [0, 0, 1]]
    """
    labels, predictions = np.asarray(labels, np.int64), np.asarray(predictions, np.int64)
    return np.bincount(labels * n_classes + predictions, minlength=n_classes * n_classes).reshape(n_classes, -1)


@dataclass(frozen=True)
class Scores:
    """Accuracy figures of one engine, all derived from its confusion matrix (rows: label, columns: predicted)."""

    confusion: np.ndarray  # (classes, classes) int64

    @property
    def images(self) -> int:
        return int(self.confusion.sum())

    @property
    def correct(self) -> int:
        return int(np.trace(self.confusion))

    @property
    def accuracy(self) -> float:
        return self.correct / self.images if self.images else 0.0

    def per_class(self) -> list[tuple[int, int, float | None]]:
        """(images, correct, accuracy or None when the class has no image) for each class."""
        rows = self.confusion.sum(axis=1)
        return [(int(n), int(self.confusion[i, i]), float(self.confusion[i, i] / n) if n else None)
                for i, n in enumerate(rows)]

    def to_json(self, names: list[str]) -> dict:
        return {"images": self.images, "correct": self.correct, "accuracy": self.accuracy,
                "per_class": [{"class": name, "images": n, "correct": c, "accuracy": a}
                              for name, (n, c, a) in zip(names, self.per_class())],
                "confusion": self.confusion.tolist()}


@dataclass
class LibraryEvaluation:
    """The result of `evaluate_library`: the host C build's scores, and the target's on the same images."""

    project: Path
    data: str
    classes: list[str]  # the name of each class (a folder's sub-folder names, else the label numbers)
    preprocessing: dict
    host: Scores
    split: dict | None = None  # with split="test": the held-out record (what was reported, on which images)
    hint: str | None = None  # a note for the reader (e.g. the reported accuracy is on a split of this data)
    warning: str | None = None  # the images' values do not look like the range the input represents
    target: str | None = None
    on_target: Scores | None = None
    differing: list[int] = field(default_factory=list)  # images whose target output differs from the host's

    @property
    def same_images_as_report(self) -> bool:
        """All the held-out images the reported int8 accuracy was measured on (split="test" and no smaller limit)."""
        return self.split is not None and self.host.images == self.split["images"]

    def to_json(self) -> dict:
        out = {"model_dir": str(self.project), "data": self.data, "classes": self.classes,
               "preprocessing": self.preprocessing, "host": self.host.to_json(self.classes),
               "accuracy": self.host.accuracy, "split": self.split, "note": self.hint, "warning": self.warning,
               "target": None}
        if self.split is not None:
            out["reported_int8_accuracy"] = self.split["int8_accuracy"]
            out["same_images_as_report"] = self.same_images_as_report
        if self.on_target is not None:
            out["target"] = {"core": self.target, **self.on_target.to_json(self.classes),
                             "equal_to_host": not self.differing, "differing_images": self.differing}
        return out


def library_dir(path) -> Path:
    """The compiled library in `path`: the folder itself, or the `model/` a search writes into its output folder."""
    path = Path(path)
    for candidate in (path, path / "model"):
        if (candidate / "kilobyte.json").is_file():
            return candidate
    raise KilobyteError(f"{path}: not a compiled Kilobyte library (no kilobyte.json), nor a search's output folder "
                        "(no model/kilobyte.json)")


def class_count(project: Path, m: dict) -> int:
    """N of the library's one output (1, ..., N) of class scores; a one-line error for anything else."""
    outputs = m.get("outputs", [m["output"]])
    if not is_classifier(outputs):
        shapes = ", ".join("x".join(str(d) for d in o["shape"]) for o in outputs)
        raise KilobyteError(f"{project}: not a classifier — evaluate needs one int8 output of shape (1, N), class "
                            f"scores; this library has {len(outputs)} output(s): {shapes}")
    return int(outputs[0]["shape"][-1])


def check_labels(ds, spec: str, n_classes: int) -> None:
    if len(ds.x) == 0:
        raise KilobyteError(f"dataset '{spec}': no images")
    if ds.y is None:
        raise KilobyteError(f"dataset '{spec}' has no labels ('y' in a .npz, or class sub-folders)")
    bad = ds.y[(ds.y < 0) | (ds.y >= n_classes)]
    if len(bad):
        worst = int(bad.max()) if bad.max() >= n_classes else int(bad.min())  # the largest, else the most negative
        raise KilobyteError(f"dataset '{spec}': label {worst} is out of range for the library's {n_classes} "
                            f"classes (0-{n_classes - 1}); {len(bad)} image(s) have such labels")


def fit_images(x: np.ndarray, in_shape: tuple[int, ...], spec: str, resize: str) -> np.ndarray:
    """NHWC images `x` in the library's input size and channels (`data.resize.fit_to_input`)."""
    return fit_to_input(x, in_shape, spec, resize, what="the library's")


def quantize_images(x: np.ndarray, m_input: dict) -> tuple[np.ndarray, int]:
    """TFLite QUANTIZE of float images with the library input's scale, zero point and type (int8 or uint8);
    returns the integers and how many values were clipped to the type's range."""
    scale, zp, dtype = m_input["scale"], m_input["zero_point"], np.dtype(m_input["dtype"])
    q = round_half_away(np.asarray(x, np.float32) / np.float32(scale)) + zp  # float32, as QUANTIZE computes it
    info = np.iinfo(dtype)
    clipped = int(np.count_nonzero((q < info.min) | (q > info.max)))
    if dtype == np.int8:
        return quantize_values(x, scale, zp), clipped
    return np.clip(q, info.min, info.max).astype(dtype), clipped


def describe_preprocessing(x: np.ndarray, in_shape, m_input: dict, resize: str) -> dict:
    """What is done to the images `x` (as read, NHWC), for the report: sizes, resize, channel repeat, quantisation
    parameters, and the range of the values (the library's scale was calibrated on [0, 1] images by Kilobyte)."""
    _, h, w, c = in_shape
    same = tuple(x.shape[1:3]) == (h, w)
    return {"data_shape": list(x.shape[1:]), "input_shape": [h, w, c], "resize": None if same else resize,
            "channels_repeated": int(x.shape[3]) != c, "value_range": [float(x.min()), float(x.max())],
            "dtype": m_input["dtype"], "scale": m_input["scale"], "zero_point": m_input["zero_point"]}


def range_warning(p: dict) -> str | None:
    """A warning when the images' values do not fit the float range the library's input represents, scale * (q -
    zero point) over its type: over 1 % of them clipped, or all of them within a tenth of it (e.g. images in 0..1 fed
    to a model trained on 0..255) — the accuracy is then that of badly scaled images."""
    info = np.iinfo(np.dtype(p["dtype"]))
    lo_in, hi_in = p["scale"] * (info.min - p["zero_point"]), p["scale"] * (info.max - p["zero_point"])
    lo, hi = p["value_range"]
    span = f"the {lo_in:.4g}..{hi_in:.4g} the library's input represents"
    if p["values"] and p["clipped_values"] > 0.01 * p["values"]:
        return (f"{p['clipped_values'] / p['values']:.1%} of the image values ({lo:.4g}..{hi:.4g}) fall outside "
                f"{span}: scale the images as the model was trained")
    if hi - lo < 0.1 * (hi_in - lo_in):
        return f"the images span {lo:.4g}..{hi:.4g}, a small part of {span}: scale them as the model was trained"
    return None


# -- the run ---------------------------------------------------------------------------------------------------------
def evaluate_library(path, data: str | None = None, *, split: str | None = None, limit: int | None = None,
                     target: str | None = None, device=None, kernels: str | None = None, resize: str = "bilinear",
                     progress: bool = False) -> LibraryEvaluation:
    """Accuracy, per class and as a confusion matrix, of the library in `path` (or a search's output folder) on the
    labelled images `data` (mnist, digits, a .npz, a folder of class sub-folders); `split="test"`: on the held-out
    images its reported int8 accuracy was measured on (`data.held_out`; `data` then defaults to the recorded one).
    `limit`: the first `limit` images only. `target` (a Cortex-M core, or from `device`): the firmware also runs each
    image under QEMU, and every output is compared with the host build's. `device` over budget: `DoesNotFitError`."""
    if resize not in RESIZES:
        raise KilobyteError(f"resize '{resize}': use one of {', '.join(RESIZES)}")
    if limit is not None and limit < 1:
        raise KilobyteError(f"--limit {limit}: give at least 1 image")
    project = library_dir(path)
    m = manifest(project)
    n_classes = class_count(project, m)
    in_shape = tuple(m["input"]["shape"])
    if len(in_shape) != 4:
        raise KilobyteError(f"{project}: the input {in_shape} is not an image (1, H, W, C); evaluate takes images")
    ds, spec, record, hint = _dataset(project, data, split)
    ds = ds if limit is None else ds.take(slice(0, limit))
    check_labels(ds, spec, n_classes)
    x = choose_reading(ds, in_shape, spec)  # (n, h, w, c) float32, as loaded
    names = [ds.classes[i] if ds.classes and i < len(ds.classes) else str(i) for i in range(n_classes)]
    run = _Run(project, m, in_shape, spec, resize, _firmware(project, target, device, kernels))
    predictions, target_predictions = run.all(x, progress)
    prep = {**describe_preprocessing(x, in_shape, m["input"], resize), "clipped_values": run.clipped,
            "values": run.values}
    ev = LibraryEvaluation(project, spec, names, prep, Scores(confusion_matrix(ds.y, predictions, n_classes)),
                           split=record, hint=hint, warning=range_warning(prep))
    if run.build is not None:
        ev.target, ev.differing = run.build.target, run.differing
        ev.on_target = Scores(confusion_matrix(ds.y, target_predictions, n_classes))
    return ev


def _dataset(project: Path, data: str | None, split: str | None):
    """(images, their data spec, the held-out record when split="test", a hint) for `evaluate_library`."""
    record = read_held_out(project)
    if split is None:
        if data is None:
            raise KilobyteError("give the labelled images with --data (mnist, digits, a .npz or a folder of class "
                                "sub-folders), or --split test for the held-out images the library was reported on")
        hint = None
        if record is not None and (data == record["data"] or os.path.abspath(data) == record.get("path")):
            hint = (f"{record['by']} reported int8 accuracy {record['int8_accuracy'] * 100:.2f} % on "
                    f"{record['images']} held-out images of this data; --split test evaluates exactly those")
        return load_dataset(data), data, None, hint
    if split != "test":
        raise KilobyteError(f"--split {split}: the only split is 'test' (the held-out images)")
    if record is None:
        raise KilobyteError(f"{project}: no {HELD_OUT_FILE} (written by `kilobyte search` and `kilobyte demo`), so "
                            "the held-out split is unknown; give the test images with --data")
    ds, spec = load_held_out(record, data)
    return ds, spec, record, None


def _firmware(project: Path, target: str | None, device, kernels: str | None):
    """The firmware built once for `target` / `device` (None without either)."""
    if target is None and device is None:
        return None
    core, dev = resolve_target(target, device)
    return cortexm.build_firmware(project, core, device=dev, kernels=kernels)


class _Run:
    """Images through the library in chunks: prepared, quantised, run on the host (and the target)."""

    def __init__(self, project: Path, m: dict, in_shape, spec: str, resize: str, build):
        self.host, self.m, self.in_shape, self.spec, self.resize = HostModel(project), m, in_shape, spec, resize
        self.build, self.clipped, self.values, self.differing = build, 0, 0, []

    def all(self, x: np.ndarray, progress: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Predicted classes of every image of `x` on the host, and on the target (or None)."""
        host, on_target = [], []
        what = "evaluate" + (f" ({self.build.target}, QEMU)" if self.build is not None else "")
        with tqdm(total=len(x), desc=what, unit="image", delay=2, disable=not progress, leave=False) as bar:
            for start in range(0, len(x), CHUNK):
                q, clipped = quantize_images(fit_images(x[start:start + CHUNK], self.in_shape, self.spec,
                                                        self.resize), self.m["input"])
                self.clipped, self.values = self.clipped + clipped, self.values + q.size
                ys = self.host.run_batch(q).reshape(len(q), -1)  # (n, classes) int8 scores
                host.append(ys.argmax(axis=1))
                if self.build is not None:
                    on_target.append(self._on_target(q, ys, start, bar))
                else:
                    bar.update(len(q))
        return np.concatenate(host), (np.concatenate(on_target) if self.build is not None else None)

    def _on_target(self, q: np.ndarray, host_ys: np.ndarray, start: int, bar) -> np.ndarray:
        """Each image of `q` under QEMU: its predicted class; an output unlike the host's is recorded."""
        classes = []
        for i, (x, want) in enumerate(zip(q, host_ys)):
            got = cortexm.run_qemu(self.build, x).output.reshape(-1).view(want.dtype)
            if not np.array_equal(got, want):
                self.differing.append(start + i)
            classes.append(int(got.argmax()))
            bar.update(1)
        return np.array(classes, np.int64)
