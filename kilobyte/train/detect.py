"""Training stage: what a YOLO-style detector (`zoo/detector.py`) needs beyond the classifier recipe (issue 28).

- `fit_anchors`: anchors from the training boxes, k-means on (w, h) with 1 - IoU as the distance (YOLOv2), the
  smaller half to the finer head.
- `build_targets` + `detection_loss`: YOLOv3's assignment and loss. A ground-truth box belongs to the one anchor
  (of any head) whose shape overlaps it most, in the cell holding its centre; there tx, ty are the centre's offset
  in the cell (binary cross-entropy on their sigmoid), tw, th = log(box / anchor) (squared error), both weighted by
  2 - box area / image area; objectness is 1 there (BCE), 0 at every other anchor unless its decoded box overlaps
  a ground-truth box by IoU > `IGNORE_IOU` (not penalised); the classes are one-hot BCE at the assigned anchors.
  The decoding is `ops.detect_post`'s float meaning (centre = (sigmoid(t) + cell) · stride, size = anchor · exp(t)).
- `augment_detection`: each image zoomed by 0.75–1.25 and shifted by up to 15 % of its side, its boxes moved with
  it (clipped; a box left with under 40 % of its area is dropped).
- `decode`: float detections of a batch (score threshold, class-wise NMS, top-K) for validation mAP.
- `fit_detector`: AdamW with a cosine schedule, augmentation on every batch, the epoch of best validation mAP kept.
"""

from __future__ import annotations

import numpy as np

from ..data.detect import box_iou
from ..ops.detect_post import FIELDS
from .detect_eval import Detections, mean_average_precision
from .schedule import lr_factor

IGNORE_IOU = 0.5
LR = 3e-3  # AdamW's peak rate (from scratch); the search's supernet phases use it too (nas/task.py)
WEIGHT_DECAY = 5e-4
CLIP_NORM = 10.0  # every step's gradient norm is clipped to this: YOLOv3's loss is a sum over the anchors


def fit_anchors(boxes, k: int, seed: int = 0, iterations: int = 50) -> np.ndarray:
    """(k, 2) anchors (w, h) in pixels from every box of `boxes` (a list of (K, 4) arrays), smallest area first."""
    wh = np.concatenate([b[:, 2:] - b[:, :2] for b in boxes if len(b)]).astype(np.float64)
    if len(wh) < k:
        raise ValueError(f"{len(wh)} boxes for {k} anchors")
    rng = np.random.default_rng(seed)
    centres = wh[rng.choice(len(wh), k, replace=False)]
    for _ in range(iterations):
        nearest = np.argmax(_shape_iou(wh, centres), axis=1)
        moved = np.array([np.median(wh[nearest == j], axis=0) if np.any(nearest == j) else centres[j]
                          for j in range(k)])
        if np.allclose(moved, centres):
            break
        centres = moved
    return centres[np.argsort(centres.prod(1))]


