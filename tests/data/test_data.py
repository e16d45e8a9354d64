"""`kilobyte.data`: an .npz's layout is decided by the model's input, not guessed from the array alone.

A Conv1d keyword-spotting module (input (1, 10, 49) = NCHW 1x10x1x49, NHWC 1x1x49x10) given its data NHWC
(N, 1, 49, 10) was read as NCHW because H = 1, then refused ("cannot resize (49, 10) images to 1x49"). Here: NHWC and
NCHW files of the same random values both calibrate it to the same images (the values a wrong reading would scramble),
and `kilobyte compile` takes both; an array both readings fit is a one-line error naming them and how to choose (a
`layout` entry in the file), which then decides. MNIST-style NCHW files and image folders keep working.
"""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.api import calibration_inputs
from kilobyte.cli import main
from kilobyte.data import load_dataset
from kilobyte.errors import KilobyteError

KWS_NHWC = (1, 1, 49, 10)  # the graph input of a Conv1d over 10 bands x 49 frames


MODULES = """
import torch
from torch import nn


class KeywordSpotter(nn.Module):
    input_shape = (1, 10, 49)  # (N, bands, frames)

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(10, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(-1))


class Cube(nn.Module):
    input_shape = (1, 4, 4, 4)  # C = H = W: an (N, 4, 4, 4) array fits as NHWC and as NCHW

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))
"""


@pytest.fixture
def kws_files(tmp_path, monkeypatch):
    """The module importable as kws_mod:KeywordSpotter from tmp_path, and the same images saved both ways."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kws_mod.py").write_text(MODULES)  # `kilobyte compile kws_mod:...` imports it from the cwd
    nhwc = np.random.default_rng(0).random((8, *KWS_NHWC[1:]), np.float32)  # (8, 1, 49, 10)
    np.savez(tmp_path / "nhwc.npz", x=nhwc)
    np.savez(tmp_path / "nchw.npz", x=nhwc.transpose(0, 3, 1, 2))  # (8, 10, 1, 49)
    return tmp_path, nhwc


def test_either_layout_calibrates_to_the_same_images(kws_files):
    root, nhwc = kws_files
    for name in ("nhwc.npz", "nchw.npz"):
        got = np.concatenate(calibration_inputs(str(root / name), KWS_NHWC, n=8))
        assert np.array_equal(got, nhwc), name


def test_compile_takes_the_conv1d_module_with_either_layout(kws_files, capsys):
    root, _ = kws_files
    for name in ("nhwc.npz", "nchw.npz"):
        code = main(["compile", "kws_mod:KeywordSpotter", "--data", str(root / name), "--samples", "8",
                     "--out", str(root / name.replace(".npz", ""))])
        _, err = capsys.readouterr()
        assert code == 0, err
        assert (root / name.replace(".npz", "") / "src" / "model.c").is_file()


def test_both_readings_fitting_is_a_one_line_question(kws_files, capsys):
    root, _ = kws_files
    cube = np.random.default_rng(1).random((4, 4, 4, 4), np.float32)
    np.savez(root / "cube.npz", x=cube)
    code = main(["compile", "kws_mod:Cube", "--data", str(root / "cube.npz"), "--out", str(root / "c")])
    _, err = capsys.readouterr()
    assert code == 1 and err.count("\n") == 1 and not (root / "c").exists()
    assert "fits the model input 4x4x4 both as NHWC (4x4x4) and as NCHW (4x4x4)" in err and "layout='NCHW'" in err
    np.savez(root / "cube_nchw.npz", x=cube, layout="NCHW")  # the file says: then no question
    got = np.concatenate(calibration_inputs(str(root / "cube_nchw.npz"), (1, 4, 4, 4), n=4))
    assert np.array_equal(got, cube.transpose(0, 2, 3, 1))


def test_neither_reading_fitting_names_both(kws_files):
    root, _ = kws_files
    np.savez(root / "odd.npz", x=np.zeros((2, 3, 5, 7), np.float32))
    with pytest.raises(KilobyteError, match=r"fits the model input 1x49x10 neither as NHWC \(3x5x7\) nor as NCHW "
                                            r"\(5x7x3\)$"):
        calibration_inputs(str(root / "odd.npz"), KWS_NHWC, n=2)


def test_mnist_style_nchw_and_image_folders_still_load(tmp_path):
    from PIL import Image

    digits = (np.random.default_rng(2).random((5, 1, 28, 28)) * 255).astype(np.uint8)  # (N, 1, 28, 28) as saved
    np.savez(tmp_path / "mnist_nchw.npz", x=digits, y=np.arange(5))
    got = np.concatenate(calibration_inputs(str(tmp_path / "mnist_nchw.npz"), (1, 28, 28, 1), n=5))
    assert np.allclose(got, digits.transpose(0, 2, 3, 1) / 255.0)
    assert load_dataset(str(tmp_path / "mnist_nchw.npz")).x.shape == (5, 28, 28, 1)  # the guess, with no model
    for c in ("a", "b"):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        Image.fromarray(np.full((3, 8, 4), 200, np.uint8)).save(tmp_path / "imgs" / c / "0.png")  # RGBA, H = 3
    ds = load_dataset(str(tmp_path / "imgs"))  # PIL arrays are HWC: never read as NCHW (the old guess did)
    assert ds.x.shape == (2, 3, 8, 4) and ds.undecided is None and list(ds.y) == [0, 1]
