"""Eleven ordinary PyTorch modules a new user would try first, shared by tests/frontends/test_breadth_{torch,onnx}.py.

Each `Case` holds a factory (seeded weights, randomised BatchNorm statistics), its NCHW / NCL input shape and the
calibration data it is quantised with.

- `mobilenet_v3_block`: Hardswish stem, an inverted residual with a squeeze-excite (global mean, 1x1 convs, ReLU,
  sigmoid, a (1, C, 1, 1) scale multiplied over (1, C, H, W)), residual add, mean + Linear head;
- `unet`: a two-level U-Net (max pool down, nn.Upsample up, torch.cat skip);
- `lenet`: LeNet-5 on 28x28 digits ending in log_softmax;
- `lenet5_tanh`: the classic LeNet-5 (tanh, average pooling, 32-px digits padded in the first conv);
- `smooth_activations`: ELU and tanh as modules, functions and methods, a per-channel PReLU;
- `unit_clamp_exp_log`: hardtanh(-1, 1), exp and log (TFLite's interpreter is their oracle);
- `decoder`: LeakyReLU and ConvTranspose2d upsampling, sigmoid output;
- `segmentation_decoder`: a stride-2 ConvTranspose2d with PyTorch's padding and output_padding, bilinear
  resizes with and without align_corners, a nearest resize to a given size, a sigmoid mask head;
- `gelu_head`: GELU convs (exact, then tanh) and a global max pool (nn.AdaptiveMaxPool2d(1) -> MAX_POOL_2D);
- `kws_conv1d`: keyword spotting over 40 MFCC bands x 49 frames, Conv1d / BatchNorm1d / MaxPool1d /
  AdaptiveAvgPool1d, then Linear;
- `broadcast_constants`: the constants hand-written modules add, multiply and subtract (a (C,) bias after a ReLU, as
  a pre-activation ResNet's folded BatchNorm, a scale and a shift by one value, a (1, 1, H, W) positional term, a
  (W,) row scale, c - x): ADD / SUB / MUL by constants of several broadcast shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class MobileNetV3Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
        self.expand = nn.Sequential(nn.Conv2d(16, 48, 1, bias=False), nn.BatchNorm2d(48), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(48, 48, 3, 1, 1, groups=48, bias=False), nn.BatchNorm2d(48),
                                nn.Hardswish())
        self.se_reduce, self.se_expand = nn.Conv2d(48, 12, 1), nn.Conv2d(12, 48, 1)
        self.project = nn.Sequential(nn.Conv2d(48, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(self.expand(x))
        s = torch.sigmoid(self.se_expand(F.relu(self.se_reduce(y.mean((2, 3), keepdim=True)))))
        x = x + self.project(y * s)
        return self.fc(x.mean((2, 3)))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.enc2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec = nn.Sequential(nn.Conv2d(24, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))

    def forward(self, x):
        skip = self.enc1(x)
        return self.dec(torch.cat([self.up(self.enc2(skip)), skip], dim=1))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(16 * 4 * 4, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc2(F.relu(self.fc1(x))))
        return F.log_softmax(self.fc3(x), dim=1)


class LeNet5Tanh(nn.Module):
    """LeCun et al.'s LeNet-5 as textbooks write it: 5x5 convs, tanh, average pooling, three tanh FC layers."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2),
                                      nn.Conv2d(6, 16, 5), nn.Tanh(), nn.AvgPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.Tanh(), nn.Linear(120, 84),
                                        nn.Tanh(), nn.Linear(84, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class SmoothActivations(nn.Module):
    """ELU and tanh in their module, function and method forms; PReLU per channel."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 12, 3, padding=1), nn.Conv2d(12, 8, 3, stride=2)
        self.elu, self.fc, self.prelu = nn.ELU(), nn.Linear(8, 4), nn.PReLU(12)
        with torch.no_grad():
            self.prelu.weight.copy_(torch.linspace(-0.5, 1.5, 12))

    def forward(self, x):
        y = self.prelu(F.elu(self.conv1(x)))
        y = torch.tanh(self.conv2(y)).mean((2, 3))
        return self.fc(self.elu(y)).tanh()


class UnitClampExpLog(nn.Module):
    """hardtanh(-1, 1) (TFLite's RELU_N1_TO_1), then exp and log: ops TFLite Micro has no int8 kernel for."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, stride=2)
        self.clamp, self.fc = nn.Hardtanh(), nn.Linear(8, 3)

    def forward(self, x):
        y = torch.log(torch.exp(self.clamp(self.conv1(x))) * 2.0)  # exp of [-1, 1]: log's input stays positive
        return self.fc(self.conv2(y).mean((2, 3)))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.LeakyReLU(0.1),
                                  nn.ConvTranspose2d(16, 8, 2, stride=2), nn.LeakyReLU(0.1),
                                  nn.ConvTranspose2d(8, 1, 2, stride=2), nn.Sigmoid())

    def forward(self, x):
        return self.body(x)


class SegmentationDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 12, 3, stride=2, padding=1), nn.ReLU())
        self.up1 = nn.Sequential(nn.ConvTranspose2d(12, 8, 3, stride=2, padding=1, output_padding=1), nn.ReLU())
        self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.head = nn.Sequential(nn.Conv2d(8, 3, 1), nn.Sigmoid())  # per-class mask probabilities

    def forward(self, x):  # (N, 3, 24, 20)
        y = self.up2(self.up1(self.stem(x)))  # (N, 8, 48, 40)
        y = F.interpolate(y, size=(33, 27), mode="bilinear", align_corners=True)
        return self.head(F.interpolate(y, size=(24, 20), mode="nearest"))


class GeluHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.GELU(),
                                      nn.Conv2d(16, 32, 3, stride=2), nn.GELU(approximate="tanh"))
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class KeywordSpotter(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(40, 32, 3, padding=1, bias=False), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(32, 48, 3, stride=2, bias=False), nn.BatchNorm1d(48), nn.ReLU(),
            nn.Conv1d(48, 48, 5, padding=2, groups=48), nn.ReLU6(), nn.AdaptiveAvgPool1d(1))
        self.fc = nn.Linear(48, 12)

    def forward(self, x):  # (N, 40 MFCC bands, 49 frames)
        return self.fc(self.features(x).flatten(1))


class BroadcastConstants(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 6, 3, padding=1)
        self.bias = nn.Parameter(0.3 * torch.randn(8))
        self.pos = nn.Parameter(0.5 * torch.randn(1, 1, 16, 12))
        self.row = nn.Parameter(0.5 + torch.rand(12))
        self.fc = nn.Linear(6, 4)

    def forward(self, x):  # (N, 3, 16, 12)
        y = F.relu(self.conv1(x)) + self.bias.view(1, -1, 1, 1)
        y = (y * 0.5 - 0.25) + self.pos
        y = F.relu(self.conv2(1.0 - y * self.row))
        return self.fc(y.mean((2, 3)))


@dataclass(frozen=True)
class Case:
    make: Callable[[], nn.Module]
    shape: tuple[int, ...]
    data: str = "random"  # "digits": scikit-learn's digits resized to the input; "random": standard normal
    mean_steps: float = 1.0  # the int8 output's mean distance from the float one, in output steps (check_pipeline)


CASES = {
    "mobilenet_v3_block": Case(MobileNetV3Block, (1, 3, 32, 32)),
    "unet": Case(UNet, (1, 3, 16, 16)),
    "lenet": Case(LeNet, (1, 1, 28, 28), data="digits"),
    "decoder": Case(Decoder, (1, 8, 4, 4)),
    # four tanh layers, each rounding onto the 1/128 steps TFLite fixes for TANH: 1.34 steps off on average
    "lenet5_tanh": Case(LeNet5Tanh, (1, 1, 28, 28), data="digits", mean_steps=1.5),
    "smooth_activations": Case(SmoothActivations, (1, 3, 12, 12)),
    "unit_clamp_exp_log": Case(UnitClampExpLog, (1, 3, 10, 10)),
    "segmentation_decoder": Case(SegmentationDecoder, (1, 3, 24, 20)),
    "gelu_head": Case(GeluHead, (1, 3, 16, 16)),
    "kws_conv1d": Case(KeywordSpotter, (1, 40, 49)),
    "broadcast_constants": Case(BroadcastConstants, (1, 3, 16, 12)),
}


def build(name: str, seed: int = 0) -> nn.Module:
    """The module of case `name` in eval mode, with seeded weights and non-trivial BatchNorm statistics."""
    torch.manual_seed(seed)
    module = CASES[name].make()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                c = m.num_features
                m.running_mean.copy_(0.3 * torch.randn(c, generator=g))
                m.running_var.copy_(0.5 + torch.rand(c, generator=g))
                m.weight.copy_(0.5 + 0.8 * torch.rand(c, generator=g))
                m.bias.copy_(0.2 * torch.randn(c, generator=g))
    return module.eval()


