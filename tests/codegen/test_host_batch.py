"""`HostModel.run_batch`: many inputs through the library in one call, each output equal to the numpy int8
reference's (and so to a call per input)."""

from __future__ import annotations

import numpy as np
from classifier_nets import classifier_library, two_output_library

from kilobyte.codegen import HostModel
from kilobyte.interp import run_int8


def test_run_batch_equals_the_reference(tmp_path):
    project, q = classifier_library(tmp_path / "c", hw=5, channels=2, classes=7)
    host = HostModel(project)
    xs = np.random.default_rng(0).integers(-128, 128, (40, 5, 5, 2)).astype(np.int8)
    ys = host.run_batch(xs)
    assert ys.shape == (40, 1, 7) and ys.dtype == np.int8
    for x, y in zip(xs, ys):
        assert np.array_equal(y, run_int8(q, x[None])[q.outputs[0]])
    assert np.array_equal(host.run_batch(xs[:, None]), ys)  # the input's batch of 1 may be given too
    assert host.run_batch(xs[:0]).shape == (0, 1, 7)


def test_run_batch_with_two_outputs(tmp_path):
    host = HostModel(two_output_library(tmp_path / "t"))
    xs = np.random.default_rng(1).integers(-128, 128, (5, 1, 4, 4, 1)).astype(np.int8)
    ys = host.run_batch(xs)
    assert ys.shape == (5, 6) and all(np.array_equal(y, host(x)) for x, y in zip(xs, ys))
