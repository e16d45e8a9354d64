"""Schedule stage: the static part of the in-place rules — which tensors share storage whatever the order.

A *storage unit* is a set of activation tensors that live in the same bytes for their whole lives:
- a RESHAPE output and its input (`alias_reshape`), unless the input is a caller-owned graph input;
- CONCAT (last axis) inputs written straight into their slice of the output (`concat_in_place`): allowed when the
  input is consumed only by that concat (once), is neither a graph input nor a graph output, and is not produced by a
  RESHAPE (a reshape output must stay at its input's bytes, contiguous). Nested concats nest slices.
Each unit has a *root* (the tensor that owns the bytes: neither an alias nor a slice) and occupies `size(root)` bytes
from the first time any member is produced until every member is dead.

The dynamic part — a depthwise conv or ADD overwriting an input whose unit dies at that very step — depends on the
order and is decided by `inplace_input` (here, so the DP in reorder.py and the interval model in liveness.py apply the
same rule). It never applies when the node's output is itself a slice: the concat slice wins because the slice has
the output's channel stride, not the input's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis.shapes import activation_bytes, activation_inputs
from ..ir import Graph, Node, Op
from .plan_types import PlanOptions
from .scratch import padded_channel_bytes


@dataclass(frozen=True)
class Aliases:
    """Storage units of a graph under some `PlanOptions` (order independent)."""

    root: dict[str, str]  # activation tensor (not a graph input) -> root of its unit
    size: dict[str, int]  # root -> bytes of the unit
    members: dict[str, tuple[str, ...]]  # root -> tensors of the unit (root first)
    slice_of: dict[str, tuple[str, int]]  # concat input -> (concat output, first channel of its slice)
    reshape_of: dict[str, str]  # aliased reshape output -> its input
    candidates: dict[str, tuple[str, ...]]  # node -> inputs it may overwrite in place (if they die there)
    inplace_scratch: dict[str, int]  # node -> scratch bytes when it runs in place (DW: one padded channel)


def is_last_axis_concat(graph: Graph, node: Node) -> bool:
    rank = len(graph.tensors[node.outputs[0]].shape)
    return node.op is Op.CONCAT and node.attrs.axis % rank == rank - 1


def _slices(graph: Graph, options: PlanOptions, pinned: frozenset) -> dict[str, tuple[str, int]]:
    """Concat inputs that are written into their slice of the concat output: input -> (output, channel offset)."""
    if not options.concat_in_place:
        return {}
    consumers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for t in n.inputs:
            consumers.setdefault(t, []).append(n)
    out: dict[str, tuple[str, int]] = {}
    for n in graph.nodes:
        if not is_last_axis_concat(graph, n) or n.outputs[0] in pinned:
            continue
        channel = 0
        for t in n.inputs:
            prod = graph.producer(t)
            ok = (prod is not None and prod.op is not Op.RESHAPE and t not in graph.outputs and t not in pinned
                  and len(consumers[t]) == 1 and n.inputs.count(t) == 1)
            if ok:
                out[t] = (n.outputs[0], channel)
            channel += graph.tensors[t].shape[-1]
    return out


def _reshapes(graph: Graph, options: PlanOptions, slices: dict) -> dict[str, str]:
    if not options.alias_reshape:
        return {}
    return {n.outputs[0]: n.inputs[0] for n in graph.nodes
            if n.op is Op.RESHAPE and n.inputs[0] not in graph.inputs and n.outputs[0] not in slices}


def _candidates(graph: Graph, options: PlanOptions, slices: dict) -> tuple[dict, dict]:
    """Inputs each node may overwrite, and the scratch it then needs. Graph inputs are read-only."""
    cands: dict[str, tuple[str, ...]] = {}
    scratch: dict[str, int] = {}
    for n in graph.nodes:
        out = n.outputs[0]
        if out in slices:
            continue
        ins = [t for t in activation_inputs(graph, n) if t not in graph.inputs]
        if n.op is Op.DEPTHWISE_CONV_2D and options.inplace_depthwise and ins:
            # TinyEngine in-place DW: channel by channel through one padded channel buffer; needs C_out == C_in
            # and an output no larger than the input. Used only when it saves bytes (padded channel < output).
            pad = padded_channel_bytes(graph, n)
            fits = n.attrs.depth_multiplier == 1 and activation_bytes(graph, out) <= activation_bytes(graph, ins[0])
            if fits and pad < activation_bytes(graph, out):
                cands[n.name] = (ins[0],)
                scratch[n.name] = pad
        elif n.op is Op.ADD and options.inplace_add and ins:
            cands[n.name] = tuple(ins)
            scratch[n.name] = 0
    return cands, scratch


def find_aliases(graph: Graph, options: PlanOptions, pinned=frozenset()) -> Aliases:
    """Storage units of `graph`: see the module docstring. `pinned` tensors (a patch stage's, which the patch loop
    writes whole or as tiles) are never concat slices and never host slices.

    >>> from kilobyte.ir import GraphBuilder, Op, ReshapeAttrs
    >>> b = GraphBuilder()
    >>> x = b.node(Op.RELU, [b.input((1, 2, 2, 3))])
    >>> y = b.node(Op.RESHAPE, [x], ReshapeAttrs((1, 12)))
    >>> a = find_aliases(b.build([y]), PlanOptions())
    >>> a.root[y], a.size[x]
    ('relu_0', 12)
    """
    slices = _slices(graph, options, frozenset(pinned))
    reshapes = _reshapes(graph, options, slices)

    def root_of(t: str) -> str:
        while True:
            if t in slices:
                t = slices[t][0]
            elif t in reshapes:
                t = reshapes[t]
            else:
                return t

    root: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for n in graph.nodes:
        for t in n.outputs:
            r = root_of(t)
            root[t] = r
            members.setdefault(r, []).append(t)
    members = {r: sorted(ms, key=lambda t: t != r) for r, ms in members.items()}
    size = {r: activation_bytes(graph, r) for r in members}
    cands, scratch = _candidates(graph, options, slices)
    return Aliases(root, size, {r: tuple(m) for r, m in members.items()}, slices, reshapes, cands, scratch)


def slice_placement(aliases: Aliases, graph: Graph, tensor: str) -> tuple[int, int]:
    """(byte offset of element 0 from the unit root's first byte, channel stride) of `tensor` in its unit.

    Reshape aliases sit at their input's bytes, contiguous. A slice of a slice (nested concat) adds channel offsets
    and takes the outermost concat output's channel count as its stride.
    """
    offset = 0
    t = tensor
    while t in aliases.slice_of:
        t, channel = aliases.slice_of[t]
        offset += channel
    return offset, graph.tensors[t].shape[-1]
