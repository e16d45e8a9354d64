"""Op registry: the building blocks of a patch-stage tile's C — what an op's `emit_tile` writes with.

A patch stage (MCUNetV2; `codegen/patch_loop.py` loops over the patches) runs each of its nodes once per patch, on
tiles. An op that may run there has an `OpDef.emit_tile(g, k, code) -> str`: it adds node k's per-patch tables to
`code.decls` (a `kb_pp_<node>[P]` of kernel parameters, `param_table`; a `kb_po_<node>[P][...]` of byte offsets,
`Columns`) and returns its statement block of the loop body (`block`). `g` is the stage's geometry
(`codegen/patch_loop.StageGeometry`, duck-typed here): `g.nodes`, `g.graph`, `g.bufs`, `g.stage`, `g.boxes`,
`g.tile(p, k)`, `g.source(t, p, box)`, `g.target(p, k)`, `g.whole(t, box)`, `g.base(t)`, `g.channels(t)`,
`g.in_place(k)`. A stage output that also has a tile buffer is copied out of it (`copy_columns`,
`copy_statements`). Window ops share `emit_window`, each giving its kernel call as a `WindowSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import KilobyteError
from .c_text import c_ident
from .layer_code import LayerCode, window_params


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


def block(g, k: int, how: str, io: Columns, statements: list[str]) -> str:
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


def hw(box) -> tuple[int, int]:
    """(height, width) of a box; 0 for an empty one."""
    return max(box[1] - box[0], 0), max(box[3] - box[2], 0)


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
    scratch_bytes: int | None = None  # a conv's kb_conv_params.scratch_bytes (None: the struct's default)


def emit_window(g, k: int, code: LayerCode, spec: WindowSpec) -> str:
    """A window op's tile (CONV_2D, DEPTHWISE_CONV_2D, AVG/MAX_POOL_2D: `spec` from its op module): one call per
    patch on the tile, with the tile's padding."""
    node, ident = g.nodes[k], c_ident(g.nodes[k].name)
    io, rows = Columns(f"kb_po_{ident}"), []
    for p in range(len(g.boxes)):
        tile = g.tile(p, k)
        src, dst = g.source(node.inputs[0], p, tile.in_box), g.target(p, k)
        fields = window_params(g.graph, node, g.bufs, spec.kernel, spec.zps, spec.act)
        (ih, iw), (oh, ow) = hw(tile.in_box), hw(tile.out_box)
        t, b, left, r = tile.padding
        fields.update(in_h=ih, in_w=iw, in_cstride=src.cstride, out_h=oh, out_w=ow, out_cstride=dst.cstride,
                      pad_t=t, pad_b=b, pad_l=left, pad_r=r, in_row=src.row, out_row=dst.row)
        if spec.scratch_bytes is not None:
            fields["scratch_bytes"] = spec.scratch_bytes
        rows.append(fields)
        io.add(p, src=src.offset, dst=dst.offset)
        copy_columns(g, p, k, io)
    code.decls += [param_table("kb_conv_params", f"kb_pp_{ident}", rows), io.decl()]
    call = (f"{spec.fn}(&kb_pp_{ident}[p], {io.pointer(g.base(node.inputs[0]), 'src')}{spec.weights}, "
            f"{io.pointer('KB_ARENA', 'dst')}{spec.scratch});")
    return block(g, k, ", in place" if "inplace" in spec.fn else "", io, [call, *copy_statements(g, k, io, code)])


def copy_columns(g, p: int, k: int, io: Columns) -> None:
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


def copy_statements(g, k: int, io: Columns, code: LayerCode) -> list[str]:
    """The row-by-row copy `copy_columns` describes (nothing when node k needs none)."""
    out = g.nodes[k].outputs[0]
    if "copy_src" not in io.names:
        return []
    code.families.add("concat")
    c, cs = g.channels(out), g.bufs.plan.placements[out].channel_stride
    call = (f"kb_copy_channels({io['copy_pixels']}, {c}, {io.pointer('KB_ARENA', 'copy_src', row='copy_src_pitch')}, "
            f"{c}, {io.pointer('KB_ARENA', 'copy_dst', row='copy_dst_pitch')}, {cs});")
    return [f"/* stage output '{out}': this patch's own box, out of the tile */", row_loop(io["copy_rows"], call)]


