"""Op registry: the ops whose behaviour has not moved into an op module yet — CONV_2D and DEPTHWISE_CONV_2D.

Their data (attrs type, parameter inputs, weight axis, fusable activation, TFLite builtin) and kernel contracts are
here; their behaviour (shape rule, references, emitters, `.tflite` lowering) is still the stages' own code, which
asks the registry first and falls back to it. Moving them means filling the behaviour fields in an op module
(`opdef.py`) once the scratch rules, kernel variants and sparse weight formats they read sit below `ops/`.
"""

from __future__ import annotations

from .contract import InPlaceRule, KernelContract, conv_window
from .opdef import OpDef
from .types import ConvAttrs, DepthwiseAttrs, Op

DEFS = (
    OpDef(Op.CONV_2D, ConvAttrs,
          KernelContract(Op.CONV_2D, "conv", "kb_conv_params", local=True, window=conv_window, columns=True,
                         constraints="any kernel, stride, dilation and explicit padding; fused ReLU/ReLU6; a 1x1 "
                         "conv feeding only a residual ADD runs fused with it; pruned weights stored FWCS (DTMM's "
                         "filterlets) or CSR (`weight_format`) run kb_conv_fwcs / kb_conv_csr of kb_sparse_conv.c, "
                         "per layer"),
          params=True, weight_axis=0, fusable=True, builtin="CONV_2D"),
    OpDef(Op.DEPTHWISE_CONV_2D, DepthwiseAttrs,
          KernelContract(Op.DEPTHWISE_CONV_2D, "depthwise", "kb_conv_params", local=True, window=conv_window,
                         inplace=InPlaceRule("inplace_depthwise", "first", elementwise=False),
                         constraints="depth multiplier 1; any kernel, stride, dilation and explicit padding"),
          params=True, weight_axis=3, fusable=True, builtin="DEPTHWISE_CONV_2D"),
)