def samples(name: str, n: int, seed: int) -> np.ndarray:
    """`n` float32 inputs of case `name` in its source layout, (n, *shape[1:])."""
    case = CASES[name]
    if case.data == "digits":
        from kilobyte.data import load_dataset
        from kilobyte.data.resize import resize_images

        x = load_dataset("digits", seed=seed).x[:n]  # (n, 8, 8, 1) in [0, 1]
        return resize_images(x, case.shape[2], "nearest").transpose(0, 3, 1, 2).astype(np.float32)
    return np.random.default_rng(seed).standard_normal((n, *case.shape[1:])).astype(np.float32)


def to_ir_layout(a: np.ndarray) -> np.ndarray:
    """Source-layout samples (N, C, H, W) / (N, C, L) -> the IR's (N, H, W, C) / (N, 1, L, C); others unchanged."""
    if a.ndim == 4:
        return a.transpose(0, 2, 3, 1)
    if a.ndim == 3:
        return a.transpose(0, 2, 1)[:, None]
    return a


# -- the pipeline every case goes through once imported ---------------------------------------------------------------
N_CALIBRATION, N_UNSEEN = 32, 6


def check_pipeline(name: str, graph, reference: Callable[[np.ndarray], np.ndarray], out_dir) -> dict:
    """Check an imported float `graph` of case `name` from float IR to generated C; return the measured errors.

    1. The float IR computes what `reference` (the framework, source layout in and out) computes, within 1e-4.
    2. `prepare_for_inference` + `quantize` on `N_CALIBRATION` samples; the compiled project (`compile_graph`) passes
       `verify_project` (host C == numpy reference == TFLite Micro on its model.tflite, an ASan/UBSan build) on
       random int8 inputs, and the same three engines agree byte for byte on the unseen samples quantised.
    3. On those unseen samples the int8 output, dequantised, is within the quantisation tolerance of the float one:
       at most 4 output steps off anywhere and 1 step on average (rounding accumulates over ~10 layers; these
       modules measure 1.5 and 0.45 at worst), or the case's own `mean_steps` (LeNet-5's four fixed-scale tanh).
    """
    from kilobyte.codegen import HostModel, compile_graph
    from kilobyte.driver.verify import project_tflite, reference_graph, verify_project
    from kilobyte.interp import run_float, run_int8
    from kilobyte.quant import dequantize_output, quantize, quantize_input
    from kilobyte.transforms import prepare_for_inference

    data = samples(name, N_CALIBRATION + N_UNSEEN, seed=1)
    calib, unseen = data[:N_CALIBRATION], data[N_CALIBRATION:]
    want = reference(unseen)
    got = np.concatenate([run_float(graph, to_ir_layout(x[None]))[graph.outputs[0]] for x in unseen])
    np.testing.assert_allclose(got, to_ir_layout(want), rtol=0, atol=1e-4, err_msg="float IR vs framework")

    qgraph = quantize(prepare_for_inference(graph), to_ir_layout(calib))
    result = compile_graph(qgraph, out_dir, model_name=name)
    report = verify_project(result.out_dir, n_random=3)
    assert report.ok, report.mismatches
    core, out = reference_graph(result.out_dir)
    host, tflite = HostModel(result.out_dir), project_tflite(result.out_dir)
    xq = quantize_input(qgraph, to_ir_layout(unseen))
    outputs = []
    oracle = _tflite_oracle(tflite, core)
    for x in xq:
        ref = run_int8(core, x[None])[out]
        assert np.array_equal(host(x[None]).reshape(ref.shape), ref), "C differs from the reference"
        assert np.array_equal(oracle(x[None], out).reshape(ref.shape), ref), "TFLite differs from the reference"
        outputs.append(ref)
    y = dequantize_output(core, np.concatenate(outputs), out)
    step = float(core.tensors[out].qparams.scale[0])
    err = np.abs(y - to_ir_layout(want)) / step
    assert err.max() <= 4 and err.mean() <= CASES[name].mean_steps, \
        f"int8 vs float: max {err.max():.2f}, mean {err.mean():.2f} steps"
    return {"max_steps": float(err.max()), "mean_steps": float(err.mean()), "ops": [n.op for n in qgraph.nodes]}


def _tflite_oracle(model: bytes, core) -> Callable:
    """TFLite Micro on the project's model.tflite; TFLite's own interpreter for a model with an op TFLite Micro has
    no kernel for (GELU). Called as oracle(x, output name)."""
    from kilobyte.targets.tflm import run_tflm, tflm_missing_ops

    if not tflm_missing_ops(core):
        return lambda x, out: run_tflm(model, x).outputs[out]
    from litert_oracle import run_litert

    name = core.inputs[0]
    return lambda x, out: run_litert(model, {name: x})[out]
