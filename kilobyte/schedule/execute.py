"""Schedule stage: the plan executor — runs an int8 graph inside ONE simulated byte arena, exactly as planned.

Every activation lives in a `np.int8` arena of `plan.arena_bytes` at its planned offset (concat slices with their
channel stride, in-place outputs at their input's offset, RESHAPE aliases); only the caller-owned graph input lives
outside. Nodes run in `plan.order` with the int8 reference kernels, reading their inputs from the arena and writing
their outputs back into it. The arena starts as random bytes and every scratch region is poisoned before use, so a
plan that reads bytes nobody wrote, or lets one tensor overwrite another that is still needed, gives different
outputs or fails a check: each read is compared with what was written, and an output may overlap its own input
only in the planned in-place forms. In-place depthwise runs channel by channel through its scratch as the C kernel
does; a fused conv + ADD pair (`plan.fused`) runs as one step over the residual as `kb_conv_1x1_add` does; the patch
stage runs tile by tile through the tile buffers of `plan.patch`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import KilobyteError
from ..interp.int8_ref import eval_node_int8
from ..ir import Graph, Node, Op
from .patch import split
from .plan_types import PatchStage, Plan, TensorPlacement, Tile


class PlanExecutionError(KilobyteError):
    """The plan is not executable as written (overlap, clobbered tensor, out-of-arena access)."""


def execute_plan(graph: Graph, plan: Plan, inputs, *, keep_all: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
    """Run int8 `graph` under `plan` in one simulated arena; return its outputs (every tensor with `keep_all`).

    `inputs` is one int8 array (single-input graphs) or a dict name -> array. Outputs are read back from the arena
    after the last node. With `keep_all`, patch-stage intermediates (which never exist whole) are included when
    their tiles cover the whole tensor, assembled from the tiles (overlapping tiles must agree).
    """
    run = _Arena(graph, plan, inputs, seed)
    skip = 0
    if plan.patch is not None:
        if tuple(plan.order[:plan.patch.n_nodes]) != tuple(plan.patch.nodes):
            raise PlanExecutionError("plan.patch.nodes must be the first n_nodes of plan.order")
        _PatchRun(run, plan.patch).execute()
        skip = plan.patch.n_nodes
    fused = getattr(plan, "fused", {})
    for k, name in enumerate(plan.order[skip:], start=skip):
        if name in fused:
            if plan.order[k + 1:k + 2] != (fused[name],):
                raise PlanExecutionError(f"fused pair {name} + {fused[name]}: the ADD must run right after the conv")
            run.run_fused(run.nodes[name], run.nodes[fused[name]])
        elif name not in fused.values():
            run.run_node(run.nodes[name])
    out = {t: run.read(t, "the end of the plan") for t in graph.outputs if t not in graph.inputs}
    if keep_all:
        return {**run.inputs, **run.written, **run.unstored, **out}
    return {t: out.get(t, run.inputs.get(t)) for t in graph.outputs}


# -- the arena ----------------------------------------------------------------------------------------------------
class _Arena:
    def __init__(self, graph: Graph, plan: Plan, inputs, seed: int):
        if not isinstance(inputs, dict):
            inputs = {graph.inputs[0]: inputs}
        self.graph, self.plan = graph, plan
        self.rng = np.random.default_rng(seed)
        self.bytes = self.rng.integers(-128, 128, plan.arena_bytes, dtype=np.int8)  # poison: nothing is zero
        self.inputs = {t: _checked_input(graph, t, inputs.get(t)) for t in graph.inputs}
        self.nodes = {n.name: n for n in graph.nodes}
        self.written: dict[str, np.ndarray] = {}  # tensor -> the values written (what every read must see)
        self.unstored: dict[str, np.ndarray] = {}  # fused conv outputs: computed pixel by pixel, never stored

    # byte-level access: `shape` (..., C) rows placed `stride` elements apart from `offset`
    def view(self, offset: int, stride: int, shape, dtype, what: str) -> np.ndarray:
        dtype = np.dtype(dtype)
        c = int(shape[-1])
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        end = offset + ((rows - 1) * stride + c) * dtype.itemsize if rows else offset
        if offset < 0 or end > len(self.bytes) or stride < c:
            raise PlanExecutionError(f"{what}: bytes [{offset}, {end}) with row stride {stride} leave the "
                                     f"{len(self.bytes)}-byte arena or overlap their own rows")
        v = np.lib.stride_tricks.as_strided(self.bytes[offset:], (rows, c * dtype.itemsize),
                                            (stride * dtype.itemsize, 1))
        return v

    def load(self, pl: TensorPlacement, shape, dtype, what: str) -> np.ndarray:
        v = self.view(pl.offset, pl.channel_stride, shape, dtype, what)
        return v.copy().view(dtype).reshape(shape)

    def store(self, pl: TensorPlacement, value: np.ndarray, what: str) -> None:
        v = self.view(pl.offset, pl.channel_stride, value.shape, value.dtype, what)
        v[...] = np.ascontiguousarray(value).reshape(v.shape[0], -1).view(np.int8)

    def poison(self, offset: int, size: int) -> None:
        self.bytes[offset:offset + size] = self.rng.integers(-128, 128, size, dtype=np.int8)

    # tensor-level access
    def placement(self, t: str) -> TensorPlacement:
        if t not in self.plan.placements:
            raise PlanExecutionError(f"tensor '{t}' has no placement in the plan")
        return self.plan.placements[t]

    def read(self, t: str, reader: str) -> np.ndarray:
        tensor = self.graph.tensors[t]
        if tensor.is_const:
            return tensor.data
        if t in self.inputs:
            return self.inputs[t]
        if t not in self.written:
            raise PlanExecutionError(f"{reader} reads '{t}' before it is written (order is not topological)")
        value = self.load(self.placement(t), tensor.shape, tensor.dtype, f"tensor '{t}'")
        _same(value, self.written[t], f"tensor '{t}' was overwritten before {reader} read it")
        return value

    def write(self, t: str, value: np.ndarray) -> None:
        self.store(self.placement(t), value, f"tensor '{t}'")
        self.written[t] = value

    # nodes
    def run_node(self, node: Node) -> None:
        args = [self.read(t, f"node '{node.name}'") for t in node.inputs]
        if node.name in self.plan.scratch:
            self.poison(*self.plan.scratch[node.name])
        out = node.outputs[0]
        src = self.overlapped_input(node)
        declared = getattr(self.plan, "inplace", {}).get(node.name)  # what codegen will run in place
        if node.op in (Op.DEPTHWISE_CONV_2D, Op.ADD) and declared != src:
            raise PlanExecutionError(f"node '{node.name}': the plan says it overwrites {declared!r} in place, its "
                                     f"placements say {src!r}")
        if src is not None and node.op is Op.DEPTHWISE_CONV_2D:
            scratch = self.plan.scratch.get(node.name)
            if scratch is None:
                raise PlanExecutionError(f"node '{node.name}': in-place depthwise without a scratch buffer")
            regions = tuple(Region.of_tensor(self.placement(t), self.graph.tensors[t].shape) for t in (src, out))
            y = depthwise_in_place(self, self.graph, node, args, regions, scratch)
            self.written[out] = y
            return
        self.write(out, eval_node_int8(self.graph, node, args))

    def run_fused(self, conv: Node, add: Node) -> None:
        """A fused pair as `kb_conv_1x1_add` runs it: for each pixel, the conv's outputs requantised to the conv
        output's qparams, added (TFLite int8 ADD, in the IR's operand order) to the residual pixel and written over
        it. Checked: the conv output has no bytes, the ADD output is exactly the residual's bytes, and the conv's
        input does not meet them — so each pixel reads only itself before it is written, and running the pixels
        at once below gives the kernel's result."""
        y, out = conv.outputs[0], add.outputs[0]
        residual = next(t for t in add.inputs if t != y)
        dst, src = self.placement(out), self.placement(residual)
        x = self.graph.activation_inputs(conv)[0]
        overlaps = x not in self.inputs and _spans_meet(self.span(x), self.span(residual))
        if y in self.plan.placements or (dst.offset, dst.channel_stride) != (src.offset, src.channel_stride) \
                or overlaps or getattr(self.plan, "inplace", {}).get(add.name) != residual:
            raise PlanExecutionError(f"fused pair {conv.name} + {add.name}: its output must be exactly over the "
                                     f"residual '{residual}', which the conv must not read, and '{y}' unplaced")
        if conv.name in self.plan.scratch:
            self.poison(*self.plan.scratch[conv.name])
        args = [self.read(t, f"node '{conv.name}'") for t in conv.inputs]
        r = self.read(residual, f"node '{add.name}'")
        conv_out = eval_node_int8(self.graph, conv, args)
        self.unstored[y] = conv_out
        self.write(out, eval_node_int8(self.graph, add, [conv_out if t == y else r for t in add.inputs]))

    def overlapped_input(self, node: Node) -> str | None:
        """The input whose bytes `node`'s output overlaps; checked to be a form the C kernels can run in place:
        depthwise at its input's offset, ADD / IDENTITY exactly over an input, RESHAPE over a contiguous input,
        CONCAT over its slices."""
        out = node.outputs[0]
        b = self.placement(out)
        for t in dict.fromkeys(self.graph.activation_inputs(node)):
            if t in self.inputs or not _spans_meet(self.span(t), self.span(out)):
                continue
            a = self.placement(t)
            if node.op is Op.DEPTHWISE_CONV_2D:
                ok = a.offset == b.offset
            elif node.op is Op.RESHAPE:
                ok = a.offset == b.offset and self.contiguous(t) and self.contiguous(out)
            elif node.op is Op.CONCAT:
                ok = a.channel_stride == b.channel_stride
            else:
                ok = node.op in (Op.ADD, Op.IDENTITY) and (a.offset, a.channel_stride) == (b.offset, b.channel_stride)
            if not ok:
                raise PlanExecutionError(f"node '{node.name}' ({node.op.value}): output overlaps input '{t}' in a "
                                         f"way its kernel cannot run in place")
            return t
        return None

    def span(self, t: str) -> tuple[int, int]:
        """First and one-past-last arena byte of tensor `t`."""
        pl, tensor = self.placement(t), self.graph.tensors[t]
        rows = tensor.numel // tensor.shape[-1]
        return pl.offset, pl.offset + ((rows - 1) * pl.channel_stride + tensor.shape[-1]) * np.dtype(
            tensor.dtype).itemsize

    def contiguous(self, t: str) -> bool:
        return self.placement(t).channel_stride == self.graph.tensors[t].shape[-1]


