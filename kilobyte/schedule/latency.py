"""Schedule stage: a per-layer model of the Cortex-M instructions the generated C executes, for search.

Every kb_layer_* function of the generated model.c (`codegen/model_c.py`) makes one call into the runtime, and a
patch stage (`codegen/patch_loop.py`) calls the same kernels once per tile on the tile's box. So the model costs
kernel *calls*: a call of runtime function f (`kernels.calls`: kb_conv_1x1, kb_depthwise_inplace_5x5, ...) on a
geometry costs

    T(f, call) = Σ_j c[f.j] · x_j(call)

with a few features x_j per function (below), linear in the constants c. A layer is one call; a patch-stage node is
one call per tile (kb_add and the copy of a stage output out of its tile: one per tile row) plus `stage.block`, the
loop's own work per patch and node; `invoke` is kb_invoke's own code (per layer call, per output byte copied). The
constants are fitted by least squares on relative errors (`fit_model`) to instructions measured by the unicorn
counter (`targets/cortexm/icount.py`) on random networks of the MBConv space, by `python bench/fit_latency.py`; the
measured layers and networks, the constants and their error (on the fit set and on held-out networks) ship as
`latency_<core>_<kernels>.json` next to this module. icount attributes a patch stage to no layer, so a network's
measured remainder (total minus its layers) is one sample: invoke plus the whole stage.

Features per call (oh x ow output pixels, ih x iw input, k x k window, cin / cout channels):
    call       1                          every function: argument set-up, requantisation prepared per call
    channel    cout                       per-channel multipliers, shifts, bias
    pixel      oh·ow                      per output pixel (window walk, stores)
    input      ih·iw·cin                  bytes read once (a 1x1 conv widens them; in-place depthwise loads planes)
    window     oh·ow·k·k·cin              im2col bytes of a kxk conv (widened once per pixel)
    output     oh·ow·cout                 requantised outputs (an ADD or a copy: elements / bytes)
    mac        MACs of the call
    edge       output pixels whose window meets the zero-point padding, times k·k·cin (conv) or channels
               (depthwise): the slow bounds-checked path; a patch tile has padding only where it meets the image
    row        rows (kb_add, kb_copy_channels: one call per row inside a patch stage)

A function whose constants the shipped file lacks (no sample used it) is an error naming the node, never a guess.
Costs about 50 µs of Python per layer with a 4x4 patch stage (`tests/schedule/test_latency_model.py`), so the search
calls it per candidate and per patch schedule (n, p), with the `steps` it planned anyway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from ..errors import KilobyteError
from ..ir import Graph, Node, Op
from ..kernels.calls import node_function
from ..ops.conv_kernels import conv_kernel, depthwise_kernel, depthwise_ring_bytes
from .plan import plan_steps
from .plan_types import DEFAULT_OPTIONS, PlanOptions


class LatencyModelError(KilobyteError):
    """No fitted latency model for a core / kernel set, or a layer the fitted model has no constants for."""


INVOKE = "(invoke)"  # per_layer key of kb_invoke's own instructions
RING_PATH = "kb_dwg"  # the DSP depthwise kernels' channel-group path (arm/kb_arm_dwg.S) where its ring was granted
SHIPPED = {(core, kernels): Path(__file__).with_name(f"latency_{core.replace('-', '_')}_{kernels}.json")
           for core, kernels in (("cortex-m7", "dsp"), ("cortex-m7", "portable"), ("cortex-m4", "dsp"))}

Features = dict[str, float]  # "function.feature" -> value


# -- geometry of one call ---------------------------------------------------------------------------------------------
def edge_count(out: int, size: int, k: int, stride: int, pad_lo: int) -> int:
    """Output positions along one axis whose window (k taps from `pos·stride - pad_lo`) leaves [0, size).

    >>> edge_count(8, 8, 3, 1, 1), edge_count(4, 8, 3, 2, 1), edge_count(8, 8, 1, 1, 0)
    (2, 1, 0)
    """
    low = min(out, -(-pad_lo // stride))  # pos·stride < pad_lo
    first_high = -(-(size + pad_lo - k + 1) // stride)  # pos·stride - pad_lo + k - 1 >= size
    high = max(0, out - max(first_high, low))
    return low + high


def edge_pixels(oh: int, ow: int, ih: int, iw: int, k: tuple[int, int], stride: tuple[int, int],
                padding: tuple[int, int, int, int]) -> int:
    """Output pixels (of oh x ow) whose window meets the padding; `padding` is (top, bottom, left, right)."""
    rows = edge_count(oh, ih, k[0], stride[0], padding[0])
    cols = edge_count(ow, iw, k[1], stride[1], padding[2])
    return oh * ow - (oh - rows) * (ow - cols)


def window_call(fn: str, node: Node, graph: Graph, ih: int, iw: int, oh: int, ow: int,
                padding: tuple[int, int, int, int]) -> Features:
    """Features of one CONV_2D / DEPTHWISE_CONV_2D / pool call of runtime function `fn` on an (ih, iw) -> (oh, ow)
    box with `padding`."""
    cin = graph.tensors[node.inputs[0]].shape[3]
    cout = graph.tensors[node.outputs[0]].shape[3]
    if node.op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        kh, kw = node.attrs.kernel
    else:
        kh, kw = graph.tensors[node.inputs[1]].shape[1:3]
    dil = getattr(node.attrs, "dilation", (1, 1))
    keff = ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1)
    pixels, taps = oh * ow, kh * kw
    edge = edge_pixels(oh, ow, ih, iw, keff, node.attrs.stride, padding)
    if node.op is Op.CONV_2D:
        f = {"call": 1, "channel": cout, "pixel": pixels, "input": ih * iw * cin, "output": pixels * cout,
             "mac": pixels * cout * taps * cin}
        if (kh, kw) != (1, 1):
            f.update(window=pixels * taps * cin, edge=edge * taps * cin)
    else:  # depthwise (multiplier 1) or pool: channel by channel
        f = {"call": 1, "channel": cout, "pixel": pixels, "input": ih * iw * cin, "output": pixels * cout,
             "mac": pixels * cout * taps, "edge": edge * cout}
    return {f"{fn}.{k}": float(v) for k, v in f.items()}


def _shape(graph: Graph, t: str) -> tuple[int, ...]:
    return graph.tensors[t].shape


def layer_features(graph: Graph, node: Node, function: str) -> Features:
    """Features of `node` run as one layer (one call of `function` on the whole tensors)."""
    if node.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        _, ih, iw, _ = _shape(graph, node.inputs[0])
        _, oh, ow, _ = _shape(graph, node.outputs[0])
        return window_call(function, node, graph, ih, iw, oh, ow, tuple(node.attrs.padding))
    n_in = graph.tensors[node.inputs[0]].numel
    n_out = graph.tensors[node.outputs[0]].numel
    channels = _shape(graph, node.outputs[0])[-1]
    if node.op is Op.FULLY_CONNECTED:
        f = {"call": 1, "channel": channels, "mac": n_out * _shape(graph, node.inputs[1])[1]}
    elif node.op is Op.MEAN:
        f = {"call": 1, "channel": channels, "input": n_in}
    elif function == "memmove":  # a RESHAPE that copies
        f = {"call": 1, "input": n_in}
    else:  # elementwise (ADD, ...), PAD, copies: per element
        f = {"call": 1, "input": n_in, "output": n_out}
    return {f"{function}.{k}": float(v) for k, v in f.items()}


def _add(into: Features, f: Features) -> None:
    for k, v in f.items():
        into[k] = into.get(k, 0.0) + v


# -- a plan's layers and patch stage ----------------------------------------------------------------------------------
def per_layer_features(graph: Graph, steps) -> dict[str, Features]:
    """Features of every kb_layer_* function a plan (`plan.plan_steps`) generates, by node name (a fused conv + ADD
    under the conv's name), then each patch-stage node (its tiles summed) and `INVOKE`."""
    stage = steps.draft.stage
    fused, inplace = steps.life.fused, steps.life.inplace
    skip = (set(stage.nodes) if stage else set()) | set(fused.values())
    out: dict[str, Features] = {}
    layers = 0
    for i, name in enumerate(steps.life.order):
        if name in skip:
            continue
        node = graph.node(name)
        if name in fused:
            function = "kb_conv_1x1_add"
        elif node.op is Op.RESHAPE:
            if node.outputs[0] in steps.storage.reshape_of:
                continue  # an alias: no layer
            function = "memmove"
        elif node.op is Op.MEAN:
            function = "kb_mean"
        else:
            function = node_function(graph, node, name in inplace)
            if function is None:
                continue
            if _ring_granted(graph, node, name in inplace, steps.options.kernels, steps.layout.scratch[i]):
                function = RING_PATH
        out[name] = layer_features(graph, node, function)
        layers += 1
    if stage is not None:
        out.update(stage_features(graph, stage))
    out[INVOKE] = {"invoke.call": 1.0, "invoke.layer": float(layers + (stage is not None)),
                   "invoke.output": float(sum(graph.tensors[t].numel for t in graph.outputs))}
    return out


def _ring_granted(graph: Graph, node: Node, in_place: bool, kernels: str, scratch: int) -> bool:
    """Whether a depthwise layer with `scratch` bytes runs the DSP kernels' channel-group path: it was granted its
    ring."""
    if kernels != "dsp" or node.op is not Op.DEPTHWISE_CONV_2D:
        return False
    return 0 < depthwise_ring_bytes(graph, node, in_place) <= scratch


def stage_features(graph: Graph, stage) -> dict[str, Features]:
    """Features of each patch-stage node: its calls on every tile's box, and the loop's block per patch."""
    step_of = {graph.node(n).outputs[0]: n for n in stage.nodes}
    offsets = stage.tile_offsets
    out: dict[str, Features] = {}
    for k, name in enumerate(stage.nodes):
        node = graph.node(name)
        hosts = [step_of[t] for t in node.inputs if t in step_of]
        in_place = name in offsets and any(offsets.get(h) == offsets[name] for h in hosts)
        copies = node.outputs[0] in stage.outputs and name in offsets
        f: Features = {"stage.block": float(len(stage.tiles))}
        for tiles in stage.tiles:
            tile = tiles[k]
            ih, iw = max(tile.in_box[1] - tile.in_box[0], 0), max(tile.in_box[3] - tile.in_box[2], 0)
            oh, ow = max(tile.out_box[1] - tile.out_box[0], 0), max(tile.out_box[3] - tile.out_box[2], 0)
            _add(f, _tile_call(graph, node, in_place, ih, iw, oh, ow, tile.padding))
            if copies:
                c = _shape(graph, node.outputs[0])[3]
                _add(f, {"kb_copy_channels.call": oh, "kb_copy_channels.output": oh * ow * c})
        out[name] = f
    return out


def _tile_call(graph: Graph, node: Node, in_place: bool, ih: int, iw: int, oh: int, ow: int, padding) -> Features:
    """Features of node's work on one tile (codegen/patch_loop.py's emitters)."""
    if node.op is Op.CONV_2D:
        fn = conv_kernel(node, tuple(_shape(graph, node.inputs[1])[1:3]))
    elif node.op is Op.DEPTHWISE_CONV_2D:
        kernel = tuple(_shape(graph, node.inputs[1])[1:3])
        fn = depthwise_kernel(node, kernel, in_place)
    elif node.op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        fn = node_function(graph, node)
    else:  # ADD / PAD / CONCAT: elementwise on the tile, ADD and CONCAT one call per row
        fn = node_function(graph, node)
        c = _shape(graph, node.outputs[0])[3]
        rows = oh if node.op in (Op.ADD, Op.CONCAT) else 1
        return {f"{fn}.call": float(rows), f"{fn}.input": float(ih * iw * c), f"{fn}.output": float(oh * ow * c)}
    return window_call(fn, node, graph, ih, iw, oh, ow, tuple(padding))


# -- the model --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LatencyModel:
    """Fitted constants ("function.feature" -> instructions per unit) for one core and kernel set."""

    core: str
    kernels: str
    constants: dict[str, float] = field(hash=False)

    def predict(self, features: Features, where: str = "layer") -> float:
        """Instructions of one layer (or stage node, or kb_invoke) with `features`."""
        total = 0.0
        for k, v in features.items():
            c = self.constants.get(k)
            if c is None:
                if v:
                    raise LatencyModelError(f"{where}: the {self.core} / {self.kernels} latency model has no "
                                            f"constant {k!r} (no fitted network called it)")
                continue
            total += c * v
        return total


@dataclass(frozen=True)
class LatencyEstimate:
    total: float  # instructions of one inference (kb_invoke and everything it calls)
    per_layer: dict[str, float]  # by node name (a fused conv + ADD: the conv's; patch-stage nodes: all tiles),
    # plus INVOKE ("(invoke)"): kb_invoke's own instructions


@cache
def shipped_model(core: str = "cortex-m7", kernels: str = "dsp") -> LatencyModel:
    """The constants fitted on `core`'s instruction counts with kernel set `kernels`, as the JSON ships them."""
    path = SHIPPED.get((core, kernels))
    if path is None or not path.exists():
        fitted = ", ".join(f"{c}/{k}" for (c, k), p in SHIPPED.items() if p.exists())
        raise LatencyModelError(f"no fitted latency model for core {core!r} with kernel set {kernels!r}; "
                                f"fitted: {fitted}")
    data = json.loads(path.read_text())
    return LatencyModel(core, kernels, dict(data["constants"]))


def estimate_instructions(graph: Graph, options: PlanOptions = DEFAULT_OPTIONS, *, core: str = "cortex-m7",
                          steps=None, model: LatencyModel | None = None) -> LatencyEstimate:
    """Instructions one inference of `graph` executes on `core` when planned with `options` (its kernel set and
    patch stage); `steps`: the caller's `plan.plan_steps(graph, options)`, to avoid planning again; `model`: other
    constants than the shipped ones."""
    model = model or shipped_model(core, options.kernels)
    if steps is None:
        steps = plan_steps(graph, options)
    per_layer = {name: model.predict(f, f"node '{name}'") for name, f in per_layer_features(graph, steps).items()}
    return LatencyEstimate(sum(per_layer.values()), per_layer)


# -- the fit ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    """One measurement: the summed features of a layer (or of kb_invoke + a patch stage) and its instructions."""

    features: Features
    instructions: float
    kind: str = "layer"  # "layer" or "rest" (kb_invoke's own code, plus the patch stage if any)


def fit_model(samples: list[Sample], core: str, kernels: str) -> LatencyModel:
    """Least-squares constants for every feature the samples use, on relative errors (layers span four orders of
    magnitude: an absolute fit would leave the small ones to the noise of the large).

    >>> s = [Sample({"f.call": 1.0, "f.mac": m}, 50 + 2 * m) for m in (10.0, 100.0, 1000.0)]
    >>> {k: round(v, 6) for k, v in fit_model(s, "c", "k").constants.items()}
    {'f.call': 50.0, 'f.mac': 2.0}
    """
    names = sorted({k for s in samples for k, v in s.features.items() if v})
    col = {n: j for j, n in enumerate(names)}
    a = np.zeros((len(samples), len(names)))
    for i, s in enumerate(samples):
        for k, v in s.features.items():
            if v:
                a[i, col[k]] = v
    t = np.array([s.instructions for s in samples], np.float64)
    if (t <= 0).any():
        raise LatencyModelError("fit_model: every sample needs a positive instruction count")
    coef, *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
    return LatencyModel(core, kernels, {n: float(c) for n, c in zip(names, coef)})


def relative_errors(predicted, measured) -> dict:
    """Count, relative RMS and largest relative error of `predicted` against `measured`."""
    p, t = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    rel = (p - t) / t
    return {"count": int(len(t)), "relative_rms": float(np.sqrt(np.mean(rel ** 2))) if len(t) else 0.0,
            "max_relative": float(np.max(np.abs(rel))) if len(t) else 0.0}