def _shape_iou(wh: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """IoU of boxes and anchors of the given sizes placed at one corner: (N, K)."""
    inter = np.minimum(wh[:, None, 0], anchors[None, :, 0]) * np.minimum(wh[:, None, 1], anchors[None, :, 1])
    return inter / (wh[:, None].prod(-1) + anchors[None].prod(-1) - inter)


def split_anchors(anchors: np.ndarray, heads: int) -> tuple[tuple[tuple[float, float], ...], ...]:
    """`fit_anchors`' list as one group per head, finest head first (the smallest anchors)."""
    groups = np.array_split(np.asarray(anchors, np.float64), heads)
    return tuple(tuple((float(w), float(h)) for w, h in g) for g in groups)


def build_targets(boxes, labels, anchors, strides, image_hw: tuple[int, int], num_classes: int):
    """Per head, numpy arrays over (N, A, H, W): `mask` (an assigned anchor), `t` (…, 4: tx, ty, tw, th targets),
    `cls` (the class), `weight` (2 - relative area)."""
    flat = np.asarray([a for group in anchors for a in group], np.float64)
    owner = [(i, j) for i, group in enumerate(anchors) for j in range(len(group))]
    n, (ih, iw) = len(boxes), image_hw
    out = []
    for group, stride in zip(anchors, strides):
        h, w = ih // stride, iw // stride
        out.append({"mask": np.zeros((n, len(group), h, w), bool), "t": np.zeros((n, len(group), h, w, 4)),
                    "cls": np.zeros((n, len(group), h, w), np.int64), "weight": np.zeros((n, len(group), h, w))})
    for b, (bx, lab) in enumerate(zip(boxes, labels)):
        for (x0, y0, x1, y1), c in zip(np.asarray(bx, np.float64), lab):
            bw, bh = x1 - x0, y1 - y0
            if bw <= 0 or bh <= 0:
                continue
            i, j = owner[int(np.argmax(_shape_iou(np.array([[bw, bh]]), flat)[0]))]
            stride, target = strides[i], out[i]
            gx = min(int((x0 + x1) / 2 / stride), target["mask"].shape[3] - 1)
            gy = min(int((y0 + y1) / 2 / stride), target["mask"].shape[2] - 1)
            target["mask"][b, j, gy, gx] = True
            target["t"][b, j, gy, gx] = [(x0 + x1) / 2 / stride - gx, (y0 + y1) / 2 / stride - gy,
                                         np.log(bw / anchors[i][j][0]), np.log(bh / anchors[i][j][1])]
            target["cls"][b, j, gy, gx] = int(c)
            target["weight"][b, j, gy, gx] = 2.0 - bw * bh / (iw * ih)
    return out


def decode_boxes(raw, anchors, stride: int):
    """Boxes (N, A, H, W, 4: x_min, y_min, x_max, y_max in pixels) of one head's raw map (N, A·(5+C), H, W)."""
    import torch

    n, _, h, w = raw.shape
    v = raw.view(n, len(anchors), -1, h, w)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=raw.dtype), torch.arange(w, dtype=raw.dtype), indexing="ij")
    a = torch.as_tensor(anchors, dtype=raw.dtype).view(1, -1, 2, 1, 1)
    cx, cy = (torch.sigmoid(v[:, :, 0]) + xs) * stride, (torch.sigmoid(v[:, :, 1]) + ys) * stride
    bw, bh = a[:, :, 0] * torch.exp(v[:, :, 2].clamp(max=10)), a[:, :, 1] * torch.exp(v[:, :, 3].clamp(max=10))
    return torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], -1)


def _torch_iou(a, b):
    """IoU of every box of a (..., P, 4) with every box of b (..., G, 4): (..., P, G)."""
    import torch

    lt = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda r: (r[..., 2:] - r[..., :2]).clamp(min=0).prod(-1)  # noqa: E731
    return inter / (area(a)[..., :, None] + area(b)[..., None, :] - inter).clamp(min=1e-9)


def detection_loss(outputs, boxes, labels, anchors, strides, num_classes: int):
    """YOLOv3's loss (module doc) of a batch: `outputs` the detector's head maps, `boxes`/`labels` per image.
    Returns (total, {"box", "obj", "cls"}) averaged over the images."""
    import torch
    import torch.nn.functional as F

    n = outputs[0].shape[0]
    image_hw = (outputs[0].shape[2] * strides[0], outputs[0].shape[3] * strides[0])
    targets = build_targets(boxes, labels, anchors, strides, image_hw, num_classes)
    g = max(1, max(len(b) for b in boxes))
    truth = torch.zeros(n, g, 4, dtype=outputs[0].dtype)
    for i, b in enumerate(boxes):
        if len(b):
            truth[i, :len(b)] = torch.as_tensor(np.asarray(b), dtype=truth.dtype)
    parts = {"box": 0.0, "obj": 0.0, "cls": 0.0}
    for raw, group, stride, target in zip(outputs, anchors, strides, targets):
        h, w = raw.shape[2:]
        v = raw.view(n, len(group), FIELDS + num_classes, h, w).permute(0, 1, 3, 4, 2)  # (N, A, H, W, 5+C)
        mask = torch.as_tensor(target["mask"])
        with torch.no_grad():
            pred = decode_boxes(raw.detach(), group, stride).view(n, -1, 4)
            best = _torch_iou(pred, truth).amax(-1).view(mask.shape) if truth.shape[1] else torch.zeros(mask.shape)
        negative = ~mask & (best <= IGNORE_IOU)
        obj = v[..., 4]
        parts["obj"] = parts["obj"] + F.binary_cross_entropy_with_logits(obj[mask], torch.ones_like(obj[mask]),
                                                                         reduction="sum") \
            + F.binary_cross_entropy_with_logits(obj[negative], torch.zeros_like(obj[negative]), reduction="sum")
        if mask.any():
            t = torch.as_tensor(target["t"], dtype=v.dtype)[mask]
            wgt = torch.as_tensor(target["weight"], dtype=v.dtype)[mask]
            p = v[mask]
            xy = F.binary_cross_entropy_with_logits(p[:, :2], t[:, :2], reduction="none").sum(-1)
            wh = ((p[:, 2:4] - t[:, 2:4]) ** 2).sum(-1) * 0.5
            parts["box"] = parts["box"] + (wgt * (xy + wh)).sum()
            onehot = F.one_hot(torch.as_tensor(target["cls"])[mask], num_classes).to(v.dtype)
            parts["cls"] = parts["cls"] + F.binary_cross_entropy_with_logits(p[:, FIELDS:], onehot, reduction="sum")
    parts = {k: v / n for k, v in parts.items()}
    return parts["box"] + parts["obj"] + parts["cls"], parts


