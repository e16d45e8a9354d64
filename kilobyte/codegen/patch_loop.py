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
from ..ir import Graph, Op
from ..ops.binary import add_fields
from ..ops.c_text import c_ident
from ..ops.conv import conv_scratch
from ..ops.conv_kernels import conv_kernel, inplace_depthwise_kernel
from ..ops.layer_code import Buffers, LayerCode, weight_arrays, window_params
from ..ops.node_params import activation_range_of, requant_params
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


class Columns:
    """One node's per-patch offset table: named int32 columns, one row per patch."""

    def __init__(self, var: str):
        self.var, self.names, self.rows = var, [], []

    def add(self, p: int, **values: int) -> None:
        """Append columns to patch p's row (patch 0 names them; every patch adds the same ones, in order)."""
        if p == len(self.rows):
            self.rows.append([])
        for name, v in values.items():
            if p == 0:
                self.names.append(name)
            self.rows[p].append(int(v))

    def __getitem__(self, name: str) -> str:
        """The C expression of column `name` in the loop (`io` points at the current patch's row)."""
        return f"io[{self.names.index(name)}]"

    def decl(self) -> str:
        if any(len(row) != len(self.names) for row in self.rows):
            raise KilobyteError(f"{self.var}: patches disagree on the table's columns")
        lines = [f"/* per patch: {{{', '.join(self.names)}}} (bytes) */",
                 f"static const int32_t {self.var}[{len(self.rows)}][{len(self.names)}] = {{"]
        lines += [f"    {{{', '.join(map(str, row))}}},  /* patch {p} */" for p, row in enumerate(self.rows)]
        return "\n".join(lines + ["};"])

    def pointer(self, base: str, column: str, extra: int = 0, row: str | None = None) -> str:
        """`base + io[column] (+ extra) (+ r * io[row])`: a pointer into the image or the arena."""
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


def block(g: StageGeometry, k: int, how: str, io: Columns, statements: list[str]) -> str:
    """A `{ ... }` statement block for node k inside the patch loop, with a comment saying what flows where."""
    node = g.nodes[k]
    srcs = ["input" if t in g.graph.inputs else f"tile {t}" for t in g.graph.activation_inputs(node)]
    dst = "tile buffer" if node.name in g.stage.tile_offsets else "stage output"
    head = [f"{{   /* {node.name} ({node.op.value}{how}): {', '.join(srcs)} -> {dst} */",
            f"    const int32_t *io = {io.var}[p];  /* {{{', '.join(io.names)}}} */"]
    return "\n".join(head + ["    " + line for s in statements for line in s.split("\n")] + ["}"])


def row_loop(rows: str, call: str) -> str:
    """`call` once per tile row `r` (for kernels without a row pitch)."""
    return f"for (int32_t r = 0; r < {rows}; ++r) {{\n    {call}\n}}"


# -- per-op emitters: each fills its tables (code.decls) and returns its block of the loop body ----------------------
@dataclass(frozen=True)
class WindowSpec:
    """How a CONV_2D / DEPTHWISE_CONV_2D / pooling tile is called: kernel function, window, zero points, clamp and
    the trailing arguments (weights before the output pointer, scratch after it)."""

    fn: str
    kernel: tuple[int, int]
    zps: tuple[int, int]
    act: tuple[int, int]
    weights: str = ""
    scratch: str = ""
    scratch_bytes: int = 0  # a conv's kb_conv_params.scratch_bytes


def window_spec(g: StageGeometry, k: int, code: LayerCode) -> WindowSpec:
    """The kernel call of window node k; emits its weights, multipliers and shifts into `code.decls`."""
    graph, node = g.graph, g.nodes[k]
    if node.op in (Op.AVG_POOL_2D, Op.MAX_POOL_2D):
        code.families.add("pool")
        zp = int(graph.tensors[node.inputs[0]].qparams.zero_point[0])
        fn = "kb_avg_pool" if node.op is Op.AVG_POOL_2D else "kb_max_pool"
        return WindowSpec(fn, tuple(node.attrs.kernel), (zp, zp), activation_range_of(graph, node))
    rq = requant_params(graph, node)
    kernel = tuple(graph.tensors[node.inputs[1]].shape[1:3])
    weights = ", " + ", ".join(weight_arrays(graph, node, code))
    common = dict(kernel=kernel, zps=(rq.input_zp, rq.output_zp), act=(rq.act_min, rq.act_max), weights=weights)
    if node.op is Op.CONV_2D:
        code.families.add("conv")  # the tile scratch the stage planned for im2col columns, if any (else NULL)
        scratch, size = conv_scratch(graph, node, g.stage.tile_scratch.get(node.name))
        return WindowSpec(conv_kernel(node, kernel), scratch=f", {scratch}", scratch_bytes=size, **common)
    code.families.add("depthwise")
    if node.attrs.depth_multiplier != 1:
        raise UnsupportedOpError(f"node '{node.name}': depthwise multiplier {node.attrs.depth_multiplier} has no C "
                                 "kernel (only 1)")
    if not g.in_place(k):
        return WindowSpec("kb_depthwise", **common)
    if node.name not in g.stage.tile_scratch:
        raise KilobyteError(f"patch stage: in-place depthwise '{node.name}' has no tile scratch")
    fn = inplace_depthwise_kernel(node, kernel)
    return WindowSpec(fn, scratch=f", KB_ARENA + {g.stage.tile_scratch[node.name][0]}", **common)


