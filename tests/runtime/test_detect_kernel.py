"""Runtime stage tests: kb_detect (runtime/c/kb_detect.c), a detector's post-processing, against the reference
`kilobyte.ops.detect_post.postprocess` — the same boxes, scores, classes and order on 1,000 random heads (one or
two scales, 1-3 anchors, 1-6 classes, random quantisation, thresholds and top-K limits), outputs past the count
untouched; and the object file needs no function at all (no malloc: nothing from the heap or libc)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from kilobyte.ops.detect_post import DETECTION_DTYPE, FIELDS, DetectHead, DetectSpec, candidates, postprocess
from kilobyte.runtime import C_DIR, Detection, DetectParams
from kilobyte.runtime import DetectHead as Head


def run_c(lib, spec: DetectSpec, outputs: list[np.ndarray]) -> np.ndarray:
    keep = []  # the arrays the structs point into, alive until the call returns

    def ptr(a: np.ndarray, ctype):
        a = np.ascontiguousarray(a)
        keep.append(a)
        return a.ctypes.data_as(ctypes.POINTER(ctype))

    heads = (Head * len(spec.heads))()
    for hd, head, out in zip(heads, spec.heads, outputs):
        hd.data, hd.h, hd.w, hd.stride = ptr(out.astype(np.int8), ctypes.c_int8), head.h, head.w, head.stride
        hd.anchors, hd.anchor_wh = len(head.anchors), ptr(head.anchors_q4().reshape(-1), ctypes.c_int16)
        hd.sigmoid, hd.exp = ptr(head.sigmoid_table(), ctypes.c_uint16), ptr(head.exp_table(), ctypes.c_uint32)
    params = DetectParams(spec.classes, spec.image_w, spec.image_h, spec.score_q15, spec.iou_q15)
    cand = np.zeros(spec.max_candidates, DETECTION_DTYPE)
    out = np.full((spec.max_detections + 4) * 6, -7, np.int16)  # 6 int16 fields a detection, 4 spare rows
    n = lib.kb_detect(ctypes.byref(params), heads, len(spec.heads), cand.ctypes.data_as(ctypes.POINTER(Detection)),
                      spec.max_candidates, out.ctypes.data_as(ctypes.POINTER(Detection)), spec.max_detections)
    rows = out.view(DETECTION_DTYPE)
    assert (out[n * 6:] == -7).all(), "kb_detect wrote past the detections it returned"
    return rows[:n]


def random_case(rng: np.random.Generator) -> tuple[DetectSpec, list[np.ndarray]]:
    classes = int(rng.integers(1, 7))
    side = int(rng.integers(16, 200))
    heads = []
    for stride in (8, 16)[:int(rng.integers(1, 3))]:
        cells = max(1, side // stride)
        anchors = tuple((float(rng.uniform(4, 60)), float(rng.uniform(4, 60))) for _ in range(int(rng.integers(1, 4))))
        heads.append(DetectHead(cells, cells, stride, anchors, float(rng.uniform(0.02, 0.2)),
                                int(rng.integers(-40, 40))))
    spec = DetectSpec(tuple(heads), classes, side, side, score_threshold=float(rng.uniform(0.05, 0.7)),
                      iou_threshold=float(rng.uniform(0.1, 0.8)), max_candidates=int(rng.integers(1, 40)),
                      max_detections=int(rng.integers(1, 12)))
    # logits biased so that a fair share of the boxes pass the threshold, with ties among the int8 values
    outputs = [np.clip(rng.normal(int(rng.integers(-30, 60)), 40, (h.h, h.w, len(h.anchors) * (FIELDS + classes))),
                       -128, 127).astype(np.int8) for h in heads]
    return spec, outputs


def test_thousand_random_heads_equal_the_reference(kb_lib):
    rng = np.random.default_rng(28)
    kept = suppressed = truncated = 0
    for _ in range(1000):
        spec, outputs = random_case(rng)
        want = postprocess(spec, outputs)
        got = run_c(kb_lib, spec, outputs)
        np.testing.assert_array_equal(got, want)
        found = len(candidates(spec, outputs))
        kept += len(want)
        suppressed += len(want) < min(found, spec.max_candidates, spec.max_detections)
        truncated += found > spec.max_candidates
    # the cases exercise every path: boxes kept, NMS dropping some, the candidate list full
    assert kept > 2000 and suppressed > 100 and truncated > 100


def test_a_hand_made_head_decodes_as_yolo_does():
    """One 2x2 head, one anchor, two classes, scale 1/16: the box of the one confident cell, in 1/16 pixel."""
    head = DetectHead(2, 2, 8, ((16.0, 8.0),), 1 / 16, 0)
    spec = DetectSpec((head,), 2, 16, 16, score_threshold=0.5)
    out = np.full((2, 2, FIELDS + 2), -128, np.int8)
    out[1, 0] = [0, 0, 0, 16, 127, -10, 40]  # tx = ty = 0 (sigmoid 1/2), tw = 0, th = 1, obj 7.9, class 1: 2.5
    (d,) = postprocess(spec, [out])
    sig_obj, sig_cls = 1 / (1 + np.exp(-127 / 16)), 1 / (1 + np.exp(-40 / 16))
    assert d["cls"] == 1 and abs(d["score"] / 32768 - sig_obj * sig_cls) < 1e-4
    cx, cy, w, h = (0.5 + 0) * 8, (0.5 + 1) * 8, 16 * 1.0, 8 * np.e  # centre (4, 12), size 16 x 21.7
    box = np.array([d["x_min"], d["y_min"], d["x_max"], d["y_max"]]) / 16
    assert box == pytest.approx([max(cx - w / 2, 0), cy - h / 2, cx + w / 2, min(cy + h / 2, 16)], abs=1 / 8)


def test_the_kernel_calls_nothing(tmp_path):
    assert shutil.which("arm-none-eabi-gcc"), "arm-none-eabi-gcc is needed to read the kernel's symbols"
    obj = tmp_path / "kb_detect.o"
    subprocess.run(["arm-none-eabi-gcc", "-O2", "-mthumb", "-mcpu=cortex-m4", "-c", f"-I{C_DIR}",
                    str(C_DIR / "kb_detect.c"), "-o", str(obj)], check=True, capture_output=True)
    undefined = subprocess.run(["arm-none-eabi-nm", "-u", str(obj)], check=True, capture_output=True,
                               text=True).stdout.split()
    assert undefined == []