def augment_detection(x, boxes, labels, generator, max_shift: float = 0.15, zoom: tuple[float, float] = (0.75, 1.25)):
    """Zoomed and shifted copies of the NCHW batch `x` (zeros outside) with their boxes moved alike (module doc)."""
    import torch
    import torch.nn.functional as F

    n, _, h, w = x.shape
    u = torch.rand(n, 3, generator=generator)
    z = zoom[0] + u[:, 0] * (zoom[1] - zoom[0])  # output = input zoomed by z about the centre, then shifted
    shift = (u[:, 1:] * 2 - 1) * 2 * max_shift  # in normalised units ([-1, 1] spans the image)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 1, 1] = 1 / z, 1 / z
    theta[:, :, 2] = -shift / z[:, None]  # input = (output - shift) / z
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
    with torch.no_grad():
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    new_boxes, new_labels = [], []
    for i, (b, lab) in enumerate(zip(boxes, labels)):
        b = np.asarray(b, np.float64).reshape(-1, 4)
        size = np.array([w, h, w, h], np.float64)
        norm = b / size * 2 - 1
        off = np.array([shift[i, 0], shift[i, 1], shift[i, 0], shift[i, 1]], np.float64)
        moved = ((norm * float(z[i]) + off) + 1) / 2 * size
        clipped = np.clip(moved, 0, size)
        area = lambda r: np.clip(r[:, 2] - r[:, 0], 0, None) * np.clip(r[:, 3] - r[:, 1], 0, None)  # noqa: E731
        keep = area(clipped) >= 0.4 * np.maximum(area(moved), 1e-9)
        new_boxes.append(clipped[keep].astype(np.float32))
        new_labels.append(np.asarray(lab)[keep])
    return out, new_boxes, new_labels


def decode(outputs, anchors, strides, num_classes: int, score_threshold: float = 0.05, iou_threshold: float = 0.45,
           max_detections: int = 50):
    """Float detections of a batch: per image (boxes (K, 4) in pixels, scores (K,), labels (K,)), best first, after
    the score threshold and class-wise greedy NMS — `ops.detect_post.postprocess` in float, for validation."""
    import torch

    n = outputs[0].shape[0]
    per_image = [([], [], []) for _ in range(n)]
    with torch.no_grad():
        for raw, group, stride in zip(outputs, anchors, strides):
            h, w = raw.shape[2:]
            v = raw.view(n, len(group), FIELDS + num_classes, h, w).permute(0, 1, 3, 4, 2).reshape(n, -1,
                                                                                                 FIELDS + num_classes)
            b = decode_boxes(raw, group, stride).reshape(n, -1, 4)
            logit, cls = v[..., FIELDS:].max(-1)
            score = torch.sigmoid(v[..., 4]) * torch.sigmoid(logit)
            for i in range(n):
                keep = score[i] >= score_threshold
                per_image[i][0].append(b[i][keep].numpy())
                per_image[i][1].append(score[i][keep].numpy())
                per_image[i][2].append(cls[i][keep].numpy())
    result = []
    image_hw = (outputs[0].shape[2] * strides[0], outputs[0].shape[3] * strides[0])
    for boxes, scores, classes in per_image:
        boxes = np.clip(np.concatenate(boxes), 0, [image_hw[1], image_hw[0], image_hw[1], image_hw[0]])
        scores, classes = np.concatenate(scores), np.concatenate(classes)
        order = np.argsort(-scores, kind="stable")
        kept: list[int] = []
        for k in order:
            if len(kept) == max_detections:
                break
            same = [j for j in kept if classes[j] == classes[k]]
            if not same or box_iou(boxes[k:k + 1], boxes[same]).max() <= iou_threshold:
                kept.append(int(k))
        result.append((boxes[kept].astype(np.float32), scores[kept].astype(np.float32), classes[kept].astype(np.int64)))
    return result


