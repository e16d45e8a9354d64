"""mAP@0.5 (all-point, `train/detect_eval.py`): cases worked out by hand, and random cases against a second,
independent formula of the same AP — the mean over ground-truth boxes of the best precision at or after the
detection that found it."""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.data.detect import box_iou
from kilobyte.train.detect_eval import Detections, average_precision, class_ap, mean_average_precision

BOX = np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32)


def _det(boxes, scores, labels):
    return Detections(np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(scores, np.float32),
                      np.asarray(labels, np.int64))


def test_hand_worked_precision_recall():
    # TP (0.9), FP (0.8), TP (0.7) over 2 boxes: P/R = 1/0.5, 0.5/0.5, 0.667/1 -> 0.5 * 1 + 0.5 * 2/3
    d = _det([[0, 0, 10, 10], [50, 50, 60, 60], [21, 21, 30, 30]], [0.9, 0.8, 0.7], [0, 0, 0])
    assert class_ap([d], [BOX], [[0, 0]], 0) == pytest.approx(0.5 + 0.5 * 2 / 3)
    # the FP ranked first instead: 0/0, 0.5/0.5, 0.667/1 -> 0.5 * 2/3 + 0.5 * 2/3
    d = _det(d.boxes, [0.7, 0.95, 0.9], [0, 0, 0])
    assert class_ap([d], [BOX], [[0, 0]], 0) == pytest.approx(2 / 3)
    assert average_precision([0.5, 1.0], [1.0, 1.0]) == 1.0


def test_perfect_missing_duplicate_and_wrong_class():
    gt_boxes, gt_labels = [BOX, BOX[:1]], [[0, 1], [1]]
    perfect = [_det(BOX, [0.9, 0.8], [0, 1]), _det(BOX[:1], [0.5], [1])]
    assert mean_average_precision(perfect, gt_boxes, gt_labels, 3) == (1.0, [1.0, 1.0, None])
    none = [_det([], [], []), _det([], [], [])]
    assert mean_average_precision(none, gt_boxes, gt_labels, 3) == (0.0, [0.0, 0.0, None])
    # a second detection of the same box is a false positive: after the true one, AP stays 1
    twice = [_det([BOX[0], BOX[0], BOX[1]], [0.9, 0.2, 0.8], [0, 0, 1]), _det(BOX[:1], [0.5], [1])]
    assert mean_average_precision(twice, gt_boxes, gt_labels, 3)[1][0] == 1.0
    twice_first = [_det([BOX[0], BOX[0], BOX[1]], [0.9, 0.95, 0.8], [0, 0, 1]), _det(BOX[:1], [0.5], [1])]
    assert mean_average_precision(twice_first, gt_boxes, gt_labels, 3)[1][0] == 1.0  # the first one found it
    fp_first = [_det([[40, 40, 50, 50], BOX[0], BOX[1]], [0.95, 0.9, 0.8], [0, 0, 1]), _det(BOX[:1], [0.5], [1])]
    assert mean_average_precision(fp_first, gt_boxes, gt_labels, 3)[1][0] == 0.5  # recall 1 at precision 1/2
    wrong = [_det(BOX, [0.9, 0.8], [1, 0]), _det(BOX[:1], [0.5], [1])]
    assert mean_average_precision(wrong, gt_boxes, gt_labels, 3)[1][0] == 0.0
    shifted = [_det(BOX + 4, [0.9, 0.8], [0, 1]), _det(BOX[:1] + 4, [0.5], [1])]  # IoU 36/164 < 0.5
    assert box_iou(BOX[:1], BOX[:1] + 4)[0, 0] < 0.5
    assert mean_average_precision(shifted, gt_boxes, gt_labels, 3)[0] == 0.0
    assert mean_average_precision(shifted, gt_boxes, gt_labels, 3, iou=0.2)[0] == 1.0


def _oracle_ap(detections, gt_boxes, gt_labels, cls, iou=0.5):
    """AP as the mean, over ground-truth boxes, of the best precision at any rank at or after the one that found
    it (0 for a box never found) — the all-point area written as a sum over recall steps."""
    found = sorted(((d.scores[k], i, k) for i, d in enumerate(detections) for k in range(len(d.scores))
                    if d.labels[k] == cls), key=lambda f: -f[0])
    truth = [np.asarray(b).reshape(-1, 4)[np.asarray(lab) == cls] for b, lab in zip(gt_boxes, gt_labels)]
    used = [set() for _ in truth]
    hits, precision, tp = [], [], 0
    for n, (_, i, k) in enumerate(found, start=1):
        best, best_j = -1.0, None
        for j, t in enumerate(truth[i]):
            v = box_iou(detections[i].boxes[k:k + 1], t[None])[0, 0]
            if j not in used[i] and v > best:
                best, best_j = v, j
        hit = best_j is not None and best >= iou
        if hit:
            used[i].add(best_j)
            tp += 1
        hits.append(hit)
        precision.append(tp / n)
    total = sum(len(t) for t in truth)
    return sum(max(precision[n:]) for n in range(len(found)) if hits[n]) / total


@pytest.mark.parametrize("seed", range(20))
def test_random_cases_equal_the_independent_formula(seed):
    rng = np.random.default_rng(seed)
    gt_boxes, gt_labels, dets = [], [], []
    for _ in range(int(rng.integers(1, 5))):
        n = int(rng.integers(1, 5))
        xy = rng.uniform(0, 80, (n, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(8, 30, (n, 2))], 1)
        gt_boxes.append(boxes)
        gt_labels.append(rng.integers(0, 3, n))
        m = int(rng.integers(0, 7))
        pick = rng.integers(0, n, m)
        pred = boxes[pick] + rng.normal(0, 3, (m, 4))
        dets.append(_det(pred, rng.uniform(0, 1, m), np.where(rng.uniform(size=m) < 0.8, gt_labels[-1][pick],
                                                                  rng.integers(0, 3, m))))
    for cls in range(3):
        got = class_ap(dets, gt_boxes, gt_labels, cls)
        if got is not None:
            assert got == pytest.approx(_oracle_ap(dets, gt_boxes, gt_labels, cls))
