"""Frontend stage: fold a `.tflite` file's constant shape arithmetic into constant tensors, before conversion.

Keras and PyTorch exports compute shapes inside the graph: `SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE` builds a
RESHAPE's new shape from the input's shape, `CONCATENATION`, `GATHER`, `CAST` and integer `ADD` / `MUL` fill in the
rest. With the input shape fixed every such value is a constant, so `fold_constants` evaluates it once, in numpy, and
gives the operator's output tensor its data; the operators that read it (RESHAPE's shape, STRIDED_SLICE's begin, TILE's
multiples, ...) then find a constant as if the file had one, and the folded operators are skipped.

An operator is folded when its output is an int32 / int64 tensor that is not a graph output, and either it is SHAPE
(its value is the input's static shape) or every input it reads is an integer constant (in the file or folded before
it; the operators are in execution order). Anything a numpy evaluation would refuse (an axis out of range, a gather
index past the end, a division by zero) or a value that does not fit the output's type is a one-line
`ModelFileError` naming the operator.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ModelFileError
from ..formats import tflite_schema as S
from ..ops.movement import strided_slice_values
from .tflite_ops import op_options, op_where, strided_slice_bounds

B = S.B
_INT_TYPES = {S.T.INT32: np.int32, S.T.INT64: np.int64}


def fold_constants(fm) -> set[int]:
    """Give the outputs of foldable operators their values (in `fm.tensors`); return those operators' indices."""
    folded: set[int] = set()
    edges = set(fm.inputs) | set(fm.outputs)
    for op in fm.ops:
        fold = _FOLDERS.get(op.code)
        if fold is None or len(op.outputs) != 1 or op.outputs[0] in edges or not op.inputs or op.inputs[0] < 0:
            continue
        out = fm.tensors[op.outputs[0]]
        ins = [i for i in op.inputs if i >= 0]
        if out.type not in _INT_TYPES or not ins:
            continue
        args = [fm.tensors[i].data for i in ins]
        if op.code != B.SHAPE and any(a is None or a.dtype.kind not in "iu" for a in args):
            continue  # shape arithmetic is integer: anything else stays an operator
        try:
            value = fold(fm, op, args)
        except (ValueError, IndexError, TypeError, OverflowError, ZeroDivisionError, FloatingPointError) as e:
            raise ModelFileError(f"{op_where(fm, op)}: cannot evaluate its constant inputs ({e})") from None
        if value is None:
            continue
        value = _fit(fm, op, np.asarray(value), _INT_TYPES[out.type])
        value.setflags(write=False)
        fm.tensors[op.outputs[0]] = dataclasses.replace(out, shape=tuple(value.shape), data=value)
        folded.add(op.index)
    return folded


def _fit(fm, op, value: np.ndarray, dtype) -> np.ndarray:
    """`value` as the output's integer type; a value that does not fit is a one-line error, not a silent wrap."""
    info = np.iinfo(dtype)
    if value.size and (value.min() < info.min or value.max() > info.max):
        raise ModelFileError(f"{op_where(fm, op)}: its value {value.reshape(-1)[:8].tolist()} does not fit "
                             f"{np.dtype(dtype).name}")
    return value.astype(dtype)


# -- one evaluation per operator: (file model, operator, input arrays) -> value, or None to leave it ----------------
def _shape(fm, op, args):
    return np.array(fm.tensors[op.inputs[0]].shape)


def _pack(fm, op, args):
    axis = op_options(fm, op, "PackOptions").Axis() if op.options is not None else 0
    return np.stack(args, axis=axis)


def _strided_slice(fm, op, args):
    b = strided_slice_bounds(fm, op)
    return strided_slice_values(args[0], b.begin, b.end, b.strides).reshape(b.out_shape)


def _concat(fm, op, args):
    opts = op_options(fm, op, "ConcatenationOptions")
    if opts.FusedActivationFunction() != 0:
        return None
    return np.concatenate(args, axis=opts.Axis())


def _gather(fm, op, args):
    opts = op_options(fm, op, "GatherOptions") if op.options is not None else None
    axis, batch_dims = (0, 0) if opts is None else (opts.Axis(), opts.BatchDims())
    params, indices = args[0], np.asarray(args[1])
    if batch_dims != 0:
        return None
    axis %= max(params.ndim, 1)
    if indices.size and not (0 <= indices.min() and indices.max() < params.shape[axis]):
        raise IndexError(f"indices {indices.reshape(-1).tolist()} out of range for axis {axis} of {params.shape}")
    return np.take(params, indices, axis=axis)


def _same_values(fm, op, args):
    """CAST (integer to integer), and RESHAPE / SQUEEZE / EXPAND_DIMS of a constant: the values in the output's
    shape as the file declares it."""
    return np.asarray(args[0]).reshape(fm.tensors[op.outputs[0]].shape)


_ARITH = {B.ADD: np.add, B.SUB: np.subtract, B.MUL: np.multiply, B.MAXIMUM: np.maximum, B.MINIMUM: np.minimum,
          B.FLOOR_DIV: np.floor_divide}
_ARITH_OPTIONS = {B.ADD: "AddOptions", B.SUB: "SubOptions", B.MUL: "MulOptions"}


def _arith(fm, op, args):
    """Integer ADD, SUB, MUL (without a fused activation), MAXIMUM, MINIMUM, FLOOR_DIV; numpy broadcasting."""
    kind = _ARITH_OPTIONS.get(op.code)
    if kind and op.options is not None and op_options(fm, op, kind).FusedActivationFunction() != 0:
        return None
    if len(args) != 2:
        return None
    a, b = (np.asarray(v, np.int64) for v in args)
    if op.code == B.FLOOR_DIV and np.any(b == 0):
        raise ZeroDivisionError("integer division by zero")
    return _ARITH[op.code](a, b)


_FOLDERS = {B.SHAPE: _shape, B.PACK: _pack, B.STRIDED_SLICE: _strided_slice, B.CONCATENATION: _concat,
            B.GATHER: _gather, B.CAST: _same_values, B.RESHAPE: _same_values, B.SQUEEZE: _same_values,
            B.EXPAND_DIMS: _same_values, **dict.fromkeys(_ARITH, _arith)}