def validation_map(model, images: np.ndarray, boxes, labels, anchors, strides, num_classes: int,
                   batch_size: int = 64) -> float:
    """mAP@0.5 of `model` (float) on NHWC `images` with their boxes, through `decode`."""
    import torch

    was_training = model.training
    model.eval()
    found = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            x = torch.as_tensor(images[start:start + batch_size]).permute(0, 3, 1, 2)
            found += [Detections(*d) for d in decode(model(x), anchors, strides, num_classes)]
    model.train(was_training)
    return mean_average_precision(found, boxes, labels, num_classes)[0]


def fit_detector(model, train, val, *, epochs: int = 30, lr: float = LR, batch_size: int = 32, seed: int = 0,
                 augment: bool = True, weight_decay: float = WEIGHT_DECAY, keep_initial: bool = False,
                 progress: bool = False) -> dict:
    """Train a detector (`zoo.detector.YoloDetector` or `MBDetector`: its `anchors`, `strides`, `num_classes`) in
    place on the `data.detect.DetectionSet` `train`: AdamW, a cosine schedule after one epoch of linear warm-up
    (`schedule.lr_factor`), `augment_detection` on every batch; after each epoch the validation mAP@0.5 on `val`,
    and the weights of the best epoch are kept — with `keep_initial`, the weights it started from count as epoch
    -1 (a search's inherited weights). Returns the history ({"epoch", "loss", "map50"} per epoch), the best mAP and
    its epoch."""
    import torch

    anchors, strides = model.anchors, model.strides
    gen = torch.Generator().manual_seed(seed)
    order_rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    steps_per_epoch = max(1, -(-len(train.images) // batch_size))
    total = steps_per_epoch * epochs
    best = {"map50": -1.0, "epoch": -1, "state": None}
    if keep_initial:
        best = {"map50": validation_map(model, val.images, val.boxes, val.labels, anchors, strides,
                                        model.num_classes),
                "epoch": -1, "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    history, step = [], 0
    for epoch in range(epochs):
        model.train()
        order = order_rng.permutation(len(train.images))
        losses = []
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            x = torch.as_tensor(train.images[rows]).permute(0, 3, 1, 2)
            boxes, labels = [train.boxes[i] for i in rows], [train.labels[i] for i in rows]
            if augment:
                x, boxes, labels = augment_detection(x, boxes, labels, gen)
            for group in opt.param_groups:
                group["lr"] = lr * lr_factor(step, total, steps_per_epoch, "cosine")
            loss, _ = detection_loss(model(x), boxes, labels, anchors, strides, model.num_classes)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
            opt.step()
            losses.append(loss.item())
            step += 1
        score = validation_map(model, val.images, val.boxes, val.labels, anchors, strides, model.num_classes)
        history.append({"epoch": epoch, "loss": float(np.mean(losses)), "map50": score})
        if progress:
            print(f"epoch {epoch + 1}/{epochs}: loss {np.mean(losses):.3f}, validation mAP@0.5 {score * 100:.1f} %")
        if score > best["map50"]:
            best = {"map50": score, "epoch": epoch,
                    "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    model.load_state_dict(best["state"])
    return {"history": history, "best_map50": best["map50"], "best_epoch": best["epoch"]}
