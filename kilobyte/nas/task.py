"""Search stage: what TinyNAS's training, fitness and time budget ask of the task — a classifier's labels or a
detector's boxes (issue 28).

The supernet phases, a subnet's fitness and the step timings (`supernet_train`, `budget`) handle a split as
(images, targets) and ask the task for the rest:

- `tensors(split, resolution)`: the split's images as an NCHW tensor at the resolution (`data.resize_images`, as
  every stage resizes) and its targets — a label tensor, or per-image boxes scaled with the pixels and labels;
- `take(targets, rows)`: the targets of a batch; `augment(x, targets, generator, shift)`: the batch as trained
  (a classifier: the random shift of `SupernetTraining.shift`; a detector: `train.detect.augment_detection`, zoom
  and shift moving the boxes);
- `loss(outputs, targets)`: cross-entropy, or YOLOv3's loss (`train.detect.detection_loss`);
- `optimizer(params, cfg, phase)` and `clip`: how a phase steps — a classifier: SGD with Nesterov momentum at
  `SupernetTraining`'s rates (the measured ones, docs/search.md); a detector: AdamW at `train.detect.LR` with the
  gradient norm clipped to `CLIP_NORM`, as `train.fit_detector` trains one (SGD at the classifier's rates diverged
  on YOLOv3's loss, a sum over the anchors: NaN within one epoch);
- `images(split)`: the split's NHWC images, as the data holds them;
- `score(net, x, targets)`: the fitness — top-1 accuracy, or mAP@0.5 (all-point, `train.detect_eval`) of the
  float detections (`train.detect.decode`); `chance(targets)`: the fitness of a network that learned nothing.

Both are small frozen dataclasses, pickled to the pool's workers inside `supernet_train.ScorerSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from ..data.resize import resize_images
from ..train import to_nchw_tensor
from ..train.detect import CLIP_NORM, LR, WEIGHT_DECAY, augment_detection, decode, detection_loss, fit_anchors
from ..train.detect_eval import Detections, mean_average_precision

SCORE_BATCH = 250


def shift_batch(x, pixels: int, g):
    """Each image of the NCHW batch `x` moved by a random integer offset in [-pixels, pixels] per axis,
    zero-filled."""
    import torch
    import torch.nn.functional as F

    if pixels <= 0:
        return x
    n, _, h, w = x.shape
    padded = F.pad(x, (pixels, pixels, pixels, pixels))
    dy = torch.randint(0, 2 * pixels + 1, (n,), generator=g)
    dx = torch.randint(0, 2 * pixels + 1, (n,), generator=g)
    rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None].expand(n, x.shape[1], h, w + 2 * pixels)
    out = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :].expand(n, x.shape[1], h, w)
    return out.gather(3, cols)


@dataclass(frozen=True)
class Classify:
    """Labelled images (`data.Dataset`: x NHWC, y int labels); fitness: top-1 accuracy."""

    kind: ClassVar[str] = "classify"
    clip: ClassVar[float | None] = None

    def optimizer(self, params, cfg, phase: str):
        """(optimizer, peak rate) of a training phase: SGD, Nesterov momentum; the supernet phase at its own rate."""
        import torch

        peak = cfg.supernet_lr if phase == "supernet" and cfg.supernet_lr is not None else cfg.lr
        return torch.optim.SGD(params, lr=peak, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                               nesterov=True), peak

    def images(self, split):
        """The split's NHWC images."""
        return split.x

    def tensors(self, split, resolution: int):
        import torch

        return to_nchw_tensor(split.x, resolution), torch.from_numpy(split.y)

    def take(self, targets, rows):
        return targets[rows]

    def augment(self, x, targets, g, shift: int):
        return shift_batch(x, shift, g), targets

    def loss(self, outputs, targets):
        import torch.nn.functional as F

        return F.cross_entropy(outputs, targets)

    def score(self, net, x, targets) -> float:
        correct = 0
        for i in range(0, len(x), SCORE_BATCH):
            correct += int((net(x[i:i + SCORE_BATCH]).argmax(1) == targets[i:i + SCORE_BATCH]).sum())
        return correct / len(x)

    def chance(self, targets) -> float:
        """The accuracy of always answering the most frequent label."""
        labels = np.asarray(targets)
        return float(np.bincount(labels).max() / len(labels))


