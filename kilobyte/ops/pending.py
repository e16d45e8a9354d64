"""Op registry: the ops whose behaviour has not moved into an op module yet — their data, one `OpDef` each.

The tables every stage used to keep (attrs type, parameter inputs, weight axis, fusable activation, quantisation rule,
cost, TFLite builtin, runtime function) and the kernel contracts are here, so no stage keys a table by `Op` any more.
Their behaviour (shape rule, references, emitter, `.tflite` lowering) is still each stage's own code. Migrating an
op = moving its `OpDef` out of this file into its op module with the behaviour fields filled (`opdef.py`).
"""

from __future__ import annotations

import numpy as np

from .contract import InPlaceRule, KernelContract, conv_window, pad_window, pool_window
from .opdef import OpDef
from .types import (
    AddAttrs,
    BatchNormAttrs,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    MeanAttrs,
    NoAttrs,
    Op,
    PadAttrs,
    PoolAttrs,
    ReshapeAttrs,
    SoftmaxAttrs,
    StridedSliceAttrs,
    TileAttrs,
    TransposeAttrs,
)

# What TFLite's softmax kernels write (TFLite Micro checks the zero points).
FIXED = {Op.SOFTMAX: (np.float32(1 / 256), -128), Op.LOG_SOFTMAX: (np.float32(16 / 256), 127)}

CONTRACTS: dict[Op, KernelContract] = {c.op: c for c in (
    KernelContract(Op.CONV_2D, "conv", "kb_conv_params", local=True, window=conv_window, columns=True,
                   constraints="any kernel, stride, dilation and explicit padding; fused ReLU/ReLU6; a 1x1 conv "
                   "feeding only a residual ADD runs fused with it; pruned weights stored FWCS (DTMM's filterlets) "
                   "or CSR (`weight_format`) run kb_conv_fwcs / kb_conv_csr of kb_sparse_conv.c, per layer"),
    KernelContract(Op.DEPTHWISE_CONV_2D, "depthwise", "kb_conv_params", local=True, window=conv_window,
                   inplace=InPlaceRule("inplace_depthwise", "first", elementwise=False),
                   constraints="depth multiplier 1; any kernel, stride, dilation and explicit padding"),
    KernelContract(Op.FULLY_CONNECTED, "fc", "kb_fc_params", constraints="2-D input (1, in); fused ReLU/ReLU6"),
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
    KernelContract(Op.PAD, "pad", "kb_pad_params", local=True, window=pad_window,
                   constraints="H, W and C; padded with the zero point; folded into a following conv at import"),
    KernelContract(Op.RESHAPE, None, constraints="an alias of its input's bytes, or one copy"),
    KernelContract(Op.CONCAT, "concat", local=True,
                   constraints="channel axis; producers write straight into their slice, else a channel copy"),
    KernelContract(Op.MEAN, "mean", "kb_mean_params", constraints="the reduced axes are one contiguous run"),
    KernelContract(Op.TRANSPOSE, "movement", "kb_strides_params",
                   constraints="any permutation of up to 4 axes (NCHW -> NHWC is (0, 2, 3, 1)); input and output share "
                   "quantisation params; one strided copy (kb_strided_copy); not spatially local: ends a patch stage"),
    KernelContract(Op.STRIDED_SLICE, "movement", "kb_strides_params",
                   constraints="up to 4 axes; begin, end and shrink masks, negative indices and strides (resolved "
                   "at import as TFLite Micro does; ellipsis, new-axis and offset are refused: TFLite Micro ignores "
                   "them); input and output share quantisation params; one strided copy; not spatially local"),
    KernelContract(Op.TILE, "movement", "kb_strides_params",
                   constraints="up to 4 axes; input and output share quantisation params; a strided copy with repeats "
                   "(TFLite Micro has no TILE: checked against TFLite's interpreter); not spatially local"),
    KernelContract(Op.REDUCE_MAX, "movement", "kb_strides_params",
                   constraints="any axes of up to 4, keep_dims either way; input and output share quantisation params "
                   "(TFLite Micro requires it); raw int8 maximum (kb_reduce_max)"),
    KernelContract(Op.SOFTMAX, "softmax", "kb_softmax_params",
                   constraints="int8 in, int8 out with scale 1/256 and zero point -128 (TFLite); a float SOFTMAX "
                   "after a DEQUANTIZE at the output is left to the caller"),
    KernelContract(Op.LOG_SOFTMAX, "softmax", "kb_softmax_params",
                   constraints="int8 in, int8 out with scale 16/256 and zero point 127 (TFLite)"),
    KernelContract(Op.PRELU, "lut", constraints="int8 in, out and constant alpha (per tensor params, as TFLite "
                   "Micro); alpha per channel or single: a 256-entry table per channel, one kb_lut per table"),
    *(KernelContract(op, None, local=True, constraints="folded into the producer at import")
      for op in (Op.IDENTITY, Op.BATCH_NORM)),
    KernelContract(Op.QUANTIZE, "quantize", "kb_requantize_params",
                   constraints="uint8 <-> int8 at the model's input or output; float -> int8 at the input through "
                   "kb_invoke_float"),
    KernelContract(Op.DEQUANTIZE, "quantize", constraints="int8 / uint8 -> float at a model's output, through "
                   "kb_invoke_float, with the float ops after it (SOFTMAX, LOG_SOFTMAX, LOGISTIC, ADD / MUL by a "
                   "constant, RESHAPE: kb_float_tail.c)"),
)}