def _checked_input(graph: Graph, name: str, x) -> np.ndarray:
    t = graph.tensors[name]
    if x is None:
        raise KilobyteError(f"graph input '{name}' was not given")
    x = np.asarray(x)
    if x.shape != t.shape or x.dtype != np.dtype(t.dtype):
        raise KilobyteError(f"graph input '{name}': got {x.dtype}{list(x.shape)}, want {t.dtype}{list(t.shape)}")
    return x


def _same(got: np.ndarray, want: np.ndarray, message: str) -> None:
    if got.shape != want.shape or not np.array_equal(got.view(np.int8), want.view(np.int8)):
        raise PlanExecutionError(message)


# -- regions and in-place depthwise -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Region:
    """Pixels `box` = (y0, y1, x0, x1) of an NHWC int8 buffer at `offset`, `width` pixels per row, pixels `stride`
    bytes apart (the channel stride), `channels` channels."""

    offset: int
    width: int
    stride: int
    box: tuple[int, int, int, int]
    channels: int

    @staticmethod
    def of_tensor(pl: TensorPlacement, shape) -> Region:
        _, h, w, c = shape
        return Region(pl.offset, w, pl.channel_stride, (0, h, 0, w), c)

    def view(self, run: _Arena, channel: int | None = None) -> np.ndarray:
        """Writable (h, w, C) view of the arena bytes, or (h, w) of one channel."""
        y0, y1, x0, x1 = self.box
        start = self.offset + (y0 * self.width + x0) * self.stride
        end = start + ((y1 - y0 - 1) * self.width + (x1 - x0 - 1)) * self.stride + self.channels
        if self.offset < 0 or end > len(run.bytes) or self.stride < self.channels:
            raise PlanExecutionError(f"region at {self.offset} (box {self.box}) leaves the arena")
        if channel is not None:
            return np.lib.stride_tricks.as_strided(run.bytes[start + channel:], (y1 - y0, x1 - x0),
                                                   (self.width * self.stride, self.stride))
        return np.lib.stride_tricks.as_strided(run.bytes[start:], (y1 - y0, x1 - x0, self.channels),
                                               (self.width * self.stride, self.stride, 1))

    def span(self) -> tuple[int, int]:
        y0, y1, x0, x1 = self.box
        start = self.offset + (y0 * self.width + x0) * self.stride
        return start, start + ((y1 - y0 - 1) * self.width + (x1 - x0 - 1)) * self.stride + self.channels


