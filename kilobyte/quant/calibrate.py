"""Quantisation stage: calibration — the float range of every activation tensor over user-supplied samples.

The float reference interpreter runs each calibration sample with `keep_all=True`; every non-constant tensor's
values feed either a running min/max (`method="minmax"`, TFLite's post-training default) or a pool of values whose
`percentile`-th and `(100 - percentile)`-th percentiles become the range (`method="percentile"`, which ignores rare
outliers). The pool is bounded: each sample contributes an evenly strided subsample of at most
`PERCENTILE_VALUES_PER_SAMPLE` values, and when a tensor's pool exceeds `PERCENTILE_POOL_SIZE` values it is thinned
by half (and so is every later sample), so all samples keep equal weight and memory stays flat. Percentiles are
therefore exact for small tensors and few samples, and close estimates otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from ..errors import KilobyteError
from ..interp import run_float
from ..ir import Graph

METHODS = ("minmax", "percentile")
PERCENTILE_VALUES_PER_SAMPLE = 1 << 12
PERCENTILE_POOL_SIZE = 1 << 16

Range = tuple[float, float]  # (min, max) in real units


def calibrate(graph: Graph, inputs, *, method: str = "minmax", percentile: float = 99.99) -> dict[str, Range]:
    """Float range `(lo, hi)` of every activation tensor (graph inputs and node outputs) of a float `graph`.

    `inputs` holds the calibration samples: one array with a leading sample axis (`(N, H, W, C)` or
    `(N, 1, H, W, C)` for a `(1, H, W, C)` input), a dict input-name -> such array, or any iterable of
    per-sample arrays / dicts.

    >>> from kilobyte.ir import GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> g = b.build([b.node(Op.RELU, [b.input((1, 2))])])
    >>> calibrate(g, np.array([[-1.0, 2.0], [3.0, 0.5]]))
    {'input': (-1.0, 3.0), 'relu_0': (0.0, 3.0)}
    """
    if method not in METHODS:
        raise KilobyteError(f"calibration method '{method}' unknown; use one of {', '.join(METHODS)}")
    if method == "percentile" and not 50.0 < percentile <= 100.0:
        raise KilobyteError(f"calibration percentile {percentile} must be in (50, 100]")
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    pools: dict[str, _Pool] = {}
    count = 0
    for sample in iter_samples(graph, inputs):
        for name, v in run_float(graph, sample, keep_all=True).items():
            lo[name] = min(lo.get(name, np.inf), float(v.min()))
            hi[name] = max(hi.get(name, -np.inf), float(v.max()))
            if method == "percentile":
                pools.setdefault(name, _Pool()).add(v)
        count += 1
    if count == 0:
        raise KilobyteError("calibration needs at least one input sample; got none")
    if method == "minmax":
        return {k: (lo[k], hi[k]) for k in lo}
    return {k: pools[k].percentile_range(percentile) for k in lo}


class _Pool:
    """A bounded, evenly thinned sample of one tensor's values over all calibration samples."""

    def __init__(self):
        self.chunks: list[np.ndarray] = []
        self.size = 0
        self.thin = 1  # every sample keeps 1 value in (its own stride · thin)

    def add(self, v: np.ndarray) -> None:
        flat = v.ravel()
        step = -(-flat.size // PERCENTILE_VALUES_PER_SAMPLE)  # ceil: at most the cap per sample
        chunk = flat[:: step * self.thin].astype(np.float32)
        self.chunks.append(chunk)
        self.size += chunk.size
        if self.size > PERCENTILE_POOL_SIZE:
            self.chunks = [np.concatenate(self.chunks)[::2]]
            self.size = self.chunks[0].size
            self.thin *= 2

    def percentile_range(self, p: float) -> Range:
        lo, hi = np.percentile(np.concatenate(self.chunks), [100.0 - p, p])
        return float(lo), float(hi)


def iter_samples(graph: Graph, inputs) -> Iterator[dict[str, np.ndarray]]:
    """Yield one `{input name: (1, ...) array}` dict per calibration sample (see `calibrate` for the forms)."""
    if isinstance(inputs, np.ndarray):
        if len(graph.inputs) != 1:
            raise KilobyteError(f"graph has inputs {list(graph.inputs)}: pass a dict name -> samples")
        inputs = {graph.inputs[0]: inputs}
    if isinstance(inputs, dict):
        batches = {name: _as_batch(graph, name, inputs.get(name)) for name in graph.inputs}
        n = {len(b) for b in batches.values()}
        if len(n) != 1:
            raise KilobyteError(f"calibration inputs differ in sample count: {sorted(n)}")
        for i in range(n.pop()):
            yield {name: b[i] for name, b in batches.items()}
        return
    if not isinstance(inputs, Iterable):
        raise KilobyteError(f"calibration inputs must be an array, a dict or an iterable, not {type(inputs).__name__}")
    for sample in inputs:
        if not isinstance(sample, dict):
            sample = {graph.inputs[0]: sample}
        yield {name: _one(graph, name, sample.get(name)) for name in graph.inputs}


def _as_batch(graph: Graph, name: str, x) -> np.ndarray:
    """Samples of input `name` as an (N, *shape) array, accepting (N, *shape[1:]) for batch-1 shapes."""
    if x is None:
        raise KilobyteError(f"calibration inputs lack graph input '{name}'")
    x = np.asarray(x, np.float32)
    shape = graph.tensors[name].shape
    if x.shape[1:] == shape:
        return x
    if shape[0] == 1 and x.shape[1:] == shape[1:]:
        return x[:, None]
    raise KilobyteError(f"calibration samples for '{name}' have shape {x.shape}; expected (N, *{shape}) "
                        f"or (N, *{shape[1:]})")


def _one(graph: Graph, name: str, x) -> np.ndarray:
    if x is None:
        raise KilobyteError(f"calibration sample lacks graph input '{name}'")
    x = np.asarray(x, np.float32)
    shape = graph.tensors[name].shape
    if x.shape != shape:
        if x.size != int(np.prod(shape)) or x.shape != shape[1:]:
            raise KilobyteError(f"calibration sample for '{name}' has shape {x.shape}; expected {shape}")
        x = x.reshape(shape)
    return x
