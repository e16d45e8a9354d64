"""Kernels stage: the contracts, one per op (see the package docstring), and the questions the planner asks of them.

Scratch, as the runtime's kernels read it (bytes; scratch lives in the arena at its step only):
- CONV_2D, portable kernels: none (they read each window straight from the NHWC input).
- CONV_2D, DSP kernels with at least `KB_COLS_MIN_OUT_C` output channels: im2col columns of `kh*kw*Cin` int16
  values. A conv with a window larger than 1x1 is planned two columns per layer (`4*kh*kw*Cin` bytes; without them
  it falls back to direct convolution); from bytes free anyway the planner grants up to `WIDE_COLUMNS` (the kernel
  reads at most that many) or, for 1x1 convs, two. With fewer output channels the DSP conv never widens columns
  (`KB_COLS_MIN_OUT_C` in `runtime/c/arm/`), so it is planned none.
- CONV_2D with a sparse weight format (FWCS, CSR; `ir/sparse.py`), both sets: two im2col windows of 2-byte values,
  `4 * ceil4(kh*kw*Cin)` bytes, and 36 bytes per output channel (`KB_SPARSE_SCRATCH`), always (the DSP kernels widen
  two pixels' windows into them and prepare each channel's requantisation, the portable ones gather one int8
  window); never more, and never a patch stage: a sparse conv runs per layer.
- DEPTHWISE_CONV_2D in place (TinyEngine): one zero-padded input channel, `(H+pt+pb)*(W+pl+pr)` bytes, both sets.
- TRANSPOSE_CONV: none. TFLite Micro scatters into an int32 copy of the whole output (4 bytes per output value of
  arena); `kb_transpose_conv` gathers per output pixel instead, with the same sums.
- Everything else streams: none.

TRANSPOSE, STRIDED_SLICE, TILE and REDUCE_MAX (family `movement`) are not spatially local: an output pixel of a
transpose or slice comes from elsewhere in the map (a strided slice's patch of output reads a strided, not a
contiguous, input box; a transpose may swap H or W with C), so a patch stage ends before them. None runs in place:
their output overlaps their input only when it is a copy, and RESHAPE covers that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..interp.int8_ref import add_node_params, constant_terms, mul_node_params
from ..ir import Graph, Node, Op

KERNEL_SETS = ("portable", "dsp")
KB_COLS_MIN_OUT_C = 16  # runtime/c/arm: below this many output channels the DSP conv never widens columns
IM2COL_COLUMNS = 2  # columns of a per-layer DSP im2col buffer (KB_CONV_SCRATCH in kilobyte.h)
WIDE_COLUMNS = 6  # the most columns the DSP conv reads
IM2COL_ELEMENT_BYTES = 2  # int16 after widening
SPARSE_RQ_BYTES = 36  # sizeof(kb_arm_rq1): per output channel of a sparse conv's scratch

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
    window: Callable[[Graph, Node], tuple[Window, Window]] | None = None  # None with `local`: pointwise
    columns: bool = False  # reads im2col columns with the DSP kernel set (CONV_2D)
    constraints: str = ""  # what the int8 kernel accepts, for people (docs/ops.md is generated from it)


def _conv_window(graph: Graph, node: Node) -> tuple[Window, Window]:
    _, kh, kw, _ = graph.tensors[node.inputs[1]].shape
    t, b, left, r = node.attrs.padding
    (sh, sw), (dh, dw) = node.attrs.stride, node.attrs.dilation
    return (kh, sh, dh, t, b), (kw, sw, dw, left, r)


def _pool_window(graph: Graph, node: Node) -> tuple[Window, Window]:
    (kh, kw), (sh, sw) = node.attrs.kernel, node.attrs.stride
    t, b, left, r = node.attrs.padding
    return (kh, sh, 1, t, b), (kw, sw, 1, left, r)


def _pad_window(graph: Graph, node: Node) -> tuple[Window, Window]:
    (t, b), (left, r) = node.attrs.pads[1], node.attrs.pads[2]
    return (1, 1, 1, t, b), (1, 1, 1, left, r)


CONTRACTS: dict[Op, KernelContract] = {c.op: c for c in (
    KernelContract(Op.CONV_2D, "conv", "kb_conv_params", local=True, window=_conv_window, columns=True,
                   constraints="any kernel, stride, dilation and explicit padding; fused ReLU/ReLU6; a 1x1 conv "
                   "feeding only a residual ADD runs fused with it; pruned weights stored FWCS (DTMM's filterlets) "
                   "or CSR (`weight_format`) run kb_conv_fwcs / kb_conv_csr of kb_sparse_conv.c, per layer"),
    KernelContract(Op.DEPTHWISE_CONV_2D, "depthwise", "kb_conv_params", local=True, window=_conv_window,
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
    KernelContract(Op.AVG_POOL_2D, "pool", "kb_conv_params", local=True, window=_pool_window,
                   constraints="input and output share quantisation params"),
    KernelContract(Op.MAX_POOL_2D, "pool", "kb_conv_params", local=True, window=_pool_window,
                   constraints="input and output share quantisation params"),
    KernelContract(Op.PAD, "pad", "kb_pad_params", local=True, window=_pad_window,
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
    KernelContract(Op.LOGISTIC, "lut", constraints="int8 in, int8 out with scale 1/256 and zero point -128 (TFLite); "
                   "a 256-entry table per node"),
    KernelContract(Op.TANH, "lut", constraints="int8 in, int8 out with scale 1/128 and zero point 0 (TFLite); a "
                   "256-entry table per node"),
    KernelContract(Op.ELU, "lut", constraints="int8 in and out (alpha 1, as TFLite); a 256-entry table per node, built "
                   "as TFLite Micro's Prepare builds it"),
    KernelContract(Op.RELU_N1_TO_1, "lut", constraints="int8 in and out; a 256-entry table per node, TFLite's "
                   "requantise-and-clamp (TFLite Micro has no RELU_N1_TO_1: checked against TFLite's interpreter)"),
    *(KernelContract(op, "lut", constraints="int8 in and out; a 256-entry table per node, built as TFLite's Prepare "
                     "builds it in float32 (TFLite Micro's kernel is float only: checked against TFLite's interpreter)")
      for op in (Op.EXP, Op.LOG)),
    KernelContract(Op.PRELU, "lut", constraints="int8 in, out and constant alpha (per tensor params, as TFLite "
                   "Micro); alpha per channel or single: a 256-entry table per channel, one kb_lut per table"),
    KernelContract(Op.HARD_SWISH, "lut", constraints="int8 in and out, input scale below 128x the output's "
                   "(TFLite Micro); a 256-entry table per node"),
    KernelContract(Op.LEAKY_RELU, "lut", constraints="int8 in and out, any alpha (negative too); a 256-entry table "
                   "per node"),
    KernelContract(Op.GELU, "lut", constraints="int8 in and out, exact (erf) or tanh-approximate; a 256-entry table "
                   "per node, built as TFLite's int8 GELU builds it (TFLite Micro has no GELU kernel)"),
    *(KernelContract(op, "resize", "kb_resize_params",
                     constraints=f"input and output share quantisation params; {how}; any sizes below 32768 (an "
                     "int16 table of source rows and columns per node); runs per layer, never in a patch stage "
                     "(an integer-factor resize would be spatially local, other factors are not)")
      for op, how in ((Op.RESIZE_NEAREST_NEIGHBOR, "align_corners and half_pixel_centers in any combination"),
                      (Op.RESIZE_BILINEAR, "align_corners or half_pixel_centers (not both, as TFLite); sizes where "
                       "TFLite Micro's Q10 scale would read past the input edge are refused"))),
    KernelContract(Op.TRANSPOSE_CONV, "transpose_conv", "kb_conv_params",
                   constraints="any kernel and stride, crop on any side (SAME, VALID, PyTorch's padding and "
                   "output_padding); per-channel weights, bias; fused ReLU/ReLU6; no scratch (gathers per output "
                   "pixel where TFLite Micro scatters into an int32 copy of the output); runs per layer, never in "
                   "a patch stage"),
    KernelContract(Op.RELU, "lut", constraints="folded into the producer at import; one left standing in an int8 "
                   "file runs as a 256-entry table"),
    KernelContract(Op.RELU6, "lut", constraints="folded into the producer at import; one left standing in an int8 "
                   "file runs as a 256-entry table, input and output quantised alike (TFLite Micro never rescales)"),
    *(KernelContract(op, None, local=True, constraints="folded into the producer at import")
      for op in (Op.IDENTITY, Op.BATCH_NORM)),
    KernelContract(Op.QUANTIZE, "quantize", "kb_requantize_params",
                   constraints="uint8 <-> int8 at the model's input or output; float -> int8 at the input through "
                   "kb_invoke_float"),
    KernelContract(Op.DEQUANTIZE, "quantize", constraints="int8 / uint8 -> float at a model's output, through "
                   "kb_invoke_float, with the float ops after it (SOFTMAX, LOG_SOFTMAX, LOGISTIC, ADD / MUL by a "
                   "constant, RESHAPE: kb_float_tail.c)"),
)}


def contract_for(node: Node) -> KernelContract:
    """The contract of `node`'s op (every `Op` has one)."""
    return CONTRACTS[node.op]


