"""Prune stage: DTMM's latency model of a filterlet convolution (§III-C2) and its least-squares fit.

Per output pixel of a layer with N filters of KH x KW x Cin, a fraction α of its filterlets removed, and SIMD of l
lanes, the kernel
- fetches the im2col patch:                 T_ft = KH·KW·Cin·t_mem
- runs each kept filterlet's dot product:   T_cm = N·KH·KW·(1-α)·(t_idx + ⌈Cin/l⌉·t_com)
- adds the bias and requantises each output: T_ps = N·t_post
and the layer takes T̂ = (T_ft + T_cm + T_ps)·OH·OW. T̂ is linear in the four constants, so measured samples
(geometry, α, instructions or cycles) give them by least squares — on relative errors, as the samples span orders of
magnitude; `fit_latency` reports the fit's mean squared error (the paper's figure: 0.03 on 10 samples, units not
given) and its relative RMS error.

Cortex-M (the DSP kernel set's kb_conv_fwcs, runtime/c/arm/kb_sparse_conv.c) has two code paths, so a model holds
two sets of constants. With Cin a multiple of 4, a filterlet is walked one 32-bit word of 4 int8 weights at a time,
unpacked once and applied to two output pixels by SMLAD (two 16-bit lanes) — so there l = 4 values per step, and
t_com is the cost of one such step per output pixel (two SMLADs plus its share of the loads); it is not a 4-lane
MAC. Any other Cin takes a value-by-value loop (widening and MACs), fitted apart with l = 1 (`LatencyModel.scalar`).
DTMM's T_ft counts im2col bytes only; this kernel also pays per window tap (bounds check, source pointer, the loop),
which the four constants cannot absorb (Cin = 1 ... 3 layers were 20-30 % off). An optional fifth constant, t_tap
per tap per output pixel (T_ft = KH·KW·(Cin·t_mem + t_tap)), brings the measured error from 7-10 % to 2-4 %
(bench/results/dtmm_latency.json); `fit_latency(..., per_tap=True)` fits it, and it is 0 in DTMM's form.
The shipped Cortex-M7 constants (`shipped_model`, latency_cortex_m7.json) are fitted on measured instruction
counts by `python bench/bench_dtmm.py --fit-latency`; the file holds the samples, the fit's error and the error on
geometries left out of the fit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np

from .layers import ConvLayer

CONSTANTS = ("t_mem", "t_idx", "t_com", "t_post")  # DTMM's four
TAP = "t_tap"  # the optional fifth (module doc)


@dataclass(frozen=True)
class LatencyModel:
    """The fitted constants (instructions or cycles per unit of work) and the SIMD lanes l they were fitted for."""

    t_mem: float
    t_idx: float
    t_com: float
    t_post: float
    t_tap: float = 0.0
    lanes: int = 16  # int8 values per SIMD step (Helium: 16 lanes; Cortex-M DSP: 4, module doc)
    scalar: LatencyModel | None = None  # constants for layers whose Cin is not a multiple of `lanes` (None: same)

    def as_array(self) -> np.ndarray:
        return np.array([self.t_mem, self.t_idx, self.t_com, self.t_post, self.t_tap])

    def path(self, layer: ConvLayer) -> LatencyModel:
        """The constants that apply to `layer`: `scalar` when set and Cin is not a multiple of `lanes`."""
        return self.scalar if self.scalar is not None and layer.cin % self.lanes else self

    def to_dict(self) -> dict:
        out = {"vector": {"t_mem": self.t_mem, "t_idx": self.t_idx, "t_com": self.t_com, "t_post": self.t_post,
                          "t_tap": self.t_tap, "lanes": self.lanes}}
        if self.scalar is not None:
            out["scalar"] = self.scalar.to_dict()["vector"]
        return out

    @staticmethod
    def from_dict(d: dict) -> LatencyModel:
        scalar = LatencyModel(**d["scalar"]) if "scalar" in d else None
        return LatencyModel(**d["vector"], scalar=scalar)

    def layer(self, layer: ConvLayer, alpha: float) -> float:
        """T̂ of `layer` with a fraction `alpha` of its filterlets removed.

        >>> LatencyModel(1.0, 0.0, 0.0, 0.0).layer(ConvLayer("c", 8, 4, 3, 3, 6, 6), 0.5)  # 36 im2col bytes x 36 px
        1296.0
        """
        m = self.path(layer)
        return float(latency_features(layer, alpha, m.lanes) @ m.as_array())

    def per_filterlet(self, layer: ConvLayer) -> float:
        """What removing one filterlet saves: (t_idx + ⌈Cin/l⌉·t_com)·OH·OW."""
        m = self.path(layer)
        return (m.t_idx + math.ceil(layer.cin / m.lanes) * m.t_com) * layer.oh * layer.ow


def latency_features(layer: ConvLayer, alpha: float, lanes: int) -> np.ndarray:
    """The coefficients of (t_mem, t_idx, t_com, t_post, t_tap) in T̂ (module doc)."""
    pixels = layer.oh * layer.ow
    kept = layer.filterlets * (1.0 - alpha)
    return np.array([layer.kh * layer.kw * layer.cin, kept, kept * math.ceil(layer.cin / lanes),
                     layer.filters, layer.kh * layer.kw], np.float64) * pixels


@dataclass(frozen=True)
class LatencySample:
    """One measurement: a layer, the fraction of its filterlets removed, and what it cost (instructions)."""

    layer: ConvLayer
    alpha: float
    instructions: float


@dataclass(frozen=True)
class LatencyFit:
    """DTMM's latency model fitted to measured samples, and how well it fits them."""

    model: LatencyModel
    mse: float  # mean squared error of the fitted T̂ over the samples, in squared instructions
    relative_rms: float  # sqrt(mean(((T̂ - measured) / measured)^2))
    rank: int  # of the design matrix: `constants` when the samples determine every constant
    constants: int = len(CONSTANTS)  # fitted: 4, or 5 with t_tap

    def describe(self) -> str:
        names = (*CONSTANTS, TAP)[:self.constants]
        consts = ", ".join(f"{n} = {v:.4g}" for n, v in zip(names, self.model.as_array()))
        text = f"{consts} (l = {self.model.lanes}); MSE {self.mse:.4g}, relative RMS {self.relative_rms * 100:.2f} %"
        if self.rank < self.constants:  # e.g. samples of one geometry: T̂ fits, its split into constants does not
            text += f"; rank {self.rank} of {self.constants}: vary the geometry to determine every constant"
        return text


