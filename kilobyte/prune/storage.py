"""Prune stage: the Flash bytes of a pruned convolution in each storage format — the size model the scheduler
constrains and the report prints (DTMM Eq. 4, counted exactly rather than with its omissions).

Per layer with N filters, int8 weights and 16-bit indices:
- dense:  N·KH·KW·Cin weights;
- FWCS:   the kept weights (1 B each) + cPtr, 2 B per kept filterlet + fIdx, 2 B per filter + its sentinel, 2 B
          (`size` = Cin is a constant of the layer's parameters, not an array);
- CSR:    the kept weights + 2 B per kept weight (its offset in the filter) + fIdx and its sentinel, 2 B per filter + 2.
Every format adds the per-channel data the generated C holds for any weighted layer: an int32 bias, multiplier and
shift per output channel (`schedule.estimate.constant_bytes`), 12 B per filter — "other" below.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layers import ConvLayer

INDEX_BYTES = 2  # uint16 cPtr / fIdx entries
PER_CHANNEL_BYTES = 12  # int32 bias, multiplier and shift per output channel


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
    index = INDEX_BYTES * (kept_filterlets + layer.filters + 1)
    return LayerBytes(kept_filterlets * layer.cin, index, PER_CHANNEL_BYTES * layer.filters)


def csr_bytes(layer: ConvLayer, kept_weights: int) -> LayerBytes:
    """CSR with `kept_weights` weights kept.

    >>> csr_bytes(ConvLayer("c", 8, 4, 3, 3, 6, 6), 144)
    LayerBytes(weight_bytes=144, index_bytes=306, other_bytes=96)
    """
    index = INDEX_BYTES * (kept_weights + layer.filters + 1)
    return LayerBytes(kept_weights, index, PER_CHANNEL_BYTES * layer.filters)


def sparse_bytes(layer: ConvLayer, method: str, removed_units: int) -> LayerBytes:
    """The layer's bytes after `method` ("filterlet": FWCS, "csr") removed `removed_units` of its filterlets or
    weights; a layer with nothing removed stays dense (the sparse kernels run only on pruned layers). (Channel pruning
    gives a smaller dense layer: `dense_bytes` of its new geometry.)"""
    if removed_units == 0:
        return dense_bytes(layer)
    if method == "filterlet":
        return fwcs_bytes(layer, layer.filterlets - removed_units)
    if method == "csr":
        return csr_bytes(layer, layer.weights - removed_units)
    raise ValueError(f"sparse_bytes: method {method!r} is not a sparse format (filterlet, csr)")
