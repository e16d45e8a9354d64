"""`kilobyte evaluate` on a detector library (issue 28): its mAP@0.5 equals the one computed from the numpy int8
reference's outputs through the reference post-processing on the same images; under QEMU the firmware gives the
same boxes; the CLI prints the figures and draws the PNG; a classifier asked for --task detect is a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from kilobyte.api import evaluate
from kilobyte.codegen import compile_graph
from kilobyte.data.detect import CSV_HEADER, load_detection, make_digit_scenes
from kilobyte.driver import from_module
from kilobyte.interp import run_int8
from kilobyte.ops.detect_post import DetectConfig, manifest_spec, postprocess, to_pixels
from kilobyte.quant.quantize import quantize
from kilobyte.train.detect import detection_loss, fit_anchors, split_anchors
from kilobyte.train.detect_eval import Detections, mean_average_precision
from kilobyte.train.library_accuracy import quantize_images
from kilobyte.zoo.detector import YoloDetector


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """A small detector trained briefly on 64 px scenes, compiled with its post-processing; and a folder holding 12
    of its training scenes with boxes.csv (where a briefly trained detector finds most boxes)."""
    torch.manual_seed(0)
    train = make_digit_scenes(48, seed=1, size=64, digit_px=(16, 28))
    anchors = split_anchors(fit_anchors(train.boxes, 4), 2)
    model = YoloDetector(10, anchors, width=0.5)
    x = torch.as_tensor(train.images).permute(0, 3, 1, 2)
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    for step in range(120):
        rows = slice(step % 3 * 16, step % 3 * 16 + 16)
        loss, _ = detection_loss(model(x[rows]), train.boxes[rows], train.labels[rows], anchors, (8, 16), 10)
        opt.zero_grad()
        loss.backward()
        opt.step()
    graph = from_module("det", model.eval(), (1, 1, 64, 64)).graph
    int8 = quantize(graph, [train.images[i:i + 1] for i in range(16)])
    root = tmp_path_factory.mktemp("det")
    result = compile_graph(int8, root / "lib", detect=DetectConfig(anchors, 10, score_threshold=0.05,
                                                                    max_detections=10))
    scenes = train.take(slice(0, 12))
    folder = root / "scenes"
    folder.mkdir()
    rows = [",".join(CSV_HEADER)]
    for i, (image, boxes, labels) in enumerate(zip(scenes.images, scenes.boxes, scenes.labels)):
        Image.fromarray(np.round(image[..., 0] * 255).astype(np.uint8)).save(folder / f"{i:02d}.png")
        rows += [f"{i:02d}.png,{x0:g},{y0:g},{x1:g},{y1:g},{c}" for (x0, y0, x1, y1), c in zip(boxes, labels)]
    (folder / "boxes.csv").write_text("\n".join(rows) + "\n")
    return result, folder


def test_map_equals_the_reference_pipeline(detector):
    result, folder = detector
    ev = evaluate(result.out_dir, str(folder))
    assert ev.images == 12 and ev.objects > 12 and len(ev.samples) == 8
    m, spec = result.manifest, manifest_spec(result.manifest)
    ds = load_detection(str(folder))
    found = []
    for image in ds.images:
        q, _ = quantize_images(image[None], m["input"])
        outs = run_int8(result.graph, q)
        boxes = postprocess(spec, [outs[o["name"]][0] for o in m["outputs"]])
        found.append(Detections(to_pixels(boxes), boxes["score"] / 32768.0, boxes["cls"].astype(np.int64)))
    want, per_class = mean_average_precision(found, ds.boxes, ds.labels, 10)
    assert ev.map50 == want and ev.ap == per_class
    assert ev.map50 > 0.3  # it learned the scenes: random boxes score ~0


def test_cli_text_json_plot_and_qemu(detector, tmp_path):
    result, folder = detector
    cmd = [sys.executable, "-m", "kilobyte", "evaluate", str(result.out_dir), "--data", str(folder), "--task", "detect"]
    run = subprocess.run([*cmd, "--plot", str(tmp_path / "boxes.png")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "mAP@0.5" in run.stdout and (tmp_path / "boxes.png").stat().st_size > 10_000
    run = subprocess.run([*cmd, "--target", "cortex-m7", "--limit", "2", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["task"] == "detect" and got["images"] == 2 and got["target"] == "cortex-m7"
    assert got["differing_on_target"] == []


def test_a_classifier_is_not_a_detector(tmp_path):
    from kilobyte.zoo import create

    model, shape = create("mnist-cnn", width=0.25, resolution=28)
    graph = from_module("cnn", model, shape).graph
    lib = compile_graph(quantize(graph, [np.zeros((1, 28, 28, 1), np.float32)]), tmp_path / "cnn")
    run = subprocess.run([sys.executable, "-m", "kilobyte", "evaluate", str(lib.out_dir), "--task", "detect",
                          "--data", "digit-scenes"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and "not a detector library" in run.stderr
