"""Op registry: the ops whose behaviour has not moved into an op module yet — their data, one `OpDef` each.

The tables every stage used to keep (attrs type, parameter inputs, weight axis, fusable activation, quantisation rule,
cost, TFLite builtin, runtime function) and the kernel contracts are here, so no stage keys a table by `Op` any more.
Their behaviour (shape rule, references, emitter, `.tflite` lowering) is still each stage's own code. Migrating an
op = moving its `OpDef` out of this file into its op module with the behaviour fields filled (`opdef.py`).
"""

from __future__ import annotations

from .contract import InPlaceRule, KernelContract, conv_window, pool_window
from .opdef import OpDef
from .types import (
    AddAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    NoAttrs,
    Op,
    PoolAttrs,
)

CONTRACTS: dict[Op, KernelContract] = {c.op: c for c in (
    KernelContract(Op.CONV_2D, "conv", "kb_conv_params", local=True, window=conv_window, columns=True,
                   constraints="any kernel, stride, dilation and explicit padding; fused ReLU/ReLU6; a 1x1 conv "
                   "feeding only a residual ADD runs fused with it; pruned weights stored FWCS (DTMM's filterlets) "
                   "or CSR (`weight_format`) run kb_conv_fwcs / kb_conv_csr of kb_sparse_conv.c, per layer"),
    KernelContract(Op.DEPTHWISE_CONV_2D, "depthwise", "kb_conv_params", local=True, window=conv_window,
                   inplace=InPlaceRule("inplace_depthwise", "first", elementwise=False),
                   constraints="depth multiplier 1; any kernel, stride, dilation and explicit padding"),
    KernelContract(Op.ADD, "add", "kb_add_params", local=True,
                   inplace=InPlaceRule("inplace_add", "any", elementwise=True),
                   constraints="two activations of the same shape, or a (1,1,1,C) one broadcast over (1,H,W,C); "
                   "TFLite's left shift 20; either operand may be a constant of any shape that broadcasts (a (C,) "
                   "bias, a single value, ...): kb_add_const with its rescaled values prepared, not spatially local; "
                   "fused ReLU/ReLU6"),
    KernelContract(Op.SUB, "add", "kb_add_params",
                   constraints="ADD's arithmetic, the rescaled input 2 subtracted (kb_sub); two activations of the "
                   "same shape, or a (1,1,1,C) operand broadcast over (1,H,W,C); either may be a constant of any "
                   "shape that broadcasts (kb_add_const); fused ReLU/ReLU6"),
    KernelContract(Op.MUL, "elementwise", "kb_mul_params",
                   constraints="two activations of the same shape, or a (1,1,1,C) operand broadcast over (1,H,W,C) "
                   "(squeeze-excite); either may be a constant of any shape that broadcasts (kb_mul_const); one "
                   "output rescale; fused ReLU/ReLU6"),
    *(KernelContract(op, "elementwise", "kb_minmax_params",
                     constraints="inputs and output share quantisation params; same shape or a (1,1,1,C) operand "
                     "broadcast over (1,H,W,C), either may be a constant") for op in (Op.MAXIMUM, Op.MINIMUM)),
    KernelContract(Op.AVG_POOL_2D, "pool", "kb_conv_params", local=True, window=pool_window,
                   constraints="input and output share quantisation params"),
    KernelContract(Op.MAX_POOL_2D, "pool", "kb_conv_params", local=True, window=pool_window,
                   constraints="input and output share quantisation params"),
)}

PENDING = (
    OpDef(Op.CONV_2D, ConvAttrs, CONTRACTS[Op.CONV_2D], params=True, weight_axis=0, fusable=True, builtin="CONV_2D"),
    OpDef(Op.DEPTHWISE_CONV_2D, DepthwiseAttrs, CONTRACTS[Op.DEPTHWISE_CONV_2D], params=True, weight_axis=3,
          fusable=True, builtin="DEPTHWISE_CONV_2D"),
    OpDef(Op.ADD, AddAttrs, CONTRACTS[Op.ADD], fusable=True, builtin="ADD", function="kb_add", const_operands=True),
    OpDef(Op.SUB, AddAttrs, CONTRACTS[Op.SUB], fusable=True, elementwise_cost=True, builtin="SUB", function="kb_sub",
          const_operands=True),
    OpDef(Op.MUL, AddAttrs, CONTRACTS[Op.MUL], fusable=True, elementwise_cost=True, builtin="MUL", function="kb_mul",
          const_operands=True),
    OpDef(Op.MAXIMUM, NoAttrs, CONTRACTS[Op.MAXIMUM], qparams="shared", elementwise_cost=True, builtin="MAXIMUM",
          function="kb_maximum", const_operands=True),
    OpDef(Op.MINIMUM, NoAttrs, CONTRACTS[Op.MINIMUM], qparams="shared", elementwise_cost=True, builtin="MINIMUM",
          function="kb_minimum", const_operands=True),
    OpDef(Op.AVG_POOL_2D, PoolAttrs, CONTRACTS[Op.AVG_POOL_2D], fusable=True, qparams="shared",
          builtin="AVERAGE_POOL_2D", function="kb_avg_pool"),
    OpDef(Op.MAX_POOL_2D, PoolAttrs, CONTRACTS[Op.MAX_POOL_2D], fusable=True, qparams="shared", builtin="MAX_POOL_2D",
          function="kb_max_pool"),
)