def fit_latency(samples: list[LatencySample], lanes: int = 16, per_tap: bool = False) -> LatencyFit:
    """Least-squares constants of the latency model from measured `samples` (at least 4, of varied geometry);
    `per_tap`: fit t_tap too (module doc), else it is 0.

    >>> layers = [ConvLayer("c", n, c, 3, 3, 4, 4) for n, c in ((4, 8), (8, 16), (16, 32), (8, 3))]
    >>> truth = LatencyModel(2.0, 5.0, 3.0, 20.0)
    >>> samples = [LatencySample(l, a, truth.layer(l, a)) for l in layers for a in (0.0, 0.5)]
    >>> [round(float(v), 6) for v in fit_latency(samples).model.as_array()]
    [2.0, 5.0, 3.0, 20.0, 0.0]
    """
    k = len(CONSTANTS) + per_tap
    if len(samples) < k:
        raise ValueError(f"fit_latency: {len(samples)} samples cannot determine {k} constants")
    a = np.stack([latency_features(s.layer, s.alpha, lanes)[:k] for s in samples])  # (samples, k)
    t = np.array([s.instructions for s in samples], np.float64)
    if (t <= 0).any():
        raise ValueError("fit_latency: every sample needs a positive instruction count")
    # least squares on relative errors: layers differ in cost by orders of magnitude, and an absolute fit would
    # leave the small layers' terms (t_post above all) to the noise of the large ones
    coef, _, rank, _ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
    predicted = a @ coef
    mse = float(np.mean((predicted - t) ** 2))
    rel = float(np.sqrt(np.mean(((predicted - t) / t) ** 2)))
    return LatencyFit(LatencyModel(*map(float, coef), lanes=lanes), mse, rel, int(rank), k)


