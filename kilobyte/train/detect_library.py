"""Training stage: the mAP@0.5 of a compiled detector library on images with boxes (`kilobyte evaluate`, issue 28).

The library's own host build runs each image — `<prefix>_invoke`, then its `<prefix>_detections` (the C
post-processing) — and, with a target, its firmware under QEMU does the same and must give the same boxes. Images
are prepared as for a classifier (`library_accuracy`: the reading that fits the input, resized to its size when it
differs, one channel repeated, TFLite's QUANTIZE); a resize scales the ground-truth boxes with the pixels, and the
library's boxes (1/16 pixel of its input) are scored in the input's pixels by `detect_eval.mean_average_precision`
(all-point AP at IoU 0.5, per class, mean over the classes with boxes).

`split="test"`: the held-out scenes a search reported its mAP on (the library's `held_out.json`, `data.held_out`), or
without that record those of a built-in set (the last fifth of `digit-scenes` or `small-digit-scenes`, whose digits
the training scenes never show).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..codegen import HostModel
from ..data.detect import BUILTIN_DETECTION, TRAIN_SHARE, DetectionSet, load_detection
from ..data.held_out import load_detection_held_out, read_held_out
from ..data.resize import fit_to_input
from ..errors import KilobyteError
from ..formats.project import manifest
from ..ops.detect_post import to_pixels
from ..targets import cortexm
from ..targets.cortexm.verify import resolve_target
from .detect_eval import Detections, mean_average_precision
from .library_accuracy import library_dir, quantize_images

SAMPLES = 8  # images kept with their boxes for the plot


@dataclass
class DetectionEvaluation:
    """mAP@0.5 of a detector library on `images` images holding `objects` boxes."""

    project: Path
    data: str
    classes: list[str]
    images: int
    objects: int
    map50: float
    ap: list[float | None]  # per class; None for a class without ground truth
    split: str | None = None
    target: str | None = None
    differing: list[int] = field(default_factory=list)  # images whose boxes on the target differ from the host's
    samples: list = field(default_factory=list)  # the first SAMPLES images: (image HWC float, true boxes, Detections)
    record: dict | None = None  # with split="test": the search's held-out record (what it reported, on which scenes)

    def to_json(self) -> dict:
        out = {"task": "detect", "dir": str(self.project), "data": self.data, "split": self.split,
               "images": self.images, "objects": self.objects, "map50": self.map50,
               "per_class": {c: a for c, a in zip(self.classes, self.ap)}, "target": self.target,
               "differing_on_target": self.differing}
        if self.record is not None:
            out["reported_map50"] = self.record["map50"]
        return out


def evaluate_detector(path, data: str | None = None, *, split: str | None = None, limit: int | None = None,
                      target: str | None = None, device=None, kernels: str | None = None,
                      progress: bool = False) -> DetectionEvaluation:
    """mAP@0.5 of the detector library in `path` on `data` (`digit-scenes` or a folder with boxes.csv); see the
    module doc."""
    if limit is not None and limit < 1:
        raise KilobyteError(f"--limit {limit}: give at least 1 image")
    project = library_dir(path)
    m = manifest(project)
    if not m.get("detect"):
        raise KilobyteError(f"{project}: not a detector library (compiled without --detect): evaluate its "
                            f"classification accuracy without --task detect")
    record = read_held_out(project) if split == "test" else None
    if record is not None:  # written by `kilobyte search --task detect`: the very scenes it reported on
        ds, data = load_detection_held_out(record, data)
    else:
        data = data or "digit-scenes"
        ds = _split(load_detection(data), data, split)
    ds = ds if limit is None else ds.take(slice(0, limit))
    in_shape = tuple(m["input"]["shape"])
    x = fit_to_input(ds.images, in_shape, data)
    sy, sx = in_shape[1] / ds.images.shape[1], in_shape[2] / ds.images.shape[2]
    truth = [b * np.array([sx, sy, sx, sy], np.float32) for b in ds.boxes]
    host = HostModel(project)
    build = None
    if target is not None or device is not None:
        core, dev = resolve_target(target, device)
        build = cortexm.build_firmware(project, core, device=dev, kernels=kernels)
    found, differing, samples = [], [], []
    what = "evaluate" + (f" ({build.target}, QEMU)" if build is not None else "")
    for i in tqdm(range(len(x)), desc=what, unit="image", delay=2, disable=not progress, leave=False):
        q, _ = quantize_images(x[i:i + 1], m["input"])
        boxes = host.detections(q)
        if build is not None and not np.array_equal(cortexm.run_qemu(build, q).detections, boxes):
            differing.append(i)
        found.append(Detections(to_pixels(boxes), boxes["score"] / 32768.0, boxes["cls"].astype(np.int64)))
        if i < SAMPLES:
            samples.append((x[i], truth[i], found[-1]))
    n_classes = int(m["detect"]["classes"])
    map50, ap = mean_average_precision(found, truth, ds.labels, n_classes)
    names = list(ds.classes) if len(ds.classes) == n_classes else [str(c) for c in range(n_classes)]
    return DetectionEvaluation(project, data, names, len(x), ds.objects, map50, ap, split,
                               build.target if build is not None else None, differing, samples, record)


def _split(ds: DetectionSet, data: str, split: str | None) -> DetectionSet:
    if split is None:
        return ds
    if split != "test":
        raise KilobyteError(f"--split {split}: the only split is 'test' (the held-out images)")
    if data not in BUILTIN_DETECTION:
        raise KilobyteError(f"--split test: known for the built-in scenes ({', '.join(BUILTIN_DETECTION)}) only; "
                            f"give {data}'s test images as their own folder")
    return ds.take(slice(int(round(len(ds.images) * TRAIN_SHARE)), None))
