"""Codegen stage: the MCUNetV2 patch stage as a generated loop over patches — data tables plus kernel calls.

The first `plan.patch.n_nodes` nodes run once per spatial patch (`kilobyte.schedule.patch`). Everything that differs
between patches — tile sizes, zero-point padding at image borders, input/output byte offsets and row pitches — is
computed here and emitted as const tables indexed by the patch: per node a `kb_pp_<node>[P]` of kernel parameters
and a `kb_po_<node>[P][...]` of byte offsets. `kb_patch_stage` then loops `for (p = 0; p < P; ++p)` and calls the
kernels in stage order. It mirrors the plan executor (`kilobyte.schedule.execute._PatchRun`) rule for rule:
  - a tile reads the caller's `input` (the whole image, row pitch = image width) or its producer's tile buffer at
    `tile_offsets` (its input box is a sub-box of the producer's tile: a pointer offset, row pitch = that tile's width);
  - it writes its own tile buffer, or — a stage output without one — its patch box of the whole stage-output tensor
    at its placement (row pitch = full width); a stage output that also has a tile buffer is copied out of it;
  - a depthwise conv whose tile buffer is its input's runs in place through `tile_scratch`; an ADD sharing its
    input's buffer overwrites it (same box); ADD and CONCAT run one call per tile row (their kernels have no pitch).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import KilobyteError, UnsupportedOpError
from ..interp.int8_ref import activation_range_of, add_node_params, requant_params
from ..ir import Graph, Node, Op
from ..schedule.patch import box_area, split
from .c_text import c_ident
from .layers import Buffers, LayerCode, _weights, window_params

INPLACE_DW = {(3, 3): "kb_depthwise_inplace_3x3", (5, 5): "kb_depthwise_inplace_5x5",
              (7, 7): "kb_depthwise_inplace_7x7"}


@dataclass(frozen=True)
class At:
    """Where one patch reads or writes a box: `base + offset` (bytes) is its first pixel; rows are `row` pixels
    apart and pixels `cstride` bytes apart."""

    base: str  # "input" (caller-owned image) or "KB_ARENA"
    offset: int
    row: int
    cstride: int

    @property
    def pitch(self) -> int:
        """Bytes from one row of the box to the next."""
        return self.row * self.cstride


class StageGeometry:
    """Generation-time view of the patch stage: for every patch, where each node's tile reads and writes."""

    def __init__(self, graph: Graph, plan, bufs: Buffers):
        self.graph, self.stage, self.bufs = graph, plan.patch, bufs
        self.nodes = [graph.node(n) for n in self.stage.nodes]
        self.step_of = {n.outputs[0]: k for k, n in enumerate(self.nodes)}
        _, h, w, _ = graph.tensors[self.stage.outputs[0]].shape
        grid = self.stage.grid
        self.boxes = [(y0, y1, x0, x1) for y0, y1 in split(h, grid) for x0, x1 in split(w, grid)]
        if len(self.stage.tiles) != len(self.boxes):
            raise KilobyteError(f"patch stage: {len(self.stage.tiles)} patches for a {grid}x{grid} grid")

    def tile(self, p: int, k: int):
        return self.stage.tiles[p][k]

    def channels(self, t: str) -> int:
        return self.graph.tensors[t].shape[3]

    def source(self, t: str, p: int, box) -> At:
        """Where patch `p` reads `box` (tensor coordinates) of input tensor `t`."""
        if t in self.graph.inputs:
            _, _, w, c = self.graph.tensors[t].shape
            return At("input", (box[0] * w + box[2]) * c if box_area(box) else 0, w, c)
        if t not in self.step_of or self.nodes[self.step_of[t]].name not in self.stage.tile_offsets:
            raise KilobyteError(f"patch stage: '{t}' is read inside the stage but has no tile buffer")
        name, c = self.nodes[self.step_of[t]].name, self.channels(t)
        oy0, oy1, ox0, ox1 = self.tile(p, self.step_of[t]).out_box
        base = self.stage.tile_offsets[name]
        if box_area(box) == 0:  # a window lying wholly in the padding reads nothing
            return At("KB_ARENA", base, max(ox1 - ox0, 0), c)
        if not (oy0 <= box[0] <= box[1] <= oy1 and ox0 <= box[2] <= box[3] <= ox1):
            raise KilobyteError(f"patch stage: box {box} of '{t}' reaches outside its tile {(oy0, oy1, ox0, ox1)}")
        return At("KB_ARENA", base + ((box[0] - oy0) * (ox1 - ox0) + box[2] - ox0) * c, ox1 - ox0, c)

    def target(self, p: int, k: int) -> At:
        """Where patch `p` writes node k's tile: its tile buffer, or its box of the whole stage-output tensor."""
        node, tile = self.nodes[k], self.tile(p, k)
        out = node.outputs[0]
        if node.name in self.stage.tile_offsets:
            width = tile.out_box[3] - tile.out_box[2]
            return At("KB_ARENA", self.stage.tile_offsets[node.name], max(width, 0), self.channels(out))
        if tile.out_box != self.boxes[p]:
            raise KilobyteError(f"patch stage: tile {tile.out_box} of '{node.name}' is not its patch {self.boxes[p]}")
        return self.whole(out, tile.out_box)

    def whole(self, t: str, box) -> At:
        """`box` of stage-output tensor `t`, kept whole at its placement."""
        place = self.bufs.plan.placements[t]
        w, cs = self.graph.tensors[t].shape[2], place.channel_stride
        return At("KB_ARENA", place.offset + (box[0] * w + box[2]) * cs, w, cs)

    def in_place(self, k: int) -> bool:
        """Node k overwrites its input's tile buffer (the executor's rule: both tiles at one offset)."""
        node, offsets = self.nodes[k], self.stage.tile_offsets
        hosts = [self.nodes[self.step_of[t]].name for t in self.graph.activation_inputs(node) if t in self.step_of]
        return node.name in offsets and any(offsets.get(h) == offsets[node.name] for h in hosts)


