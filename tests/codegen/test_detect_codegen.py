"""A detector library (`compile_graph(..., detect=)`, issue 28): model.h declares `kb_detection`, the limits and
`<prefix>_detections`; the host build's boxes for real scenes equal the reference post-processing of the outputs
the same build wrote; the runtime's kb_detect.c is in the project; a configuration that does not match the
outputs is a one-line error before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from kilobyte.codegen import HostModel, LibraryOptions, compile_graph
from kilobyte.data.detect import make_digit_scenes
from kilobyte.driver import from_module, verify_on_target, verify_project
from kilobyte.errors import KilobyteError
from kilobyte.export.tflite import to_tflite
from kilobyte.ops.detect_post import DetectConfig, manifest_spec, postprocess
from kilobyte.quant.quantize import quantize
from kilobyte.targets.cortexm import build_firmware
from kilobyte.targets.cortexm.qemu import run_qemu
from kilobyte.zoo.detector import YoloDetector

ANCHORS = (((10.0, 12.0), (20.0, 24.0)), ((40.0, 40.0),))


@pytest.fixture(scope="module")
def detector_graph():
    torch.manual_seed(0)
    model = YoloDetector(10, ANCHORS, width=0.35).eval()
    with torch.no_grad():  # objectness up, so that many boxes pass the threshold and NMS has work
        for head in (model.head8, model.head16):
            head.bias.view(-1, 15)[:, 4] = 2.0
    graph = from_module("det", model, (1, 1, 64, 64)).graph
    scenes = make_digit_scenes(12, seed=0, size=64, digit_px=(14, 30))
    return quantize(graph, [scenes.images[i:i + 1] for i in range(8)]), scenes


def test_host_boxes_equal_the_reference_of_its_outputs(tmp_path, detector_graph):
    graph, scenes = detector_graph
    config = DetectConfig(ANCHORS, 10, score_threshold=0.2, iou_threshold=0.4, max_candidates=30, max_detections=8)
    result = compile_graph(graph, tmp_path / "p", detect=config, library=LibraryOptions("det"))
    header = (result.out_dir / "src" / "det_model.h").read_text()
    assert "} kb_detection;" in header and "#define DET_MAX_DETECTIONS 8" in header
    assert "int32_t det_detections(const int8_t *" in header and "det_detections" in result.manifest["exports"]
    assert (result.out_dir / "src" / "kb_detect.c").exists() and result.manifest["detect"] == config.to_json()
    host, spec = HostModel(result.out_dir), manifest_spec(result.manifest)
    q = result.manifest["input"]
    counts = []
    for image in scenes.images:
        x = np.clip(np.round(image[None] / q["scale"]) + q["zero_point"], -128, 127).astype(np.int8)
        outs = host.outputs(x)
        want = postprocess(spec, [outs[o["name"]][0] for o in result.manifest["outputs"]])
        got = host.detections(x)
        np.testing.assert_array_equal(got, want)
        counts.append(len(got))
    assert max(counts) == 8 and min(counts) >= 1  # full result arrays and NMS both reached


@pytest.mark.parametrize("anchors, message", [
    (ANCHORS[:1], "1 anchor groups for 2 outputs"),
    ((ANCHORS[0], ANCHORS[0]), "output 'conv_2d_"),
])
def test_a_config_that_does_not_match_the_outputs_is_refused(tmp_path, detector_graph, anchors, message):
    with pytest.raises(KilobyteError, match=message) as e:
        compile_graph(detector_graph[0], tmp_path / "p", detect=DetectConfig(anchors, 10))
    assert "\n" not in str(e.value) and not (tmp_path / "p").exists()


def test_compile_command_takes_a_detect_file(tmp_path, detector_graph):
    """`kilobyte compile MODEL.tflite --detect detect.json`: the library has the detector's entry point; a file
    that is not the configuration is a one-line error naming it, exit 1."""
    model = tmp_path / "det.tflite"
    model.write_bytes(to_tflite(detector_graph[0]))
    good = tmp_path / "detect.json"
    good.write_text(json.dumps(DetectConfig(ANCHORS, 10).to_json()))
    cmd = [sys.executable, "-m", "kilobyte", "compile", str(model), "--out", str(tmp_path / "lib")]
    run = subprocess.run([*cmd, "--detect", str(good), "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "int32_t kb_detections(" in (tmp_path / "lib" / "src" / "model.h").read_text()
    bad = tmp_path / "bad.json"
    bad.write_text('{"classes": 10}')
    run = subprocess.run([*cmd, "--detect", str(bad)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and str(bad) in run.stderr, run.stderr


def test_boxes_verified_on_the_host_and_under_qemu(tmp_path, detector_graph):
    """`verify_project` and `verify_on_target` (Cortex-M7 under QEMU: the firmware writes detections.bin) check
    the boxes against the reference post-processing, and say so."""
    config = DetectConfig(ANCHORS, 10, score_threshold=0.2, max_detections=6)
    result = compile_graph(detector_graph[0], tmp_path / "p", detect=config)
    host = verify_project(result.out_dir, n_random=3, sanitize=False)
    assert host.ok and host.detections == "boxes: c-host == reference post-processing on 3 inputs"
    target = verify_on_target(result.out_dir, "cortex-m7", n_random=2)
    assert target.ok, target.mismatches
    assert target.detections == "boxes: qemu-cortex-m7 == c-host == reference post-processing on 2 inputs"
    build = build_firmware(result.out_dir, "cortex-m7")
    run = run_qemu(build, np.zeros(result.manifest["input"]["shape"], np.int8))
    assert build.max_detections == 6 and run.detections is not None and 1 <= len(run.detections) <= 6
    # no heap in the linked firmware: kb_detect is in it, nothing of malloc's family or the heap's sbrk
    symbols = subprocess.run(["arm-none-eabi-nm", str(build.elf)], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in symbols.splitlines() if line.strip()}
    assert "kb_detect" in names
    assert not names & {"malloc", "_malloc_r", "free", "_free_r", "calloc", "realloc", "_sbrk", "_sbrk_r"}, names
