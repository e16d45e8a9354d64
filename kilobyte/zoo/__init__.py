"""Model zoo stage: reference PyTorch networks that feed the frontend, built from code (no weight downloads).

Every model uses only the ops the PyTorch frontend supports and traces with torch.fx. The registry below is plain
data; a family's module (and torch) is imported only when `create` builds one of its models, so `names()` and
`describe()` stay cheap for the CLI.

>>> names()  # doctest: +NORMALIZE_WHITESPACE
['ad-autoencoder', 'ic-resnet8', 'kws-dscnn', 'mbv2-rd', 'mnasnet', 'mnist-cnn', 'mobilenetv2',
 'proxyless-mobile', 'resnet-small', 'vgg-small', 'vww-mbv1']
>>> names("mlperf-tiny")
['ad-autoencoder', 'ic-resnet8', 'kws-dscnn', 'vww-mbv1']
>>> describe("vgg-small")
'VGG-11-style CNN, 8 conv3x3 in 1-1-2-2-2 groups, widths 16-64 (DTMM-like, MCU-sized); 32 px, 10 classes'
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kilobyte.errors import KilobyteError

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class ZooEntry:
    """One model: where its builder lives (`module:function`), what it is, and its default input."""

    builder: str
    description: str
    resolution: int
    num_classes: int
    min_resolution: int  # smallest square input the down-sampling plan accepts
    in_channels: int = 3
    kind: str = "image"  # "image": any square resolution >= min_resolution; "mlperf-tiny": its own fixed input
    input_hw: tuple[int, int] | None = None  # a fixed (H, W) input (the MLPerf Tiny models)


_REGISTRY: dict[str, ZooEntry] = {
    "mobilenetv2": ZooEntry(
        "kilobyte.zoo.mobilenetv2:build", "MobileNetV2 (Sandler et al.), torchvision layout", 224, 1000, 32
    ),
    "mbv2-rd": ZooEntry(
        "kilobyte.zoo.mbv2_rd:build",
        "MobileNetV2 with receptive field redistributed for patch-based inference (MCUNetV2 MbV2-RD)",
        224,
        1000,
        32,
    ),
    "mnasnet": ZooEntry(
        "kilobyte.zoo.mnasnet:build", "MnasNet-B1 (no SE), torchvision mnasnet1_0 layout", 224, 1000, 32
    ),
    "proxyless-mobile": ZooEntry(
        "kilobyte.zoo.proxyless:build", "ProxylessNAS-Mobile (Cai et al.), published block list", 224, 1000, 32
    ),
    "vgg-small": ZooEntry(
        "kilobyte.zoo.small_cnns:build_vgg",
        "VGG-11-style CNN, 8 conv3x3 in 1-1-2-2-2 groups, widths 16-64 (DTMM-like, MCU-sized)",
        32,
        10,
        8,  # below 16 px it drops the pools of a 1 px map (small_cnns.VggSmall)
    ),
    "mnist-cnn": ZooEntry(
        "kilobyte.zoo.mnist_cnn:build",
        "the demo CNN: 3 convs, a depthwise-separable residual block, ~2.2 M MACs at 28 px",
        28,
        10,
        16,
        in_channels=1,
    ),
    "resnet-small": ZooEntry(
        "kilobyte.zoo.small_cnns:build_resnet",
        "ResNet-12-style CNN, 5 basic blocks in 3 stages, widths 16-64 (DTMM-like, MCU-sized)",
        32,
        10,
        16,
    ),
    # MLPerf Tiny reference model shapes (kilobyte/zoo/mlperf_tiny.py)
    "kws-dscnn": ZooEntry("kilobyte.zoo.mlperf_tiny:build_kws", "MLPerf Tiny keyword spotting DS-CNN (small), "
                          "49x10 MFCC", 49, 12, 49, 1, "mlperf-tiny", (49, 10)),
    "vww-mbv1": ZooEntry("kilobyte.zoo.mlperf_tiny:build_vww", "MLPerf Tiny visual wake words MobileNetV1 0.25",
                         96, 2, 96, 3, "mlperf-tiny", (96, 96)),
    "ic-resnet8": ZooEntry("kilobyte.zoo.mlperf_tiny:build_resnet8", "MLPerf Tiny image classification ResNet-8 "
                           "(CIFAR-10)", 32, 10, 32, 3, "mlperf-tiny", (32, 32)),
    "ad-autoencoder": ZooEntry("kilobyte.zoo.mlperf_tiny:build_autoencoder", "MLPerf Tiny anomaly detection FC "
                               "autoencoder, 640 -> 8 -> 640", 1, 640, 1, 640, "mlperf-tiny", (1, 1)),
}


class UnknownModelError(KilobyteError, KeyError):
    """Raised for a model name the zoo does not have; a KilobyteError (so a ValueError) and a KeyError."""

    def __str__(self) -> str:  # KeyError would otherwise print the message in quotes
        return str(self.args[0])


def names(kind: str | None = None) -> list[str]:
    """Names of the zoo models, sorted: all of them, or those of one `kind` ("image" or "mlperf-tiny")."""
    return sorted(name for name, e in _REGISTRY.items() if kind is None or e.kind == kind)


def _entry(name: str) -> ZooEntry:
    key = name.strip().lower().replace("_", "-")
    if key not in _REGISTRY:
        raise UnknownModelError(f"unknown zoo model {name!r}; valid names: {', '.join(names())}")
    return _REGISTRY[key]


def describe(name: str) -> str:
    """One-line description of a model, with its default input size and class count."""
    entry = _entry(name)
    if entry.input_hw is not None:
        (h, w), c = entry.input_hw, entry.in_channels
        return f"{entry.description}; {h}x{w}x{c} input, {entry.num_classes} outputs"
    return f"{entry.description}; {entry.resolution} px, {entry.num_classes} classes"


def create(
    name: str,
    width: float = 1.0,
    resolution: int | None = None,
    num_classes: int | None = None,
    in_channels: int | None = None,
    seed: int = 0,
) -> tuple[nn.Module, tuple[int, int, int, int]]:
    """Build zoo model `name` in eval mode and return it with its NCHW input shape (batch 1).

    `width` multiplies channel counts; `resolution` (square) and `num_classes` default to the model's own values.
    The initial weights follow from `seed` alone (the caller's global torch generator is left as it was), so a
    model trained from them is the same every run: the demo's result does not depend on what ran before it.

    >>> model, shape = create("resnet-small", resolution=28, in_channels=1)
    >>> shape
    (1, 1, 28, 28)
    """
    entry = _entry(name)
    if entry.input_hw is not None and resolution not in (None, entry.resolution):
        raise KilobyteError(f"zoo model {name}: its input is fixed at {entry.input_hw[0]}x{entry.input_hw[1]}; "
                            f"drop --resolution")
    resolution = entry.resolution if resolution is None else resolution
    num_classes = entry.num_classes if num_classes is None else num_classes
    in_channels = entry.in_channels if in_channels is None else in_channels
    if resolution < entry.min_resolution:
        raise KilobyteError(f"zoo model {name}: resolution {resolution} px is below its minimum of "
                            f"{entry.min_resolution} px")
    if width <= 0 or num_classes < 1 or in_channels < 1:
        raise KilobyteError(f"zoo model {name}: need width > 0, num_classes >= 1 and in_channels >= 1 "
                            f"(got {width}, {num_classes}, {in_channels})")
    module_name, function_name = entry.builder.split(":")
    build = getattr(importlib.import_module(module_name), function_name)
    extra = {"resolution": resolution} if "resolution" in inspect.signature(build).parameters else {}
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build(width=width, num_classes=num_classes, in_channels=in_channels, **extra)
    shape = (1, in_channels, *(entry.input_hw or (resolution, resolution)))
    _settle_batchnorm(model, shape, seed)
    return model.eval(), shape


def _settle_batchnorm(model: nn.Module, shape: tuple[int, int, int, int], seed: int = 0) -> None:
    """Give an untrained model the BatchNorm statistics of random inputs (a few train-mode forward passes).

    With PyTorch's default running stats (mean 0, var 1) an untrained deep net shrinks its activations layer after
    layer (MobileNetV2 reaches ~1e-9 by block 15), which int8 cannot represent and TFLM rejects. Real statistics
    keep every layer near unit scale, like a trained network; training overwrites them anyway.
    """
    import torch

    bns = [m for m in model.modules() if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d))]
    if not bns:
        return
    gen = torch.Generator().manual_seed(seed)
    saved = [m.momentum for m in bns]
    for m in bns:
        m.momentum = None  # cumulative average over the passes below
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.rand((2, *shape[1:]), generator=gen))
    for m, mom in zip(bns, saved):
        m.momentum = mom
    model.eval()