def hw(box) -> tuple[int, int]:
    """(height, width) of a box; 0 for an empty one."""
    return max(box[1] - box[0], 0), max(box[3] - box[2], 0)


def emit_window(g: StageGeometry, k: int, code: LayerCode) -> str:
    """CONV_2D, DEPTHWISE_CONV_2D, AVG/MAX_POOL_2D: one call per patch on the tile, with the tile's padding."""
    node, ident = g.nodes[k], c_ident(g.nodes[k].name)
    spec = window_spec(g, k, code)
    io, rows = Columns(f"kb_po_{ident}"), []
    for p in range(len(g.boxes)):
        tile = g.tile(p, k)
        src, dst = g.source(node.inputs[0], p, tile.in_box), g.target(p, k)
        fields = window_params(g.graph, node, g.bufs, spec.kernel, spec.zps, spec.act)
        (ih, iw), (oh, ow) = hw(tile.in_box), hw(tile.out_box)
        t, b, left, r = tile.padding
        fields.update(in_h=ih, in_w=iw, in_cstride=src.cstride, out_h=oh, out_w=ow, out_cstride=dst.cstride,
                      pad_t=t, pad_b=b, pad_l=left, pad_r=r, in_row=src.row, out_row=dst.row)
        if node.op is Op.CONV_2D:
            fields["scratch_bytes"] = spec.scratch_bytes
        rows.append(fields)
        io.add(p, src=src.offset, dst=dst.offset)
        copy_columns(g, p, k, io)
    code.decls += [param_table("kb_conv_params", f"kb_pp_{ident}", rows), io.decl()]
    call = (f"{spec.fn}(&kb_pp_{ident}[p], {io.pointer(g.base(node.inputs[0]), 'src')}{spec.weights}, "
            f"{io.pointer('KB_ARENA', 'dst')}{spec.scratch});")
    return block(g, k, ", in place" if "inplace" in spec.fn else "", io, [call, *copy_statements(g, k, io, code)])


def emit_pad(g: StageGeometry, k: int, code: LayerCode) -> str:
    """PAD: the tile's share of the layer's padding (zero-point bytes only where the tile meets the border)."""
    node, ident = g.nodes[k], c_ident(g.nodes[k].name)
    code.families.add("pad")
    (_, _), _, _, (c0, c1) = node.attrs.pads
    zp = int(g.graph.tensors[node.inputs[0]].qparams.zero_point[0])
    io, rows = Columns(f"kb_po_{ident}"), []
    for p in range(len(g.boxes)):
        tile = g.tile(p, k)
        src, dst = g.source(node.inputs[0], p, tile.in_box), g.target(p, k)
        (ih, iw), (t, b, left, r) = hw(tile.in_box), tile.padding
        rows.append(dict(in_h=ih, in_w=iw, in_c=g.channels(node.inputs[0]), in_cstride=src.cstride, pad_t=t,
                         pad_b=b, pad_l=left, pad_r=r, pad_c0=c0, pad_c1=c1, out_cstride=dst.cstride, value=zp,
                         in_row=src.row, out_row=dst.row))
        io.add(p, src=src.offset, dst=dst.offset)
        copy_columns(g, p, k, io)
    code.decls += [param_table("kb_pad_params", f"kb_pp_{ident}", rows), io.decl()]
    call = f"kb_pad(&kb_pp_{ident}[p], {io.pointer(g.base(node.inputs[0]), 'src')}, {io.pointer('KB_ARENA', 'dst')});"
    return block(g, k, "", io, [call, *copy_statements(g, k, io, code)])


def emit_add(g: StageGeometry, k: int, code: LayerCode) -> str:
    """ADD: one `kb_add` per tile row (operands can be tiles of different widths); in place when the plan put the
    output tile in an input's buffer (same box, so row r overwrites only itself)."""
    node, ident = g.nodes[k], c_ident(g.nodes[k].name)
    code.families.add("add")
    io, rows = Columns(f"kb_po_{ident}"), []
    for p in range(len(g.boxes)):
        tile = g.tile(p, k)
        a, b = (g.source(t, p, tile.in_box) for t in node.inputs)
        dst = g.target(p, k)
        h, w = hw(tile.out_box)
        rows.append(add_fields(g.graph, node, (a.cstride, b.cstride, dst.cstride), pixels=w))
        io.add(p, src1=a.offset, src1_pitch=a.pitch, src2=b.offset, src2_pitch=b.pitch, dst=dst.offset,
               dst_pitch=dst.pitch, rows=h)
        copy_columns(g, p, k, io)
    code.decls += [param_table("kb_add_params", f"kb_pp_{ident}", rows), io.decl()]
    bases = [g.base(t) for t in node.inputs]
    call = (f"kb_add(&kb_pp_{ident}[p], {io.pointer(bases[0], 'src1', row='src1_pitch')}, "
            f"{io.pointer(bases[1], 'src2', row='src2_pitch')}, {io.pointer('KB_ARENA', 'dst', row='dst_pitch')});")
    how = ", in place" if g.in_place(k) else ""
    return block(g, k, f"{how}, row by row", io, [row_loop(io["rows"], call), *copy_statements(g, k, io, code)])


