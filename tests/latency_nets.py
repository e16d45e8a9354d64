"""Random int8 networks of the MBConv search space, with or without a patch stage, for the instruction-count model
(kilobyte/schedule/latency.py): fitted on by bench/fit_latency.py, predicted by tests/schedule/test_latency_model.py.

A candidate is drawn from a seed alone: 1 or 3 input channels, width 0.1-0.4, resolution 24-64, a random
architecture of `MBSpace` (10 classes), random weights and biases (so every kernel takes its realistic paths),
calibrated on two random images and quantised; with `patch`, a random stage length among `candidate_cuts` and a
random grid of 2-4 that the stage output can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WIDTHS = (0.1, 0.2, 0.3, 0.4)
RESOLUTIONS = tuple(range(24, 65, 8))  # wider and larger nets count for minutes each under unicorn


@dataclass(frozen=True)
class Candidate:
    graph: object  # int8 Graph
    arch: dict  # Arch.to_json()
    in_channels: int
    patch: tuple[int, int] | None  # PlanOptions.patch
    input: np.ndarray  # int8, one image (flat)


def random_weights(net, rng):
    """(OHWI weight, bias) per conv / depthwise / linear layer of `net`, in build_graph's order."""
    layers = [net.stem, *(c for b in net.blocks for c in b.convs), net.head]
    out = []
    for layer in layers:
        shape = (1, layer.kernel, layer.kernel, layer.cout) if layer.depthwise else \
            (layer.cout, layer.kernel, layer.kernel, layer.cin)
        out.append((rng.normal(0, 0.2, shape).astype(np.float32), rng.normal(0, 0.1, layer.cout)))
    out.append((rng.normal(0, 0.1, (net.num_classes, net.head.cout)).astype(np.float32), np.zeros(net.num_classes)))
    return out


def candidate(seed: int, patch: bool) -> Candidate:
    """The random quantised network of `seed` (module doc); with a patch stage when `patch` and the graph has a cut."""
    from kilobyte.nas.build import build_graph, network
    from kilobyte.nas.space import MBSpace
    from kilobyte.quant import quantize
    from kilobyte.schedule.patch import candidate_cuts

    rng = np.random.default_rng(seed)
    channels = int(rng.choice((1, 3)))
    width, resolution = float(rng.choice(WIDTHS)), int(rng.choice(RESOLUTIONS))
    space = MBSpace(num_classes=10, in_channels=channels, widths=(width,), resolutions=(resolution,))
    arch = space.sample(rng)
    graph = build_graph(space, arch, weights=iter(random_weights(network(space, arch), rng)))
    calib = [rng.standard_normal((1, resolution, resolution, channels)).astype(np.float32) for _ in range(2)]
    graph = quantize(graph, calib)
    stage = None
    if patch:
        order = [n.name for n in graph.nodes]
        cuts = [(n, min(graph.tensors[graph.node(order[n - 1]).outputs[0]].shape[1:3]))
                for n in candidate_cuts(graph, order)]
        cuts = [(n, side) for n, side in cuts if side >= 2]
        if cuts:
            n, side = cuts[int(rng.integers(len(cuts)))]
            stage = (n, int(rng.integers(2, min(4, side) + 1)))
    x = rng.integers(-128, 128, graph.tensors[graph.inputs[0]].numel).astype(np.int8)
    return Candidate(graph, arch.to_json(), channels, stage, x)
