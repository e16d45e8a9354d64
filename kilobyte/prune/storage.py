"""Prune stage: the Flash bytes of a convolution the scheduler has not pruned yet — dense, or in FWCS with a given
number of filterlets kept — the size model DTMM's Flash constraint (Eq. 4) needs before any weight is zero.

The byte rules are not repeated here: a format's weights and indices come from `ops/sparse.py` (`fwcs_sizes`, the
rule its encoder's arrays follow), the per-channel data from the planner's Flash model
(`schedule.estimate.PER_CHANNEL_BYTES`: an int32 bias, multiplier and shift per output channel, "other" below).
Once the weights are pruned, the report counts the real arrays instead (`analysis.macs.layer_weight_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ops.sparse import fwcs_sizes
from ..schedule.estimate import PER_CHANNEL_BYTES
from .layers import ConvLayer


@dataclass(frozen=True)
class LayerBytes:
    weight_bytes: int
    index_bytes: int
    other_bytes: int

    @property
    def total(self) -> int:
        return self.weight_bytes + self.index_bytes + self.other_bytes


def dense_bytes(layer: ConvLayer) -> LayerBytes:
    """A dense int8 layer.

    >>> dense_bytes(ConvLayer("c", 8, 4, 3, 3, 6, 6))
    LayerBytes(weight_bytes=288, index_bytes=0, other_bytes=96)
    """
    return LayerBytes(layer.weights, 0, PER_CHANNEL_BYTES * layer.filters)


def fwcs_bytes(layer: ConvLayer, kept_filterlets: int) -> LayerBytes:
    """FWCS with `kept_filterlets` of the layer's filterlets kept (each Cin weights).

    >>> fwcs_bytes(ConvLayer("c", 8, 4, 3, 3, 6, 6), 36)  # half the filterlets: 144 weights, 36 + 8 + 1 indices
    LayerBytes(weight_bytes=144, index_bytes=90, other_bytes=96)
    """
    weight, index = fwcs_sizes(layer.filters, layer.cin, kept_filterlets)
    return LayerBytes(weight, index, PER_CHANNEL_BYTES * layer.filters)
