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
from ..ir import Graph
from ..ops import opdef
from ..ops.layer_code import Buffers, LayerCode
from ..schedule.patch import box_area, split


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
        self.options = plan.options  # the kernel set the tiles' calls are planned for
        self.nodes = [graph.node(n) for n in self.stage.nodes]
        self.step_of = {n.outputs[0]: k for k, n in enumerate(self.nodes)}
        _, h, w, _ = graph.tensors[self.stage.outputs[0]].shape
        grid = self.stage.grid
        self.boxes = [(y0, y1, x0, x1) for y0, y1 in split(h, grid) for x0, x1 in split(w, grid)]
        if len(self.stage.tiles) != len(self.boxes):
            raise KilobyteError(f"patch stage: {len(self.stage.tiles)} patches for a {grid}x{grid} grid")

    def tile(self, p: int, k: int):
        """Node k's `Tile` in patch p."""
        return self.stage.tiles[p][k]

    def channels(self, t: str) -> int:
        """Channels of tensor `t` (NHWC)."""
        return self.graph.tensors[t].shape[3]

    def base(self, t: str) -> str:
        """The C pointer tensor `t`'s tiles are read from: the caller's image or the arena."""
        return "input" if t in self.graph.inputs else "KB_ARENA"

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


def emit_patch_stage(graph: Graph, plan, bufs: Buffers) -> LayerCode:
    """The patch stage of `plan` as per-patch tables (`code.decls`) and one loop over patches (`code.body`)."""
    stage = plan.patch
    if tuple(plan.order[:stage.n_nodes]) != tuple(stage.nodes):
        raise KilobyteError("patch stage: its nodes must be the first n_nodes of the plan's order")
    g = StageGeometry(graph, plan, bufs)
    code = LayerCode()
    blocks = []
    for k, node in enumerate(g.nodes):
        emit = opdef(node.op).emit_tile
        if emit is None:
            raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): no C kernel for a patch-stage tile; "
                                     f"end the patch stage before it (--patch N,P with a smaller N)")
        blocks.append(emit(g, k, code))
    n = len(g.boxes)
    loop = "\n".join([f"for (int32_t p = 0; p < {n}; ++p) {{  /* {stage.grid}x{stage.grid} patches, row-major */",
                      *("    " + line for b in blocks for line in b.split("\n")), "}"])
    head = (f"/* MCUNetV2 patch stage: {stage.n_nodes} nodes tile by tile; working region "
            f"[{stage.working_offset}, {stage.working_offset + stage.working_bytes}) of the arena; stage outputs "
            f"{', '.join(stage.outputs)} kept whole */")
    code.body = [head, loop]
    return code
