"""Op registry: the binary ops ADD, SUB, MUL, MAXIMUM and MINIMUM — TFLite's int8 arithmetic (ADD's left shift 20
and per-input rescales, SUB as ADD with the second input subtracted, MUL's one output rescale, MAXIMUM / MINIMUM on
raw values), the C kernels' parameters, and their layers.

Operands are of the output's shape, or a per-channel (1,1,1,C) operand broadcast by a pixel stride of 0
(`binary_operands`). ADD, SUB and MUL with one constant operand of any shape that broadcasts call `kb_add_const` /
`kb_mul_const` with the constant's share of each element prepared here (`constant_terms`, `const_fields`); a
constant operand of MAXIMUM / MINIMUM is a const int8 array in model.c. ADD is spatially local: inside a patch stage
it runs per tile row (its tile emitter is in `codegen/patch_loop.py`), and a 1x1 conv feeding only an ADD runs fused
with it (`codegen/layers.emit_conv_add`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedOpError
from .arith import AddParams, MulParams, multiply_by_quantized_multiplier
from .c_text import c_array, c_ident, c_struct
from .contract import InPlaceRule, KernelContract
from .layer_code import Buffers, LayerCode
from .node_params import add_node_params, constant_terms, mul_node_params, require_same_qparams
from .opdef import OpDef, broadcast_shape
from .tile_code import Columns, block, copy_columns, copy_statements, hw, param_table, row_loop
from .types import AddAttrs, NoAttrs, Op, ShapeError, apply_activation


# -- references ----------------------------------------------------------------------------------------------------
def add_int8(a, b, p: AddParams) -> np.ndarray:
    """TFLite's int8 ADD (`AddFunc`): inputs shifted left 20 bits, rescaled, summed. Shapes broadcast as in numpy
    (TFLite Micro's `BroadcastAdd6DSlow` applies the same function per element)."""
    x = (np.asarray(a, np.int64) + p.input1_offset) << p.left_shift
    y = (np.asarray(b, np.int64) + p.input2_offset) << p.left_shift
    x = multiply_by_quantized_multiplier(x, p.input1_multiplier, p.input1_shift)
    y = multiply_by_quantized_multiplier(y, p.input2_multiplier, p.input2_shift)
    raw = multiply_by_quantized_multiplier(x + y, p.output_multiplier, p.output_shift) + p.output_offset
    return np.clip(raw, p.act_min, p.act_max).astype(np.int8)


def sub_int8(a, b, p: AddParams) -> np.ndarray:
    """TFLite's int8 SUB (`SubElementwise`, and its broadcast form element by element): ADD's arithmetic with the
    rescaled second input subtracted. Shapes broadcast as in numpy."""
    x = (np.asarray(a, np.int64) + p.input1_offset) << p.left_shift
    y = (np.asarray(b, np.int64) + p.input2_offset) << p.left_shift
    x = multiply_by_quantized_multiplier(x, p.input1_multiplier, p.input1_shift)
    y = multiply_by_quantized_multiplier(y, p.input2_multiplier, p.input2_shift)
    raw = multiply_by_quantized_multiplier(x - y, p.output_multiplier, p.output_shift) + p.output_offset
    return np.clip(raw, p.act_min, p.act_max).astype(np.int8)


def mul_int8(a, b, p: MulParams) -> np.ndarray:
    """TFLite's int8 MUL (`reference_integer_ops::MulElementwise`, and its broadcast form element by element): the
    product of the offset inputs, rescaled once, plus the output zero point, clamped. Shapes broadcast as in numpy."""
    prod = (np.asarray(a, np.int64) + p.input1_offset) * (np.asarray(b, np.int64) + p.input2_offset)
    raw = multiply_by_quantized_multiplier(prod, p.output_multiplier, p.output_shift) + p.output_offset
    return np.clip(raw, p.act_min, p.act_max).astype(np.int8)



# -- C parameters --------------------------------------------------------------------------------------------------
def add_fields(graph, node, cstrides: tuple[int, int, int], pixels: int, swap: bool = False) -> dict:
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


def mul_fields(graph, node, cstrides: tuple[int, int, int], pixels: int) -> dict:
    """`kb_mul_params` of an int8 MUL over `pixels` pixels with channel strides (in1, in2, out); a stride of 0
    repeats one pixel of that operand (per-channel broadcast)."""
    mp = mul_node_params(graph, node)
    return dict(pixels=pixels, c=graph.tensors[node.outputs[0]].shape[-1], in1_cstride=cstrides[0],
                in2_cstride=cstrides[1], out_cstride=cstrides[2], in1_offset=mp.input1_offset,
                in2_offset=mp.input2_offset, out_mult=mp.output_multiplier, out_shift=mp.output_shift,
                out_offset=mp.output_offset, act_min=mp.act_min, act_max=mp.act_max)



# -- a constant operand of ADD / SUB / MUL -------------------------------------------------------------------------
CONST_OPERAND_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL})  # with one constant operand: kb_add_const / kb_mul_const
CONST_STRUCT = "kb_const_params"