def depthwise_in_place(run: _Arena, graph: Graph, node: Node, args, regions: tuple[Region, Region],
                       scratch: tuple[int, int]) -> np.ndarray:
    """TinyEngine's in-place depthwise conv, channel by channel, as the C kernel runs it.

    For each channel c: copy input channel c into the (poisoned) scratch with zero-point padding, compute output
    channel c from the scratch, write it into channel c's slots. Input and output share the base offset and the
    pixel stride, so output channel c's bytes are `offset + pixel*stride + c` and input channel c' occupies
    `offset + pixel*stride + c'`: they meet only for c' == c, already copied out. Each channel is re-read from the
    arena just before its copy and must equal the value the node started from, which proves no unread byte was
    overwritten. (Output channel c depends only on the padded channel in the scratch, which is then the padded
    start value, so the kernel's arithmetic runs once for all channels, from the start values.)
    """
    src, dst = regions
    x = args[0]
    if (src.offset, src.stride, src.channels) != (dst.offset, dst.stride, dst.channels):
        raise PlanExecutionError(f"node '{node.name}': in-place depthwise needs its output at its input's offset "
                                 f"with the same channel stride")
    t, b, left, r = node.attrs.padding
    _, h, w, channels = x.shape
    hp, wp = h + t + b, w + left + r
    offset, size = scratch
    if hp * wp > size or offset < 0 or offset + size > len(run.bytes):
        raise PlanExecutionError(f"node '{node.name}': scratch of {size} B cannot hold a {hp}x{wp} padded channel")
    y = eval_node_int8(graph, node, args)
    zero_point = int(graph.tensors[node.inputs[0]].qparams.zero_point[0])
    for c in range(channels):
        channel = src.view(run, c)
        _same(channel, x[0, :, :, c], f"node '{node.name}': input channel {c} was overwritten before the in-place "
                                      f"depthwise read it")
        run.poison(offset, size)
        padded = run.bytes[offset:offset + hp * wp].reshape(hp, wp)
        padded[...] = zero_point
        padded[t:t + h, left:left + w] = channel
        dst.view(run, c)[...] = y[0, :, :, c]
    return y