def check_kernel_set(kernels: str) -> str:
    if kernels not in KERNEL_SETS:
        raise KilobyteError(f"unknown kernel set {kernels!r}: choose 'portable' or 'dsp'")
    return kernels


# -- scratch ------------------------------------------------------------------------------------------------------
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
    """Bytes of one int16 im2col column of a CONV_2D's window: kh*kw*Cin values, whatever the kernel size."""
    _, kh, kw, cin = graph.tensors[node.inputs[1]].shape
    return IM2COL_ELEMENT_BYTES * kh * kw * cin


def is_sparse(node: Node) -> bool:
    """A CONV_2D whose weights the generated C stores in a sparse format (FWCS or CSR): `kb_sparse_conv.c`."""
    return node.op is Op.CONV_2D and node.attrs.weight_format != "dense"


def sparse_scratch_bytes(graph: Graph, node: Node) -> int:
    """`KB_SPARSE_SCRATCH`: two im2col windows of 2-byte values, kh*kw*Cin rounded up to a multiple of 4, then 36
    bytes per output channel (the DSP kernels' requantisation constants, prepared once per call)."""
    cout, kh, kw, cin = graph.tensors[node.inputs[1]].shape
    return 4 * ((kh * kw * cin + 3) // 4 * 4) + SPARSE_RQ_BYTES * cout


def is_local(node: Node) -> bool:
    """Whether `node` may run inside a patch stage: its contract's `local`, and dense weights (a sparse conv runs
    per layer)."""
    return contract_for(node).local and not is_sparse(node)


def reads_columns(graph: Graph, node: Node, kernels: str) -> bool:
    """Whether `node`'s kernel in `kernels` reads im2col columns at all (DSP conv, >= KB_COLS_MIN_OUT_C outputs)."""
    return (kernels == "dsp" and contract_for(node).columns and not is_sparse(node)
            and graph.tensors[node.outputs[0]].shape[-1] >= KB_COLS_MIN_OUT_C)


def layer_scratch(graph: Graph, node: Node, kernels: str) -> int:
    """Scratch bytes `node` reads per layer when it does not run in place (module docstring)."""
    if is_sparse(node):
        return sparse_scratch_bytes(graph, node)
    if not reads_columns(graph, node, kernels) or graph.tensors[node.inputs[1]].shape[1:3] == (1, 1):
        return 0
    return IM2COL_COLUMNS * column_bytes(graph, node)


def extra_columns(graph: Graph, node: Node, kernels: str) -> tuple[int, int]:
    """(bytes of one column, the most columns the kernel reads) for scratch granted from free bytes; (0, 0) when
    `node`'s kernel reads no columns."""
    if not reads_columns(graph, node, kernels):
        return 0, 0
    return column_bytes(graph, node), WIDE_COLUMNS


def inplace_rule(graph: Graph, node: Node, options) -> InPlaceRule | None:
    """`node`'s in-place rule when `options` allow it (depthwise also needs depth multiplier 1)."""
    rule = contract_for(node).inplace
    if rule is None or not getattr(options, rule.option):
        return None
    if node.op is Op.DEPTHWISE_CONV_2D and node.attrs.depth_multiplier != 1:
        return None
    return rule


# -- C parameters ---------------------------------------------------------------------------------------------------
def add_fields(graph: Graph, node: Node, cstrides: tuple[int, int, int], pixels: int, swap: bool = False) -> dict:
    """`kb_add_params` of an int8 ADD over `pixels` pixels with channel strides (in1, in2, out); `swap` exchanges the
    two operands' offsets and rescales (exact: each keeps its own rescaling and the int32 sum commutes)."""
    ap = add_node_params(graph, node)
    ops = [(ap.input1_offset, ap.input1_multiplier, ap.input1_shift),
           (ap.input2_offset, ap.input2_multiplier, ap.input2_shift)]
    (o1, m1, s1), (o2, m2, s2) = ops[::-1] if swap else ops
    return dict(pixels=pixels, c=graph.tensors[node.outputs[0]].shape[-1], in1_cstride=cstrides[0],
                in2_cstride=cstrides[1], out_cstride=cstrides[2], in1_offset=o1, in2_offset=o2,
                left_shift=ap.left_shift, in1_mult=m1, in1_shift=s1, in2_mult=m2, in2_shift=s2,
                out_mult=ap.output_multiplier, out_shift=ap.output_shift, out_offset=ap.output_offset,
                act_min=ap.act_min, act_max=ap.act_max)


def mul_fields(graph: Graph, node: Node, cstrides: tuple[int, int, int], pixels: int) -> dict:
    """`kb_mul_params` of an int8 MUL over `pixels` pixels with channel strides (in1, in2, out); a stride of 0
    repeats one pixel of that operand (per-channel broadcast)."""
    mp = mul_node_params(graph, node)
    return dict(pixels=pixels, c=graph.tensors[node.outputs[0]].shape[-1], in1_cstride=cstrides[0],
                in2_cstride=cstrides[1], out_cstride=cstrides[2], in1_offset=mp.input1_offset,
                in2_offset=mp.input2_offset, out_mult=mp.output_multiplier, out_shift=mp.output_shift,
                out_offset=mp.output_offset, act_min=mp.act_min, act_max=mp.act_max)


# -- a constant operand of ADD / SUB / MUL ----------------------------------------------------------------------------
CONST_OPERAND_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL})  # with one constant operand: kb_add_const / kb_mul_const
CONST_STRUCT = "kb_const_params"