def constant_operand(graph, node) -> int | None:
    """Index of the one constant operand of an ADD / SUB / MUL (run by `kb_add_const` / `kb_mul_const` from its
    prepared terms), else None."""
    if node.op not in CONST_OPERAND_OPS or len(node.inputs) != 2:
        return None
    consts = [k for k, t in enumerate(node.inputs) if graph.tensors[t].is_const]
    return consts[0] if len(consts) == 1 else None


def _steps(shape: tuple[int, ...], pixel: int, where: str) -> tuple[int, int, int]:
    """Element steps (row, col, c) of an operand of `shape` (padded to (1, H, W, C)) stored with pixel stride
    `pixel`: 0 on an axis of size 1 (one the operand broadcasts over, or one the output has as 1 too)."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    if len(shape) != 4 or shape[0] != 1:
        raise UnsupportedOpError(f"{where}: operand of shape {shape} has no C kernel (batch 1, up to 4 axes)")
    _, h, w, c = shape
    return (w * pixel if h > 1 else 0, pixel if w > 1 else 0, 1 if c > 1 else 0)


def const_fields(graph, node, in_cstride: int, out_cstride: int) -> tuple[dict, np.ndarray]:
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


# -- layers --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Operands:
    """Where a binary op's kernel reads its two operands and writes its output: C pointers and pixel strides (a
    stride of 0 repeats one pixel of that operand), and the constant arrays it reads."""

    ptrs: tuple[str, str]
    strides: tuple[int, int, int]  # in1, in2, out
    decls: list[str]


def binary_operands(graph, node, bufs: Buffers) -> Operands:
    """An operand shaped like the output keeps its planned stride; a per-channel one (one pixel of the output's C
    channels, e.g. (1,1,1,C), or one value) gets stride 0 (the kernel repeats that pixel). A constant operand becomes
    a const array in model.c (a single value repeated over the C channels). Any other broadcast raises a one-line
    `UnsupportedOpError`."""
    out = graph.tensors[node.outputs[0]].shape
    ptrs, strides, decls = [], [], []
    for k, t in enumerate(node.inputs):
        tensor = graph.tensors[t]
        shape = tensor.shape
        per_channel = int(np.prod(shape[:-1], dtype=np.int64)) == 1 and shape[-1:] in (out[-1:], (1,))
        if tuple(shape) != tuple(out) and not per_channel:
            raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): broadcast of {shape} to {out} has no C "
                                     f"kernel (same shape or a (1,1,1,C) operand only)")
        if per_channel and shape[-1] != out[-1] and not tensor.is_const:
            raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): broadcast of {shape} to {out} has no C "
                                     f"kernel (a single-value operand must be a constant)")
        if tensor.is_const:
            name = f"kb_k_{c_ident(node.name)}_{k}"
            values = tensor.data.reshape(-1) if tuple(shape) == tuple(out) else np.broadcast_to(
                tensor.data.reshape(-1), (out[-1],))
            decls.append(c_array(name, "int8_t", values))
            ptrs.append(name)
            strides.append(out[-1] if tuple(shape) == tuple(out) else 0)
        else:
            ptrs.append(bufs.ptr(t))
            strides.append(bufs.cstride(t) if tuple(shape) == tuple(out) else 0)
    return Operands(tuple(ptrs), (strides[0], strides[1], bufs.cstride(node.outputs[0])), decls)


def _binary_call(node, bufs: Buffers, operands: Operands, struct: str, params: dict, fn: str,
                 family: str) -> LayerCode:
    a, b = operands.ptrs
    return LayerCode(decls=operands.decls, body=[c_struct(struct, params),
                                                 f"{fn}(&p, {a}, {b}, {bufs.ptr(node.outputs[0])});"],
                     families={family})


def emit_add(graph, node, bufs: Buffers, plan) -> LayerCode:
    """int8 ADD and SUB: `kb_add_params` (TFLite computes SUB's rescales as ADD's) and `kb_add` / `kb_sub`; with a
    constant operand, `emit_const_operand`."""
    if constant_operand(graph, node) is not None:
        return emit_const_operand(graph, node, bufs, plan)
    pixels = int(np.prod(graph.tensors[node.outputs[0]].shape[:-1]))
    operands = binary_operands(graph, node, bufs)
    params = add_fields(graph, node, operands.strides, pixels)
    return _binary_call(node, bufs, operands, "kb_add_params", params, "kb_add" if node.op is Op.ADD else "kb_sub",
                        "add")


def emit_mul(graph, node, bufs: Buffers, plan) -> LayerCode:
    """int8 MUL: `kb_mul_params` and `kb_mul`; with a constant operand, `emit_const_operand`."""
    if constant_operand(graph, node) is not None:
        return emit_const_operand(graph, node, bufs, plan)
    pixels = int(np.prod(graph.tensors[node.outputs[0]].shape[:-1]))
    operands = binary_operands(graph, node, bufs)
    params = mul_fields(graph, node, operands.strides, pixels)
    return _binary_call(node, bufs, operands, "kb_mul_params", params, "kb_mul", "elementwise")


def emit_const_operand(graph, node, bufs: Buffers, plan) -> LayerCode:
    """ADD / SUB / MUL of an activation and a constant of any shape that broadcasts to it: the constant's share of
    each element (`constant_terms`) as an int32 array in model.c, one per constant value (a (C,) bias stays C
    values, never the broadcast map), read by `kb_add_const` / `kb_mul_const` with steps of 0 on broadcast axes."""
    x, y = node.inputs[1 - constant_operand(graph, node)], node.outputs[0]
    params, terms = const_fields(graph, node, bufs.cstride(x), bufs.cstride(y))
    name = f"kb_k_{c_ident(node.name)}"
    fn, family = ("kb_mul_const", "elementwise") if node.op is Op.MUL else ("kb_add_const", "add")
    return LayerCode(decls=[c_array(name, "int32_t", terms)],
                     body=[c_struct(CONST_STRUCT, params), f"{fn}(&p, {bufs.ptr(x)}, {name}, {bufs.ptr(y)});"],
                     families={family})


def emit_minmax(graph, node, bufs: Buffers, plan) -> LayerCode:
    """int8 MAXIMUM / MINIMUM compare raw values: inputs and output must share quantisation params."""
    want = graph.tensors[node.outputs[0]].qparams
    if any(graph.tensors[t].qparams != want for t in node.inputs):
        raise UnsupportedOpError(f"node '{node.name}' ({node.op.value}): inputs and output must share quantisation "
                                 f"params (the kernel compares raw int8 values)")
    shape = graph.tensors[node.outputs[0]].shape
    operands = binary_operands(graph, node, bufs)
    s1, s2, so = operands.strides
    params = dict(pixels=int(np.prod(shape[:-1])), c=shape[-1], in1_cstride=s1, in2_cstride=s2, out_cstride=so)
    fn = "kb_maximum" if node.op is Op.MAXIMUM else "kb_minimum"
    return _binary_call(node, bufs, operands, "kb_minmax_params", params, fn, "elementwise")



TERM_BYTES = 4  # an int32 term per value of an ADD / SUB / MUL constant operand (kb_add_const, kb_mul_const)


def _table_bytes(graph, node) -> int:
    """Constant arrays in model.c: per constant operand of ADD / SUB / MUL one int32 term per value it has (never
    broadcast); per constant operand of MAXIMUM / MINIMUM its int8 values (one per channel for a per-channel or
    single-value constant)."""
    k = constant_operand(graph, node)
    if k is not None:
        return TERM_BYTES * graph.tensors[node.inputs[k]].numel
    out_shape = graph.tensors[node.outputs[0]].shape
    consts = [graph.tensors[t] for t in node.inputs if graph.tensors[t].is_const]
    return sum(t.numel if t.shape == out_shape else out_shape[-1] for t in consts)


# -- the ops -------------------------------------------------------------------------------------------------------
def _shape(attrs, shapes) -> tuple[int, ...]:
    if len(shapes) != 2:
        raise ShapeError(f"a binary op takes two operands, got {len(shapes)}")
    return broadcast_shape(shapes[0], shapes[1])


FLOAT = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum}


def _float(node, args) -> np.ndarray:
    y = FLOAT[node.op](args[0], args[1])
    return y if node.op in (Op.MAXIMUM, Op.MINIMUM) else apply_activation(y, node.attrs.activation)


def _int8(graph, node, args) -> np.ndarray:
    if node.op is Op.ADD:
        return add_int8(args[0], args[1], add_node_params(graph, node))
    if node.op is Op.SUB:
        return sub_int8(args[0], args[1], add_node_params(graph, node))
    if node.op is Op.MUL:
        return mul_int8(args[0], args[1], mul_node_params(graph, node))
    require_same_qparams(graph, node)
    return FLOAT[node.op](args[0], args[1])


def _lower(w, graph, node) -> None:
    """ADD, SUB, MUL with their fused activation; MAXIMUM, MINIMUM without options fields."""
    if len(node.inputs) != 2:
        raise UnsupportedOpError(f"node '{node.name}': TFLite {node.op.value} takes 2 operands, not "
                                 f"{len(node.inputs)}")
    opts = {} if node.op in (Op.MAXIMUM, Op.MINIMUM) else {"FusedActivationFunction": w.activation(node)}
    w.op(node.op.value, node.inputs, node.outputs, opts)


# ADD, SUB and MUL take the same operands
_OPERANDS = ("two activations of the same shape, or a (1,1,1,C) one broadcast over (1,H,W,C); either may be a constant "
             "of any shape that broadcasts")
_MINMAX = ("inputs and output share quantisation params; same shape or a (1,1,1,C) operand broadcast over (1,H,W,C), "
           "either may be a constant")
_COMMON = dict(const_operands=True, table_bytes=_table_bytes, shape=_shape, float_ref=_float, int8_ref=_int8,
               lower=_lower)
def emit_add_tile(g, k: int, code: LayerCode) -> str:
    """ADD: one `kb_add` per tile row (operands can be tiles of different widths); in place when the plan put the
    output tile in an input's buffer (same box, so row r overwrites only itself)."""
    node, ident = g.nodes[k], c_ident(g.nodes[k].name)
    code.families.add("add")
    io, rows = Columns(f"kb_po_{ident}"), []
    for p in range(len(g.boxes)):
        tile = g.tile(p, k)
        a, b = (g.source(t, p, tile.in_box) for t in node.inputs)
        dst = g.target(p, k)
        h, w = hw(tile.out_box)
        rows.append(add_fields(g.graph, node, (a.cstride, b.cstride, dst.cstride), pixels=w))
        io.add(p, src1=a.offset, src1_pitch=a.pitch, src2=b.offset, src2_pitch=b.pitch, dst=dst.offset,
               dst_pitch=dst.pitch, rows=h)
        copy_columns(g, p, k, io)
    code.decls += [param_table("kb_add_params", f"kb_pp_{ident}", rows), io.decl()]
    bases = [g.base(t) for t in node.inputs]
    call = (f"kb_add(&kb_pp_{ident}[p], {io.pointer(bases[0], 'src1', row='src1_pitch')}, "
            f"{io.pointer(bases[1], 'src2', row='src2_pitch')}, {io.pointer('KB_ARENA', 'dst', row='dst_pitch')});")
    how = ", in place" if g.in_place(k) else ""
    return block(g, k, f"{how}, row by row", io, [row_loop(io["rows"], call), *copy_statements(g, k, io, code)])


