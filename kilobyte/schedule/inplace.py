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

Fused conv + ADD (`fuse_add`; DESIGN.md: "a residual ADD ... may be fused into the projection conv"): a pointwise
CONV_2D (1x1, stride 1, no padding) whose output's only reader is an ADD, whose other input (the residual) is no graph
input, has the same shape and dtype, and is not what the conv reads, may run with the ADD as ONE step: the kernel
adds each output pixel to the residual pixel and writes it over it, so the conv's output takes no bytes and the ADD's
output takes the residual's. `find_aliases` lists these pairs (`Aliases.fusable`); whether a pair fuses depends on
the order (the ADD right after the conv, the residual dying at the ADD) and is decided in liveness.py / reorder.py.

Bytes: an int8 graph's tensors take their real itemsize (a float32 DEQUANTIZE -> SOFTMAX tail takes 4 B per element);
a float graph is planned as if it were int8, 1 B per element (the papers' count), see `planned_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..analysis.shapes import activation_inputs
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
    fusable: dict[str, FusedAdd] = field(default_factory=dict)  # pointwise conv node -> its ADD (module docstring)


@dataclass(frozen=True)
class FusedAdd:
    """A conv + ADD pair that may run as one step: the ADD node, the conv's output (never stored when fused) and the
    residual (the ADD's other input, whose bytes the ADD's output takes)."""

    add: str
    conv_out: str
    residual: str


def planned_bytes(graph: Graph, tensor: str) -> int:
    """Bytes the plan gives activation `tensor`: numel x itemsize in an int8 graph, numel in a float graph.

    >>> from kilobyte.ir import GraphBuilder, Op, QParams
    >>> b = GraphBuilder()
    >>> y = b.node(Op.DEQUANTIZE, [b.input((1, 10), "int8", qparams=QParams.per_tensor(0.1, 0))], dtype="float32")
    >>> g = b.build([y])
    >>> planned_bytes(g, y), planned_bytes(g, "input")
    (40, 10)
    """
    return graph.tensors[tensor].numel * element_bytes(graph, tensor)


def element_bytes(graph: Graph, tensor: str) -> int:
    """Bytes per element of `tensor` in the plan (see `planned_bytes`)."""
    if not any(graph.tensors[t].dtype == "int8" for t in graph.inputs):
        return 1  # a float graph is planned as int8
    return np.dtype(graph.tensors[tensor].dtype).itemsize


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
            fits = n.attrs.depth_multiplier == 1 and planned_bytes(graph, out) <= planned_bytes(graph, ins[0])
            if fits and pad < planned_bytes(graph, out):
                cands[n.name] = (ins[0],)
                scratch[n.name] = pad
        elif n.op is Op.ADD and options.inplace_add and ins:
            cands[n.name] = tuple(ins)
            scratch[n.name] = 0
    return cands, scratch


def is_pointwise_conv(graph: Graph, node: Node) -> bool:
    """A CONV_2D with a 1x1 kernel, stride 1 and no padding (what `kb_conv_1x1` / `kb_conv_1x1_add` run)."""
    return (node.op is Op.CONV_2D and graph.tensors[node.inputs[1]].shape[1:3] == (1, 1)
            and tuple(node.attrs.stride) == (1, 1) and tuple(node.attrs.padding) == (0, 0, 0, 0))


def _fusable(graph: Graph, options: PlanOptions, slices: dict, root: dict, pinned: frozenset) -> dict[str, FusedAdd]:
    """Pointwise convs that may run fused with the ADD reading their output (module docstring). Patch-stage convs
    (`pinned` outputs) are left unfused: the patch loop runs its nodes one by one."""
    if not options.fuse_add:
        return {}
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    pairs: dict[str, FusedAdd] = {}
    for n in graph.nodes:
        y = n.outputs[0]
        users = readers.get(y, [])
        if not is_pointwise_conv(graph, n) or len(users) != 1 or y in graph.outputs or y in pinned:
            continue
        add = users[0]
        others = [t for t in add.inputs if t != y]
        if add.op is not Op.ADD or len(add.inputs) != 2 or len(others) != 1 or add.outputs[0] in slices:
            continue
        r, x = others[0], graph.activation_inputs(n)[0]
        if r not in root or root.get(x, x) == root[r]:
            continue  # a graph input or constant residual is read-only; the conv must not read what it writes
        shapes = {(graph.tensors[t].shape, graph.tensors[t].dtype) for t in (y, r, add.outputs[0])}
        if len(shapes) == 1:
            pairs[n.name] = FusedAdd(add.name, y, r)
    return pairs


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
    size = {r: planned_bytes(graph, r) for r in members}
    cands, scratch = _candidates(graph, options, slices)
    fusable = _fusable(graph, options, slices, root, frozenset(pinned))
    return Aliases(root, size, {r: tuple(m) for r, m in members.items()}, slices, reshapes, cands, scratch, fusable)


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