PENDING = (
    OpDef(Op.CONV_2D, ConvAttrs, CONTRACTS[Op.CONV_2D], params=True, weight_axis=0, fusable=True, builtin="CONV_2D"),
    OpDef(Op.DEPTHWISE_CONV_2D, DepthwiseAttrs, CONTRACTS[Op.DEPTHWISE_CONV_2D], params=True, weight_axis=3,
          fusable=True, builtin="DEPTHWISE_CONV_2D"),
    OpDef(Op.FULLY_CONNECTED, FullyConnectedAttrs, CONTRACTS[Op.FULLY_CONNECTED], params=True, weight_axis=0,
          fusable=True, builtin="FULLY_CONNECTED", function="kb_fully_connected"),
    OpDef(Op.ADD, AddAttrs, CONTRACTS[Op.ADD], fusable=True, builtin="ADD", function="kb_add"),
    OpDef(Op.SUB, AddAttrs, CONTRACTS[Op.SUB], fusable=True, elementwise_cost=True, builtin="SUB", function="kb_sub"),
    OpDef(Op.MUL, AddAttrs, CONTRACTS[Op.MUL], fusable=True, elementwise_cost=True, builtin="MUL", function="kb_mul"),
    OpDef(Op.MAXIMUM, NoAttrs, CONTRACTS[Op.MAXIMUM], qparams="shared", elementwise_cost=True, builtin="MAXIMUM",
          function="kb_maximum"),
    OpDef(Op.MINIMUM, NoAttrs, CONTRACTS[Op.MINIMUM], qparams="shared", elementwise_cost=True, builtin="MINIMUM",
          function="kb_minimum"),
    OpDef(Op.AVG_POOL_2D, PoolAttrs, CONTRACTS[Op.AVG_POOL_2D], fusable=True, qparams="shared",
          builtin="AVERAGE_POOL_2D", function="kb_avg_pool"),
    OpDef(Op.MAX_POOL_2D, PoolAttrs, CONTRACTS[Op.MAX_POOL_2D], fusable=True, qparams="shared", builtin="MAX_POOL_2D",
          function="kb_max_pool"),
    OpDef(Op.MEAN, MeanAttrs, CONTRACTS[Op.MEAN], builtin="MEAN", function="kb_mean"),
    OpDef(Op.PAD, PadAttrs, CONTRACTS[Op.PAD], qparams="shared", builtin="PAD", function="kb_pad"),
    OpDef(Op.RESHAPE, ReshapeAttrs, CONTRACTS[Op.RESHAPE], qparams="shared", builtin="RESHAPE"),
    OpDef(Op.CONCAT, ConcatAttrs, CONTRACTS[Op.CONCAT], fusable=True, qparams="shared", builtin="CONCATENATION",
          function="kb_copy_channels"),
    OpDef(Op.TRANSPOSE, TransposeAttrs, CONTRACTS[Op.TRANSPOSE], qparams="shared", builtin="TRANSPOSE",
          function="kb_strided_copy"),
    OpDef(Op.STRIDED_SLICE, StridedSliceAttrs, CONTRACTS[Op.STRIDED_SLICE], qparams="shared", builtin="STRIDED_SLICE",
          function="kb_strided_copy"),
    OpDef(Op.TILE, TileAttrs, CONTRACTS[Op.TILE], qparams="shared", builtin="TILE", function="kb_strided_copy"),
    OpDef(Op.REDUCE_MAX, MeanAttrs, CONTRACTS[Op.REDUCE_MAX], qparams="shared", builtin="REDUCE_MAX",
          function="kb_reduce_max"),
    OpDef(Op.SOFTMAX, SoftmaxAttrs, CONTRACTS[Op.SOFTMAX], qparams="fixed", fixed_qparams=FIXED[Op.SOFTMAX],
          elementwise_cost=True, int8_input=False, builtin="SOFTMAX", function="kb_softmax"),
    OpDef(Op.LOG_SOFTMAX, NoAttrs, CONTRACTS[Op.LOG_SOFTMAX], qparams="fixed", fixed_qparams=FIXED[Op.LOG_SOFTMAX],
          elementwise_cost=True, int8_input=False, builtin="LOG_SOFTMAX", function="kb_log_softmax"),
    OpDef(Op.PRELU, NoAttrs, CONTRACTS[Op.PRELU], elementwise_cost=True, builtin="PRELU"),
    OpDef(Op.BATCH_NORM, BatchNormAttrs, CONTRACTS[Op.BATCH_NORM], params=True, elementwise_cost=True,
          int8_input=False),
    OpDef(Op.IDENTITY, NoAttrs, CONTRACTS[Op.IDENTITY], qparams="shared", int8_input=False),
    OpDef(Op.QUANTIZE, NoAttrs, CONTRACTS[Op.QUANTIZE], int8_input=False, builtin="QUANTIZE"),
    OpDef(Op.DEQUANTIZE, NoAttrs, CONTRACTS[Op.DEQUANTIZE], builtin="DEQUANTIZE"),
)
