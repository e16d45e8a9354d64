"""Op registry: the ops whose behaviour has not moved into an op module yet — their data, one `OpDef` each.

The tables every stage used to keep (attrs type, parameter inputs, weight axis, fusable activation, quantisation rule,
cost, TFLite builtin, runtime function) and the kernel contracts are here, so no stage keys a table by `Op` any more.
Their behaviour (shape rule, references, emitter, `.tflite` lowering) is still each stage's own code. Migrating an
op = moving its `OpDef` out of this file into its op module with the behaviour fields filled (`opdef.py`).
"""

from __future__ import annotations

from .contract import InPlaceRule, KernelContract, conv_window
from .opdef import OpDef
from .types import (
    ConvAttrs,
    DepthwiseAttrs,
    Op,
)

CONTRACTS: dict[Op, KernelContract] = {c.op: c for c in (
    KernelContract(Op.CONV_2D, "conv", "kb_conv_params", local=True, window=conv_window, columns=True,
                   constraints="any kernel, stride, dilation and explicit padding; fused ReLU/ReLU6; a 1x1 conv "
                   "feeding only a residual ADD runs fused with it; pruned weights stored FWCS (DTMM's filterlets) "
                   "or CSR (`weight_format`) run kb_conv_fwcs / kb_conv_csr of kb_sparse_conv.c, per layer"),
    KernelContract(Op.DEPTHWISE_CONV_2D, "depthwise", "kb_conv_params", local=True, window=conv_window,
                   inplace=InPlaceRule("inplace_depthwise", "first", elementwise=False),
                   constraints="depth multiplier 1; any kernel, stride, dilation and explicit padding"),
)}

PENDING = (
    OpDef(Op.CONV_2D, ConvAttrs, CONTRACTS[Op.CONV_2D], params=True, weight_axis=0, fusable=True, builtin="CONV_2D"),
    OpDef(Op.DEPTHWISE_CONV_2D, DepthwiseAttrs, CONTRACTS[Op.DEPTHWISE_CONV_2D], params=True, weight_axis=3,
          fusable=True, builtin="DEPTHWISE_CONV_2D"),
)
