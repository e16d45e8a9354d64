"""CLI: `kilobyte evaluate` on the library a tiny `kilobyte search` wrote — its accuracy on the held-out images
equals the int8 accuracy the search reported (the search trains at 12x12, the digits are 8x8: the resize is part of
what must match); text, JSON and PNG; under QEMU on a few images, outputs equal to the host build's, and a
differing output is reported (exit code 1); bad input is one line on stderr."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest
from classifier_nets import classifier_library, feature_map_library

from kilobyte.cli import main
from kilobyte.targets.cortexm import have_tools

pytest.importorskip("torch")
needs_qemu = pytest.mark.skipif(not os.environ.get("CI") and not have_tools(),  # never skipped on CI: fail there
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) missing")


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """(search output folder, its report): TinyNAS on digits at resolution 12 with a budget of seconds (the
    settings of tests/nas/test_search_cli.py, smaller: the accuracy only has to be above chance, ~25 %)."""
    import torch

    from kilobyte.nas.evolution import EvolutionConfig
    from kilobyte.nas.search import SearchConfig, run_search
    from kilobyte.targets.devices import get_device

    device = get_device("stm32f410")
    config = SearchConfig(device.name, device.sram_bytes, device.flash_bytes, data="digits", resolutions=(12,),
                          space_samples=10, train_images=512, finetune_epochs=4,
                          evolution=EvolutionConfig(population=4, parents=2, generations=1))
    config = replace(config, training=replace(config.training, largest_epochs=1, supernet_epochs=1))
    out = tmp_path_factory.mktemp("search") / "s"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = run_search(config, out, workers=1, log=lambda *a: None, device=device)
    finally:
        torch.set_num_threads(threads)
    return out, report


def _evaluate(capsys, *args):
    code = main(["evaluate", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_equals_the_search_reported_int8_accuracy(searched, capsys):
    out, report = searched
    assert report["held_out"]["images"] == 360  # digits' last 20 %: 1,797 - int(0.8 * 1,797)
    code, text, err = _evaluate(capsys, out, "--split", "test", "--json")
    assert code == 0, err
    got = json.loads(text)
    assert got["accuracy"] == report["int8_accuracy"] and got["host"]["images"] == 360
    assert got["reported_int8_accuracy"] == report["int8_accuracy"] and got["same_images_as_report"] is True
    assert report["int8_accuracy"] > 0.15  # above chance (10 %): a preprocessing slip would show
    assert sum(c["images"] for c in got["host"]["per_class"]) == 360
    assert np.trace(got["host"]["confusion"]) == round(report["int8_accuracy"] * 360)


def test_text_and_png(searched, capsys, tmp_path):
    out, report = searched
    png = tmp_path / "confusion.png"
    code, text, err = _evaluate(capsys, out / "model", "--split", "test", "--plot", png)
    assert code == 0, err
    acc = report["int8_accuracy"] * 100
    assert f"accuracy  {acc:.2f} % ({round(report['int8_accuracy'] * 360)} / 360)" in text
    assert f"(reported by kilobyte search (tinynas): {acc:.2f} %, same images)" in text
    assert "class  images  correct  accuracy" in text and "confusion matrix (rows: true class" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    assert imread(png).shape[1] > 600  # two panels side by side


def test_all_of_the_data_says_where_the_reported_split_is(searched, capsys):
    out, report = searched
    code, text, err = _evaluate(capsys, out, "--data", "digits", "--limit", "50", "--json")
    assert code == 0, err
    got = json.loads(text)
    assert got["host"]["images"] == 50 and got["split"] is None
    assert "on 360 held-out images of this data; --split test evaluates exactly those" in got["note"]


@needs_qemu
def test_on_qemu_equals_the_host(searched, capsys):
    out, _ = searched
    code, text, err = _evaluate(capsys, out, "--split", "test", "--limit", "4", "--target", "cortex-m7", "--json")
    assert code == 0, err
    got = json.loads(text)
    t = got["target"]
    assert t["core"] == "cortex-m7" and t["images"] == 4 and t["equal_to_host"] and t["differing_images"] == []
    assert t["confusion"] == got["host"]["confusion"] and got["host"]["images"] == 4
    assert got["same_images_as_report"] is False  # 4 of the 360: not the reported number's images


@needs_qemu
def test_a_differing_target_output_is_reported(searched, capsys, monkeypatch):
    """The comparison can fail: QEMU's output of the third image is altered on its way back."""
    import kilobyte.targets.cortexm as cortexm

    out, _ = searched
    real, calls = cortexm.run_qemu, []

    def altered(build, x, **kw):
        result = real(build, x, **kw)
        calls.append(1)
        if len(calls) == 3:
            result = replace(result, output=result.output ^ np.int8(1))
        return result

    monkeypatch.setattr(cortexm, "run_qemu", altered)
    code, text, err = _evaluate(capsys, out, "--split", "test", "--limit", "4", "--target", "cortex-m7")
    assert code == 1, err
    assert "outputs DIFFER from the host C build's on 1 of 4 images (first: image 2)" in text


def test_one_line_errors(tmp_path, capsys):
    features = feature_map_library(tmp_path / "f")
    classifier, _ = classifier_library(tmp_path / "c")
    cases = [((features, "--data", "digits"), "not a classifier"),
             ((classifier,), "give the labelled images with --data"),
             ((classifier, "--split", "test"), "no held_out.json"),
             ((classifier, "--data", "digits", "--limit", "0"), "--limit 0: give at least 1 image"),
             ((tmp_path, "--data", "digits"), "not a compiled Kilobyte library"),
             ((classifier, "--data", "digits"), "label 9 is out of range for the library's 3 classes (0-2)"),
             ((classifier, "--data", tmp_path / "rgb.npz"), "has 3 channels, the library's input has 1"),
             ((classifier, "--data", tmp_path / "empty"), "no images found in class sub-folders"),
             ((classifier, "--data", "digits", "--plot", tmp_path / "nowhere" / "a.png"), "no such folder")]
    np.savez(tmp_path / "rgb.npz", x=np.zeros((2, 4, 4, 3), np.uint8), y=np.zeros(2, int), layout="NHWC")
    (tmp_path / "empty" / "a").mkdir(parents=True)
    for args, message in cases:
        code, _, err = _evaluate(capsys, *args)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
