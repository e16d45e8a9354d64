"""Analysis stage: `profile(graph)`, the per-layer report behind `kilobyte profile` — MACs, params, Flash, memory, RF.

One `LayerProfile` per node in execution order, the per-block summary of `group_blocks`, and the totals. Memory is
the analytic per-layer figure at int8 (see `memory.py`); Flash is int8 weights plus int32 biases (see `macs.py`).
Works unchanged on float and int8 graphs. Totals count a constant shared by several nodes once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..ir import Graph
from .blocks import group_blocks
from .macs import constant_flash_bytes, constant_inputs, node_flash_bytes, node_macs, node_ops, node_params
from .memory import live_bytes
from .receptive_field import receptive_field
from .shapes import in_bytes, out_bytes, output_shape


@dataclass(frozen=True)
class LayerProfile:
    name: str
    op: str  # Op value, e.g. "CONV_2D"
    macs: int
    params: int
    in_bytes: int  # activation inputs at int8
    out_bytes: int
    live_bytes: int  # inputs + outputs + tensors held for later nodes
    receptive_field: int  # input-pixel side one output pixel depends on
    origin: str = ""  # source-framework name
    out_shape: tuple[int, ...] = ()
    flash_bytes: int = 0  # int8 weights + int32 bias
    ops: int = 0  # non-MAC ops: pooling, add, mean, elementwise


@dataclass(frozen=True)
class BlockProfile:
    name: str  # "block_<k>"
    layers: tuple[str, ...]  # node names, in execution order
    macs: int
    peak_bytes: int  # max live_bytes over the block's layers


@dataclass(frozen=True)
class Profile:
    layers: list[LayerProfile]
    macs: int
    params: int
    flash_bytes: int
    peak_bytes: int  # analytic per-layer peak (max live_bytes)
    input_shape: tuple[int, ...]  # NHWC shape of the (first) graph input
    ops: int = 0
    peak_layer: str = ""  # name of the node where the peak occurs
    blocks: list[BlockProfile] = field(default_factory=list)
    name: str = "model"

    def to_dict(self) -> dict:
        """JSON-ready data (lists, ints, strings): totals, then `layers` and `blocks` in execution order."""
        return {
            "name": self.name, "macs": self.macs, "ops": self.ops, "params": self.params,
            "flash_bytes": self.flash_bytes, "peak_bytes": self.peak_bytes, "peak_layer": self.peak_layer,
            "input_shape": list(self.input_shape),
            "layers": [_jsonable(dataclasses.asdict(layer)) for layer in self.layers],
            "blocks": [_jsonable(dataclasses.asdict(block)) for block in self.blocks],
        }


def _jsonable(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def profile(graph: Graph) -> Profile:
    """Profile `graph` (best after `prepare_for_inference`; never modifies it).

    >>> import numpy as np
    >>> from kilobyte.ir import ConvAttrs, GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 8, 8, 3))], ConvAttrs(stride=(2, 2), padding=(1, 1, 1, 1)),
    ...            params={"weight": np.zeros((4, 3, 3, 3), np.float32), "bias": np.zeros(4, np.float32)})
    >>> p = profile(b.build([y]))
    >>> p.macs, p.params, p.flash_bytes, p.peak_bytes  # 108*16, 108+4, 108+4*4, 8*8*3 + 4*4*4
    (1728, 112, 124, 256)
    """
    live = live_bytes(graph)
    layers = [_layer(graph, node, live[i]) for i, node in enumerate(graph.nodes)]
    by_name = {layer.name: layer for layer in layers}
    blocks = [BlockProfile(f"block_{k}", names, sum(by_name[n].macs for n in names),
                           max(by_name[n].live_bytes for n in names))
              for k, names in enumerate(group_blocks(graph))]
    peak = max(layers, key=lambda layer: layer.live_bytes, default=None)
    consts = {t: (graph.tensors[t].numel, constant_flash_bytes(graph, n, t))
              for n in graph.nodes for t in constant_inputs(graph, n)}  # shared constants counted once
    return Profile(
        layers=layers,
        macs=sum(layer.macs for layer in layers),
        params=sum(numel for numel, _ in consts.values()),
        flash_bytes=sum(nbytes for _, nbytes in consts.values()),
        peak_bytes=peak.live_bytes if peak else 0,
        input_shape=tuple(graph.tensors[graph.inputs[0]].shape) if graph.inputs else (),
        ops=sum(layer.ops for layer in layers),
        peak_layer=peak.name if peak else "",
        blocks=blocks,
        name=graph.name,
    )


def _layer(graph: Graph, node, live: int) -> LayerProfile:
    return LayerProfile(
        name=node.name, op=node.op.value, macs=node_macs(graph, node), params=node_params(graph, node),
        in_bytes=in_bytes(graph, node), out_bytes=out_bytes(graph, node), live_bytes=live,
        receptive_field=receptive_field(graph, node), origin=node.origin, out_shape=output_shape(graph, node),
        flash_bytes=node_flash_bytes(graph, node), ops=node_ops(graph, node),
    )