def emit_concat(g: StageGeometry, k: int, code: LayerCode) -> str:
    """CONCAT (channels): each input's tile rows copied into its channel slice of the output tile."""
    node, ident = g.nodes[k], c_ident(g.nodes[k].name)
    code.families.add("concat")
    io = Columns(f"kb_po_{ident}")
    for p in range(len(g.boxes)):
        tile = g.tile(p, k)
        for j, t in enumerate(node.inputs):
            src = g.source(t, p, tile.in_box)
            io.add(p, **{f"src{j}": src.offset, f"src{j}_pitch": src.pitch})
        dst = g.target(p, k)
        h, w = hw(tile.out_box)
        io.add(p, dst=dst.offset, dst_pitch=dst.pitch, rows=h, pixels=w)
        copy_columns(g, p, k, io)
    code.decls.append(io.decl())
    out_cs, calls, c0 = g.target(0, k).cstride, [], 0
    for j, t in enumerate(node.inputs):
        c = g.channels(t)  # tiles and the caller's input are dense: pixel stride = channels
        calls.append(row_loop(io["rows"], f"kb_copy_channels({io['pixels']}, {c}, "
                              f"{io.pointer(g.base(t), f'src{j}', row=f'src{j}_pitch')}, {c}, "
                              f"{io.pointer('KB_ARENA', 'dst', c0, row='dst_pitch')}, {out_cs});"))
        c0 += c
    return block(g, k, ", row by row", io, [*calls, *copy_statements(g, k, io, code)])


# -- stage outputs that also live in a tile buffer ----------------------------------------------------------------
def copy_columns(g: StageGeometry, p: int, k: int, io: Columns) -> None:
    """For a stage output that has a tile buffer (it is read inside the stage too): where patch p's own box is
    copied from (the tile) and to (the whole tensor)."""
    node, out = g.nodes[k], g.nodes[k].outputs[0]
    if out not in g.stage.outputs or node.name not in g.stage.tile_offsets:
        return
    box = g.boxes[p]
    src, dst = g.source(out, p, box), g.whole(out, box)
    h, w = hw(box)
    io.add(p, copy_src=src.offset, copy_src_pitch=src.pitch, copy_dst=dst.offset, copy_dst_pitch=dst.pitch,
           copy_rows=h, copy_pixels=w)


def copy_statements(g: StageGeometry, k: int, io: Columns, code: LayerCode) -> list[str]:
    """The row-by-row copy `copy_columns` describes (nothing when node k needs none)."""
    out = g.nodes[k].outputs[0]
    if "copy_src" not in io.names:
        return []
    code.families.add("concat")
    c, cs = g.channels(out), g.bufs.plan.placements[out].channel_stride
    call = (f"kb_copy_channels({io['copy_pixels']}, {c}, {io.pointer('KB_ARENA', 'copy_src', row='copy_src_pitch')}, "
            f"{c}, {io.pointer('KB_ARENA', 'copy_dst', row='copy_dst_pitch')}, {cs});")
    return [f"/* stage output '{out}': this patch's own box, out of the tile */", row_loop(io["copy_rows"], call)]


EMITTERS = {
    Op.CONV_2D: emit_window, Op.DEPTHWISE_CONV_2D: emit_window, Op.AVG_POOL_2D: emit_window,
    Op.MAX_POOL_2D: emit_window, Op.PAD: emit_pad, Op.ADD: emit_add, Op.CONCAT: emit_concat,
}


def emit_patch_stage(graph: Graph, plan, bufs: Buffers) -> LayerCode:
    """The patch stage of `plan` as per-patch tables (`code.decls`) and one loop over patches (`code.body`)."""
    stage = plan.patch
    if tuple(plan.order[:stage.n_nodes]) != tuple(stage.nodes):
        raise KilobyteError("patch stage: its nodes must be the first n_nodes of the plan's order")
    g = StageGeometry(graph, plan, bufs)
    code = LayerCode()
    blocks = []
    for k, node in enumerate(g.nodes):
        if node.op not in EMITTERS:
            raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): no C kernel for a patch-stage tile; "
                                     f"end the patch stage before it (--patch N,P with a smaller N)")
        blocks.append(EMITTERS[node.op](g, k, code))
    n = len(g.boxes)
    loop = "\n".join([f"for (int32_t p = 0; p < {n}; ++p) {{  /* {stage.grid}x{stage.grid} patches, row-major */",
                      *("    " + line for b in blocks for line in b.split("\n")), "}"])
    head = (f"/* MCUNetV2 patch stage: {stage.n_nodes} nodes tile by tile; working region "
            f"[{stage.working_offset}, {stage.working_offset + stage.working_bytes}) of the arena; stage outputs "
            f"{', '.join(stage.outputs)} kept whole */")
    code.body = [head, loop]
    return code
