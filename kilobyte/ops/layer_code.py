"""Op registry: what an op's emitter returns and the C expressions it writes with — the vocabulary of the C emitters.

`LayerCode` is one layer's C (file-scope constant arrays, the statements of its layer function, the runtime kernel
families it calls); `Buffers` names where each tensor lives (the caller's input pointer or an arena offset from the
plan); `window_params` fills `kb_conv_params` for a windowed op. Emitters live with their op (`kilobyte.ops`) or in
`codegen/layers.py`; `codegen/model_c.py` assembles the layers into `model.c`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .c_text import c_array, c_ident
from .node_params import requant_params


@dataclass
class LayerCode:
    decls: list[str] = field(default_factory=list)  # file-scope constant arrays
    body: list[str] = field(default_factory=list)  # statements of the layer function
    families: set[str] = field(default_factory=set)  # runtime kernel families used


class Buffers:
    """C expressions for where each tensor lives: the caller's input pointer or an offset into the arena."""

    def __init__(self, graph, plan):
        self.graph, self.plan = graph, plan

    def ptr(self, tensor: str) -> str:
        if tensor in self.graph.inputs:
            return "input"
        return f"(KB_ARENA + {self.plan.placements[tensor].offset})"

    def cstride(self, tensor: str) -> int:
        if tensor in self.plan.placements:
            return self.plan.placements[tensor].channel_stride
        return self.graph.tensors[tensor].shape[-1]

    def same_bytes(self, a: str, b: str) -> bool:
        pa, pb = self.plan.placements.get(a), self.plan.placements.get(b)
        return pa is not None and pb is not None and pa.offset == pb.offset


def window_params(graph, node, bufs: Buffers, kernel: tuple[int, int], zps: tuple[int, int],
                  act: tuple[int, int]) -> dict[str, int]:
    """Fields of `kb_conv_params` (conv, depthwise, pooling)."""
    a = node.attrs
    _, ih, iw, ic = graph.tensors[node.inputs[0]].shape
    _, oh, ow, oc = graph.tensors[node.outputs[0]].shape
    t, b, left, r = a.padding
    dil = getattr(a, "dilation", (1, 1))
    return dict(in_h=ih, in_w=iw, in_c=ic, in_cstride=bufs.cstride(node.inputs[0]), out_h=oh, out_w=ow, out_c=oc,
                out_cstride=bufs.cstride(node.outputs[0]), k_h=kernel[0], k_w=kernel[1], stride_h=a.stride[0],
                stride_w=a.stride[1], dil_h=dil[0], dil_w=dil[1], pad_t=t, pad_b=b, pad_l=left, pad_r=r,
                in_offset=-zps[0], out_offset=zps[1], act_min=act[0], act_max=act[1], in_row=iw, out_row=ow)


def layer_bias(graph, node) -> np.ndarray:
    """The node's int32 bias (zeros when it has none), one per output channel."""
    if len(node.inputs) > 2:
        return graph.tensors[node.inputs[2]].data
    return np.zeros(len(requant_params(graph, node).multiplier), np.int32)


def folded_bias(graph, node) -> np.ndarray:
    """bias[n] - zp_in * sum(w[n]), wrapped to int32: sum(w * (x - zp_in)) + bias = sum(w * x) + this modulo 2^32, so
    a kernel given it multiplies raw int8 inputs and the input zero point enters once per output channel — the
    sparse convs (kb_sparse_conv.c, which read padded taps as zp_in) and the fully connected layer (whose Cortex-M
    kernel then only sign-extends its input: runtime/c/arm/kb_fc.c)."""
    w = graph.tensors[node.inputs[1]].data.astype(np.int64)
    zp = int(requant_params(graph, node).input_zp)
    folded = layer_bias(graph, node).astype(np.int64) - zp * w.reshape(w.shape[0], -1).sum(axis=1)
    return ((folded + 2**31) % 2**32 - 2**31).astype(np.int32)


def weight_arrays(graph, node, code: LayerCode, bias: np.ndarray | None = None) -> tuple[str, str, str, str]:
    """Emit weight, bias (the node's, or `bias`), multiplier and shift arrays; return their C names."""
    base = c_ident(node.name)
    p = requant_params(graph, node)
    w = graph.tensors[node.inputs[1]].data
    bias = layer_bias(graph, node) if bias is None else bias
    names = (f"kb_w_{base}", f"kb_b_{base}", f"kb_mult_{base}", f"kb_shift_{base}")
    code.decls += [c_array(names[0], "int8_t", w, align=16), c_array(names[1], "int32_t", bias, align=16),
                   c_array(names[2], "int32_t", p.multiplier), c_array(names[3], "int32_t", p.shift)]
    return names
