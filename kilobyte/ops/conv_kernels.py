"""Op registry: what a convolution's kernels read and which of them runs — CONV_2D and DEPTHWISE_CONV_2D's scratch
sizes (im2col columns of the DSP conv, the zero-padded channel of an in-place depthwise conv, the windows of a
sparse conv) and the C variant a node calls. The planner (`kernels/contracts.py`, `schedule/scratch.py`), the Flash
model (`kernels/calls.py`) and the code generator ask it, so the convs' C emitters can move into `ops/` beside it.
"""

from __future__ import annotations

from .types import Op

IM2COL_COLUMNS = 2  # columns of a per-layer DSP im2col buffer (KB_CONV_SCRATCH in kilobyte.h)
IM2COL_ELEMENT_BYTES = 2  # int16 after widening
SPARSE_RQ_BYTES = 36  # sizeof(kb_arm_rq1): per output channel of a sparse conv's scratch
INPLACE_DW = {(3, 3): "kb_depthwise_inplace_3x3", (5, 5): "kb_depthwise_inplace_5x5",
              (7, 7): "kb_depthwise_inplace_7x7"}


def padded_channel_bytes(graph, node) -> int:
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


DW_RING_BYTES_PER_PIXEL = 24  # three window rows x (two int16-pair words) per ring pixel: KB_DWG_RING_PIXEL_BYTES
DW_RING_S1_MAX_WIDTH = 7  # KB_DWG_S1_MAX_WIDTH in runtime/c/arm/kb_depthwise.c: stride 1 runs the group path only
MVE_RING_BYTES_PER_PIXEL = 12  # runtime/c/mve/kb_depthwise.c's KB_DW_RING_BYTES: three rows x four channel bytes
#                           on output rows of at most this many pixels (wider ones: per channel, fewer cycles)


def mve_ring_bytes(graph, node, in_place: bool = True) -> int:
    """Bytes of the Helium 3x3 depthwise conv's ring (`mve/kb_depthwise.c`), in place or not (`kb_depthwise_3x3`):
    three padded input rows of (W+pl+pr) pixels, four channel bytes a pixel — or at stride 1 three padded columns of
    (H+pt+pb) pixels, which the kernel takes on maps taller than wide, whichever is larger; 0 where that path never
    runs (a window other than 3x3, dilation, a stride other than 1x1 or 2x2, fewer than four channels). In place,
    where the padded plane already holds it the kernel needs no more. `in_place` is the planner's question; the
    answer is the same."""
    _, h, w, c = graph.tensors[node.inputs[0]].shape
    kernel = tuple(graph.tensors[node.inputs[1]].shape[1:3])
    if (kernel != (3, 3) or tuple(node.attrs.dilation) != (1, 1)
            or tuple(node.attrs.stride) not in ((1, 1), (2, 2)) or c < 4):
        return 0
    t, b, left, r = node.attrs.padding
    across = MVE_RING_BYTES_PER_PIXEL * (w + left + r)
    if tuple(node.attrs.stride) == (2, 2):
        return across
    return max(across, MVE_RING_BYTES_PER_PIXEL * (h + t + b))  # stride 1 may run down the columns (tall maps)


def depthwise_ring_bytes(graph, node, in_place: bool = True) -> int:
    """Bytes of the DSP in-place depthwise conv's channel-group ring (`arm/kb_depthwise.c`, `kb_arm_dwg.S`): three
    widened window rows of (W+pl+pr) pixels, 24 bytes a pixel; 0 where that path never runs (a window other than
    3x3, dilation, a stride other than 1x1 or 2x2, fewer than four channels; in place, stride 1 on output rows wider
    than `DW_RING_S1_MAX_WIDTH` pixels: the kernel runs channel by channel there). Out of place (`kb_depthwise_3x3`)
    every 3x3 stride-1 or -2 conv takes the ring where granted.

    >>> from kilobyte.ir import DepthwiseAttrs, GraphBuilder, Op
    >>> import numpy as np
    >>> b = GraphBuilder()
    >>> y = b.node(Op.DEPTHWISE_CONV_2D, [b.input((1, 6, 6, 32))], DepthwiseAttrs(padding=(1, 1, 1, 1)),
    ...            params={"weight": np.zeros((1, 3, 3, 32), np.float32)})
    >>> padded_channel_bytes(b.build([y]), b.nodes[0]), depthwise_ring_bytes(b.build([y]), b.nodes[0])
    (64, 192)
    """
    _, h, w, c = graph.tensors[node.inputs[0]].shape
    kernel = tuple(graph.tensors[node.inputs[1]].shape[1:3])
    stride = tuple(node.attrs.stride)
    wo = graph.tensors[node.outputs[0]].shape[2]
    if kernel != (3, 3) or tuple(node.attrs.dilation) != (1, 1) or stride not in ((1, 1), (2, 2)) or c < 4:
        return 0
    if in_place and stride == (1, 1) and wo > DW_RING_S1_MAX_WIDTH:
        return 0
    _, _, left, r = node.attrs.padding
    return DW_RING_BYTES_PER_PIXEL * (w + left + r)


def column_bytes(graph, node) -> int:
    """Bytes of one int16 im2col column of a CONV_2D's window: kh*kw*Cin values, whatever the kernel size."""
    _, kh, kw, cin = graph.tensors[node.inputs[1]].shape
    return IM2COL_ELEMENT_BYTES * kh * kw * cin