def constant_operand(graph: Graph, node: Node) -> int | None:
    """Index of the one constant operand of an ADD / SUB / MUL (run by `kb_add_const` / `kb_mul_const` from its
    prepared terms), else None."""
    if node.op not in CONST_OPERAND_OPS or len(node.inputs) != 2:
        return None
    consts = [k for k, t in enumerate(node.inputs) if graph.tensors[t].is_const]
    return consts[0] if len(consts) == 1 else None


def node_struct(graph: Graph, node: Node) -> str | None:
    """The C parameter struct `node`'s layer fills: its contract's, or `kb_const_params` for a constant operand."""
    return CONST_STRUCT if constant_operand(graph, node) is not None else contract_for(node).struct


def _steps(shape: tuple[int, ...], pixel: int, where: str) -> tuple[int, int, int]:
    """Element steps (row, col, c) of an operand of `shape` (padded to (1, H, W, C)) stored with pixel stride
    `pixel`: 0 on an axis of size 1 (one the operand broadcasts over, or one the output has as 1 too)."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    if len(shape) != 4 or shape[0] != 1:
        raise UnsupportedOpError(f"{where}: operand of shape {shape} has no C kernel (batch 1, up to 4 axes)")
    _, h, w, c = shape
    return (w * pixel if h > 1 else 0, pixel if w > 1 else 0, 1 if c > 1 else 0)


def const_fields(graph: Graph, node: Node, in_cstride: int, out_cstride: int) -> tuple[dict, np.ndarray]:
    """`kb_const_params` of an ADD / SUB / MUL with a constant operand, and its terms (int32, the constant's shape,
    row-major: `constant_terms`). The activation and the output have pixel strides `in_cstride` / `out_cstride`."""
    k = constant_operand(graph, node)
    x, out = node.inputs[1 - k], graph.tensors[node.outputs[0]].shape
    where = f"node '{node.name}' ({node.op.value})"
    out4 = (1,) * (4 - len(out)) + tuple(out)
    if len(out4) != 4 or out4[0] != 1:
        raise UnsupportedOpError(f"{where}: output of shape {tuple(out)} has no C kernel (batch 1, up to 4 axes)")
    const = graph.tensors[node.inputs[k]]
    kc = const.shape[-1] if const.shape else 1
    in_steps = _steps(graph.tensors[x].shape, in_cstride, where)
    k_steps = _steps(const.shape, kc, where)
    fields = dict(rows=out4[1], cols=out4[2], c=out4[3], in_row=in_steps[0], in_col=in_steps[1], in_c=in_steps[2],
                  k_row=k_steps[0], k_col=k_steps[1], k_c=k_steps[2], out_row=out4[2] * out_cstride,
                  out_col=out_cstride)
    if node.op is Op.MUL:
        mp = mul_node_params(graph, node)
        fields.update(in_offset=(mp.input1_offset, mp.input2_offset)[1 - k], left_shift=0, in_mult=0, in_shift=0,
                      neg=0, out_mult=mp.output_multiplier, out_shift=mp.output_shift, out_offset=mp.output_offset,
                      act_min=mp.act_min, act_max=mp.act_max)
    else:
        ap = add_node_params(graph, node)
        ins = ((ap.input1_offset, ap.input1_multiplier, ap.input1_shift),
               (ap.input2_offset, ap.input2_multiplier, ap.input2_shift))[1 - k]
        fields.update(in_offset=ins[0], left_shift=ap.left_shift, in_mult=ins[1], in_shift=ins[2],
                      neg=-1 if node.op is Op.SUB and k == 0 else 0, out_mult=ap.output_multiplier,
                      out_shift=ap.output_shift, out_offset=ap.output_offset, act_min=ap.act_min, act_max=ap.act_max)
    return fields, constant_terms(graph, node, k).astype(np.int32).reshape(-1)
