"""Schedule stage: the Flash model — what a planned graph's linked Cortex-M firmware holds besides its weights.

`estimate_resources` gives Flash = the constant arrays of model.c (`estimate.constant_bytes`, exact) + `code_bytes`
here, which adds up, from the measured table in `code_size.py` (written by `bench/calibrate_flash.py`):

    firmware base     the harness every build links (vectors, startup, semihosting, main, newlib's memcpy / memset /
                      strlen, their strings), kb_invoke's own bytes, and the alignment allowance
    runtime code      the union of the linked closures of the runtime functions the model calls (a 1x1 DSP conv
                      links 14 KB, a general one 18 KB: the family alone does not say)
    per layer         each kb_layer_* function of model.c, measured per kind, with its call in kb_invoke
    patch stage       kb_patch_stage: a fixed part plus a part per stage node
    data              the static parameter structs (their ctypes mirrors' sizes), the per-patch tables, and the
                      most alignment padding the constant arrays can take (an array aligned to A bytes: A - 1
                      bytes before it)

All per core (`cortex-m4`, `cortex-m7`, `cortex-m55`) and, for the runtime, per kernel set. Every part is meant as an
upper bound of what it measures: the runtime code exactly (each function or table rounded up to its 4-byte
alignment), the data exactly plus the most padding, the layer and patch-loop code as the largest the calibration saw
(an empirical bound: GCC's code for a layer varies by a few literals). `tests/targets/test_flash_estimate.py` holds
the estimate at or above the linked firmware and within 3 % (or 1 KB) of it on models the calibration never saw.
With no core given, or one the table lacks (cortex-m0plus: no firmware target), the largest of the cores is used.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from ..ir import Graph, Node, Op
from ..kernels import contract_for, is_sparse
from ..kernels.calls import ENTRY_POINTS, node_function
from ..kernels.contracts import node_struct
from ..ops import opdef
from ..ops.binary import constant_operand
from ..ops.movement import movement_calls
from ..runtime import STRUCTS
from . import code_size
from .inplace import slice_placement

# Padding the linker may put before each constant array: alignment - 1 (w and b are aligned(16), the rest 4).
WEIGHTED_PAD = 15 + 15 + 3 + 3
STRUCT_PAD = 3
STAGE_STRUCTS = {"conv": "kb_conv_params", "depthwise": "kb_conv_params", "pool": "kb_conv_params",
                 "pad": "kb_pad_params", "add": "kb_add_params"}
STAGE_COLUMNS = {"conv": 2, "depthwise": 2, "pool": 2, "pad": 2, "add": 7}  # kb_po_* int32 columns per patch
COPY_COLUMNS = 6  # a stage output copied out of its tile: its source, destination, pitches, rows and pixels


@dataclass(frozen=True)
class GeneratedCode:
    """What the generated C of a plan calls and holds, as the Flash model counts it."""

    functions: frozenset[str]  # runtime functions called (`kernels.calls`)
    layers: tuple[str, ...]  # the kind of each kb_layer_* function (a concat: one per channel copy)
    stage: tuple[str, ...]  # the kind of each block of the patch loop (plus "copy" per stage output copied out)
    data_bytes: int  # parameter structs, per-patch tables, alignment allowance of every constant array
    outputs: int  # outputs kb_invoke copies out


@functools.cache
def struct_bytes(name: str) -> int:
    """Bytes of the runtime's parameter struct `name` on Cortex-M: its ctypes mirror (`runtime.STRUCTS`; int32
    fields only, so the host's layout is the target's)."""
    return ctypes.sizeof(STRUCTS[name])


def _round4(n: int) -> int:
    return (n + 3) // 4 * 4


def layer_kind(graph: Graph, node: Node) -> str | None:
    """The per-layer kind of a node that gets a kb_layer_* function of its own (its contract family), None when
    it generates no code. In a float graph (a search candidate) a RELU / RELU6 is fused into its producer, as
    `quantize()` does; a MEAN stays a MEAN (kb_mean)."""
    int8 = graph.tensors[node.inputs[0]].dtype in ("int8", "uint8")
    if node.op in (Op.RELU, Op.RELU6) and not int8:
        return None
    if is_sparse(node):
        return "sparse_conv"
    return contract_for(node).family


def _struct_bytes(graph: Graph, node: Node) -> int:
    """Bytes of `node`'s static parameter struct + its padding."""
    struct = node_struct(graph, node)
    return struct_bytes(struct) + STRUCT_PAD if struct else 0


