"""Prune stage: the pruning pipeline — a trained PyTorch classifier and a dataset in; the pruned float module, its
int8 graph, per-layer ratios and storage bytes, and accuracy before and after out.

    scores (Taylor, on the training split) -> ratios -> masks (lowest scores go) -> retrain with the masks re-applied
    after every optimiser step -> [channel: remove the masked channels] -> int8 PTQ -> accuracy on the held-out split

Methods (the unit each removes, and how the report stores a pruned layer):
- "filterlet": DTMM's filterlets, stored as FWCS;
- "csr": single weights by Taylor score (the unstructured baseline), stored as CSR;
- "channel": output channels (channels.py says which convolutions can lose them), really removed: a smaller dense
  module.
Ratios come from exactly one of: `ratios` (per layer name), `sparsity` (the fraction of the prunable weights to
remove, taken where the Taylor score per weight is lowest: `masks.ratios_for_sparsity`, at most sparsity + `spread`
per filterlet / CSR layer; a removed channel also takes its consumer's input channel), or `device` (filterlet only:
DTMM's scheduler chooses the ratios with the least modelled latency that fit the device's Flash within the loss
budget). Prunable weights are those of the standard convolutions; depthwise and fully connected layers stay dense.

The int8 graph comes back with each pruned convolution's weight format set (`set_weight_format`: "fwcs" for
filterlets, "csr" for weights; channel pruning and layers with nothing removed stay dense), so compiling it emits the
sparse arrays and kernels. Its per-layer bytes are those arrays' (`analysis.macs.layer_weight_bytes`) and its Flash is
the planner's Flash model on it (`schedule.estimate_resources`: the arrays plus the linked code, sparse kernels
included), the figure `kilobyte compile` reports for it. The result also gives the share of the dense model's
convolution weights that only ever multiply padding (`analysis.dead_weights`): a network that runs 3x3 convolutions
on 1x1 maps has most of its weights removable before any pruning, and a sparsity means little next to that.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import asdict, dataclass, field

import numpy as np

from ..analysis.dead_weights import dead_weights
from ..analysis.macs import layer_weight_bytes
from ..data import Dataset, load_dataset
from ..errors import DoesNotFitError, PruneError
from ..ir import Op
from ..schedule import estimate_resources
from ..schedule.estimate import PER_CHANNEL_BYTES
from ..schedule.plan_types import PlanOptions
from ..targets.devices import Device, get_device
from ..train import TrainConfig, fit, float_accuracy, int8_accuracy, quantise_module
from ..transforms import set_weight_format
from .channels import channel_chains, shrink_channels
from .importance import taylor_scores
from .latency import LatencyModel, shipped_model
from .layers import ConvLayer, conv_layers
from .masks import ParameterMasks, achieved_ratios, ratios_for_sparsity, removal_counts, unit_keep
from .scheduler import Constraints, Strategy, schedule
from .storage import dense_bytes

METHODS = ("filterlet", "csr", "channel")
UNIT = {"filterlet": "filterlet", "csr": "weight", "channel": "channel"}
FORMAT = {"filterlet": "fwcs", "csr": "csr", "channel": "dense"}  # how a pruned layer's weights are stored
DEFAULT_LOSS_BUDGET = 0.01  # ΔL_max for the scheduler (the paper's example: 0.001), in nats of mean cross-entropy
# With a target sparsity s, no filterlet / CSR layer loses more than s + SPREAD of its units. Without it the
# allocation by score per weight put 88-93 % on resnet-small's last convolutions at s = 0.75 (int8 98.4 -> 93.8 %);
# with 0.05 or 0.1: 96.5 %; a shared ratio (0): 93.7 %; per-layer L2-normalised scores: 95.5 % (docs/prune.md).
SPREAD = 0.1


@dataclass(frozen=True)
class LayerReport:
    """One standard convolution after pruning; bytes as the generated C stores its int8 weights: FWCS or CSR arrays
    (`ops/sparse.py`) or dense."""

    name: str  # the module path
    ratio: float  # fraction of the layer's units removed (filterlets, weights or output channels)
    format: str  # "fwcs", "csr" or "dense"
    weight_bytes: int
    index_bytes: int
    other_bytes: int  # bias, multiplier and shift per output channel


@dataclass
class PruneResult:
    method: str
    module: object  # the pruned float module, eval mode (channel: the smaller module)
    graph: object  # its int8 IR graph
    layers: list[LayerReport]
    sparsity: float  # achieved: fraction of the prunable weights removed
    accuracy_before: dict[str, float]  # {"float": ..., "int8": ...} on the held-out split
    accuracy_after: dict[str, float]
    flash_bytes: int  # whole model, pruned layers in their format, for the device's core or the largest (module doc)
    dense_flash_bytes: int  # the same model unpruned
    dense_dead_fraction: float  # of the dense model's convolution weights, those that only ever multiply padding
    # (`analysis.dead_weights`): removable for free, so a sparsity is read against it
    strategy: Strategy | None = None  # device mode: the scheduler's choice ...
    uniform: Strategy | None = None  # ... and the uniform baseline at the same budget (`feasible` False: no shared
    # ratio meets both the loss budget and the Flash; it is then the dense model)
    history: list = field(default_factory=list)  # retraining's EpochStats

    @property
    def ratios(self) -> dict[str, float]:
        return {r.name: r.ratio for r in self.layers}

    @property
    def weight_bytes(self) -> int:
        return sum(r.weight_bytes for r in self.layers)

    @property
    def index_bytes(self) -> int:
        return sum(r.index_bytes for r in self.layers)

    def to_dict(self) -> dict:
        out = {"method": self.method, "sparsity": self.sparsity, "weight_bytes": self.weight_bytes,
               "index_bytes": self.index_bytes, "flash_bytes": self.flash_bytes,
               "dense_flash_bytes": self.dense_flash_bytes, "dense_dead_fraction": self.dense_dead_fraction,
               "accuracy_before": self.accuracy_before,
               "accuracy_after": self.accuracy_after, "layers": [asdict(r) for r in self.layers]}
        for key in ("strategy", "uniform"):
            s = getattr(self, key)
            if s is not None:
                out[key] = {"ratios": s.ratios, "latency": s.latency, "loss": s.loss, "flash_bytes": s.flash_bytes,
                            "feasible": s.feasible}
        return out


@dataclass(frozen=True)
class _Split:
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    shape: tuple[int, int, int, int]  # (1, C, H, W)


def prune_model(module, data, method: str = "filterlet", *, sparsity: float | None = None, device=None,
                ratios: dict[str, float] | None = None, loss_budget: float = DEFAULT_LOSS_BUDGET, config=None,
                latency: LatencyModel | None = None, test_fraction: float = 0.2, calibration: int = 64,
                score_batches: int | None = 8, max_ratio: float = 0.95, spread: float | None = SPREAD,
                seed: int = 0, scheduler_steps: int = 20000, kernels: str = "portable") -> PruneResult:
    """Prune a trained classifier (module doc). `module` is not changed (a copy is pruned).

    `data`: a dataset name or path (`kilobyte.data.load_dataset`), a `Dataset`, or ((train_x, train_y), (test_x,
    test_y)) as NHWC arrays; a dataset is split into its first 1 - `test_fraction` for scoring, retraining and
    calibration and the rest for the accuracies. `config`: the retraining `TrainConfig` (default: 3 epochs of
    AdamW at 1e-3, no validation split). `device`: a device name or `targets.Device`. `score_batches`: batches of 64
    the Taylor scores average (None: the whole training split). `latency`: the scheduler's model (None: the constants
    fitted on Cortex-M7 instruction counts, `latency.shipped_model`). `spread`: with a `sparsity`, a filterlet or CSR
    layer loses at most sparsity + spread of its units (`SPREAD`; None: up to `max_ratio`). `kernels`: the kernel set
    ("portable" or "dsp") the Flash figures count the code of, as `compile_model(..., kernels=)` will build it."""
    _check_request(method, sparsity, device, ratios)
    split = _split(data, test_fraction)
    module = copy.deepcopy(module).eval()
    before, dense_graph = _accuracies(module, split, calibration)
    dense = _dense_resources(dense_graph, device, kernels)  # SRAM checked before any work the device cannot use
    all_layers = conv_layers(module, split.shape)
    layers, norms, chains = _prunable(module, all_layers, method)
    unit = UNIT[method]
    scores = taylor_scores(module, layers, split.train_x, split.train_y, unit, max_batches=score_batches)
    strategy = uniform = None
    if device is not None:
        fixed = dense.flash_bytes - sum(dense_bytes(c).total for c in layers) + \
            _fwcs_code_bytes(dense_graph, dense, device, kernels)
        constraints = Constraints(loss_budget, _device(device).flash_bytes, fixed, max_ratio)
        strategy, uniform = schedule(layers, scores, latency or shipped_model(), constraints, seed=seed,
                                     steps=scheduler_steps)
        ratios = strategy.ratios
    elif sparsity is not None:
        cap = max_ratio if spread is None or method == "channel" else min(max_ratio, sparsity + spread)
        ratios = _ratios_for_sparsity(all_layers, layers, scores, unit, sparsity, cap, chains)
    else:
        ratios = _checked_ratios(ratios, layers, method)
    keep = unit_keep(scores, removal_counts(layers, ratios, unit))
    masks = ParameterMasks.for_units(module, keep, unit, norms)
    masks.apply()
    config = config or TrainConfig.plain(epochs=3, lr=1e-3, seed=seed)
    history = fit(module, split.train_x, split.train_y, config, on_step=masks).history
    achieved = achieved_ratios(module, layers, unit)
    if method == "channel":
        module = shrink_channels(module, chains, keep)
    after, graph = _accuracies(module, split, calibration)
    graph = _set_formats(graph, method, achieved)
    reports = _layer_reports(all_layers, graph, achieved)
    flash = _resources(graph, device, kernels).flash_bytes
    return PruneResult(method, module, graph, reports, _sparsity(all_layers, reports), before, after, flash,
                       dense.flash_bytes, dead_weights(dense_graph).fraction, strategy, uniform, history)


def _check_request(method: str, sparsity, device, ratios) -> None:
    if method not in METHODS:
        raise PruneError(f"pruning method {method!r}: use one of {', '.join(METHODS)}")
    if sum(v is not None for v in (sparsity, device, ratios)) != 1:
        raise PruneError("prune_model: give exactly one of sparsity, device or ratios")
    if device is not None and method != "filterlet":
        raise PruneError(f"a device target picks filterlet ratios with DTMM's scheduler; for {method} pruning give "
                         "a sparsity")
    if sparsity is not None and not 0 <= sparsity < 1:
        raise PruneError(f"target sparsity {sparsity}: must be in [0, 1)")


def _split(data, test_fraction: float) -> _Split:
    if isinstance(data, str):
        data = load_dataset(data)
    if isinstance(data, Dataset):
        if data.y is None:
            raise PruneError(f"dataset '{data.name}' has no labels: pruning needs them for scores and accuracy")
        train, test = data.split(len(data.x) - max(1, round(test_fraction * len(data.x))))
        data = ((train.x, train.y), (test.x, test.y))
    (tx, ty), (vx, vy) = data
    _, h, w, c = tx.shape
    return _Split(tx, ty, vx, vy, (1, c, h, w))


def _accuracies(module, split: _Split, calibration: int) -> tuple[dict[str, float], object]:
    graph = quantise_module(module, split.shape, split.train_x[:calibration])
    return {"float": float_accuracy(module, split.test_x, split.test_y),
            "int8": int8_accuracy(graph, split.test_x, split.test_y)}, graph


def _prunable(module, layers: list[ConvLayer], method: str):
    """(the layers the method prunes, their BatchNorm names for channel masks, the channel chains)."""
    if not layers:
        raise PruneError("the model has no standard convolution (groups = 1) to prune; depthwise and fully connected "
                         "layers stay dense")
    if method != "channel":
        return layers, None, []
    chains = channel_chains(module)
    names = {c.conv for c in chains}
    if not names:
        raise PruneError("channel pruning: no convolution's channels can be removed (each one feeds an ADD, a "
                         "CONCAT or more than one layer); try --method filterlet")
    return [c for c in layers if c.name in names], {c.conv: c.norm for c in chains}, chains


def _ratios_for_sparsity(all_layers, layers, scores, unit, sparsity, max_ratio, chains) -> dict[str, float]:
    """`masks.ratios_for_sparsity` for `sparsity` of all standard-conv weights. For channels the weights a channel
    takes with it overlap (a consumer's row and column removed twice), so the goal is raised by the shortfall of the
    exact count until it is met (or stops growing)."""
    total = sum(c.weights for c in all_layers)
    if unit != "channel":
        return ratios_for_sparsity(layers, scores, unit, sparsity * total, max_ratio)
    sizes = _unit_weights(chains, all_layers)
    goal, ratios = sparsity * total, {}
    for _ in range(20):
        ratios = ratios_for_sparsity(layers, scores, unit, goal, max_ratio, sizes)
        short = sparsity * total - _channel_removed(all_layers, chains, ratios)
        if short <= 0:
            break
        goal += short
    return ratios


def _channel_removed(layers: list[ConvLayer], chains, ratios: dict[str, float]) -> int:
    """Standard-conv weights gone when each chain's conv loses round(ratio x filters) channels."""
    kept_out = {c.name: c.filters - round(ratios.get(c.name, 0.0) * c.filters) for c in layers}
    kept_in = {c.name: c.cin for c in layers}
    for chain in chains:
        if chain.consumer in kept_in:
            kept_in[chain.consumer] = kept_out[chain.conv]
    return sum(c.weights - kept_out[c.name] * kept_in[c.name] * c.kh * c.kw for c in layers)


def _unit_weights(chains, layers: list[ConvLayer]) -> dict[str, int]:
    """Per channel-pruned conv, the standard-conv weights one of its channels takes away: its filter and, when the
    consumer is a convolution, the consumer's input channel (a Linear consumer's weights are not counted)."""
    geometry = {c.name: c for c in layers}
    out = {}
    for chain in chains:
        conv, consumer = geometry[chain.conv], geometry.get(chain.consumer)
        out[chain.conv] = conv.cin * conv.kh * conv.kw + (0 if consumer is None else
                                                           consumer.filters * consumer.kh * consumer.kw)
    return out


def _checked_ratios(ratios: dict[str, float], layers: list[ConvLayer], method: str) -> dict[str, float]:
    names = {c.name for c in layers}
    unknown = sorted(set(ratios) - names)
    if unknown:
        raise PruneError(f"ratios name layers {method} pruning cannot prune: {', '.join(unknown)} "
                         f"(prunable: {', '.join(sorted(names))})")
    bad = {n: r for n, r in ratios.items() if not 0 <= r < 1}
    if bad:
        raise PruneError(f"ratios must be in [0, 1): {bad}")
    return dict(ratios)


def _dense_resources(graph, device, kernels: str):
    """The unpruned int8 model's `Resources` for the device's core (None: the largest); with a device, raises if its
    activations alone exceed the SRAM (filterlet pruning keeps every channel, so it cannot lower them)."""
    dev = None if device is None else _device(device)
    r = _resources(graph, device, kernels)
    if dev is not None and r.peak_bytes > dev.sram_bytes:
        raise DoesNotFitError(f"{dev.name}: the model's activations need {r.peak_bytes} B of SRAM, the device has "
                              f"{dev.sram_bytes} B; filterlet pruning keeps every channel and cannot lower that")
    return r


def _fwcs_code_bytes(dense_graph, dense, device, kernels) -> int:
    """The code the FWCS kernel adds to the firmware: the Flash model's code bytes with every convolution in FWCS
    (one filterlet of each zeroed) less the dense model's. The scheduler's layer bytes hold only arrays, so its
    fixed part carries this (an upper bound: a layer it leaves unpruned stays dense)."""
    tensors = dict(dense_graph.tensors)
    for node in _conv_nodes(dense_graph).values():
        w = tensors[node.inputs[1]]
        data = w.data.copy()
        data[0, 0, 0, :] = 0  # (O, KH, KW, I): one filterlet
        tensors[w.name] = dataclasses.replace(w, data=data)
    probe = set_weight_format(dense_graph.replace(tensors=tensors), "fwcs")
    return max(0, _resources(probe, device, kernels).code_bytes - dense.code_bytes)


def _resources(graph, device, kernels: str):
    """The planner's resources of an int8 graph for the device's core (None: the largest calibrated core), with
    the options `kilobyte compile` plans with by default and the kernel set `kernels`."""
    return estimate_resources(graph, PlanOptions(kernels=kernels),
                              core=None if device is None else _device(device).core)


def _device(device):
    return device if isinstance(device, Device) else get_device(device)


def _conv_nodes(graph) -> dict[str, object]:
    """The CONV_2D nodes of the int8 graph by the module path they came from."""
    return {n.origin: n for n in graph.nodes if n.op is Op.CONV_2D}


def _set_formats(graph, method: str, achieved: dict[str, float]):
    """`graph` with each convolution that lost units stored in the method's format (`FORMAT`); the rest dense."""
    nodes = _conv_nodes(graph)
    missing = sorted(set(achieved) - set(nodes))
    if missing:
        raise PruneError(f"pruned layers {', '.join(missing)} have no CONV_2D in the int8 graph; please report this")
    return set_weight_format(graph, {nodes[name].name: FORMAT[method] if ratio > 0 else "dense"
                                     for name, ratio in achieved.items()})


def _layer_reports(layers: list[ConvLayer], graph, achieved: dict[str, float]) -> list[LayerReport]:
    """Per standard convolution: its ratio and the bytes of the arrays the generated C holds for it. A channel-pruned
    layer's ratio is the fraction of its filters gone (the graph has the smaller layer)."""
    nodes, rows = _conv_nodes(graph), layer_weight_bytes(graph)
    reports = []
    for c in layers:
        node = nodes[c.name]
        row, filters = rows[node.name], graph.tensors[node.inputs[1]].shape[0]
        ratio = 1 - filters / c.filters if filters < c.filters else achieved.get(c.name, 0.0)
        reports.append(LayerReport(c.name, ratio, row["format"], row["weight_bytes"], row["index_bytes"],
                                   PER_CHANNEL_BYTES * filters))
    return reports


def _sparsity(layers: list[ConvLayer], reports: list[LayerReport]) -> float:
    """Fraction of the standard convolutions' weights gone (each report's weight_bytes = its kept int8 weights)."""
    return 1 - sum(r.weight_bytes for r in reports) / sum(c.weights for c in layers)
