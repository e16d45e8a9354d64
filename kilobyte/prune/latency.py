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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .layers import ConvLayer

CONSTANTS = ("t_mem", "t_idx", "t_com", "t_post")


@dataclass(frozen=True)
class LatencyModel:
    """The fitted constants (instructions or cycles per unit of work) and the SIMD lanes l they were fitted for."""

    t_mem: float
    t_idx: float
    t_com: float
    t_post: float
    lanes: int = 16  # Helium: 16 int8 lanes

    def as_array(self) -> np.ndarray:
        return np.array([self.t_mem, self.t_idx, self.t_com, self.t_post])

    def layer(self, layer: ConvLayer, alpha: float) -> float:
        """T̂ of `layer` with a fraction `alpha` of its filterlets removed.

        >>> LatencyModel(1.0, 0.0, 0.0, 0.0).layer(ConvLayer("c", 8, 4, 3, 3, 6, 6), 0.5)  # 36 im2col bytes x 36 px
        1296.0
        """
        return float(latency_features(layer, alpha, self.lanes) @ self.as_array())

    def per_filterlet(self, layer: ConvLayer) -> float:
        """What removing one filterlet saves: (t_idx + ⌈Cin/l⌉·t_com)·OH·OW."""
        return (self.t_idx + math.ceil(layer.cin / self.lanes) * self.t_com) * layer.oh * layer.ow


def latency_features(layer: ConvLayer, alpha: float, lanes: int) -> np.ndarray:
    """The four coefficients of (t_mem, t_idx, t_com, t_post) in T̂ (module doc)."""
    pixels = layer.oh * layer.ow
    kept = layer.filterlets * (1.0 - alpha)
    return np.array([layer.kh * layer.kw * layer.cin, kept, kept * math.ceil(layer.cin / lanes),
                     layer.filters], np.float64) * pixels


@dataclass(frozen=True)
class LatencySample:
    """One measurement: a layer, the fraction of its filterlets removed, and what it cost (instructions)."""

    layer: ConvLayer
    alpha: float
    instructions: float


@dataclass(frozen=True)
class LatencyFit:
    model: LatencyModel
    mse: float  # mean squared error of the fitted T̂ over the samples, in squared instructions
    relative_rms: float  # sqrt(mean(((T̂ - measured) / measured)^2))
    rank: int  # of the design matrix: 4 when the samples determine every constant

    def describe(self) -> str:
        consts = ", ".join(f"{n} = {v:.4g}" for n, v in zip(CONSTANTS, self.model.as_array()))
        text = f"{consts} (l = {self.model.lanes}); MSE {self.mse:.4g}, relative RMS {self.relative_rms * 100:.2f} %"
        if self.rank < len(CONSTANTS):  # e.g. samples of one geometry: T̂ fits, its split into constants does not
            text += f"; rank {self.rank} of {len(CONSTANTS)}: vary the geometry to determine every constant"
        return text


def fit_latency(samples: list[LatencySample], lanes: int = 16) -> LatencyFit:
    """Least-squares constants of the latency model from measured `samples` (at least 4, of varied geometry).

    >>> layers = [ConvLayer("c", n, c, 3, 3, 4, 4) for n, c in ((4, 8), (8, 16), (16, 32), (8, 3))]
    >>> truth = LatencyModel(2.0, 5.0, 3.0, 20.0)
    >>> samples = [LatencySample(l, a, truth.layer(l, a)) for l in layers for a in (0.0, 0.5)]
    >>> [round(float(v), 6) for v in fit_latency(samples).model.as_array()]
    [2.0, 5.0, 3.0, 20.0]
    """
    if len(samples) < len(CONSTANTS):
        raise ValueError(f"fit_latency: {len(samples)} samples cannot determine {len(CONSTANTS)} constants")
    a = np.stack([latency_features(s.layer, s.alpha, lanes) for s in samples])  # (samples, 4)
    t = np.array([s.instructions for s in samples], np.float64)
    if (t <= 0).any():
        raise ValueError("fit_latency: every sample needs a positive instruction count")
    # least squares on relative errors: layers differ in cost by orders of magnitude, and an absolute fit would
    # leave the small layers' terms (t_post above all) to the noise of the large ones
    coef, _, rank, _ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
    predicted = a @ coef
    mse = float(np.mean((predicted - t) ** 2))
    rel = float(np.sqrt(np.mean(((predicted - t) / t) ** 2)))
    return LatencyFit(LatencyModel(*map(float, coef), lanes=lanes), mse, rel, int(rank))


# Provisional constants, in instructions, until the filterlet kernel's measured counts are fitted (`fit_latency`):
# a byte copied per im2col element, a few instructions to read cPtr and point at the patch per kept filterlet, one
# SIMD multiply-accumulate (plus its load) per l weights, and bias + requantisation + store per output. They set
# the scheduler's trade-off between layers; they are not a measurement.
PROVISIONAL_MODEL = LatencyModel(t_mem=1.0, t_idx=4.0, t_com=2.0, t_post=12.0, lanes=16)