def per_layer_code(graph: Graph, steps) -> tuple[list[tuple[str, str]], set[str], int]:
    """(layers, runtime functions, struct bytes) of the per-layer part of a plan (after any patch stage): one
    (node, kind) per kb_layer_* function — a concat once per channel copy, a RESHAPE only when it copies."""
    stage = steps.draft.stage
    fused = steps.life.fused
    skip = (set(stage.nodes) if stage else set()) | set(fused.values())
    layers, functions, data = [], set(), 0
    for name in steps.life.order:
        if name in skip:
            continue
        node = graph.node(name)
        if name in fused:
            layers.append((name, "conv_add"))
            functions.add("kb_conv_1x1_add")
            data += _struct_bytes(graph, node) + _struct_bytes(graph, graph.node(fused[name]))
        elif node.op is Op.RESHAPE:
            if node.outputs[0] not in steps.storage.reshape_of:  # not an alias: one copy
                layers.append((name, "reshape"))
                functions.add("memmove")
        elif node.op is Op.CONCAT:
            copies = [t for t in node.inputs if t not in steps.storage.slice_of]
            layers += [(name, "concat")] * len(copies)
            functions |= {"kb_copy_channels"} if copies else set()
        else:
            kind = layer_kind(graph, node)
            function = node_function(graph, node, name in steps.life.inplace) if kind else None
            if function is not None:
                layers.append((name, kind))
                functions.add(function)
                calls = 1
                if kind == "movement":  # a struct per call (ops/movement.py)
                    strides = tuple(slice_placement(steps.storage, graph, t)[1] for t in (node.inputs[0],
                                                                                          node.outputs[0]))
                    calls = movement_calls(graph, node, strides)
                data += calls * _struct_bytes(graph, node)
    return layers, functions, data


def stage_code(graph: Graph, stage) -> tuple[list[str], set[str], int]:
    """(block kinds, runtime functions, table bytes) of a patch stage (codegen/patch_loop.py's loop)."""
    if stage is None:
        return [], set(), 0
    patches = len(stage.tiles)
    step_of = {graph.node(n).outputs[0]: n for n in stage.nodes}
    offsets = stage.tile_offsets
    kinds, functions, data = [], set(), 0
    for name in stage.nodes:
        node = graph.node(name)
        kind = contract_for(node).family
        columns = STAGE_COLUMNS.get(kind, 4 + 2 * len(node.inputs))  # a concat: source + pitch per input
        if kind in STAGE_STRUCTS:
            data += patches * struct_bytes(STAGE_STRUCTS[kind]) + STRUCT_PAD
        hosts = [step_of[t] for t in node.inputs if t in step_of]
        in_place = name in offsets and any(offsets.get(h) == offsets[name] for h in hosts)
        kinds += [kind] * (len(node.inputs) if kind == "concat" else 1)
        functions.add(node_function(graph, node, in_place))
        if node.outputs[0] in stage.outputs and name in offsets:
            kinds.append("copy")
            functions.add("kb_copy_channels")
            columns += COPY_COLUMNS
        data += patches * columns * 4 + STRUCT_PAD
    return kinds, functions, data


def constant_allowance(graph: Graph) -> int:
    """The most padding the linker can put before model.c's weight arrays, lookup tables and constant terms."""
    weighted = sum(1 for n in graph.nodes if opdef(n.op).linear)
    tables = sum(1 for n in graph.nodes  # lookup tables: family lut (the unary ops, PRELU)
                 if opdef(n.op).contract.family == "lut" and graph.tensors[n.inputs[0]].dtype == "int8")
    terms = sum(1 for n in graph.nodes if constant_operand(graph, n) is not None)
    return weighted * WEIGHTED_PAD + (tables + terms) * STRUCT_PAD


