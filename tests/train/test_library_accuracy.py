"""`train.library_accuracy`: the confusion matrix against hand-counted cases, the images' quantisation against hand
values, and `evaluate_library` on small compiled classifiers against the numpy int8 reference run on images this
test prepares itself (torch's bilinear resize, TFLite's QUANTIZE: `classifier_nets.expected_classes`)."""

from __future__ import annotations

import numpy as np
import pytest
from classifier_nets import classifier_library, expected_classes, feature_map_library, two_output_library

from kilobyte.errors import KilobyteError
from kilobyte.train.library_accuracy import (
    Scores,
    confusion_matrix,
    evaluate_library,
    fit_images,
    quantize_images,
)


def test_confusion_matrix_counts_by_hand():
    labels = [0, 0, 0, 1, 1, 2, 2, 2, 2, 3]
    predicted = [0, 0, 2, 1, 0, 2, 2, 1, 2, 3]
    # by hand: class 0 -> {0: 2, 2: 1}; class 1 -> {1: 1, 0: 1}; class 2 -> {2: 3, 1: 1}; class 3 -> {3: 1}; class 4
    # has no image
    want = [[2, 0, 1, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 1, 3, 0, 0],
            [0, 0, 0, 1, 0],
            [0, 0, 0, 0, 0]]
    m = confusion_matrix(labels, predicted, 5)
    assert m.tolist() == want
    s = Scores(m)
    assert (s.images, s.correct) == (10, 7) and s.accuracy == pytest.approx(0.7)
    assert s.per_class() == [(3, 2, 2 / 3), (2, 1, 0.5), (4, 3, 0.75), (1, 1, 1.0), (0, 0, None)]


def test_quantize_images_by_hand():
    x = np.array([0.0, 0.25, 0.75, 200.0, -1.0], np.float32)
    # scale 0.5 (exact in float32): x / scale = 0, 0.5, 1.5, 400, -2; TFLite rounds halves away from zero: 0, 1, 2
    # uint8, zero point 0: 0, 1, 2, 400 -> 255 and -2 -> 0 (both clipped)
    q, clipped = quantize_images(x, {"scale": 0.5, "zero_point": 0, "dtype": "uint8"})
    assert q.dtype == np.uint8 and q.tolist() == [0, 1, 2, 255, 0] and clipped == 2
    # int8, zero point -128: -128, -127, -126, 272 -> 127 and -130 -> -128 (both clipped)
    q, clipped = quantize_images(x, {"scale": 0.5, "zero_point": -128, "dtype": "int8"})
    assert q.dtype == np.int8 and q.tolist() == [-128, -127, -126, 127, -128] and clipped == 2


def test_fit_images_repeats_one_channel_and_refuses_others():
    x = np.random.default_rng(0).random((2, 4, 4, 1)).astype(np.float32)
    y = fit_images(x, (1, 4, 4, 3), "d", "bilinear")
    assert y.shape == (2, 4, 4, 3) and all(np.array_equal(y[..., k], x[..., 0]) for k in range(3))
    with pytest.raises(KilobyteError, match="has 3 channels, the library's input has 2"):
        fit_images(np.zeros((1, 4, 4, 3), np.float32), (1, 4, 4, 2), "d", "bilinear")
    with pytest.raises(KilobyteError, match="cannot resize 4x4 images to the library's 4x6 input"):
        fit_images(x, (1, 4, 6, 1), "d", "bilinear")


