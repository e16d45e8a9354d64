"""Train stage: mean average precision of detections, at one IoU threshold (mAP@0.5 by default).

All-point interpolated AP (Pascal VOC from 2010 on, and COCO's per-threshold AP without its 101-point sampling):
per class, detections of every image sorted by score (highest first; equal scores keep image order, then the
order given), each matched to the unmatched ground-truth box of its class in its image with the highest IoU, a
true positive when that IoU is at least the threshold, else a false positive (a second detection of a matched box
is a false positive). AP is the area under the precision–recall curve after making precision monotone
(each point's precision = the highest at any recall at or above it). mAP is the mean over the classes with at
least one ground-truth box; a class with boxes but no detection scores 0. VOC's "difficult" flag does not exist
here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.detect import box_iou


@dataclass(frozen=True)
class Detections:
    """One image's detections: boxes (K, 4) as x_min, y_min, x_max, y_max in pixels, scores (K,), labels (K,)."""

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """The area under a precision–recall curve (points in detection order), precision made monotone."""
    r = np.concatenate([[0.0], np.asarray(recall, np.float64), [1.0]])
    p = np.concatenate([[0.0], np.asarray(precision, np.float64), [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]
    steps = np.nonzero(r[1:] != r[:-1])[0]
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


def class_ap(detections: list[Detections], gt_boxes, gt_labels, cls: int, iou: float = 0.5) -> float | None:
    """AP of class `cls` over all images (None when no image has a ground-truth box of it)."""
    truth = [np.asarray(b, np.float64).reshape(-1, 4)[np.asarray(lab) == cls] for b, lab in zip(gt_boxes, gt_labels)]
    total = sum(len(t) for t in truth)
    if total == 0:
        return None
    found = [(float(d.scores[k]), i, k) for i, d in enumerate(detections) for k in np.nonzero(d.labels == cls)[0]]
    found.sort(key=lambda f: -f[0])  # stable: equal scores keep image order, then the order given
    matched = [np.zeros(len(t), bool) for t in truth]
    tp = np.zeros(len(found))
    for n, (_, i, k) in enumerate(found):
        if not len(truth[i]):
            continue
        overlaps = box_iou(detections[i].boxes[k:k + 1], truth[i])[0]
        overlaps[matched[i]] = -1.0
        j = int(np.argmax(overlaps))
        if overlaps[j] >= iou:
            matched[i][j] = True
            tp[n] = 1.0
    hits = np.cumsum(tp)
    return average_precision(hits / total, hits / np.arange(1, len(found) + 1)) if found else 0.0


def mean_average_precision(detections: list[Detections], gt_boxes, gt_labels, n_classes: int,
                           iou: float = 0.5) -> tuple[float, list[float | None]]:
    """(mAP, AP of each class, None for a class without ground truth) over the images of `detections`."""
    if len(detections) != len(gt_boxes) or len(gt_boxes) != len(gt_labels):
        raise ValueError(f"{len(detections)} images of detections for {len(gt_boxes)} of ground truth")
    per_class = [class_ap(detections, gt_boxes, gt_labels, c, iou) for c in range(n_classes)]
    scored = [a for a in per_class if a is not None]
    return (float(np.mean(scored)) if scored else 0.0), per_class