# -- the patch stage --------------------------------------------------------------------------------------------
class _PatchRun:
    """Runs `stage` patch by patch: tiles through their tile buffers, stage outputs into their whole tensors."""

    def __init__(self, run: _Arena, stage: PatchStage):
        self.run, self.stage, self.graph = run, stage, run.graph
        self.nodes = [run.nodes[n] for n in stage.nodes]
        self.producer = {n.outputs[0]: n for n in self.nodes}
        _, h, w, _ = self.graph.tensors[stage.outputs[0]].shape
        self.boxes = [(y0, y1, x0, x1) for y0, y1 in split(h, stage.grid) for x0, x1 in split(w, stage.grid)]
        self.current: dict[str, tuple[Tile, np.ndarray]] = {}  # tensor -> this patch's tile and its values
        shapes = {n.outputs[0]: self.graph.tensors[n.outputs[0]].shape for n in self.nodes}
        self.full = {t: np.zeros(s, np.int8) for t, s in shapes.items()}  # tiles assembled (for checks, keep_all)
        self.covered = {t: np.zeros(s[1:3], bool) for t, s in shapes.items()}

    def execute(self) -> None:
        if len(self.stage.tiles) != len(self.boxes):
            raise PlanExecutionError(f"patch stage: {len(self.stage.tiles)} patches for a {self.stage.grid}² grid")
        for patch, box in zip(self.stage.tiles, self.boxes):
            self.current = {}
            for node, tile in zip(self.nodes, patch):
                self.run_tile(node, tile, box)
        for t in self.full:
            if t in self.stage.outputs and not self.covered[t].all():
                raise PlanExecutionError(f"patch stage: the patches do not cover stage output '{t}'")
            if self.covered[t].all():
                self.run.written[t] = self.full[t]

    def run_tile(self, node: Node, tile: Tile, patch_box) -> None:
        if tile.node != node.name:
            raise PlanExecutionError(f"patch stage: tile for '{tile.node}' where '{node.name}' runs")
        out = node.outputs[0]
        y0, y1, x0, x1 = tile.out_box
        want = (1, y1 - y0, x1 - x0, self.graph.tensors[out].shape[3])
        if node.name in self.stage.tile_scratch:
            self.run.poison(*self.stage.tile_scratch[node.name])
        tnode = tile_node(node, tile)
        if 0 in want:
            y = np.zeros(want, np.int8)  # this patch needs nothing of the node (a strided reader skips it)
        elif node.name in self.stage.tile_offsets:
            args = [self.tile_input(t, tile, node) for t in node.inputs]
            y = self.into_tile_buffer(tnode, tile, args, want)
        else:
            y = eval_node_int8(self.graph, tnode, [self.tile_input(t, tile, node) for t in node.inputs])
        if node.name in self.stage.tile_offsets:
            self.current[out] = (tile, y)
        if y.shape != want:
            raise PlanExecutionError(f"patch stage: tile of '{node.name}' is {y.shape}, its box says {want}")
        if out in self.stage.outputs:
            self.into_stage_output(out, tile, y, patch_box)
        self.assemble(out, tile.out_box, y)

    def tile_input(self, t: str, tile: Tile, reader: Node) -> np.ndarray:
        """The `tile.in_box` part of input `t`: from the caller's input, or from its producer's tile buffer."""
        y0, y1, x0, x1 = tile.in_box
        if self.graph.tensors[t].is_const:
            return self.graph.tensors[t].data
        if t in self.run.inputs:
            return self.run.inputs[t][:, y0:y1, x0:x1, :]
        if t not in self.current:
            raise PlanExecutionError(f"patch stage: '{reader.name}' reads '{t}', which has no tile in this patch")
        if y0 == y1 or x0 == x1:  # a window lying wholly in the padding reads nothing
            return np.zeros((1, y1 - y0, x1 - x0, self.graph.tensors[t].shape[3]), np.int8)
        src, values = self.current[t]
        region = self.region(self.producer[t].name, src, tile.in_box)
        got = region.view(self.run).copy()[None]
        sy, sx = y0 - src.out_box[0], x0 - src.out_box[2]
        _same(got, values[:, sy:sy + y1 - y0, sx:sx + x1 - x0, :],
              f"patch stage: the tile of '{t}' was overwritten before '{reader.name}' read it")
        return got

    def region(self, name: str, tile: Tile, box) -> Region:
        """`box` (in tensor coordinates, inside `tile.out_box`) of node `name`'s tile buffer."""
        oy0, oy1, ox0, ox1 = tile.out_box
        if not (oy0 <= box[0] <= box[1] <= oy1 and ox0 <= box[2] <= box[3] <= ox1):
            raise PlanExecutionError(f"patch stage: box {box} reaches outside the tile {tile.out_box} of '{name}'")
        c = self.graph.tensors[self.run.nodes[name].outputs[0]].shape[3]
        local = (box[0] - oy0, box[1] - oy0, box[2] - ox0, box[3] - ox0)
        return Region(self.stage.tile_offsets[name], ox1 - ox0, c, local, c)

    def into_tile_buffer(self, tnode: Node, tile: Tile, args, want) -> np.ndarray:
        dst = self.region(tnode.name, tile, tile.out_box)
        reads = tile.in_box[0] < tile.in_box[1] and tile.in_box[2] < tile.in_box[3]
        for t in dict.fromkeys(self.graph.activation_inputs(tnode)):
            if t not in self.current or not reads:
                continue
            src_tile = self.current[t][0]
            src = self.region(self.producer[t].name, src_tile, tile.in_box)
            if not _spans_meet(src.span(), dst.span()):
                continue
            if tnode.op is Op.DEPTHWISE_CONV_2D and src.offset == dst.offset:
                return depthwise_in_place(self.run, self.graph, tnode, args, (src, dst),
                                          self.stage.tile_scratch.get(tnode.name, (0, 0)))
            if not (tnode.op is Op.ADD and src == dst):
                raise PlanExecutionError(f"patch stage: the tile of '{tnode.name}' overlaps its input '{t}' in "
                                         f"a way its kernel cannot run in place")
        y = eval_node_int8(self.graph, tnode, args)
        if y.shape == want:
            dst.view(self.run)[...] = y[0]
        return y

    def into_stage_output(self, t: str, tile: Tile, y: np.ndarray, box) -> None:
        """Write the patch's own box of the tile into the whole stage-output tensor `t`."""
        oy, ox = tile.out_box[0], tile.out_box[2]
        part = y[0, box[0] - oy:box[1] - oy, box[2] - ox:box[3] - ox, :]
        if part.shape[:2] != (box[1] - box[0], box[3] - box[2]):
            raise PlanExecutionError(f"patch stage: the tile of '{t}' does not contain its patch {box}")
        pl = self.run.placement(t)
        Region(pl.offset, self.graph.tensors[t].shape[2], pl.channel_stride, box, part.shape[2]).view(
            self.run)[...] = part

    def assemble(self, t: str, box, y: np.ndarray) -> None:
        """Collect tile values into the whole tensor; tiles of different patches must agree where they overlap."""
        y0, y1, x0, x1 = box
        seen = self.covered[t][y0:y1, x0:x1]
        if not np.array_equal(self.full[t][0, y0:y1, x0:x1][seen], y[0][seen]):
            raise PlanExecutionError(f"patch stage: overlapping tiles of '{t}' disagree (halo recomputed wrong)")
        self.full[t][0, y0:y1, x0:x1] = y[0]
        seen[...] = True


def tile_node(node: Node, tile: Tile) -> Node:
    """`node` with its padding replaced by the tile's: running it on the cropped input box gives the tile."""
    if node.op is Op.PAD:
        t, b, left, r = tile.padding
        pads = ((0, 0), (t, b), (left, r), (0, 0))
        return dataclasses.replace(node, attrs=dataclasses.replace(node.attrs, pads=pads))
    if hasattr(node.attrs, "padding"):
        return dataclasses.replace(node, attrs=dataclasses.replace(node.attrs, padding=tile.padding))
    return node


def _spans_meet(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]
