"""Op registry: a YOLO-style detector's post-processing — box decoding, score threshold, class-wise NMS, top-K —
in integer arithmetic that the C runtime (`runtime/c/kb_detect.c`, `kb_detect`) reproduces exactly (issue 28).

A head is one int8 output map (H, W, A·(5 + C)) at `stride` input pixels per cell: per cell and anchor a, the
values tx, ty, tw, th, objectness, then C class logits. The float meaning (YOLOv3) is
    centre = ((sigmoid(tx) + cell x) · stride, (sigmoid(ty) + cell y) · stride),
    size = (anchor w · exp(tw), anchor h · exp(th)),   score = sigmoid(obj) · sigmoid(logit of the best class).
Every int8 value has one sigmoid and one exp, so both are 256-entry tables made here from the head's quantisation
(sigmoid in Q15, exp in Q8) and written into the generated C; what remains is integer arithmetic:
    sig_q15 = SIGMOID[v + 128];  class = the first index of the largest class logit (sigmoid is monotone);
    score = min((sig(obj) · sig(class logit) + 2^14) >> 15, 32767)           (Q15)
    centre_q4 = ((sig(t) + (cell << 15)) · stride) >> 11                   (1/16 pixel)
    size_q4 = (anchor_q4 · EXP[v + 128]) >> 8;  min = centre - (size >> 1);  max = min + size,
both ends clamped to [0, image side · 16]. A box with score ≥ the threshold is a candidate; candidates are kept
sorted by score, highest first, at most `max_candidates` (equal scores keep the order they were made in: head,
row, column, anchor). NMS then keeps a candidate unless a kept box of its class overlaps it by IoU > the IoU
threshold — compared as inter · 2^15 > iou_q15 · union in 64-bit integers — up to `max_detections`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError

FRAC_BITS = 4  # box coordinates in 1/16 pixel
Q15 = 1 << 15
EXP_ONE = 1 << 8  # the exp table's 1.0
EXP_MAX = (1 << 31) - 1
FIELDS = 5  # tx, ty, tw, th, objectness, then the class logits


@dataclass(frozen=True)
class DetectHead:
    """One head: its output map's cells (h, w), input pixels per cell, anchors ((w, h) in input pixels) and the
    int8 quantisation of its output tensor."""

    h: int
    w: int
    stride: int
    anchors: tuple[tuple[float, float], ...]
    scale: float
    zero_point: int

    def sigmoid_table(self) -> np.ndarray:
        """SIGMOID[v + 128] = round(2^15 · sigmoid(scale · (v - zero point))), uint16."""
        x = self.scale * (np.arange(-128, 128, dtype=np.float64) - self.zero_point)
        return np.round(Q15 / (1.0 + np.exp(-x))).astype(np.uint16)

    def exp_table(self) -> np.ndarray:
        """EXP[v + 128] = round(2^8 · exp(scale · (v - zero point))), at most 2^31 - 1, uint32."""
        x = self.scale * (np.arange(-128, 128, dtype=np.float64) - self.zero_point)
        return np.minimum(np.round(EXP_ONE * np.exp(np.minimum(x, 30.0))), EXP_MAX).astype(np.uint32)

    def anchors_q4(self) -> np.ndarray:
        """(A, 2) int16: the anchors' (w, h) in 1/16 pixel, at least 1."""
        return np.clip(np.round(np.asarray(self.anchors, np.float64) * (1 << FRAC_BITS)), 1, 32767).astype(np.int16)


@dataclass(frozen=True)
class DetectSpec:
    heads: tuple[DetectHead, ...]
    classes: int
    image_w: int
    image_h: int
    score_threshold: float = 0.3
    iou_threshold: float = 0.45
    max_candidates: int = 64
    max_detections: int = 16

    def __post_init__(self) -> None:
        if not self.heads or self.classes < 1:
            raise KilobyteError("detection post-processing: at least one head and one class")
        if not (0 < self.image_w <= 2047 and 0 < self.image_h <= 2047):
            raise KilobyteError(f"detection post-processing: image {self.image_w}x{self.image_h}; boxes in 1/16 "
                                f"pixel need sides of at most 2047")
        if not (0 <= self.score_threshold <= 1 and 0 <= self.iou_threshold <= 1):
            raise KilobyteError("detection post-processing: thresholds in [0, 1]")
        if self.max_candidates < 1 or self.max_detections < 1:
            raise KilobyteError("detection post-processing: max_candidates and max_detections at least 1")

    @property
    def score_q15(self) -> int:
        return int(round(self.score_threshold * Q15))

    @property
    def iou_q15(self) -> int:
        return int(round(self.iou_threshold * Q15))

    def channels(self, head: DetectHead) -> int:
        return len(head.anchors) * (FIELDS + self.classes)


