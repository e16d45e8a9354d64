"""Schedule stage: scratch bytes per step, exactly as the chosen kernel set reads them (`kilobyte.kernels`).

Per layer (`base_scratch`): each step gets what its kernel reads when it runs: an in-place depthwise conv one padded
input channel, a DSP conv with a window larger than 1x1 two im2col columns, the rest nothing (see
`kilobyte/kernels/contracts.py` for the rules and the portable/DSP difference). Scratch counts in the peak at its
step and lives in the arena for that step only.

Then, from bytes free anyway (`free_conv_columns`): every unfused conv whose kernel reads columns and whose step has
room under the peak gets `WIDE_COLUMNS` columns (`12*kh*kw*Cin` bytes), else a 1x1 conv gets two where they fit; the
Cortex-M DSP kernels pre-widen that many pixels there once for all output channels. A DSP 3x3 depthwise conv gets its
channel-group ring (`extra_ring`) where it fits, in place where the ring is larger than its padded channel.

Model-adaptive im2col (thesis Eq. 3.1-3.2): TinyEngine sizes one im2col buffer M for the largest column of the model
(Eq. 3.1, `M = max kh*kw*Cin`) and lets each layer tile `floor(M / (kh*kw*Cin))` columns (Eq. 3.2) — bytes that are
free anyway because another layer needs them. We apply the same idea per step with the real free bytes: a conv's
buffer grows to the most whole columns that fit under the model's planned peak at its step (`peak - live_j`), never
fewer than the 2 columns above, never more than its output pixels nor than its kernel reads. The peak does not rise.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Graph, Node, Op
from ..kernels import extra_columns, extra_ring, layer_scratch, padded_channel_bytes
from ..ops.conv_kernels import IM2COL_COLUMNS

__all__ = ["adaptive_im2col", "base_scratch", "free_conv_columns", "kernel_scratch"]


def kernel_scratch(graph: Graph, node: Node, kernels: str = "portable", inplace: bool = False) -> int:
    """Per-layer scratch bytes `node`'s kernel in `kernels` reads; `inplace` only matters for depthwise."""
    if node.op is Op.DEPTHWISE_CONV_2D and inplace:
        return padded_channel_bytes(graph, node)
    return layer_scratch(graph, node, kernels)


def base_scratch(graph: Graph, life, kernels: str) -> tuple[int, ...]:
    """Per-layer scratch bytes at each step of `life` (liveness.Lifetimes); patch-stage steps have none of their own
    (their tiles' scratch is in the stage's working region)."""
    nodes = {n.name: n for n in graph.nodes}
    return tuple(0 if i < life.n_stage else kernel_scratch(graph, nodes[name], kernels, name in life.inplace)
                 for i, name in enumerate(life.order))


def adaptive_im2col(graph: Graph, order: Sequence[str], live_bytes, scratch, peak: int,
                    kernels: str) -> dict[str, int]:
    """Model-adaptive im2col sizes: node -> scratch bytes, for every conv with a per-layer im2col buffer.

    `live_bytes[i]` and `scratch[i]` are step i's planned live bytes (scratch included) and scratch bytes; `peak` is
    the plan's peak. Each buffer grows to the most whole columns that keep step i at or under `peak`.
    """
    sizes: dict[str, int] = {}
    nodes = {n.name: n for n in graph.nodes}
    for i, name in enumerate(order):
        node = nodes[name]
        if not layer_scratch(graph, node, kernels):
            continue
        col, most = extra_columns(graph, node, kernels)
        if not col:  # a buffer of a fixed size (a sparse conv's two windows)
            continue
        _, ho, wo, _ = graph.tensors[node.outputs[0]].shape
        free = peak - (live_bytes[i] - scratch[i])
        sizes[name] = max(IM2COL_COLUMNS, min(ho * wo, most, free // col)) * col
    return sizes


def free_conv_columns(graph: Graph, order: Sequence[str], live_bytes, scratch, peak: int | None, fused,
                      kernels: str, wide: bool = True) -> dict[str, int]:
    """More im2col columns from bytes that are free anyway: node -> scratch bytes, for unfused convs whose kernel
    reads columns.

    With `wide`, each gets WIDE_COLUMNS int16 columns of kh*kw*Cin values rounded up to whole groups of four
    (`extra_columns`: `12*ceil4(kh*kw*Cin)` bytes) where its step has that room
    under the planned `peak` and it has at least 3 output pixels (the Cortex-M DSP kernels then run 1 channel x 3-6
    pixels per weight load); otherwise a 1x1 conv gets two such columns where those fit (its
    kernel then pre-widens two pixels once for all output channels instead of unpacking them per channel pair).
    Never raises the peak: steps without room keep what they have. `peak` None: every step has room (the plan
    option conv_columns="wide", which trades SRAM for speed)."""
    sizes: dict[str, int] = {}
    nodes = {n.name: n for n in graph.nodes}
    room = peak if peak is not None else float("inf")
    for i, name in enumerate(order):
        node = nodes[name]
        ring = extra_ring(graph, node, kernels, in_place=scratch[i] > 0)  # (in place: the padded channel)
        if ring > scratch[i] and live_bytes[i] - scratch[i] + ring <= room:
            sizes[name] = ring
            continue
        col, most = extra_columns(graph, node, kernels)
        if not col or name in fused:
            continue
        _, ho, wo, _ = graph.tensors[node.outputs[0]].shape
        base = live_bytes[i] - scratch[i]
        if wide and ho * wo >= 3 and base + most * col <= room:
            sizes[name] = most * col
        elif not scratch[i] and base + IM2COL_COLUMNS * col <= room:
            sizes[name] = IM2COL_COLUMNS * col
    return sizes
