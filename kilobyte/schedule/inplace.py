"""Schedule stage: the static part of the in-place rules — which tensors share storage whatever the order.

A *storage unit* is a set of activation tensors that live in the same bytes for their whole lives:
- a RESHAPE output and its input (`alias_reshape`), unless the input is a caller-owned graph input;
- CONCAT (last axis) inputs written straight into their slice of the output (`concat_in_place`): allowed when the
  input is consumed only by that concat (once), is neither a graph input nor a graph output, and is not produced by a
  RESHAPE (a reshape output must stay at its input's bytes, contiguous). Nested concats nest slices.
Each unit has a *root* (the tensor that owns the bytes: neither an alias nor a slice) and occupies `size(root)` bytes
from the first time any member is produced until every member is dead.

Which op may overwrite which input, and the scratch it then reads, is its kernel contract's in-place rule
(`kilobyte.kernels`); `find_aliases` turns the rules into per-node candidates. The dynamic part — a depthwise conv or
ADD overwriting an input whose unit dies at that very step — depends on the order and is decided here too
(`decide_inplace`, for one order; reorder.py's DP applies the same rule incrementally). It never applies when the
node's output is itself a slice: the concat slice wins because the slice has the output's channel stride, not the
input's.

Fused conv + ADD (`fuse_add`; DESIGN.md: "a residual ADD ... may be fused into the projection conv"): a pointwise
CONV_2D (1x1, stride 1, no padding) whose output's only reader is an ADD, whose other input (the residual) is no graph
input, has the same shape and dtype, and is not what the conv reads, may run with the ADD as ONE step: the kernel
adds each output pixel to the residual pixel and writes it over it, so the conv's output takes no bytes and the ADD's
output takes the residual's. `find_aliases` lists these pairs (`Aliases.fusable`); whether a pair fuses depends on
the order (the ADD right after the conv, the residual dying at the ADD) and is decided by `decide_inplace` (and
incrementally in reorder.py).

Bytes: an int8 graph's tensors take their real itemsize (a float32 DEQUANTIZE -> SOFTMAX tail takes 4 B per element);
a float graph is planned as if it were int8, 1 B per element (the papers' count), see `planned_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..analysis.shapes import activation_inputs
from ..ir import Graph, Node, Op
from ..kernels import inplace_rule, padded_channel_bytes
from .plan_types import PlanOptions


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
    if not _is_quantised(graph):
        return 1  # a float graph is planned as int8
    return np.dtype(graph.tensors[tensor].dtype).itemsize


def _is_quantised(graph: Graph) -> bool:
    """An int8 graph (its input int8, or uint8 before a QUANTIZE), as opposed to a float graph planned as int8."""
    return any(graph.tensors[t].dtype in ("int8", "uint8") for t in graph.inputs)


def is_last_axis_concat(graph: Graph, node: Node) -> bool:
    rank = len(graph.tensors[node.outputs[0]].shape)
    return node.op is Op.CONCAT and node.attrs.axis % rank == rank - 1


def _slices(graph: Graph, options: PlanOptions, pinned: frozenset) -> dict[str, tuple[str, int]]:
    """Concat inputs that are written into their slice of the concat output: input -> (output, channel offset)."""
    if not options.concat_in_place:
        return {}
    out: dict[str, tuple[str, int]] = {}
    for n in graph.nodes:
        if not is_last_axis_concat(graph, n) or n.outputs[0] in pinned:
            continue
        channel = 0
        for t in n.inputs:
            prod = graph.producer(t)
            ok = (prod is not None and prod.op is not Op.RESHAPE and t not in graph.outputs and t not in pinned
                  and len(graph.consumers(t)) == 1 and n.inputs.count(t) == 1)
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
    """Inputs each node may overwrite (its contract's in-place rule), and the scratch it then reads. Graph inputs are
    read-only; an output written into a concat slice is never in place."""
    cands: dict[str, tuple[str, ...]] = {}
    scratch: dict[str, int] = {}
    for n in graph.nodes:
        rule = inplace_rule(graph, n, options)
        ins = [t for t in activation_inputs(graph, n) if t not in graph.inputs]
        if rule is None or not ins or n.outputs[0] in slices:
            continue
        if rule.elementwise:  # ADD: element i over element i of any dying input of the output's shape (not one
            out_shape = graph.tensors[n.outputs[0]].shape  # it broadcasts: a constant is never an activation input)
            ins = [t for t in ins if graph.tensors[t].shape == out_shape]
            if ins:
                cands[n.name], scratch[n.name] = tuple(ins if rule.inputs == "any" else ins[:1]), 0
            continue
        # channel by channel through one padded channel (TinyEngine in-place DW): the output no larger than the
        # input, and used only when it saves bytes (padded channel < output)
        pad, out = padded_channel_bytes(graph, n), planned_bytes(graph, n.outputs[0])
        if out <= planned_bytes(graph, ins[0]) and pad < out:
            cands[n.name], scratch[n.name] = (ins[0],), pad
    return cands, scratch


def is_pointwise_conv(graph: Graph, node: Node) -> bool:
    """A CONV_2D with a 1x1 kernel, stride 1 and no padding (what `kb_conv_1x1` / `kb_conv_1x1_add` run)."""
    return (node.op is Op.CONV_2D and node.attrs.weight_format == "dense"
            and graph.tensors[node.inputs[1]].shape[1:3] == (1, 1)
            and tuple(node.attrs.stride) == (1, 1) and tuple(node.attrs.padding) == (0, 0, 0, 0))


def _fusable(graph: Graph, options: PlanOptions, slices: dict, root: dict, pinned: frozenset) -> dict[str, FusedAdd]:
    """Pointwise convs that may run fused with the ADD reading their output (module docstring). Patch-stage convs
    (`pinned` outputs) are left unfused: the patch loop runs its nodes one by one."""
    if not options.fuse_add:
        return {}
    pairs: dict[str, FusedAdd] = {}
    for n in graph.nodes:
        y = n.outputs[0]
        users = graph.consumers(y)
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


# -- the dynamic part: in-place, fusion and consumed inputs under one order -------------------------------------
@dataclass(frozen=True)
class InPlaceChoice:
    """What runs in place under one order: node -> the input it overwrites, unit root -> group, the fused pairs
    (conv -> ADD), and the bytes counted twice at each step (input and output sharing them)."""

    inplace: dict[str, str]
    group: dict[str, str]
    fused: dict[str, str]
    overlap: tuple[int, ...]


def unit_lifetimes(graph: Graph, order, aliases: Aliases) -> tuple[dict[str, int], dict[str, int]]:
    """First and last step of every storage unit under `order`."""
    pos = {name: i for i, name in enumerate(order)}
    last_step = len(order) - 1
    outs = set(graph.outputs)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for n in graph.nodes:
        i = pos[n.name]
        for t in n.outputs:
            r = aliases.root[t]
            first[r] = min(first.get(r, i), i)
            last[r] = last_step if t in outs else max(last.get(r, i), i)
        for t in n.inputs:
            r = aliases.root.get(t)  # constants and graph inputs have no unit
            if r is not None:
                last[r] = max(last.get(r, i), i)
    return first, last


def output_units(graph: Graph, aliases: Aliases) -> set[str]:
    return {aliases.root[t] for t in graph.outputs if t in aliases.root}


def choose_inplace(node: str, step: int, aliases: Aliases, last: dict[str, int], outs: set[str]) -> str | None:
    """The input `node` overwrites at `step`: the first candidate whose unit dies there (never a graph output)."""
    for c in aliases.candidates.get(node, ()):
        r = aliases.root[c]
        if last[r] == step and r not in outs:
            return c
    return None


def fused_pairs(order, aliases: Aliases, last: dict[str, int], outs: set[str], start: int = 0) -> dict[str, str]:
    """conv -> ADD for the fusable pairs (`aliases.fusable`) that run as one step under `order`: the ADD right after
    the conv, at or after step `start` (the end of a patch stage), the residual's unit dying at the ADD."""
    pos = {name: i for i, name in enumerate(order)}
    fused: dict[str, str] = {}
    for conv, pair in aliases.fusable.items():
        i, r = pos[conv], aliases.root[pair.residual]
        if i >= start and pos[pair.add] == i + 1 and last.get(r) == i + 1 and r not in outs:
            fused[conv] = pair.add
    return fused


def decide_inplace(graph: Graph, order, aliases: Aliases, first: dict, last: dict, outs: set[str],
                   start: int = 0) -> InPlaceChoice:
    """The in-place and fusion decisions for `order` after step `start` (a patch stage runs its own). Fused convs'
    output units are removed from `first`/`last` (never stored)."""
    fused = fused_pairs(order, aliases, last, outs, start)
    for conv in fused:
        y = aliases.root[aliases.fusable[conv].conv_out]
        del first[y], last[y]
    fused_adds = {add: aliases.fusable[conv].residual for conv, add in fused.items()}
    nodes = {n.name: n for n in graph.nodes}
    inplace: dict[str, str] = {}
    group = {r: r for r in first}
    overlap = [0] * len(order)
    for i, name in enumerate(order[start:], start=start):
        c = fused_adds.get(name) or choose_inplace(name, i, aliases, last, outs)
        if c is not None:
            inplace[name] = c
            src, dst = aliases.root[c], aliases.root[nodes[name].outputs[0]]
            group[dst] = group[src]
            overlap[i] = min(aliases.size[src], aliases.size[dst])
    return InPlaceChoice(inplace, group, fused, tuple(overlap))


def consumed_inputs(graph: Graph, order, aliases: Aliases, last: dict[str, int], outs: set[str],
                    start: int) -> dict[str, str]:
    """CONV_2D node -> its activation input, for the convs (fused with an ADD or not) at or after step `start` whose
    input unit dies at their step (no graph input or output): nothing reads those bytes after the conv, so its kernel
    may overwrite the input rows it has finished reading (the DSP kernels keep im2col columns there)."""
    nodes = {n.name: n for n in graph.nodes}
    consumed: dict[str, str] = {}
    for i, name in enumerate(order[start:], start=start):
        node = nodes[name]
        if node.op is not Op.CONV_2D:
            continue
        r = aliases.root.get(node.inputs[0])
        if r is not None and last[r] == i and r not in outs:
            consumed[name] = node.inputs[0]
    return consumed
