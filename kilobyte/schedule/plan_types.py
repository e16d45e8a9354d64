"""Schedule stage: the `Plan` data types — the contract between the scheduler, the plan executor and codegen.

A plan says, for an int8 inference graph: the execution order, where every activation tensor lives in ONE byte arena
(offsets; aliases for in-place ops, RESHAPE and CONCAT slices), each node's scratch buffer, and optionally a patch
stage that runs the first nodes tile by tile (MCUNetV2). The model input is caller-owned (not in the arena).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PlanOptions:
    inplace_depthwise: bool = True  # DW conv writes over its input (+ one padded input channel of scratch)
    inplace_add: bool = True  # ADD writes into an input buffer that dies there
    fuse_add: bool = True  # a 1x1 conv feeding only a residual ADD runs with it as one step into the residual
    alias_reshape: bool = True  # RESHAPE output shares its input's bytes
    concat_in_place: bool = True  # CONCAT producers write straight into their slice of the output
    reorder: bool = True  # search the topological order with the smallest peak
    patch: str | tuple[int, int] | None = None  # None/"off", "auto", or (n_nodes, grid)
    max_mac_overhead: float | None = 0.2  # patch "auto": at most this many extra MACs (0.2 = +20 %); None: no limit
    im2col: str = "per-layer"  # or "model-adaptive" (thesis Eq. 3.1-3.2)
    conv_columns: str = "free"  # "wide": 6 im2col columns for every conv, even where that raises the peak (speed)
    arena_strategy: str = "auto"  # "greedy", "exact" or "auto" (exact when small)
    exact_budget: int = 200_000  # DP states before the reorder falls back to a heuristic
    alignment: int = 4  # byte alignment of every arena offset
    kernels: str = "portable"  # the kernel set the plan is for ("portable" or "dsp"): scratch is what it reads


DEFAULT_OPTIONS = PlanOptions()


@dataclass(frozen=True)
class TensorPlacement:
    """Where a tensor's bytes live: arena offset of element 0 and the row stride of its last (channel) axis.

    `channel_stride` equals the tensor's own channel count except for CONCAT inputs written into their slice of the
    output (NHWC, axis 3): then it is the output's channel count and `offset` points at the slice's first channel.
    """

    offset: int
    size: int
    channel_stride: int


@dataclass(frozen=True)
class Tile:
    """One node's work for one patch: output box (y0, y1, x0, x1), half-open, in the node's output coordinates;
    the input box it reads (in the input's coordinates, clipped to the image) and the zero-point padding it needs
    where the box leaves the image, (top, bottom, left, right)."""

    node: str
    out_box: tuple[int, int, int, int]
    in_box: tuple[int, int, int, int]
    padding: tuple[int, int, int, int]


@dataclass(frozen=True)
class PatchStage:
    n_nodes: int  # the first n nodes of `Plan.order` run patch by patch
    grid: int  # p: the stage output is split into p x p patches
    nodes: tuple[str, ...]
    outputs: tuple[str, ...]  # stage tensors read after the stage: kept whole in the arena
    tiles: tuple[tuple[Tile, ...], ...]  # per patch (row-major), per stage node in order
    input_patch: int  # side of the largest input-image patch read by one patch
    stage_output_bytes: int
    working_bytes: int  # peak per-patch working memory (tile buffers + scratch), excluding stage outputs
    tile_offsets: dict[str, int] = field(default_factory=dict)  # arena offset of each stage node's tile buffer
    macs: int = 0  # MACs of the stage with overlap (all patches)
    base_macs: int = 0  # MACs of the same nodes run per layer
    # Added by patch.py. `working_bytes` is the size of the per-patch working region the tile buffers and tile
    # scratch are placed in (>= `working_peak`, the most working bytes live at any step of any patch). Offsets in
    # `tile_offsets` / `tile_scratch` are arena offsets once make_plan has placed the region at `working_offset`
    # (`patch.place_stage`); straight from `plan_patch_stage` they are relative to the region (offset 0).
    working_peak: int = 0
    tile_scratch: dict[str, tuple[int, int]] = field(default_factory=dict)  # node -> (offset, bytes) per patch
    working_offset: int = 0


@dataclass(frozen=True)
class Plan:
    order: tuple[str, ...]
    # every activation tensor except the caller-owned graph input(s), patch-stage tensors read only inside the
    # stage (those never exist whole: see PatchStage.tile_offsets) and the outputs of fused convs (see `fused`)
    placements: dict[str, TensorPlacement]
    scratch: dict[str, tuple[int, int]]  # node -> (offset, bytes); absent = no scratch
    arena_bytes: int  # size of the one static arena (tensors + scratch)
    peak_bytes: int  # most tensor + scratch bytes live at any step (<= arena_bytes)
    scratch_bytes: int  # largest scratch of any step
    input_bytes: int  # caller-owned input buffer(s)
    macs: int  # incl. the patch stage's repeated MACs
    mac_overhead: float  # (macs - per-layer macs) / per-layer macs
    optimal: bool  # the order is proven minimal (exact search)
    lower_bound: int  # a lower bound on the peak over all orders
    live_bytes: tuple[int, ...]  # live bytes at each step of `order` (for plots)
    patch: PatchStage | None = None
    options: PlanOptions = field(default_factory=PlanOptions)
    notes: tuple[str, ...] = ()  # e.g. "order is heuristic: graph too wide for exact search"
    # Added by plan.py: node -> the input tensor whose bytes it overwrites (in-place DEPTHWISE_CONV_2D / ADD; the
    # output's placement then starts at that input's offset). In-place depthwise nodes have their padded-channel
    # buffer in `scratch`.
    inplace: dict[str, str] = field(default_factory=dict)
    # Added by plan.py (`PlanOptions.fuse_add`): conv node -> the ADD node it runs with as ONE step. The conv's
    # output never exists: each output pixel is requantised, added to the residual pixel (the ADD's other input,
    # which dies there) and written over it, so the ADD's output sits at the residual's bytes (`inplace[add]`).
    # The pair is adjacent in `order`; the ADD's step is part of the conv's.
    fused: dict[str, str] = field(default_factory=dict)
    # Added by plan.py: CONV_2D node -> its input tensor, when the input's unit dies at the conv's step (no graph
    # input or output; a fused conv + ADD too): the kernel may overwrite input rows it has finished reading
    # (kb_conv_params.in_consumed; the DSP kernels keep im2col columns there). Per layer only, never in a patch stage.
    consumed: dict[str, str] = field(default_factory=dict)
