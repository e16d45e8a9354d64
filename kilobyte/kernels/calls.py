"""Kernels stage: the runtime function each node calls — the C entry points, named as the code generator emits them.

The code generator (`codegen/layers.py`, `codegen/patch_loop.py`) writes the calls and the Flash model
(`schedule/flash.py`) counts the code they pull into the linked firmware, so both ask this module: a conv's variant
(1x1 fast path, unrolled 3x3, general), an in-place depthwise conv's unrolled variant, an ADD or a SUB, an ADD / SUB /
MUL by a constant, ... Only the functions a model calls are linked (`-ffunction-sections -Wl,--gc-sections`), and in
the DSP set a 1x1 conv and a general one differ by 4 KB, so the family alone does not say how much code a model has.

>>> ENTRY_POINTS["pool"]
('kb_avg_pool', 'kb_max_pool')
"""

from __future__ import annotations

from ..ir import Graph, Node, Op
from ..ops import opdef
from ..ops.binary import constant_operand
from ..ops.conv_kernels import conv_kernel, depthwise_kernel

# Kernel family -> the functions of its C file that generated code may call (`runtime.KERNEL_FILES`). `memmove` is
# the C library's: a RESHAPE that cannot alias its input copies its bytes with it.
ENTRY_POINTS: dict[str, tuple[str, ...]] = {
    "conv": ("kb_conv", "kb_conv_1x1", "kb_conv_3x3"),
    "conv_add": ("kb_conv_1x1_add",),
    "depthwise": ("kb_depthwise", "kb_depthwise_3x3", "kb_depthwise_inplace", "kb_depthwise_inplace_3x3",
                  "kb_depthwise_inplace_5x5", "kb_depthwise_inplace_7x7"),
    "fc": ("kb_fully_connected",),
    "add": ("kb_add", "kb_sub", "kb_add_const"),
    "pool": ("kb_avg_pool", "kb_max_pool"),
    "mean": ("kb_mean",),
    "concat": ("kb_copy_channels",),
    "pad": ("kb_pad",),
    "quantize": ("kb_requantize_u8_i8", "kb_requantize_i8_u8"),
    "softmax": ("kb_softmax", "kb_log_softmax"),
    "elementwise": ("kb_mul", "kb_maximum", "kb_minimum", "kb_mul_const"),
    "lut": ("kb_lut",),
    "movement": ("kb_strided_copy", "kb_reduce_max"),
    "resize": ("kb_resize_nearest", "kb_resize_bilinear"),
    "transpose_conv": ("kb_transpose_conv",),
    "sparse_conv": ("kb_conv_fwcs", "kb_conv_csr"),
    "reshape": ("memmove",),
}
def node_function(graph: Graph, node: Node, in_place: bool = False) -> str | None:
    """The runtime function `node`'s layer calls (`in_place`: the plan runs it over its input), or None for a node
    that calls none (RESHAPE, an identity). A fused conv + ADD calls `kb_conv_1x1_add` instead (`ENTRY_POINTS`).

    >>> import numpy as np
    >>> from kilobyte.ir import ConvAttrs, GraphBuilder
    >>> b = GraphBuilder()
    >>> y = b.node(Op.CONV_2D, [b.input((1, 8, 8, 4))], ConvAttrs(), params={"weight": np.zeros((16, 1, 1, 4))})
    >>> node_function(b.build([y]), b.nodes[0])
    'kb_conv_1x1'
    """
    if node.op is Op.CONV_2D:
        return conv_kernel(node, tuple(graph.tensors[node.inputs[1]].shape[1:3]))
    if node.op is Op.DEPTHWISE_CONV_2D:
        kernel = tuple(graph.tensors[node.inputs[1]].shape[1:3])
        return depthwise_kernel(node, kernel, in_place)
    if node.op is Op.QUANTIZE:
        return "kb_requantize_u8_i8" if graph.tensors[node.inputs[0]].dtype == "uint8" else "kb_requantize_i8_u8"
    if constant_operand(graph, node) is not None:  # ADD / SUB / MUL by a constant: its terms prepared
        return "kb_mul_const" if node.op is Op.MUL else "kb_add_const"
    return opdef(node.op).function