def generated_code(graph: Graph, steps) -> GeneratedCode:
    """The `GeneratedCode` of `graph` planned as `steps` (`plan.plan_steps`)."""
    layers, functions, data = per_layer_code(graph, steps)
    blocks, stage_functions, tables = stage_code(graph, steps.draft.stage)
    return GeneratedCode(frozenset(functions | stage_functions), tuple(kind for _, kind in layers), tuple(blocks),
                         data + tables + constant_allowance(graph), len(graph.outputs))


def _linked_bytes(functions: frozenset[str], symbols: dict[str, int], closures: dict[str, tuple[str, ...]]) -> int:
    linked = set().union(*(closures[f] for f in functions)) if functions else set()
    return sum(_round4(symbols[key]) for key in linked)


@functools.lru_cache(maxsize=4096)
def _table_runtime_bytes(functions: frozenset[str], core: str, kernels: str) -> int:
    return _linked_bytes(functions, code_size.RUNTIME_SYMBOLS[(core, kernels)],
                         code_size.RUNTIME_CLOSURES[(core, kernels)])


def runtime_bytes(functions: frozenset[str], core: str, kernels: str, table=code_size) -> int:
    """Bytes of the runtime code `functions` link on `core` with kernel set `kernels`: the union of their closures,
    each function or table rounded up to 4 bytes. `table`: `code_size` or a namespace with its names."""
    if table is code_size:
        return _table_runtime_bytes(frozenset(functions), core, kernels)
    return _linked_bytes(frozenset(functions), table.RUNTIME_SYMBOLS[(core, kernels)],
                         table.RUNTIME_CLOSURES[(core, kernels)])


def core_code_bytes(code: GeneratedCode, kernels: str, core: str, table=code_size) -> int:
    """Flash bytes beyond the weights of a firmware linking `code` for one calibrated `core`."""
    layer, stage = table.LAYER_BYTES[core], table.STAGE_BYTES[core]
    first, per_output = table.INVOKE_BYTES[core]  # kb_invoke with one output, and per further output
    total = table.BASE_BYTES[core] + first + per_output * (code.outputs - 1) + code.data_bytes
    total += runtime_bytes(code.functions, core, kernels, table)
    total += sum(layer[kind] for kind in code.layers)
    if code.stage:
        total += stage["loop"] + sum(stage[kind] for kind in code.stage)
    return total


def code_bytes(code: GeneratedCode, kernels: str = "portable", core: str | None = None) -> int:
    """Flash bytes beyond the weights of the linked firmware: `core`'s figure, or the largest of the calibrated
    cores when `core` is None or not calibrated (`code_size.CORES`)."""
    if core in code_size.CORES:
        return core_code_bytes(code, kernels, core)
    return max(core_code_bytes(code, kernels, c) for c in _cores(kernels))


def code_lower_bound(families: tuple[str, ...], kernels: str = "portable", core: str | None = None) -> int:
    """The fewest bytes `code_bytes` can give a plan that calls at least one function of each of `families`: the
    base, kb_invoke with one output, and the code that every function of each family links (a true lower bound:
    no layer, struct or patch stage counted). `core` as in `code_bytes`."""
    cores = (core,) if core in code_size.CORES else _cores(kernels)
    return max(_core_lower_bound(tuple(sorted(families)), kernels, c) for c in cores)


def _cores(kernels: str) -> tuple[str, ...]:
    """The calibrated cores that build kernel set `kernels` (mve: the Helium ones)."""
    return tuple(c for c in code_size.CORES if (c, kernels) in code_size.RUNTIME_SYMBOLS)


@functools.lru_cache(maxsize=256)
def _core_lower_bound(families: tuple[str, ...], kernels: str, core: str) -> int:
    symbols = code_size.RUNTIME_SYMBOLS[(core, kernels)]
    closures = code_size.RUNTIME_CLOSURES[(core, kernels)]
    shared = set()
    for family in families:
        shared |= set.intersection(*(set(closures[f]) for f in ENTRY_POINTS[family]))
    return code_size.BASE_BYTES[core] + code_size.INVOKE_BYTES[core][0] + sum(_round4(symbols[k]) for k in shared)