@dataclass(frozen=True)
class Detect:
    """Images with boxes (`data.detect.DetectionSet`); fitness: mAP@0.5 of the float detections. `anchors`: (w, h)
    per anchor, per head (finest first), in pixels of the network's input; `strides`: each head's."""

    anchors: tuple[tuple[tuple[float, float], ...], ...]
    strides: tuple[int, ...]
    num_classes: int

    kind: ClassVar[str] = "detect"
    clip: ClassVar[float | None] = CLIP_NORM

    def optimizer(self, params, cfg, phase: str):
        """(optimizer, peak rate) of a training phase: AdamW at `fit_detector`'s rate (module doc)."""
        import torch

        return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY), LR

    @staticmethod
    def of(space, fit, resolution: int, seed: int) -> Detect:
        """The task of a detector space (`MBSpace.detect_heads`) at `resolution`: anchors by k-means on the training
        boxes scaled to it (`train.detect.fit_anchors`), the smallest to the finest head."""
        boxes = [b * _scale(fit, resolution) for b in fit.boxes]
        counts = [a for _, a in space.detect_heads]
        anchors = fit_anchors(boxes, sum(counts), seed=seed)
        groups, start = [], 0
        for n in counts:
            groups.append(tuple((float(w), float(h)) for w, h in anchors[start:start + n]))
            start += n
        return Detect(tuple(groups), tuple(space.head_strides), space.num_classes)

    def images(self, split):
        """The split's NHWC images."""
        return split.images

    def resized(self, split, resolution: int):
        """`split` at the network's input: images resized (`data.resize_images`), boxes scaled with them."""
        scale = _scale(split, resolution)
        return replace(split, images=resize_images(split.images, resolution),
                       boxes=tuple(np.asarray(b, np.float32) * scale for b in split.boxes))

    def tensors(self, split, resolution: int):
        at = self.resized(split, resolution)
        return to_nchw_tensor(at.images), (list(at.boxes), [np.asarray(lab) for lab in at.labels])

    def take(self, targets, rows):
        boxes, labels = targets
        rows = np.asarray(rows).reshape(-1)
        return [boxes[i] for i in rows], [labels[i] for i in rows]

    def augment(self, x, targets, g, shift: int):
        out, boxes, labels = augment_detection(x, *targets, g)
        return out, (boxes, labels)

    def loss(self, outputs, targets):
        return detection_loss(outputs, *targets, self.anchors, self.strides, self.num_classes)[0]

    def score(self, net, x, targets) -> float:
        found = []
        for i in range(0, len(x), SCORE_BATCH):
            found += [Detections(*d) for d in decode(net(x[i:i + SCORE_BATCH]), self.anchors, self.strides,
                                                     self.num_classes)]
        return mean_average_precision(found, targets[0], targets[1], self.num_classes)[0]

    def chance(self, targets) -> float:
        return 0.0

    def to_json(self) -> dict:
        return {"anchors": [[list(a) for a in g] for g in self.anchors], "strides": list(self.strides),
                "num_classes": self.num_classes}


def _scale(split, resolution: int) -> np.ndarray:
    """Box coordinates (x_min, y_min, x_max, y_max) from the split's pixels to the resized image's."""
    h, w = split.images.shape[1:3]
    sx, sy = resolution / w, resolution / h
    return np.array([sx, sy, sx, sy], np.float32)


CLASSIFY = Classify()


def task_for(space, fit, resolution: int, seed: int):
    """The task of `space` at `resolution`: a detector space's (`MBSpace.detect_heads`) `Detect`, with anchors from
    the training boxes `fit` at that resolution; otherwise `CLASSIFY`."""
    return Detect.of(space, fit, resolution, seed) if space.detect_heads else CLASSIFY
