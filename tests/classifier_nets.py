"""Small compiled libraries for the `kilobyte evaluate` tests: a classifier whose int8 scores the numpy reference
gives (a flatten and one fully connected layer, random weights), a library with two outputs, one whose output is a
feature map, and the test's own preparation of images for them (written out here, not taken from the code under
test: TFLite's QUANTIZE of torch's bilinear resize)."""

from __future__ import annotations

import numpy as np

from kilobyte.codegen import compile_graph
from kilobyte.ir import ConvAttrs, FullyConnectedAttrs, GraphBuilder, Op, ReshapeAttrs
from kilobyte.ops.arith import quantize_values
from kilobyte.quant import quantize


def _calibrated(graph, shape, seed: int):
    rng = np.random.default_rng(seed)
    return quantize(graph, [rng.random((1, *shape[1:])).astype(np.float32) for _ in range(8)])


def classifier_library(out_dir, hw: int = 4, channels: int = 1, classes: int = 3, seed: int = 0):
    """A compiled (1, hw, hw, channels) -> (1, classes) classifier calibrated on [0, 1] images: (its folder, int8
    graph)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("tiny")
    shape = (1, hw, hw, channels)
    flat = b.node(Op.RESHAPE, [b.input(shape)], ReshapeAttrs((1, hw * hw * channels)))
    w = rng.normal(size=(classes, hw * hw * channels)).astype(np.float32)
    w -= w.mean(axis=1, keepdims=True)  # rows summing to 0: on [0, 1] images each class wins some images
    scores = b.node(Op.FULLY_CONNECTED, [flat], FullyConnectedAttrs(), params={"weight": w})
    q = _calibrated(b.build([scores]), shape, seed)
    return compile_graph(q, out_dir).out_dir, q


def feature_map_library(out_dir, seed: int = 0):
    """A compiled conv whose output is a (1, 4, 4, 2) map: not a classifier."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("features")
    w = rng.normal(size=(2, 3, 3, 1)).astype(np.float32)
    y = b.node(Op.CONV_2D, [b.input((1, 4, 4, 1))], ConvAttrs((1, 1), (1, 1, 1, 1)), params={"weight": w})
    return compile_graph(_calibrated(b.build([y]), (1, 4, 4, 1), seed), out_dir).out_dir


def two_output_library(out_dir, seed: int = 0):
    """A compiled library with two (1, 3) outputs: not one vector of class scores."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("two")
    flat = b.node(Op.RESHAPE, [b.input((1, 4, 4, 1))], ReshapeAttrs((1, 16)))
    heads = [b.node(Op.FULLY_CONNECTED, [flat], FullyConnectedAttrs(),
                    params={"weight": rng.normal(size=(3, 16)).astype(np.float32)}) for _ in range(2)]
    return compile_graph(_calibrated(b.build(heads), (1, 4, 4, 1), seed), out_dir).out_dir


def expected_classes(qgraph, images: np.ndarray) -> np.ndarray:
    """The class the numpy int8 reference picks for each NHWC float image: resized bilinearly (torch, align_corners
    False) to the graph's input when the size differs, one channel repeated, quantised (TFLite QUANTIZE)."""
    import torch
    import torch.nn.functional as F

    from kilobyte.interp import run_int8

    t = qgraph.tensors[qgraph.inputs[0]]
    _, h, w, c = t.shape
    if images.shape[1:3] != (h, w):
        nchw = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        images = F.interpolate(nchw, size=(h, w), mode="bilinear", align_corners=False).numpy().transpose(0, 2, 3, 1)
    if images.shape[3] != c:
        images = np.repeat(images, c, axis=3)
    out = []
    for img in images:
        q = quantize_values(img[None], t.qparams.scale[0], t.qparams.zero_point[0])
        out.append(int(np.argmax(run_int8(qgraph, q)[qgraph.outputs[0]])))
    return np.array(out)
