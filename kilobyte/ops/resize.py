"""Op registry: RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR — their definitions and TFLite Micro's arithmetic,
shared by the float and int8 references, the code generator and the Flash model.

- RESIZE_NEAREST_NEIGHBOR (`GetNearestNeighbor`) picks source rows and columns in float32: the scale is
  `in / out` (or `(in - 1) / (out - 1)` with align_corners), the output coordinate (plus 0.5 with
  half_pixel_centers) times the scale is floored (rounded half away from zero with align_corners) and clamped to
  the input. `nearest_indices` computes that index list once; the interpreters gather with it and the code
  generator writes it into model.c, so the C kernel copies pixels and does no float arithmetic at all.
- RESIZE_BILINEAR, int8 (`ResizeBilinearInteger`): integers only. The scale is a Q10 fixed-point number rounded to
  nearest; each output coordinate becomes a Q10 source coordinate (with half_pixel_centers
  `y * scale + scale / 2 - 512`, which is negative near the top edge), its two source rows `lo` and `hi` (C division
  truncates, then both are clamped into the input) and the Q10 distance `frac` from `lo`. The four products
  `x * (1024 - fy or fy) * (1024 - fx or fx)` are summed and divided by 2^20, rounding half away from zero
  (TFLite Micro's default double-rounding build). `bilinear_taps` computes (lo, hi, frac) for one axis, again once,
  for the interpreter and for the tables the C kernel reads. The float path follows TFLite's float kernel.

Integer scale rounding can make TFLite Micro's bilinear resize read a row past the input edge for some large
upsampling factors (e.g. 2 -> 80 rows); `bilinear_taps` refuses those sizes instead of inventing a result.

>>> nearest_indices(3, 6, False, False).tolist(), nearest_indices(3, 5, True, False).tolist()
([0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2])
>>> [t.tolist() for t in bilinear_taps(2, 4, False, True)]  # (lo, hi, frac in 1/1024)
[[0, 0, 0, 1], [0, 1, 1, 1], [-256, 256, 768, 256]]
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from .c_text import c_array, c_ident, c_struct
from .contract import KernelContract
from .layer_code import Buffers, LayerCode
from .node_params import require_same_qparams
from .opdef import OpDef
from .types import Op, ResizeAttrs, ShapeError

Q10 = 1 << 10  # bilinear coordinates are Q10 fixed point
_F32 = np.float32


def _c_div(a, b: int) -> np.ndarray:
    """C's integer `/` (truncating toward zero) of int64 values by a positive constant."""
    a = np.asarray(a, np.int64)
    return np.where(a >= 0, a // b, -((-a) // b))


# -- RESIZE_NEAREST_NEIGHBOR -------------------------------------------------------------------------------------
def nearest_indices(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """Source index of every output index along one axis, as TFLite Micro's `GetNearestNeighbor` computes it in
    float32."""
    if align_corners and out_size > 1:
        scale = _F32(in_size - 1) / _F32(out_size - 1)
    else:
        scale = _F32(in_size) / _F32(out_size)
    offset = _F32(0.5) if half_pixel_centers else _F32(0.0)
    coord = (np.arange(out_size).astype(np.float32) + offset) * scale  # float32 throughout, >= 0
    # TfLiteRound (half away from zero) of a float32 >= 0: the float64 sum with 0.5 is exact, its floor the answer.
    index = np.floor(coord.astype(np.float64) + 0.5) if align_corners else np.floor(coord)
    index = np.minimum(index.astype(np.int64), in_size - 1)
    return np.maximum(index, 0) if half_pixel_centers else index


def resize_nearest(x: np.ndarray, size, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """RESIZE_NEAREST_NEIGHBOR of NHWC `x` (any dtype) to `size` (H, W): a gather, no arithmetic on values."""
    rows = nearest_indices(x.shape[1], size[0], align_corners, half_pixel_centers)
    cols = nearest_indices(x.shape[2], size[1], align_corners, half_pixel_centers)
    return x[:, rows][:, :, cols]


# -- RESIZE_BILINEAR ---------------------------------------------------------------------------------------------
def bilinear_scale_q10(in_size: int, out_size: int, align_corners: bool) -> int:
    """TFLite Micro's Q10 step between output coordinates in the input, rounded to nearest."""
    if align_corners and out_size > 1:
        return (Q10 * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    return (Q10 * in_size + out_size // 2) // out_size


def bilinear_taps(in_size: int, out_size: int, align_corners: bool,
                  half_pixel_centers: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, frac) per output index along one axis (`ComputeInterpolationValuesInteger`): the two source indices
    and the Q10 distance of the source coordinate from `lo` (in [-512, 1024)). Raises `KilobyteError` where TFLite
    Micro would read past the input (module docstring)."""
    scale = bilinear_scale_q10(in_size, out_size, align_corners)
    coord = np.arange(out_size, dtype=np.int64) * scale
    if half_pixel_centers:
        coord = coord + scale // 2 - Q10 // 2
    lo = np.maximum(_c_div(coord, Q10), 0)
    hi = np.minimum(_c_div(coord + Q10 - 1, Q10), in_size - 1)
    if lo.max() > in_size - 1:
        raise KilobyteError(f"bilinear resize {in_size} -> {out_size}: TFLite Micro's Q10 scale "
                            f"({scale}/1024) reads past the input edge; resize in smaller steps")
    return lo, hi, coord - Q10 * lo


def _lerp_int(x: np.ndarray, taps, axis: int) -> np.ndarray:
    """Both Q10-weighted source slices along `axis`: (x[lo] * (1024 - frac), x[hi] * frac), int64."""
    lo, hi, frac = taps
    shape = [1] * x.ndim
    shape[axis] = -1
    frac = frac.reshape(shape)
    return np.take(x, lo, axis=axis) * (Q10 - frac), np.take(x, hi, axis=axis) * frac


def resize_bilinear_int8(x, size, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """TFLite Micro's int8 RESIZE_BILINEAR of NHWC `x` to `size` (H, W) (output quantised like the input)."""
    x = np.asarray(x, np.int64)
    rows = bilinear_taps(x.shape[1], size[0], align_corners, half_pixel_centers)
    cols = bilinear_taps(x.shape[2], size[1], align_corners, half_pixel_centers)
    top, bottom = _lerp_int(x, rows, 1)
    total = sum(a + b for a, b in (_lerp_int(top, cols, 2), _lerp_int(bottom, cols, 2)))  # Q20
    half = np.where(total > 0, 1 << 19, -(1 << 19))
    return _c_div(total + half, 1 << 20).astype(np.int8)


def _float_taps(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool):
    """TFLite's float `ComputeInterpolationValues` in float64: (lo, hi, distance from lo)."""
    scale = in_size / out_size
    if align_corners and out_size > 1:
        scale = (in_size - 1) / (out_size - 1)
    coord = np.arange(out_size) * scale
    if half_pixel_centers:
        coord = (np.arange(out_size) + 0.5) * scale - 0.5
    lo = np.maximum(np.floor(coord), 0).astype(np.int64)
    hi = np.minimum(np.ceil(coord), in_size - 1).astype(np.int64)
    return lo, hi, coord - lo


def resize_bilinear_float(x, size, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """TFLite's float RESIZE_BILINEAR (no rounding), in x's float precision."""
    x = np.asarray(x)
    out = x
    for axis, n in ((1, size[0]), (2, size[1])):
        lo, hi, d = _float_taps(out.shape[axis], n, align_corners, half_pixel_centers)
        shape = [1] * x.ndim
        shape[axis] = -1
        d = d.reshape(shape)
        out = np.take(out, lo, axis=axis) * (1 - d) + np.take(out, hi, axis=axis) * d
    return out


# -- the C kernels' tables -------------------------------------------------------------------------------------
RESIZE_TABLE_MAX = (1 << 15) - 1  # tables are int16: every input and output size must stay below this


def resize_table(bilinear: bool, in_hw, attrs) -> np.ndarray:
    """The int16 table `kb_resize_nearest` / `kb_resize_bilinear` read (runtime/c/kb_resize.c): nearest, the source
    row of each output row then the source column of each output column; bilinear, (lo, hi, frac) per output row
    then per output column. Raises `KilobyteError` for sizes int16 cannot index, or that TFLM reads past."""
    sizes = (*in_hw, *attrs.size)
    if max(sizes) > RESIZE_TABLE_MAX:
        raise KilobyteError(f"resize {tuple(in_hw)} -> {tuple(attrs.size)}: kb_resize's int16 tables index sizes "
                            f"up to {RESIZE_TABLE_MAX}")
    flags = (attrs.align_corners, attrs.half_pixel_centers)
    if bilinear:
        axes = [np.stack(bilinear_taps(n, m, *flags), axis=1).reshape(-1) for n, m in zip(in_hw, attrs.size)]
    else:
        axes = [nearest_indices(n, m, *flags) for n, m in zip(in_hw, attrs.size)]
    return np.concatenate(axes).astype(np.int16)


# -- the ops -----------------------------------------------------------------------------------------------------
def _shape(attrs, shapes) -> tuple[int, ...]:
    x = shapes[0]
    if len(x) != 4:
        raise ShapeError(f"resize input {x} is not NHWC")
    if len(attrs.size) != 2 or min(attrs.size) < 1:
        raise ShapeError(f"resize size {attrs.size} must be two positive sizes (H, W)")
    return (x[0], int(attrs.size[0]), int(attrs.size[1]), x[3])


def _bilinear_shape(attrs, shapes) -> tuple[int, ...]:
    if attrs.align_corners and attrs.half_pixel_centers:
        raise ShapeError("bilinear resize with both align_corners and half_pixel_centers (TFLite refuses it)")
    return _shape(attrs, shapes)


def _float_nearest(node, args) -> np.ndarray:
    """TFLite's float kernel: the nearest source pixel, by the int8 kernel's own index arithmetic."""
    a = node.attrs
    return resize_nearest(args[0], a.size, a.align_corners, a.half_pixel_centers)


def _float_bilinear(node, args) -> np.ndarray:
    a = node.attrs
    return resize_bilinear_float(args[0], a.size, a.align_corners, a.half_pixel_centers)


def _int8_nearest(graph, node, args) -> np.ndarray:
    """Values are copied on the input's own scale: input and output share quantisation params."""
    require_same_qparams(graph, node)
    return _float_nearest(node, args)


def _int8_bilinear(graph, node, args) -> np.ndarray:
    require_same_qparams(graph, node)
    a = node.attrs
    try:
        return resize_bilinear_int8(args[0], a.size, a.align_corners, a.half_pixel_centers)
    except KilobyteError as e:
        raise KilobyteError(f"node '{node.name}' (RESIZE_BILINEAR): {e}") from None


def _table(graph, node) -> np.ndarray:
    return resize_table(node.op is Op.RESIZE_BILINEAR, graph.tensors[node.inputs[0]].shape[1:3], node.attrs)


def _emit(graph, node, bufs: Buffers, plan) -> LayerCode:
    """The node's int16 table of source rows and columns (`resize_table`, the reference's own arithmetic) and one
    `kb_resize_*` call."""
    x, y = node.inputs[0], node.outputs[0]
    where = f"node '{node.name}' ({node.op.value})"
    if graph.tensors[x].qparams != graph.tensors[y].qparams:
        raise UnsupportedOpError(f"{where}: input and output must share quantisation params (TFLite Micro's kernel "
                                 f"copies and interpolates values without rescaling)")
    try:
        table = _table(graph, node)
    except KilobyteError as e:
        raise UnsupportedOpError(f"{where}: {e}") from None
    _, ih, iw, c = graph.tensors[x].shape
    name = f"kb_rz_{c_ident(node.name)}"
    oh, ow = node.attrs.size
    params = dict(in_w=iw, c=c, in_cstride=bufs.cstride(x), out_h=oh, out_w=ow, out_cstride=bufs.cstride(y))
    fn = _FUNCTION[node.op]
    return LayerCode(decls=[c_array(name, "int16_t", table)],
                     body=[c_struct("kb_resize_params", params), f"{fn}(&p, {name}, {bufs.ptr(x)}, {bufs.ptr(y)});"],
                     families={"resize"})


def _table_bytes(graph, node) -> int:
    """The int16 table in model.c (0 for sizes the code generator refuses anyway)."""
    try:
        return 2 * len(_table(graph, node))
    except KilobyteError:
        return 0


def _lower(w, graph, node) -> None:
    """TFLite keeps the size in an int32 constant operand."""
    a = node.attrs
    size = w.const(f"{node.outputs[0]}.size", np.array(a.size, np.int32))
    w.op(node.op.value, (node.inputs[0], size), node.outputs,
         {"AlignCorners": bool(a.align_corners), "HalfPixelCenters": bool(a.half_pixel_centers)})


def _contract(op: Op, how: str) -> KernelContract:
    return KernelContract(op, "resize", "kb_resize_params",
                          constraints=f"input and output share quantisation params; {how}; any sizes below 32768 (an "
                          "int16 table of source rows and columns per node); runs per layer, never in a patch stage "
                          "(an integer-factor resize would be spatially local, other factors are not)")


_FUNCTION = {Op.RESIZE_NEAREST_NEIGHBOR: "kb_resize_nearest", Op.RESIZE_BILINEAR: "kb_resize_bilinear"}
_COMMON = dict(qparams="shared", emit=_emit, table_bytes=_table_bytes, lower=_lower)
DEFS = (
    OpDef(Op.RESIZE_NEAREST_NEIGHBOR, ResizeAttrs,
          _contract(Op.RESIZE_NEAREST_NEIGHBOR, "align_corners and half_pixel_centers in any combination"),
          builtin="RESIZE_NEAREST_NEIGHBOR", function=_FUNCTION[Op.RESIZE_NEAREST_NEIGHBOR], shape=_shape,
          float_ref=_float_nearest, int8_ref=_int8_nearest, **_COMMON),
    OpDef(Op.RESIZE_BILINEAR, ResizeAttrs,
          _contract(Op.RESIZE_BILINEAR, "align_corners or half_pixel_centers (not both, as TFLite); sizes where "
                    "TFLite Micro's Q10 scale would read past the input edge are refused"),
          builtin="RESIZE_BILINEAR", function=_FUNCTION[Op.RESIZE_BILINEAR], elementwise_cost=True,
          shape=_bilinear_shape, float_ref=_float_bilinear, int8_ref=_int8_bilinear, **_COMMON),
)


def add_resize_bilinear(b, x: str, size: tuple[int, int], half_pixel_centers: bool = True) -> str:
    """A RESIZE_BILINEAR node on `x` added to GraphBuilder `b` (PyTorch's `interpolate(..., align_corners=False)`
    is half_pixel_centers): for code that builds graphs without naming the op."""
    return b.node(Op.RESIZE_BILINEAR, [x], ResizeAttrs(tuple(size), align_corners=False,
                                                      half_pixel_centers=half_pixel_centers))
