"""Search stage: a trained float classifier (or detector: `deploy_detector`) to a verified C library, as every search
deploys its winner.

`deploy_module` is the last phase of TinyNAS (`search.deploy`) and of the baselines the benchmarks compare it with
(bench/bench_search.py, bench/bench_vs_hand.py): int8 PTQ, plan, C library, verification against the numpy
reference and TensorFlow Lite Micro, float and int8 accuracy on the held-out split (int8 by the generated C), the
device fit; loading, verification and the fit are the driver's (`kilobyte.driver`). `with_input_resize` puts the
training resize in front of the network, so the library takes the data's images; `patch_report` describes a
compiled patch stage for the joint search's report.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..codegen import HostModel, compile_graph
from ..data.detect import load_detection
from ..data.held_out import write_detection_held_out, write_held_out
from ..driver import device_fit, from_module, verify_project
from ..ops.detect_post import DetectConfig
from ..quant.quantize import quantize, quantize_input
from ..train import to_nchw_tensor
from ..train.detect_library import evaluate_detector


def patch_report(model_dir: Path, per_layer_macs: int) -> dict | None:
    """The compiled library's patch stage as the report's `patch` key: {n_nodes, grid, input_patch, mac_overhead}
    (extra MACs over the per-layer network's), or None when the winner runs per layer."""
    manifest = json.loads((Path(model_dir) / "kilobyte.json").read_text())
    stage = manifest.get("patch")
    if not stage:
        return None
    return {"n_nodes": stage["n_nodes"], "grid": stage["grid"], "input_patch": stage["input_patch"],
            "mac_overhead": (manifest["macs"] - per_layer_macs) / per_layer_macs}


def deploy_module(module, resolution: int | tuple[int, int], fit, test, out_dir, options, device, name: str = "tinynas",
                  progress: bool = False, resize_inside: bool = True, max_flash: int | None = None) -> dict:
    """A trained float classifier (NCHW input at `resolution`, an int for a square one) to a verified C library in
    `out_dir`: int8 PTQ on 128 training images, plan, compile, verification against the numpy reference and
    TensorFlow Lite Micro, float and int8 top-1 on the held-out `test` split (int8 by the generated C itself; which
    images they were is written to `held_out.json` beside the library, for `kilobyte evaluate --split test`), the
    device fit (measured on the linked firmware when the Arm toolchain is present; judged against `max_flash` too,
    the search's --max-flash, when that is below the device's Flash). The search's last phase, and
    the baselines' of bench_search.py.

    When `resolution` is not the data's own size, the resize the network was trained behind becomes the library's
    first op (`with_input_resize`), so the library takes the data's images and its fit includes the resized tensor;
    calibration and both accuracies then see the data's images as they are. With `resize_inside=False`, or a patch
    stage (a resize cannot run patch by patch), the input stays at `resolution` and `kilobyte evaluate` resizes
    the images with the same function (`data.resize_images`)."""
    import torch


    module = module.eval()
    _, h, w, channels = fit.x.shape
    resolution = (resolution, resolution) if isinstance(resolution, int) else tuple(resolution)
    size = (h, w) if resize_inside and options.patch is None else resolution
    module = with_input_resize(module, resolution, size)
    graph = from_module(name, module, (1, channels, *size)).graph
    calib = to_nchw_tensor(fit.x[:128], size).numpy().transpose(0, 2, 3, 1)
    int8 = quantize(graph, [calib[i:i + 1] for i in range(len(calib))])
    result = compile_graph(int8, out_dir, options, model_name=name)
    ver = verify_project(result.out_dir, n_random=8, progress=progress)
    test_x = to_nchw_tensor(test.x, size)
    with torch.no_grad():
        float_acc = float((module(test_x).argmax(1).numpy() == test.y).mean())
    host = HostModel(result.out_dir)
    nhwc = test_x.numpy().transpose(0, 2, 3, 1)
    int8_acc = float(np.mean([int(np.argmax(host(quantize_input(int8, nhwc[i:i + 1]))) == test.y[i])
                              for i in range(len(nhwc))]))
    held_out = write_held_out(result.out_dir, test, int8_acc, by=f"kilobyte search ({name})")
    below = max_flash if max_flash is not None and max_flash < device.flash_bytes else None
    on_device, _ = device_fit(result, device, below)
    return {"float_accuracy": float_acc, "int8_accuracy": int8_acc, "held_out": held_out, "bit_exact": ver.ok,
            "verified": ver.to_json(), "input_shape": [1, *size, channels],
            "input_resize": None if size == resolution else list(resolution),
            "sram_bytes": on_device.sram_bytes, "flash_bytes": on_device.flash_bytes, "memory": on_device.memory,
            "macs": on_device.macs, "fits": on_device.fits, "verdict": on_device.verdict,
            "model_dir": str(result.out_dir)}


DETECT_SCORE_THRESHOLD = 0.05  # a searched detector's library keeps boxes scoring this and more: the float decoding's
# (train.detect.decode), so that mAP, which rewards a low threshold, is measured alike in float and int8


def deploy_detector(module, task, resolution: int, fit, test, out_dir, options, device, data: str,
                    name: str = "tinynas", progress: bool = False, max_flash: int | None = None) -> dict:
    """A trained float detector (`zoo.detector.MBDetector`, NCHW input at `resolution`) to a verified C library in
    `out_dir` with its post-processing (`kb_detect`, the task's anchors): int8 PTQ on 128 training scenes, plan,
    compile, verification (network outputs and boxes) against the numpy reference and TensorFlow Lite Micro, the
    float mAP@0.5 on the held-out `test` scenes and the int8 one by the library itself — `kilobyte evaluate --task
    detect --split test`'s own function on the `held_out.json` written here, so the two are one number — and the
    device fit. The input is the resized image (the library's boxes are in its pixels); `evaluate` resizes alike."""
    import torch

    module = module.eval()
    channels = fit.images.shape[-1]
    graph = from_module(name, module, (1, channels, resolution, resolution)).graph
    calib = task.resized(fit.take(slice(0, 128)), resolution).images
    int8 = quantize(graph, [calib[i:i + 1] for i in range(len(calib))])
    config = DetectConfig(task.anchors, task.num_classes, score_threshold=DETECT_SCORE_THRESHOLD)
    result = compile_graph(int8, out_dir, options, model_name=name, detect=config)
    ver = verify_project(result.out_dir, n_random=8, progress=progress)
    test_x, test_t = task.tensors(test, resolution)
    with torch.no_grad():
        float_map = task.score(module, test_x, test_t)
    start = len(load_detection(data).images) - len(test.images)  # the test scenes are the set's last (nas.core)
    write_detection_held_out(result.out_dir, data, test, start, None, by=f"kilobyte search ({name})")
    int8_map = evaluate_detector(result.out_dir, data, split="test", progress=progress).map50
    held_out = write_detection_held_out(result.out_dir, data, test, start, int8_map, by=f"kilobyte search ({name})")
    below = max_flash if max_flash is not None and max_flash < device.flash_bytes else None
    on_device, _ = device_fit(result, device, below)
    return {"float_map50": float_map, "int8_map50": int8_map, "held_out": held_out, "bit_exact": ver.ok,
            "verified": ver.to_json(), "input_shape": [1, resolution, resolution, channels], "input_resize": None,
            "sram_bytes": on_device.sram_bytes, "flash_bytes": on_device.flash_bytes, "memory": on_device.memory,
            "macs": on_device.macs, "fits": on_device.fits, "verdict": on_device.verdict,
            "model_dir": str(result.out_dir)}


def with_input_resize(module, resolution: tuple[int, int], size: tuple[int, int]):
    """`module` (trained on images resized to `resolution` by `data.resize_images`) behind that same resize
    from `size`: an `nn.Upsample(bilinear, align_corners=False)`, which the torch frontend lowers to RESIZE_BILINEAR
    with half-pixel centres — the op whose float semantics `resize_images` has. Unchanged when `size` is already
    the resolution."""
    from torch import nn

    if tuple(size) == tuple(resolution):
        return module
    return nn.Sequential(nn.Upsample(size=tuple(resolution), mode="bilinear", align_corners=False),
                         module).eval()
