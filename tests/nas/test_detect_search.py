"""The search's detector (issue 28): a detector space (`MBSpace.detector`), its supernet and the task the supernet
phases, fitness and time budget use for it (`nas/task.py`) — subnets extracted with their heads, anchors fitted at
the search's resolution, boxes scaled with the pixels, a training step that lowers YOLOv3's loss, and a score that is
the float decoding's mAP."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from bn_helpers import randomise_bn

from kilobyte.data.detect import make_digit_scenes
from kilobyte.errors import KilobyteError
from kilobyte.nas.build import network
from kilobyte.nas.resources import layer_counts
from kilobyte.nas.space import MBSpace
from kilobyte.nas.supernet import SuperNet
from kilobyte.nas.supernet_train import SubnetScorer, SupernetTraining, train_phase
from kilobyte.nas.task import Detect
from kilobyte.train.detect import decode
from kilobyte.train.detect_eval import Detections, mean_average_precision
from kilobyte.train.detect_library import evaluate_detector

SPACE = MBSpace(num_classes=10, in_channels=1, widths=(0.3,), resolutions=(64,), stage_width_choices=(0.5, 0.75, 1.0),
                rd_stages=2).detector(((1, 3), (3, 3)))


def test_a_detector_space_keeps_the_stages_up_to_its_last_head():
    assert len(SPACE.stage_depths) == len(SPACE.stage_widths) == len(SPACE.stage_strides) == 4
    assert SPACE.head_strides == (8, 16)
    assert MBSpace.from_json(SPACE.to_json()) == SPACE
    assert "detect_heads" not in MBSpace().to_json()  # a classifier's JSON is as before
    arch = SPACE.sample(np.random.default_rng(0))
    net = network(SPACE, arch)
    assert net.head is None and [layer.cout for _, layer in net.detect] == [3 * 15, 3 * 15]
    assert [net.blocks[tap].stage for tap, _ in net.detect] == [1, 3]
    # MACs of the heads counted at their maps: 64 px -> 8x8 and 4x4
    base = layer_counts(network(SPACE, arch))[1] - sum(layer.cin * layer.cout * s * s for (_, layer), s
                                                         in zip(net.detect, (8, 4)))
    assert base == sum(layer.kernel ** 2 * (1 if layer.depthwise else layer.cin) * layer.cout
                       * (-(-h // layer.stride)) ** 2 for layer, h in list(net.convs())[:-2])
    with pytest.raises(KilobyteError, match="detect_heads"):
        MBSpace(detect_heads=((3, 3), (1, 3)))


@pytest.mark.parametrize("seed", range(3))
def test_a_detector_subnet_extracted_equals_the_supernet(seed, one_torch_thread):
    net = SuperNet(SPACE, 0.3, 64)
    randomise_bn(net, seed)
    for head in net.heads:
        torch.nn.init.normal_(head.conv.weight, 0, 0.3)
    arch = SPACE.sample(np.random.default_rng(seed))
    module = net.extract(arch)
    net.set_active(arch)
    net.eval()
    x = torch.randn(2, 1, 64, 64)
    with torch.no_grad():
        ours, theirs = net(x), module(x)
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
    assert module.strides == (8, 16) and module.num_classes == 10


def test_the_detection_task_scales_boxes_and_fits_anchors_at_the_resolution():
    scenes = make_digit_scenes(40, seed=3)
    task = Detect.of(SPACE, scenes, 64, seed=0)
    assert task.strides == (8, 16) and [len(g) for g in task.anchors] == [3, 3]
    areas = [w * h for g in task.anchors for w, h in g]
    assert areas == sorted(areas)  # the smallest anchors go to the finest head
    native = Detect.of(SPACE, scenes, 128, seed=0)
    assert np.allclose(np.array(native.anchors), 2 * np.array(task.anchors), rtol=1e-5)  # 128 px: twice the size
    x, (boxes, labels) = task.tensors(scenes, 64)
    assert x.shape == (40, 1, 64, 64)
    assert all(np.allclose(b, s / 2) for b, s in zip(boxes, scenes.boxes))
    assert [list(lab) for lab in labels] == [list(lab) for lab in scenes.labels]
    rows = torch.tensor([3, 7])
    assert [len(b) for b in task.take((boxes, labels), rows)[0]] == [len(boxes[3]), len(boxes[7])]


def test_supernet_training_lowers_the_detection_loss_and_the_score_is_the_decodings_map(one_torch_thread):
    scenes = make_digit_scenes(96, seed=1)
    task = Detect.of(SPACE, scenes, 64, seed=0)
    x, y = task.tensors(scenes, 64)
    torch.manual_seed(0)
    net = SuperNet(SPACE, 0.3, 64)
    cfg = SupernetTraining(largest_epochs=3, supernet_epochs=1, subnets_per_batch=1, batch_size=32, lr=0.05)
    history = train_phase(net, "largest", x, y, cfg, seed=0, task=task)
    assert history[-1]["loss"] < history[0]["loss"]
    history = train_phase(net, "supernet", x, y, cfg, seed=0, task=task)
    assert np.isfinite(history[-1]["loss"])
    scorer = SubnetScorer(net, x[:64], x[:48], task.take(y, np.arange(48)), calib_batches=1, task=task)
    arch = SPACE.sample(np.random.default_rng(2))
    score = scorer(arch)
    net.set_active(arch)
    net.eval()
    with torch.no_grad():  # the scorer's number is the float decoding's mAP of the recalibrated subnet
        found = [Detections(*d) for d in decode(net(x[:48]), task.anchors, task.strides, 10)]
    assert score == pytest.approx(mean_average_precision(found, y[0][:48], y[1][:48], 10)[0])
    assert task.chance(y) == 0.0


def test_search_task_detect_end_to_end(tmp_path):
    """`kilobyte search --task detect --patch` on the built-in scenes, with a budget small enough to finish in a
    test: a detector library that is bit-exact (outputs and boxes) and fits, its held-out record, the PNG of
    held-out scenes with boxes, and `kilobyte evaluate --task detect --split test` giving the search's reported int8
    mAP on the same scenes, class by class."""
    out = tmp_path / "s"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "kilobyte", "search", "--task", "detect", "--patch", "--device", "stm32f412",
           "--max-sram", "96KB", "--max-macs", "4", "--out", str(out), "--epochs", "2,1,2", "--population", "4",
           "--generations", "1", "--space-samples", "6", "--train-images", "160", "--workers", "1", "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(run.stdout)
    assert r["task"] == "detect" and r["metric"] == "mAP@0.5" and r["bit_exact"] and r["fits"]
    assert "boxes" in r["verified"]["detections"]
    assert r["macs"] <= 4e6 and r["planned"]["peak_bytes"] + r["planned"]["input_bytes"] <= 96 * 1024
    assert r["detect"]["strides"] == [8, 16] and len(r["detect"]["anchors"]) == 2
    held = json.loads((out / "model" / "held_out.json").read_text())
    assert held["task"] == "detect" and held["map50"] == r["int8_map50"] and held["images"] == 400
    assert (out / "detections.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ev = subprocess.run([sys.executable, "-m", "kilobyte", "evaluate", "--task", "detect", str(out / "model"),
                         "--split", "test", "--json"], capture_output=True, text=True, timeout=600, env=env)
    assert ev.returncode == 0, ev.stderr
    e = json.loads(ev.stdout)
    assert e["images"] == held["images"] and e["map50"] == r["int8_map50"] == e["reported_map50"]
    again = evaluate_detector(out / "model", split="test")
    assert again.map50 == e["map50"] and again.ap == [e["per_class"][c] for c in again.classes]


def test_the_time_cap_of_a_detector_search_counts_the_steps_of_all_its_training_scenes(monkeypatch):
    """`budget.time_cap` for `--task detect` (joint or per layer alike): the step model from two timed networks (their
    seconds fixed here; each network's least of its three timings) and an epoch of every training scene at the
    configuration's batch."""
    from kilobyte.nas import budget
    from kilobyte.nas.search import SearchConfig, search_space

    steps = iter([0.3, 0.4, 0.1, 0.9, 0.2, 0.5])  # (small, large) in turn, three rounds: the least of each counts
    monkeypatch.setattr(budget, "time_module_step", lambda *a, **k: next(steps))
    scenes = make_digit_scenes(100, seed=2)
    config = SearchConfig("stm32f412", 256 * 1024, 1024 * 1024, task="detect", patch=True, minutes=12,
                          planned=("largest_epochs",), training=SupernetTraining(batch_size=32))
    space = search_space(config, 1, 10, 128)
    cap = budget.time_cap(config, space, scenes)
    w, r = space.widths[len(space.widths) // 2], space.resolutions[len(space.resolutions) // 2]
    sub = space.with_config(w, r)
    a, b = (layer_counts(network(sub, arch))[1] for arch in (sub.smallest(), sub.largest()))
    model = budget.StepModel(0.1 - (0.3 / (b - a)) * a, 0.3 / (b - a))
    assert cap == pytest.approx(budget.largest_macs_cap(12, model, 4))  # 100 scenes / 32 a batch -> 4 steps


def test_a_detector_search_is_tinynas_only(tmp_path):
    run = subprocess.run([sys.executable, "-m", "kilobyte", "search", "--task", "detect", "--strategy", "unas",
                          "--out", str(tmp_path / "u")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and "--task detect" in run.stderr, run.stderr
    assert not (tmp_path / "u").exists()


def test_a_detectors_budget_counts_its_head_maps_and_post_processing_arrays():
    """The firmware holds the caller-owned outputs and kb_detect's arrays beside the arena (the first joint winner of
    issue 28's benchmark overflowed STM32F412's RAM by the 44 KB of its head maps when only the input counted): the
    evaluator's buffers equal the planned graph's input + outputs, the search's reserve holds the arrays, and a
    candidate fits only with all of them inside the SRAM."""
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.search import SearchConfig, search_budget
    from kilobyte.ops.detect_post import DETECTION_DTYPE

    config = SearchConfig("stm32f412", 256 * 1024, 1024 * 1024, task="detect")
    budget = search_budget(config)
    assert budget.sram_reserve == search_budget(SearchConfig("stm32f412", 256 * 1024, 1024 * 1024)).sram_reserve \
        + (64 + 16) * DETECTION_DTYPE.itemsize
    ev = ResourceEvaluator(SPACE)
    for seed in range(3):
        arch = SPACE.sample(np.random.default_rng(seed))
        r = ev.evaluate(arch)
        assert r.output_bytes == 3 * 15 * (8 * 8 + 4 * 4)  # 64 px: 8x8 and 4x4 cells, 3 anchors x (5 + 10)
        assert ev.io_bytes(arch) == r.input_bytes + r.output_bytes == 64 * 64 + r.output_bytes
        need = r.arena_bytes + r.input_bytes + r.output_bytes + budget.sram_reserve
        assert ev.fits(arch, dataclasses.replace(budget, sram_bytes=need, flash_bytes=10 ** 7))
        assert not ev.fits(arch, dataclasses.replace(budget, sram_bytes=need - 1, flash_bytes=10 ** 7))


def test_the_per_layer_and_joint_detector_searches_search_one_space():
    from kilobyte.nas.search import PATCH_RD_STAGES, PATCH_STAGE_WIDTHS, SearchConfig, grow_limit, search_space

    joint = SearchConfig("stm32f412", 256 * 1024, 1024 * 1024, task="detect", patch=True)
    per_layer = dataclasses.replace(joint, patch=False)
    a, b = search_space(joint, 1, 10, 128), search_space(per_layer, 1, 10, 128)
    assert a == b and b.resolutions == tuple(range(64, 257, 16))  # one space: the patch schedule is the difference
    assert b.stage_width_choices == PATCH_STAGE_WIDTHS and b.rd_stages == PATCH_RD_STAGES
    assert grow_limit(joint, 128) is None and grow_limit(per_layer, 128) is None
    assert grow_limit(dataclasses.replace(per_layer, task="classify"), 28) is not None  # a classifier's grid grows
