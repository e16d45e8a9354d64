"""Schedule stage: per-kernel scratch bytes, as the C kernels of the runtime need them.

Rules (scratch counts in the peak at its step, and lives in the arena for that step only):
- CONV_2D with a kernel larger than 1x1: an im2col buffer of 2 output columns, each column `kh*kw*Cin` int16
  values (TinyEngine / CMSIS-NN `arm_convolve_s8` style, which widens int8 to int16 and runs two columns per
  inner loop): `2 * 2*kh*kw*Cin = 4*kh*kw*Cin` bytes.
- CONV_2D 1x1: 0. The pointwise kernel reads each input pixel's Cin contiguous bytes straight from the NHWC tensor,
  so it needs no column buffer (a strided 1x1 conv likewise reads every s-th pixel).
- Then, from bytes free anyway (`free_conv_columns`): every unfused CONV_2D whose step has room under the peak gets
  6 columns (`12*kh*kw*Cin` bytes), else a 1x1 conv gets 2 where they fit; the Cortex-M DSP kernels pre-widen that
  many pixels there once for all output channels (the portable kernels ignore the scratch).
- DEPTHWISE_CONV_2D in place (TinyEngine, thesis 3.2.4): one padded input channel, `(H+pt+pb)*(W+pl+pr)` bytes, the
  buffer a channel is copied into before its output overwrites the input. Not in place: 0.
- Everything else (FC, pooling, ADD, MEAN, PAD, RESHAPE, CONCAT, SOFTMAX): 0; their kernels stream.

Model-adaptive im2col (thesis Eq. 3.1-3.2): TinyEngine sizes one im2col buffer M for the largest column of the model
(Eq. 3.1, `M = max kh*kw*Cin`) and lets each layer tile `floor(M / (kh*kw*Cin))` columns (Eq. 3.2) — bytes that are
free anyway because another layer needs them. We apply the same idea per step with the real free bytes: a conv's
buffer grows to the most whole columns that fit under the model's planned peak at its step (`peak - live_j`),
never fewer than the 2 columns above and never more than its output pixels. The peak does not rise.
"""

from __future__ import annotations

from ..ir import Graph, Node, Op

IM2COL_COLUMNS = 2  # columns of the per-layer im2col buffer
IM2COL_ELEMENT_BYTES = 2  # int16 after widening (q7 -> q15)
WIDE_COLUMNS = 6  # columns granted from free bytes (free_conv_columns)


def padded_channel_bytes(graph: Graph, node: Node) -> int:
    """Bytes of one zero-padded input channel of a depthwise conv: (H+pt+pb)*(W+pl+pr).

    >>> from kilobyte.ir import DepthwiseAttrs, GraphBuilder, Op
    >>> import numpy as np
    >>> b = GraphBuilder()
    >>> y = b.node(Op.DEPTHWISE_CONV_2D, [b.input((1, 112, 112, 32))], DepthwiseAttrs(padding=(1, 1, 1, 1)),
    ...            params={"weight": np.zeros((1, 3, 3, 32), np.float32)})
    >>> padded_channel_bytes(b.build([y]), b.nodes[0])
    12996
    """
    _, h, w, _ = graph.tensors[node.inputs[0]].shape
    t, b, left, r = node.attrs.padding
    return (h + t + b) * (w + left + r)


def column_bytes(graph: Graph, node: Node) -> int:
    """Bytes of one int16 column of a CONV_2D's window, kh*kw*Cin values, whatever the kernel size."""
    _, kh, kw, cin = graph.tensors[node.inputs[1]].shape
    return IM2COL_ELEMENT_BYTES * kh * kw * cin


def im2col_column_bytes(graph: Graph, node: Node) -> int:
    """Bytes of one im2col column of a CONV_2D: kh*kw*Cin int16 values; 0 for 1x1 (no im2col)."""
    if node.op is not Op.CONV_2D or graph.tensors[node.inputs[1]].shape[1:3] == (1, 1):
        return 0
    return column_bytes(graph, node)


def conv_columns_bytes(graph: Graph, node: Node) -> int:
    """Bytes of the two int16 columns a conv kernel may widen its windows into (`KB_CONV_SCRATCH` in kilobyte.h)."""
    return IM2COL_COLUMNS * column_bytes(graph, node)


def kernel_scratch(graph: Graph, node: Node, inplace: bool = False) -> int:
    """Per-layer scratch bytes of `node` (see the module docstring); `inplace` only matters for depthwise."""
    if node.op is Op.CONV_2D:
        return IM2COL_COLUMNS * im2col_column_bytes(graph, node)
    if node.op is Op.DEPTHWISE_CONV_2D and inplace:
        return padded_channel_bytes(graph, node)
    return 0


def adaptive_im2col(graph: Graph, order, live_bytes, scratch, peak: int) -> dict[str, int]:
    """Model-adaptive im2col sizes: node -> scratch bytes, for every conv with an im2col buffer.

    `live_bytes[i]` and `scratch[i]` are step i's planned live bytes (scratch included) and scratch bytes; `peak` is
    the plan's peak. Each buffer grows to the most whole columns that keep step i at or under `peak`.
    """
    sizes: dict[str, int] = {}
    nodes = {n.name: n for n in graph.nodes}
    for i, name in enumerate(order):
        node = nodes[name]
        col = im2col_column_bytes(graph, node)
        if not col:
            continue
        _, ho, wo, _ = graph.tensors[node.outputs[0]].shape
        free = peak - (live_bytes[i] - scratch[i])
        columns = max(IM2COL_COLUMNS, min(ho * wo, free // col))
        sizes[name] = columns * col
    return sizes


def free_conv_columns(graph: Graph, order, live_bytes, scratch, peak: int | None, fused,
                      wide: bool = True) -> dict[str, int]:
    """More im2col columns from bytes that are free anyway: node -> scratch bytes, for unfused CONV_2D steps.

    With `wide`, each gets WIDE_COLUMNS int16 columns of kh*kw*Cin (`12*kh*kw*Cin` bytes) where its step has that room
    under the planned `peak` and it has at least 3 output pixels (the Cortex-M DSP kernels then run 1 channel x 3-6
    pixels per weight load); otherwise a 1x1 conv gets the two columns of `conv_columns_bytes` where those fit (its
    kernel then pre-widens two pixels once for all output channels instead of unpacking them per channel pair).
    Never raises the peak: steps without room keep what they have. `peak` None: every step has room (the plan
    option conv_columns="wide", which trades SRAM for speed)."""
    sizes: dict[str, int] = {}
    nodes = {n.name: n for n in graph.nodes}
    for i, name in enumerate(order):
        node = nodes[name]
        if node.op is not Op.CONV_2D or name in fused:
            continue
        two, columns = conv_columns_bytes(graph, node), WIDE_COLUMNS * column_bytes(graph, node)
        _, ho, wo, _ = graph.tensors[node.outputs[0]].shape
        base, room = live_bytes[i] - scratch[i], peak if peak is not None else float("inf")
        if wide and ho * wo >= 3 and base + columns <= room:
            sizes[name] = columns
        elif not scratch[i] and base + two <= room:
            sizes[name] = two
    return sizes