@pytest.mark.parametrize("hw", [4, 6])  # the library's own size, and images resized from 6x6 to its 4x4
def test_host_evaluation_equals_the_reference(tmp_path, hw):
    project, q = classifier_library(tmp_path / "c", classes=3)
    rng = np.random.default_rng(1)
    x = rng.random((300, hw, hw, 1)).astype(np.float32)
    y = rng.integers(0, 3, 300)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    want = confusion_matrix(y, expected_classes(q, x), 3)
    assert np.count_nonzero(want.sum(axis=0)) == 3  # every class is predicted for some image: the test can fail
    ev = evaluate_library(project, str(tmp_path / "d.npz"))
    assert ev.host.confusion.tolist() == want.tolist()
    assert ev.preprocessing["resize"] == (None if hw == 4 else "bilinear")
    limited = evaluate_library(project, str(tmp_path / "d.npz"), limit=7)
    assert limited.host.confusion.tolist() == confusion_matrix(y[:7], expected_classes(q, x[:7]), 3).tolist()


def test_class_names_come_from_the_folders(tmp_path):
    from PIL import Image

    project, q = classifier_library(tmp_path / "c", classes=3)
    rng = np.random.default_rng(2)
    images = {}
    for name in ("ant", "bee", "cat"):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(4):
            a = rng.integers(0, 256, (4, 4), dtype=np.uint8)
            Image.fromarray(a).save(tmp_path / "imgs" / name / f"{i}.png")
            images.setdefault(name, []).append(a)
    ev = evaluate_library(project, str(tmp_path / "imgs"))
    assert ev.classes == ["ant", "bee", "cat"]
    x = np.stack([a for name in ("ant", "bee", "cat") for a in images[name]])[..., None] / np.float32(255)
    want = confusion_matrix(np.repeat([0, 1, 2], 4), expected_classes(q, x.astype(np.float32)), 3)
    assert ev.host.confusion.tolist() == want.tolist()


def test_one_line_errors(tmp_path):
    project, _ = classifier_library(tmp_path / "c", classes=3)
    x = np.zeros((4, 4, 4, 1), np.float32)
    cases = {
        "labels": (dict(x=x, y=np.array([0, 1, 3, 2])), "label 3 is out of range for the library's 3 classes"),
        "unlabelled": (dict(x=x), "has no labels"),
        "channels": (dict(x=np.zeros((4, 4, 4, 3), np.float32), y=np.zeros(4, int), layout="NHWC"),
                     "has 3 channels, the library's input has 1"),
    }
    for name, (arrays, message) in cases.items():
        np.savez(tmp_path / f"{name}.npz", **arrays)
        with pytest.raises(KilobyteError, match=message):
            evaluate_library(project, str(tmp_path / f"{name}.npz"))
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(KilobyteError, match="no images found in class sub-folders"):
        evaluate_library(project, str(tmp_path / "empty"))
    with pytest.raises(KilobyteError, match="no held_out.json"):
        evaluate_library(project, split="test")
    for library in (feature_map_library(tmp_path / "f"), two_output_library(tmp_path / "t")):
        with pytest.raises(KilobyteError, match="not a classifier"):
            evaluate_library(library, "digits")
    with pytest.raises(KilobyteError, match="not a compiled Kilobyte library"):
        evaluate_library(tmp_path, "digits")


def test_badly_scaled_images_are_warned_about(tmp_path):
    project, q = classifier_library(tmp_path / "c", classes=3)
    x = np.random.default_rng(3).random((50, 4, 4, 1)).astype(np.float32)  # 0..1, as calibrated
    t = q.tensors[q.inputs[0]].qparams
    represented = float(t.scale[0]) * (127 - int(t.zero_point[0])) - float(t.scale[0]) * (-128 - int(t.zero_point[0]))
    assert 0.9 < represented < 1.2  # calibrated on 0..1 images: the input represents about that span
    warnings = {}
    for name, images in (("ok", x), ("0..255", x * 255), ("tiny", x / 50)):
        np.savez(tmp_path / f"{name}.npz", x=images, y=np.zeros(50, int))
        warnings[name] = evaluate_library(project, str(tmp_path / f"{name}.npz")).warning
    assert warnings["ok"] is None
    assert "of the image values" in warnings["0..255"] and "fall outside" in warnings["0..255"]
    assert "a small part of" in warnings["tiny"]
