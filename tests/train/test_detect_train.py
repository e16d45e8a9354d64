"""The detector's training pieces (`train/detect.py`): anchors from k-means, YOLOv3's target assignment and its
inverse (decoding a map built from the targets gives the boxes back), augmentation that moves boxes with the
pixels, the float decoder against the integer post-processing of the runtime, and a small detector that learns
(its loss falls and its mAP on the scenes it trained on rises)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilobyte.data.detect import box_iou, make_digit_scenes
from kilobyte.ops.detect_post import DetectHead, DetectSpec, postprocess, to_pixels
from kilobyte.train.detect import (
    augment_detection,
    build_targets,
    decode,
    decode_boxes,
    detection_loss,
    fit_anchors,
    fit_detector,
    split_anchors,
    validation_map,
)
from kilobyte.train.detect_eval import Detections, mean_average_precision
from kilobyte.zoo.detector import YoloDetector

ANCHORS = (((10.0, 12.0), (20.0, 24.0)), ((40.0, 40.0),))
STRIDES = (8, 16)


def test_anchors_find_the_box_shapes():
    rng = np.random.default_rng(0)
    small = np.tile([0, 0, 10, 20], (50, 1)) + rng.normal(0, 0.3, (50, 4))
    large = np.tile([0, 0, 40, 30], (50, 1)) + rng.normal(0, 0.3, (50, 4))
    anchors = fit_anchors([small, large], 2)
    assert anchors == pytest.approx(np.array([[10, 20], [40, 30]]), abs=1.0)
    assert split_anchors(np.arange(6).reshape(3, 2), 2) == (((0.0, 1.0), (2.0, 3.0)), ((4.0, 5.0),))


def test_targets_by_hand_and_decoding_inverts_them():
    boxes = [np.array([[30, 34, 50, 58], [0, 0, 44, 36]], np.float32)]  # 20x24 -> head 0 anchor 1; 44x36 -> head 1
    targets = build_targets(boxes, [np.array([3, 1])], ANCHORS, STRIDES, (64, 64), 4)
    assert np.argwhere(targets[0]["mask"]).tolist() == [[0, 1, 5, 5]]  # centre (40, 46) / 8 -> cell (5, 5)
    t = targets[0]["t"][0, 1, 5, 5]
    assert t == pytest.approx([0.0, 0.75, 0.0, 0.0]) and targets[0]["cls"][0, 1, 5, 5] == 3
    assert np.argwhere(targets[1]["mask"]).tolist() == [[0, 0, 1, 1]]  # centre (22, 18) / 16 -> (1, 1)
    assert targets[1]["t"][0, 0, 1, 1] == pytest.approx([22 / 16 - 1, 18 / 16 - 1, np.log(44 / 40), np.log(36 / 40)])
    # a map holding the targets (sigmoid^-1 of the offsets) decodes to the boxes
    for head, (group, stride) in enumerate(zip(ANCHORS, STRIDES)):
        a, h = len(group), 64 // stride
        raw = torch.zeros(1, a * 9, h, h)
        for _, j, y, x in np.argwhere(targets[head]["mask"]):
            tx, ty, tw, th = np.clip(targets[head]["t"][0, j, y, x], 1e-4, None).tolist()[:2] + \
                targets[head]["t"][0, j, y, x, 2:].tolist()
            raw[0, j * 9:j * 9 + 4, y, x] = torch.tensor([np.log(tx / (1 - tx)), np.log(ty / (1 - ty)), tw, th])
            got = decode_boxes(raw, group, stride)[0, j, y, x].numpy()
            assert box_iou(got[None], boxes[0]).max() > 0.999


def test_augmentation_moves_the_boxes_with_the_pixels():
    x = torch.zeros(16, 1, 64, 64)
    x[:, :, 20:30, 10:24] = 1.0
    boxes = [np.array([[10, 20, 24, 30]], np.float32)] * 16
    out, moved, labels = augment_detection(x, boxes, [np.array([7])] * 16, torch.Generator().manual_seed(1))
    assert not torch.equal(out, x)
    for img, b, lab in zip(out, moved, labels):
        ys, xs = np.nonzero(img[0].numpy() > 0.5)
        if not len(b):  # dropped: most of the square left the image
            assert len(ys) < 0.4 * 140
            continue
        assert lab.tolist() == [7]
        x0, y0, x1, y1 = b[0]
        assert x0 - 1 <= xs.min() and xs.max() + 1 <= x1 + 1 and y0 - 1 <= ys.min() and ys.max() + 1 <= y1 + 1


def test_float_decoding_agrees_with_the_integer_post_processing():
    """The same int8 head maps through `decode` (dequantised, float) and `ops.detect_post.postprocess` (integers):
    the same boxes within an eighth of a pixel, the same classes, in the same order."""
    rng = np.random.default_rng(5)
    scale, zero = 0.08, -10
    q = [np.clip(rng.normal(0, 45, (1, len(g) * 9, 64 // s, 64 // s)), -128, 127).astype(np.int8)
         for g, s in zip(ANCHORS, STRIDES)]
    q[0][0, 4, 3, 2] = q[0][0, 9 + 4, 6, 1] = 127  # a few sure boxes
    floats = [torch.as_tensor((m.astype(np.float32) - zero) * scale) for m in q]
    boxes, scores, classes = decode(floats, ANCHORS, STRIDES, 4, score_threshold=0.4, iou_threshold=0.5,
                                    max_detections=10)[0]
    heads = tuple(DetectHead(64 // s, 64 // s, s, g, scale, zero) for g, s in zip(ANCHORS, STRIDES))
    spec = DetectSpec(heads, 4, 64, 64, score_threshold=0.4, iou_threshold=0.5, max_candidates=1000,
                      max_detections=10)
    ints = postprocess(spec, [m[0].transpose(1, 2, 0) for m in q])  # NCHW -> the runtime's NHWC map
    assert len(ints) == len(boxes) >= 3
    assert ints["cls"].tolist() == classes.tolist()
    assert np.abs(ints["score"] / 32768 - scores).max() < 1e-3
    assert np.abs(to_pixels(ints) - boxes).max() <= 0.125


@pytest.mark.parametrize("heads", [1, 2])
def test_a_small_detector_learns_the_scenes_it_sees(heads):
    torch.manual_seed(0)
    scenes = make_digit_scenes(16, seed=1, size=64, digit_px=(16, 28))
    anchors = split_anchors(fit_anchors(scenes.boxes, 2 * heads), heads)
    strides = STRIDES if heads == 2 else (16,)
    model = YoloDetector(10, anchors, width=0.5)
    x = torch.as_tensor(scenes.images).permute(0, 3, 1, 2)
    assert [o.shape[1:] for o in model(x[:1])] == [(len(a) * 15, 64 // s, 64 // s) for a, s in zip(anchors, strides)]
    opt = torch.optim.Adam(model.parameters(), 3e-3)

    def score():
        model.eval()
        found = decode(model(x), anchors, strides, 10)
        model.train()
        return mean_average_precision([Detections(*f) for f in found], scenes.boxes, scenes.labels, 10)[0]

    before = score()
    losses = []
    for _ in range(150):
        loss, parts = detection_loss(model(x), scenes.boxes, scenes.labels, anchors, strides, 10)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0] and set(parts) == {"box", "obj", "cls"}
    after = score()
    print(f"mAP {before:.3f} -> {after:.3f}, loss {losses[0]:.1f} -> {losses[-1]:.2f}")
    assert after > max(0.5, before + 0.4)


def test_fit_detector_keeps_its_best_epoch():
    scenes = make_digit_scenes(40, seed=2, size=64, digit_px=(16, 28))
    train, val = scenes.split(32)
    anchors = split_anchors(fit_anchors(train.boxes, 2), 1)
    torch.manual_seed(0)
    model = YoloDetector(10, anchors, width=0.35)
    result = fit_detector(model, train, val, epochs=4, batch_size=16, augment=True)
    maps = [h["map50"] for h in result["history"]]
    assert len(maps) == 4 and result["best_map50"] == max(maps) and maps[result["best_epoch"]] == max(maps)
    assert result["history"][-1]["loss"] < result["history"][0]["loss"]
    again = validation_map(model, val.images, val.boxes, val.labels, model.anchors, model.strides, 10)
    assert again == pytest.approx(result["best_map50"])  # the best epoch's weights are the model's