def fit_errors(model: LatencyModel, samples: list[LatencySample]) -> dict:
    """How well `model` predicts `samples`: count, MSE (instructions²), relative RMS and largest relative error."""
    t = np.array([s.instructions for s in samples], np.float64)
    p = np.array([model.layer(s.layer, s.alpha) for s in samples], np.float64)
    rel = (p - t) / t
    return {"samples": len(samples), "mse": float(np.mean((p - t) ** 2)),
            "relative_rms": float(np.sqrt(np.mean(rel ** 2))), "max_relative": float(np.max(np.abs(rel)))}


@dataclass(frozen=True)
class KernelFit:
    """A two-path model (module doc) and the samples it was fitted on."""

    model: LatencyModel
    samples: tuple[LatencySample, ...]
    ranks: tuple[int, int]  # of the vector and scalar design matrices (4 each when determined)

    def evaluate(self, samples) -> dict:
        """`fit_errors` per path ("vector", "scalar") and over "all" of `samples`."""
        vector = [s for s in samples if self.model.path(s.layer) is self.model]
        scalar = [s for s in samples if self.model.path(s.layer) is not self.model]
        out = {"all": fit_errors(self.model, list(samples))}
        for name, part in (("vector", vector), ("scalar", scalar)):
            if part:
                out[name] = fit_errors(self.model, part)
        return out

    def summary(self) -> dict:
        out = self.evaluate(self.samples)
        out["vector"]["rank"], out["scalar"]["rank"] = self.ranks
        return out


def fit_kernel_latency(samples: list[LatencySample], lanes: int = 4, per_tap: bool = True) -> KernelFit:
    """The Cortex-M kernel's two-path model: `fit_latency` on the samples with Cin a multiple of `lanes` (l =
    `lanes`) and, apart, on the others (l = 1); with t_tap unless `per_tap` is False (DTMM's four constants)."""
    vector = [s for s in samples if s.layer.cin % lanes == 0]
    scalar = [s for s in samples if s.layer.cin % lanes]
    v, s = fit_latency(vector, lanes, per_tap), fit_latency(scalar, 1, per_tap)
    return KernelFit(replace(v.model, scalar=s.model), tuple(samples), (v.rank, s.rank))


def sample_to_dict(s: LatencySample) -> dict:
    c = s.layer
    return {"n": c.filters, "cin": c.cin, "k": [c.kh, c.kw], "out": [c.oh, c.ow], "alpha": s.alpha,
            "instructions": s.instructions}


def sample_from_dict(d: dict) -> LatencySample:
    return LatencySample(ConvLayer("sample", d["n"], d["cin"], *d["k"], *d["out"]), d["alpha"], d["instructions"])


SHIPPED_MODELS = {"cortex-m7": Path(__file__).with_name("latency_cortex_m7.json")}


@cache
def shipped_model(target: str = "cortex-m7") -> LatencyModel:
    """The constants fitted on `target`'s measured instruction counts (module doc), as the file ships them."""
    if target not in SHIPPED_MODELS:
        raise ValueError(f"no fitted latency model for {target!r}; fitted: {', '.join(SHIPPED_MODELS)}")
    return LatencyModel.from_dict(json.loads(SHIPPED_MODELS[target].read_text())["model"])


# Guessed constants (no measurement), kept for comparison: a byte copied per im2col element, a few instructions per
# kept filterlet, one SIMD multiply-accumulate (plus its load) per l weights, and bias + requantisation + store per
# output. The pipeline's default is `shipped_model()`.
PROVISIONAL_MODEL = LatencyModel(t_mem=1.0, t_idx=4.0, t_com=2.0, t_post=12.0, lanes=16)