def wide_column_bytes(graph, node) -> int:
    """Bytes of one column of the DSP conv's wide path (3-6 columns, `conv_wide` in runtime/c/arm/kb_conv.c): whole
    groups of four int16 values, zeros after the window's kh*kw*Cin — what free bytes are granted in.

    >>> from kilobyte.ir import ConvAttrs, GraphBuilder, Op
    >>> import numpy as np
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 32, 32, 3))], ConvAttrs(padding=(1, 1, 1, 1)),
    ...            params={"weight": np.zeros((16, 3, 3, 3), np.float32)})
    >>> column_bytes(b.build([y]), b.nodes[0]), wide_column_bytes(b.build([y]), b.nodes[0])
    (54, 56)
    """
    values = column_bytes(graph, node) // IM2COL_ELEMENT_BYTES
    return IM2COL_ELEMENT_BYTES * ((values + 3) & ~3)


MVE_CONV_COLUMNS = 3  # runtime/c/mve/kb_conv.c: int8 im2col columns per pixel group (kb_mve_dot32.S)


def mve_conv_direct(graph, node) -> bool:
    """Whether the Helium conv reads `node`'s windows in place (a 1x1 window without padding), so needs no columns."""
    return graph.tensors[node.inputs[1]].shape[1:3] == (1, 1) and not any(node.attrs.padding)


def mve_conv_scratch_bytes(graph, node) -> int:
    """Bytes of the Helium conv's scratch (`KB_MVE_CONV_SCRATCH` in runtime/c/mve/kb_mve_dot32.h): three int8
    im2col columns of kh*kw*Cin values (none when it reads the windows in place), rounded up to a word, then one
    int32 per output channel (its bias with in_offset * sum(w) folded in, computed once per call).

    >>> from kilobyte.ir import ConvAttrs, GraphBuilder, Op
    >>> import numpy as np
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 8, 8, 3))], ConvAttrs(padding=(1, 1, 1, 1)),
    ...            params={"weight": np.zeros((16, 3, 3, 3), np.float32)})
    >>> mve_conv_scratch_bytes(b.build([y]), b.nodes[0])  # 3 * 27 = 81 -> 84, + 4 * 16
    148
    """
    _, kh, kw, cin = graph.tensors[node.inputs[1]].shape
    out_c = graph.tensors[node.outputs[0]].shape[-1]
    columns = 0 if mve_conv_direct(graph, node) else -(-MVE_CONV_COLUMNS * kh * kw * cin // 4) * 4
    return columns + 4 * out_c


def conv_columns_bytes(graph, node) -> int:
    """Bytes of the two int16 columns a conv kernel may widen its windows into (`KB_CONV_SCRATCH` in kilobyte.h)."""
    return IM2COL_COLUMNS * column_bytes(graph, node)


def is_sparse(node) -> bool:
    """A CONV_2D whose weights the generated C stores in a sparse format (FWCS or CSR): `kb_sparse_conv.c`."""
    return node.op is Op.CONV_2D and node.attrs.weight_format != "dense"


def sparse_scratch_bytes(graph, node) -> int:
    """`KB_SPARSE_SCRATCH`: two im2col windows of 2-byte values, kh*kw*Cin rounded up to a multiple of 4, then 36
    bytes per output channel (the DSP kernels' requantisation constants, prepared once per call)."""
    cout, kh, kw, cin = graph.tensors[node.inputs[1]].shape
    return 4 * ((kh * kw * cin + 3) // 4 * 4) + SPARSE_RQ_BYTES * cout


def conv_kernel(node, kernel: tuple[int, int]) -> str:
    """The CONV_2D variant to call: 1x1 fast path, unrolled 3x3, or general (all three are bit-identical); with a
    sparse weight format, that format's kernel (`kb_conv_fwcs`, `kb_conv_csr`)."""
    if node.attrs.weight_format != "dense":
        return f"kb_conv_{node.attrs.weight_format}"
    if kernel == (1, 1) and node.attrs.stride == (1, 1) and node.attrs.padding == (0, 0, 0, 0):
        return "kb_conv_1x1"
    if kernel == (3, 3) and node.attrs.dilation == (1, 1):
        return "kb_conv_3x3"
    return "kb_conv"


def depthwise_kernel(node, kernel: tuple[int, int], in_place: bool) -> str:
    """The DEPTHWISE_CONV_2D variant to call: in place, `inplace_depthwise_kernel`; out of place, `kb_depthwise_3x3`
    for a 3x3 window with dilation 1 (it takes a scratch ring, the DSP kernels' group path), else `kb_depthwise`."""
    if in_place:
        return inplace_depthwise_kernel(node, kernel)
    return "kb_depthwise_3x3" if kernel == (3, 3) and node.attrs.dilation == (1, 1) else "kb_depthwise"


def inplace_depthwise_kernel(node, kernel: tuple[int, int]) -> str:
    """The in-place depthwise variant: unrolled 3x3/5x5/7x7 need dilation 1, otherwise the general one."""
    if node.attrs.dilation != (1, 1):
        return "kb_depthwise_inplace"
    return INPLACE_DW.get(kernel, "kb_depthwise_inplace")