DEFS = (
    OpDef(Op.ADD, AddAttrs,
          KernelContract(Op.ADD, "add", "kb_add_params", local=True,
                         inplace=InPlaceRule("inplace_add", "any", elementwise=True),
                         constraints=f"{_OPERANDS} (a (C,) bias, a single value, ...): kb_add_const with its "
                         "rescaled values prepared, not spatially local; TFLite's left shift 20; fused ReLU/ReLU6"),
          fusable=True, builtin="ADD", function="kb_add", emit=emit_add, emit_tile=emit_add_tile, **_COMMON),
    OpDef(Op.SUB, AddAttrs,
          KernelContract(Op.SUB, "add", "kb_add_params",
                         constraints=f"ADD's arithmetic, the rescaled input 2 subtracted (kb_sub); {_OPERANDS} "
                         "(kb_add_const); fused ReLU/ReLU6"),
          fusable=True, elementwise_cost=True, builtin="SUB", function="kb_sub", emit=emit_add, **_COMMON),
    OpDef(Op.MUL, AddAttrs,
          KernelContract(Op.MUL, "elementwise", "kb_mul_params",
                         constraints=f"{_OPERANDS} (kb_mul_const); the (1,1,1,C) broadcast is squeeze-excite's; "
                         "one output rescale; fused ReLU/ReLU6"),
          fusable=True, elementwise_cost=True, builtin="MUL", function="kb_mul", emit=emit_mul, **_COMMON),
    *(OpDef(op, NoAttrs, KernelContract(op, "elementwise", "kb_minmax_params", constraints=_MINMAX),
            qparams="shared", elementwise_cost=True, builtin=op.value, function=fn, emit=emit_minmax, **_COMMON)
      for op, fn in ((Op.MAXIMUM, "kb_maximum"), (Op.MINIMUM, "kb_minimum"))),
)
