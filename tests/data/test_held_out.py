"""`kilobyte.data.held_out` and `Dataset.origin`: a held-out split written down is loaded again image for image,
and data that is no longer what was measured is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.data import Origin, load_dataset
from kilobyte.data.held_out import load_held_out, read_held_out, write_held_out
from kilobyte.errors import KilobyteError


def test_origin_follows_slices_only():
    ds = load_dataset("digits", seed=3)
    assert ds.origin == Origin("digits", 3, 0, 1797)
    train, test = ds.split(1000)
    assert train.origin == Origin("digits", 3, 0, 1000) and test.origin == Origin("digits", 3, 1000, 1797)
    assert test.take(slice(10, 20)).origin == Origin("digits", 3, 1010, 1020)
    assert test.take(np.arange(5)).origin is None and test.take(slice(0, 10, 2)).origin is None


def test_the_recorded_split_loads_the_same_images(tmp_path):
    test = load_dataset("digits", seed=5).split(1500)[1]
    record = write_held_out(tmp_path, test, 0.875, by="a test")
    assert read_held_out(tmp_path) == record and record["int8_accuracy"] == 0.875 and record["images"] == 297
    again, spec = load_held_out(record)
    reference = load_dataset("digits", seed=5)  # loaded independently: rows 1500.. of the same shuffle
    assert spec == "digits"
    assert np.array_equal(again.x, reference.x[1500:]) and np.array_equal(again.y, reference.y[1500:])
    assert write_held_out(tmp_path / "none", test.take(np.arange(3)), 0.5, by="x") is None  # origin unknown


def test_changed_data_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.random((100, 6, 6, 1)).astype(np.float32), rng.integers(0, 4, 100)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    record = write_held_out(tmp_path, load_dataset(str(tmp_path / "d.npz")).split(80)[1], 0.5, by="a test")
    assert record["path"] == str(tmp_path / "d.npz") and (record["start"], record["stop"]) == (80, 100)
    np.savez(tmp_path / "copy.npz", x=x, y=y)
    assert np.array_equal(load_held_out(record, str(tmp_path / "copy.npz"))[0].x, x[80:])  # same data, other name
    y[90] = (y[90] + 1) % 4
    np.savez(tmp_path / "d.npz", x=x, y=y)
    with pytest.raises(KilobyteError, match="are not the 20 held-out images a test measured"):
        load_held_out(record)
