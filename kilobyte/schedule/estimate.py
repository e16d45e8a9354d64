"""Schedule stage: `estimate_resources` — what a graph costs (SRAM, Flash, MACs) without verifying or building C.

Architecture search asks this of hundreds of thousands of candidates, and must get exactly the compiler's numbers:
so it runs the planner's own steps (`plan.plan_steps`: storage, order, lifetimes, scratch, arena layout) and stops
before `assemble_plan` / `verify_plan` and code generation. Flash is what the linked Cortex-M firmware will hold:
the constant data the generated `model.c` holds (int8 weights, int32 biases — zeros when the graph has none —,
per-channel int32 multipliers and shifts; exact) plus `code_bytes`, everything else the firmware links — the runtime
functions the model calls, the generated layer code and parameter structs, and the firmware harness — from the table
measured on linked ELF files (`flash.py`, `code_size.py`; never below the measured Flash, within 3 % or 1 KB of it).
`tests/schedule/test_estimate.py` holds every figure equal to `make_plan` and the compiled project.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Op
from ..kernels import contract_for
from ..ops import opdef
from ..ops.sparse import INDEX_BYTES, encode
from ..transforms.fuse_activation import can_fuse
from .flash import code_bytes, generated_code
from .plan import PlanSteps, input_bytes, output_bytes, plan_macs, plan_steps
from .plan_types import DEFAULT_OPTIONS, PlanOptions

PER_CHANNEL_BYTES = 12  # a weighted layer's int32 bias, multiplier and shift per output channel


@dataclass(frozen=True)
class Resources:
    peak_bytes: int  # most tensor + scratch bytes live at one step (the plan's peak)
    arena_bytes: int  # the one static arena
    scratch_bytes: int  # largest scratch of any step (or patch tile)
    input_bytes: int  # caller-owned input
    weight_bytes: int  # constant arrays of model.c (exact)
    code_bytes: int  # the rest of the linked firmware's Flash, harness included (an upper bound: flash.py)
    macs: int  # incl. a patch stage's repeated MACs
    families: tuple[str, ...]  # runtime kernel families the generated C calls (sorted)
    functions: tuple[str, ...] = ()  # runtime functions the generated C calls (sorted; kernels.calls)
    output_bytes: int = 0  # the caller-owned output buffer(s): the firmware holds them beside the arena

    @property
    def flash_bytes(self) -> int:
        """Flash of the linked firmware (weights + code_bytes): what the fit verdict compares with the device's."""
        return self.weight_bytes + self.code_bytes


def constant_bytes(graph: Graph) -> int:
    """Bytes of the constant arrays the generated C holds for `graph` (an int8 graph): per weighted layer its int8
    weights, one int32 bias per output channel (zeros if the layer has none), and an int32 multiplier and shift; per
    int8 unary op (LOGISTIC, HARD_SWISH, LEAKY_RELU, GELU, RELU, RELU6) its 256-byte table; per constant operand of
    ADD / SUB / MUL one int32 term per value it has (never broadcast); per constant operand of MAXIMUM / MINIMUM its
    int8 values (one per channel for a per-channel or single-value constant); per resize its int16 table of source
    rows and columns."""
    total = 0
    for node in graph.nodes:
        out_shape = graph.tensors[node.outputs[0]].shape
        d = opdef(node.op)
        if d.table_bytes is not None:  # the op's own constant arrays (tables, terms, constant operands)
            total += d.table_bytes(graph, node)
        elif d.linear:
            total += _weight_array_bytes(graph, node) + PER_CHANNEL_BYTES * out_shape[-1]
    return total


def _weight_array_bytes(graph: Graph, node) -> int:
    """Bytes of a weighted layer's weight arrays in model.c: its int8 values, or with a sparse format (FWCS, CSR)
    the format's arrays (`ops/sparse.py`; each at least one element, as `c_array` writes an empty one). Only where
    the weights are zero matters, so a float graph (a search candidate) is counted by its zeros."""
    w = graph.tensors[node.inputs[1]]
    fmt = getattr(node.attrs, "weight_format", "dense")
    if fmt == "dense":
        return w.numel
    enc = encode((w.data != 0).astype(np.int8) if w.dtype != "int8" else w.data, fmt, f"node '{node.name}'")
    index = enc.cptr if fmt == "fwcs" else enc.idx
    return max(enc.arr.size, 1) + INDEX_BYTES * (max(index.size, 1) + enc.fidx.size)


def kernel_families(graph: Graph, steps) -> tuple[str, ...]:
    """The runtime families the generated C calls for this plan (contract families; a fused conv + ADD calls
    `conv_add`; a concat whose inputs are all written into their slices, and a RESHAPE, call nothing). In a float
    graph a RELU / RELU6 the inference transforms would fuse into its producer counts for nothing."""
    stage = steps.draft.stage
    in_stage = set(stage.nodes) if stage else set()
    fused_adds = set(steps.life.fused.values())
    families = set()
    for node in graph.nodes:
        name = node.name
        if name in steps.life.fused:
            families.add("conv_add")
        elif name in fused_adds or node.op is Op.RESHAPE:
            continue
        elif node.op is Op.CONCAT and name not in in_stage:
            if any(t not in steps.storage.slice_of for t in node.inputs):
                families.add("concat")
        elif node.op in (Op.RELU, Op.RELU6) and graph.tensors[node.inputs[0]].dtype != "int8" \
                and can_fuse(graph, node):
            pass  # fused before compiling: no kb_lut
        elif contract_for(node).family:
            families.add(contract_for(node).family)
        if name in in_stage and node.outputs[0] in stage.outputs and name in stage.tile_offsets:
            families.add("concat")  # a stage output also read inside the stage: copied out of its tile
    return tuple(sorted(families))


def estimate_resources(graph: Graph, options: PlanOptions = DEFAULT_OPTIONS, *, core: str | None = None) -> Resources:
    """SRAM, Flash and MACs of `graph` planned with `options`: `make_plan`'s and the compiled project's figures.
    Flash is the linked firmware's for `core` ("cortex-m4", ...; None: the largest of the calibrated cores).

    >>> import numpy as np
    >>> from kilobyte.ir import ConvAttrs, GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 8, 8, 4))], ConvAttrs(padding=(1, 1, 1, 1)),
    ...            params={"weight": np.zeros((16, 3, 3, 4))})
    >>> r = estimate_resources(b.build([b.node(Op.RELU, [y])]))
    >>> r.peak_bytes, r.arena_bytes, r.macs, r.families
    (2048, 2048, 36864, ('conv',))
    """
    return steps_resources(graph, plan_steps(graph, options), core)


def steps_resources(graph: Graph, steps: PlanSteps, core: str | None = None) -> Resources:
    """The `Resources` of planner steps already run (`plan.plan_steps`): what `estimate_resources` returns for them."""
    code = generated_code(graph, steps)
    return Resources(
        peak_bytes=steps.layout.peak, arena_bytes=steps.layout.arena.arena_bytes, scratch_bytes=steps.scratch_bytes,
        input_bytes=input_bytes(graph),
        weight_bytes=constant_bytes(graph), code_bytes=code_bytes(code, steps.options.kernels, core),
        macs=plan_macs(graph, steps.draft.stage)[0], families=kernel_families(graph, steps),
        functions=tuple(sorted(code.functions)), output_bytes=output_bytes(graph))
