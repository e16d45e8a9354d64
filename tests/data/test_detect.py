"""Detection data (issue 28): the built-in digit scenes are deterministic, their boxes lie inside the canvas, hold
the digit's ink and overlap little; a user folder of images + boxes.csv reads back the boxes it was written with,
and each kind of bad input is a one-line error naming the file."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

from kilobyte.data.detect import CSV_HEADER, INK_LEVEL, box_iou, load_detection, make_digit_scenes
from kilobyte.errors import KilobyteError


@pytest.fixture(scope="module")
def scenes():
    return make_digit_scenes(60, seed=3)


def test_box_iou_by_hand():
    a = np.array([[0, 0, 10, 10]])
    b = np.array([[5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 10, 10], [2, 2, 2, 8]])
    assert box_iou(a, b)[0].tolist() == pytest.approx([50 / 150, 0.0, 1.0, 0.0])
    assert box_iou(b, a).shape == (4, 1)


def test_scenes_are_deterministic_and_seeded(scenes):
    again = make_digit_scenes(60, seed=3)
    assert np.array_equal(again.images, scenes.images)
    assert all(np.array_equal(p, q) for p, q in zip(again.boxes, scenes.boxes))
    other = make_digit_scenes(60, seed=4)
    assert not np.array_equal(other.images, scenes.images)


def test_boxes_inside_hold_ink_and_barely_overlap(scenes):
    size = scenes.images.shape[1]
    assert scenes.images.shape == (60, 128, 128, 1) and 0 <= scenes.images.min() and scenes.images.max() <= 1
    counts = [len(b) for b in scenes.boxes]
    assert min(counts) >= 1 and max(counts) == 4 and 100 < sum(counts) < 240
    for image, boxes, labels in zip(scenes.images, scenes.boxes, scenes.labels):
        assert len(boxes) == len(labels) and set(labels.tolist()) <= set(range(10))
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2:] <= size).all() and (boxes[:, 2:] > boxes[:, :2]).all()
        iou = box_iou(boxes, boxes)
        assert (iou[~np.eye(len(boxes), dtype=bool)] <= 0.1 + 1e-9).all()
        for x0, y0, x1, y1 in boxes.astype(int):
            assert 1 <= x1 - x0 <= 70 and 8 <= y1 - y0 <= 70  # a '1' can be 2 px wide
            # the digit is drawn at contrast >= 0.6: its box holds pixels at least that bright above the ink level
            assert image[y0:y1, x0:x1].max() >= 0.6 * INK_LEVEL


def test_a_user_folder_reads_back_its_boxes(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("a.png", "b.png", "c.png"):
        Image.fromarray(rng.integers(0, 255, (40, 60), dtype=np.uint8)).save(tmp_path / name)
    rows = [("a.png", 1, 2, 11, 22, "cat"), ("a.png", 30, 5, 59, 40, "dog"), ("c.png", 0, 0, 60, 40, "cat")]
    (tmp_path / "boxes.csv").write_text(",".join(CSV_HEADER) + "\n" + "".join(",".join(map(str, r)) + "\n"
                                                                                for r in rows))
    ds = load_detection(str(tmp_path))
    assert ds.images.shape == (3, 40, 60, 1) and ds.classes == ("cat", "dog")
    assert ds.boxes[0].tolist() == [[1, 2, 11, 22], [30, 5, 59, 40]] and ds.labels[0].tolist() == [0, 1]
    assert ds.boxes[1].shape == (0, 4) and ds.labels[2].tolist() == [0]
    train, test = ds.split(2)
    assert len(train.images) == 2 and test.boxes[0].tolist() == [[0, 0, 60, 40]]


@pytest.mark.parametrize("table, message", [
    (None, "no boxes.csv"),
    ("image,x0,y0,x1,y1,class\n", "expected image,x_min"),
    ("image,x_min,y_min,x_max,y_max,class\nz.png,0,0,5,5,cat\n", "no image 'z.png'"),
    ("image,x_min,y_min,x_max,y_max,class\na.png,0,0,5\n", "4 fields"),
    ("image,x_min,y_min,x_max,y_max,class\na.png,0,0,five,5,cat\n", "not four numbers"),
    ("image,x_min,y_min,x_max,y_max,class\na.png,0,0,61,5,cat\n", "outside its 60x40 pixels"),
])
def test_bad_folders_are_one_line_errors(tmp_path, table, message):
    Image.fromarray(np.zeros((40, 60), np.uint8)).save(tmp_path / "a.png")
    if table is not None:
        (tmp_path / "boxes.csv").write_text(table)
    with pytest.raises(KilobyteError, match=message) as e:
        load_detection(str(tmp_path))
    assert "\n" not in str(e.value)
    with pytest.raises(KilobyteError, match="not a folder with boxes.csv"):
        load_detection(str(tmp_path / "nothing"))


def test_small_digit_scenes_need_a_patch_schedule_at_their_own_resolution_on_a_256_kb_part():
    """`small-digit-scenes` exists for MCUNetV2's patch-based detection: at its own 224 px, no sampled detector of the
    search's space fits STM32F412's 256 KB per layer, and every one fits with a patch schedule; the scenes are
    224 px with boxes inside."""
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.search import SearchConfig, plan_options, search_budget, search_space

    ds = load_detection("small-digit-scenes")
    assert ds.name == "small-digit-scenes" and ds.images.shape == (2000, 224, 224, 1)
    assert all(((b >= 0) & (b <= 224)).all() for b in ds.boxes) and 4000 < ds.objects < 6000
    joint = SearchConfig("stm32f412", 256 * 1024, 1024 * 1024, task="detect", patch=True)
    per_layer = SearchConfig("stm32f412", 256 * 1024, 1024 * 1024, task="detect")
    space = search_space(joint, 1, 10, 224)
    assert 224 in space.resolutions and space == search_space(per_layer, 1, 10, 224)
    rng = np.random.default_rng(0)
    archs = [space.sample(rng) for _ in range(4)]
    archs = [dataclasses.replace(a, resolution=224) for a in archs]
    budget = search_budget(per_layer)
    flat, patched = ResourceEvaluator(space, plan_options(per_layer)), ResourceEvaluator(space, plan_options(joint))
    assert not any(flat.fits(a, budget) for a in archs)
    assert all(patched.fits(a, budget) for a in archs)
