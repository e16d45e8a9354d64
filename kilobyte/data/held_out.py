"""Data stage: the record of which images a library's reported accuracy was measured on (`held_out.json`).

`kilobyte search` and `kilobyte demo` report an int8 test accuracy on a held-out split of their data. They write
that split down beside the C library — the data (name or path), the seed it was shuffled with, the rows
[start, stop) of `load_dataset(data, seed)`, and a digest of those images and labels — so that `kilobyte evaluate
DIR --split test` runs the library on the very same images and can say so, and refuses (one line) when the data
found under that name is no longer what was measured.

A detector's search (`kilobyte search --task detect`) writes the same record of its images with boxes: "task":
"detect", the rows [start, stop) of `load_detection(data)` (unshuffled), their digest (images, boxes, labels) and
the int8 "map50"; `kilobyte evaluate --task detect DIR --split test` reads it (`load_detection_held_out`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ..atomic import write_json
from ..errors import KilobyteError
from . import BUILTIN, Dataset, load_dataset
from .detect import BUILTIN_DETECTION, DetectionSet, load_detection

HELD_OUT_FILE = "held_out.json"


def digest(ds: Dataset) -> str:
    """A short hash of the images (as stored: before any layout guess) and labels of `ds`."""
    h = hashlib.sha256()
    x = ds.undecided if ds.undecided is not None else ds.x
    for a in (x, ds.y):
        if a is not None:
            a = np.ascontiguousarray(a)
            h.update(str((a.dtype.str, a.shape)).encode())
            h.update(a.tobytes())
    return h.hexdigest()[:16]


def held_out_record(test: Dataset, int8_accuracy: float, by: str) -> dict | None:
    """The record of a held-out split (None when `test` does not know its origin, e.g. an index-array subset)."""
    o = test.origin
    if o is None:
        return None
    path = None if o.data in BUILTIN else os.path.abspath(o.data)
    return {"data": o.data, "path": path, "seed": o.seed, "start": o.start, "stop": o.stop, "images": len(test.x),
            "digest": digest(test), "int8_accuracy": float(int8_accuracy), "by": by}


def write_held_out(project_dir, test: Dataset, int8_accuracy: float, by: str) -> dict | None:
    """Write `held_out.json` into the library's folder (atomically); returns the record, or None if unknown."""
    record = held_out_record(test, int8_accuracy, by)
    if record is None:
        return None
    write_json(Path(project_dir) / HELD_OUT_FILE, record)
    return record


def read_held_out(project_dir) -> dict | None:
    """The record in `project_dir`, or None when the library was not written by a search or the demo."""
    path = Path(project_dir) / HELD_OUT_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise KilobyteError(f"{path}: not a valid record ({e})") from None


def load_held_out(record: dict, data: str | None = None) -> tuple[Dataset, str]:
    """The held-out images of `record` and the data spec they were loaded from: `data` when given (the same data
    under another name or path), else the recorded path (files) or name. A digest that differs from the recorded
    one is a one-line error: those would not be the images the reported accuracy was measured on."""
    spec = data or _recorded_spec(record)
    test = load_dataset(spec, seed=int(record["seed"])).take(slice(int(record["start"]), int(record["stop"])))
    if len(test.x) != record["images"] or digest(test) != record["digest"]:
        raise KilobyteError(f"dataset '{spec}': images {record['start']}-{record['stop'] - 1} are not the "
                            f"{record['images']} held-out images {record['by']} measured (their digest differs); "
                            f"give the data it used ({record['data']}) with --data")
    return test, spec


def _recorded_spec(record: dict) -> str:
    path = record.get("path")
    if path and os.path.exists(path):
        return path
    return record["data"]


# -- a detector's held-out scenes --------------------------------------------------------------------------------
def detection_digest(ds: DetectionSet) -> str:
    """A short hash of the images, boxes and labels of `ds`."""
    h = hashlib.sha256()
    for a in (ds.images, *ds.boxes, *ds.labels):
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def write_detection_held_out(project_dir, data: str, test: DetectionSet, start: int, map50: float | None,
                             by: str) -> dict:
    """Write the record of a detector's held-out scenes — rows [start, start + len(test)) of `load_detection(data)`
    — into the library's folder (atomically); returns it."""
    path = None if data in BUILTIN_DETECTION else os.path.abspath(data)
    record = {"task": "detect", "data": data, "path": path, "start": int(start), "stop": int(start) + len(test.images),
              "images": len(test.images), "digest": detection_digest(test),
              "map50": None if map50 is None else float(map50), "by": by}
    write_json(Path(project_dir) / HELD_OUT_FILE, record)
    return record


def load_detection_held_out(record: dict, data: str | None = None) -> tuple[DetectionSet, str]:
    """The held-out scenes of a detector's `record` and the data spec they came from (as `load_held_out`)."""
    if record.get("task") != "detect":
        raise KilobyteError(f"{HELD_OUT_FILE}: the record of a classifier's images, not of a detector's")
    spec = data or _recorded_spec(record)
    test = load_detection(spec).take(slice(int(record["start"]), int(record["stop"])))
    if len(test.images) != record["images"] or detection_digest(test) != record["digest"]:
        raise KilobyteError(f"detection data '{spec}': scenes {record['start']}-{record['stop'] - 1} are not the "
                            f"{record['images']} held-out scenes {record['by']} measured (their digest differs); "
                            f"give the data it used ({record['data']}) with --data")
    return test, spec
