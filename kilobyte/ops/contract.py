"""Op registry: the kernel contract — what the planner and the code generator both know of one op's kernel.

TFLite Micro registers each kernel with the callbacks its interpreter needs; Kilobyte has no interpreter, so the same
idea is done at generation time. A `KernelContract` holds, for one op: which activation input it may overwrite in
place, under which plan option (`InPlaceRule`); whether it is spatially local (may run in a patch stage) and its
window (what a patch of its output reads); whether it reads im2col columns with the DSP kernel set; its runtime family
(the one C file it lives in) and the C parameter struct it takes; what its int8 kernel accepts, for people. The
planner's questions about contracts (scratch, in-place groups, patch halos) are answered in `kilobyte.kernels`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .types import Op

Window = tuple[int, int, int, int, int]  # one axis: (kernel, stride, dilation, pad_before, pad_after)


@dataclass(frozen=True)
class InPlaceRule:
    """An op that may write its output over an activation input whose storage dies at its step.

    `option`: the `PlanOptions` flag that allows it. `inputs`: "first" (only the first activation input) or "any".
    `elementwise`: output element i overwrites input element i (same layout, ADD); otherwise the kernel goes channel
    by channel through one padded input channel of scratch (`padded_channel`, DEPTHWISE_CONV_2D), which needs an
    output no larger than the input and is used only when it saves bytes (scratch < output)."""

    option: str
    inputs: str
    elementwise: bool


@dataclass(frozen=True)
class KernelContract:
    """What the planner and codegen know of one op's kernel (package docstring)."""

    op: Op
    family: str | None  # runtime kernel family = one C file (`runtime.KERNEL_FILES`); None: no kernel of its own
    struct: str | None = None  # the C parameter struct it takes (`kilobyte.h`)
    inplace: InPlaceRule | None = None
    local: bool = False  # spatially local: may run inside a patch stage
    window: Callable[..., tuple[Window, Window]] | None = None  # None with `local`: pointwise
    columns: bool = False  # reads im2col columns with the DSP kernel set (CONV_2D)
    constraints: str = ""  # what the int8 kernel accepts, for people (docs/ops.md is generated from it)


def conv_window(graph, node) -> tuple[Window, Window]:
    _, kh, kw, _ = graph.tensors[node.inputs[1]].shape
    t, b, left, r = node.attrs.padding
    (sh, sw), (dh, dw) = node.attrs.stride, node.attrs.dilation
    return (kh, sh, dh, t, b), (kw, sw, dw, left, r)


def pool_window(graph, node) -> tuple[Window, Window]:
    (kh, kw), (sh, sw) = node.attrs.kernel, node.attrs.stride
    t, b, left, r = node.attrs.padding
    return (kh, sh, 1, t, b), (kw, sw, 1, left, r)


def pad_window(graph, node) -> tuple[Window, Window]:
    (t, b), (left, r) = node.attrs.pads[1], node.attrs.pads[2]
    return (1, 1, 1, t, b), (1, 1, 1, left, r)