@dataclass(frozen=True)
class DetectConfig:
    """What a user states about a detector's outputs (`detect.json`, `kilobyte compile --detect`): the anchors of
    each output in output order ((w, h) in input pixels), the number of classes, the thresholds and limits. The
    rest — each head's cells, stride and quantisation — is the compiled graph's (`spec`)."""

    anchors: tuple[tuple[tuple[float, float], ...], ...]
    classes: int
    score_threshold: float = 0.3
    iou_threshold: float = 0.45
    max_candidates: int = 64
    max_detections: int = 16

    @classmethod
    def from_json(cls, d: dict, where: str = "detect.json") -> DetectConfig:
        try:
            anchors = tuple(tuple((float(w), float(h)) for w, h in group) for group in d["anchors"])
            extra = {k: type(getattr(cls, k))(d[k]) for k in ("score_threshold", "iou_threshold", "max_candidates",
                                                               "max_detections") if k in d}
            config = cls(anchors, int(d["classes"]), **extra)
        except (KeyError, TypeError, ValueError) as e:
            raise KilobyteError(f"{where}: expected {{\"anchors\": [[[w, h], ...] per output], \"classes\": N, "
                                f"...}} ({type(e).__name__}: {e})") from None
        if not anchors or any(not g for g in anchors) or any(w <= 0 or h <= 0 for g in anchors for w, h in g):
            raise KilobyteError(f"{where}: every output needs at least one anchor of positive size")
        return config

    def to_json(self) -> dict:
        return {"anchors": [[list(a) for a in g] for g in self.anchors], "classes": self.classes,
                "score_threshold": self.score_threshold, "iou_threshold": self.iou_threshold,
                "max_candidates": self.max_candidates, "max_detections": self.max_detections}

    @property
    def buffer_bytes(self) -> int:
        """SRAM the post-processing needs beside the arena: the library's static candidate array and the caller's
        result array (`kb_detection` entries)."""
        return (self.max_candidates + self.max_detections) * DETECTION_DTYPE.itemsize

    def spec(self, input_hw: tuple[int, int], outputs: list[dict]) -> DetectSpec:
        """The post-processing of a graph with input (H, W) and these int8 outputs (dicts with "name", "shape"
        (1, h, w, c), "scale", "zero_point"): one head per output, its stride the input's side over its own."""
        if len(outputs) != len(self.anchors):
            raise KilobyteError(f"detection: {len(self.anchors)} anchor groups for {len(outputs)} outputs (one "
                                f"group per output, in order)")
        heads = []
        for o, group in zip(outputs, self.anchors):
            _, h, w, c = o["shape"]
            want = len(group) * (FIELDS + self.classes)
            if c != want:
                raise KilobyteError(f"detection: output '{o['name']}' has {c} channels; {len(group)} anchors x "
                                    f"(5 + {self.classes} classes) = {want}")
            if input_hw[0] % h or input_hw[1] % w or input_hw[0] // h != input_hw[1] // w:
                raise KilobyteError(f"detection: output '{o['name']}' ({h}x{w}) is not the input "
                                    f"({input_hw[0]}x{input_hw[1]}) at one whole stride")
            heads.append(DetectHead(h, w, input_hw[0] // h, group, float(o["scale"]), int(o["zero_point"])))
        return DetectSpec(tuple(heads), self.classes, input_hw[1], input_hw[0], self.score_threshold,
                          self.iou_threshold, self.max_candidates, self.max_detections)


def manifest_spec(manifest: dict) -> DetectSpec | None:
    """The post-processing a compiled library runs (`kilobyte.json`'s "detect"), or None for a plain model."""
    if not manifest.get("detect"):
        return None
    _, h, w, _ = manifest["input"]["shape"]
    return DetectConfig.from_json(manifest["detect"], "kilobyte.json").spec((h, w), manifest["outputs"])


DETECTION_DTYPE = np.dtype([("x_min", np.int16), ("y_min", np.int16), ("x_max", np.int16), ("y_max", np.int16),
                            ("score", np.int16), ("cls", np.int16)])  # kilobyte.h's kb_detection


def candidates(spec: DetectSpec, outputs: list[np.ndarray]) -> np.ndarray:
    """Every box whose score reaches the threshold, in the order made (head, row, column, anchor)."""
    found = []
    for head, out in zip(spec.heads, outputs, strict=True):
        a, c = len(head.anchors), spec.classes
        v = np.asarray(out, np.int8).reshape(head.h, head.w, a, FIELDS + c).astype(np.int64) + 128
        sig, ex = head.sigmoid_table().astype(np.int64), head.exp_table().astype(np.int64)
        best = np.argmax(v[..., FIELDS:], axis=-1)
        logit = np.take_along_axis(v[..., FIELDS:], best[..., None], axis=-1)[..., 0]
        score = np.minimum((sig[v[..., 4]] * sig[logit] + (1 << 14)) >> 15, 32767)
        ys, xs, ks = np.nonzero(score >= spec.score_q15)
        shift = 15 - FRAC_BITS
        cx = ((sig[v[ys, xs, ks, 0]] + (xs.astype(np.int64) << 15)) * head.stride) >> shift
        cy = ((sig[v[ys, xs, ks, 1]] + (ys.astype(np.int64) << 15)) * head.stride) >> shift
        anchor = head.anchors_q4().astype(np.int64)[ks]
        bw = (anchor[:, 0] * ex[v[ys, xs, ks, 2]]) >> 8
        bh = (anchor[:, 1] * ex[v[ys, xs, ks, 3]]) >> 8
        x0, y0 = cx - (bw >> 1), cy - (bh >> 1)
        wmax, hmax = spec.image_w << FRAC_BITS, spec.image_h << FRAC_BITS
        rows = np.zeros(len(ys), DETECTION_DTYPE)
        rows["x_min"], rows["x_max"] = np.clip(x0, 0, wmax), np.clip(x0 + bw, 0, wmax)
        rows["y_min"], rows["y_max"] = np.clip(y0, 0, hmax), np.clip(y0 + bh, 0, hmax)
        rows["score"], rows["cls"] = score[ys, xs, ks], best[ys, xs, ks]
        found.append(rows)
    return np.concatenate(found)


def postprocess(spec: DetectSpec, outputs: list[np.ndarray]) -> np.ndarray:
    """The detections `kb_detect` writes for the heads' int8 outputs, as a DETECTION_DTYPE array, best first."""
    found = candidates(spec, outputs)
    order = np.argsort(-found["score"].astype(np.int32), kind="stable")[:spec.max_candidates]
    kept: list[np.void] = []
    for row in found[order]:
        if len(kept) == spec.max_detections:
            break
        if not any(k["cls"] == row["cls"] and _overlaps(k, row, spec.iou_q15) for k in kept):
            kept.append(row)
    return np.array(kept, DETECTION_DTYPE).reshape(-1)


def _overlaps(a, b, iou_q15: int) -> bool:
    """IoU(a, b) > iou_q15 / 2^15, in integers."""
    w = min(int(a["x_max"]), int(b["x_max"])) - max(int(a["x_min"]), int(b["x_min"]))
    h = min(int(a["y_max"]), int(b["y_max"])) - max(int(a["y_min"]), int(b["y_min"]))
    inter = max(w, 0) * max(h, 0)
    area = lambda r: (int(r["x_max"]) - int(r["x_min"])) * (int(r["y_max"]) - int(r["y_min"]))  # noqa: E731
    return inter * Q15 > iou_q15 * (area(a) + area(b) - inter)


def to_pixels(detections: np.ndarray) -> np.ndarray:
    """(K, 4) float boxes in pixels of a DETECTION_DTYPE array."""
    d = detections
    return np.stack([d["x_min"], d["y_min"], d["x_max"], d["y_max"]], -1).astype(np.float32) / (1 << FRAC_BITS)