class Columns:
    """One node's per-patch offset table: named int32 columns, one row per patch."""

    def __init__(self, var: str):
        self.var, self.names, self.rows = var, [], []

    def add(self, p: int, **values: int) -> None:
        if p == len(self.rows):
            self.rows.append([])
        for name, v in values.items():
            if p == 0:
                self.names.append(name)
            self.rows[p].append(int(v))

    def __getitem__(self, name: str) -> str:
        return f"io[{self.names.index(name)}]"

    def decl(self) -> str:
        lines = [f"/* per patch: {{{', '.join(self.names)}}} (bytes) */",
                 f"static const int32_t {self.var}[{len(self.rows)}][{len(self.names)}] = {{"]
        lines += [f"    {{{', '.join(map(str, row))}}},  /* patch {p} */" for p, row in enumerate(self.rows)]
        return "\n".join(lines + ["};"])

    def pointer(self, base: str, column: str, extra: int = 0, row: str | None = None) -> str:
        plus = f" + {extra}" if extra else ""
        per_row = f" + r * {self[row]}" if row else ""
        return f"{base} + {self[column]}{plus}{per_row}"


def param_table(ctype: str, var: str, rows: list[dict[str, int]]) -> str:
    """A const array of parameter structs, one designated initialiser per patch."""
    lines = [f"static const {ctype} {var}[{len(rows)}] = {{"]
    for p, fields in enumerate(rows):
        body = ", ".join(f".{k} = {int(v)}" for k, v in fields.items())
        lines.append(f"    {{{body}}},  /* patch {p} */")
    return "\n".join(lines + ["};"])


def block(comment: str, io: Columns | None, statements: list[str]) -> str:
    """A `{ ... }` statement block for one node inside the patch loop."""
    head = [f"{{   /* {comment} */"]
    if io is not None:
        head.append(f"    const int32_t *io = {io.var}[p];")
    return "\n".join(head + ["    " + line for s in statements for line in s.split("\n")] + ["}"])


def row_loop(rows: str, call: str) -> str:
    return f"for (int32_t r = 0; r < {rows}; ++r) {{\n    {call}\n}}"
