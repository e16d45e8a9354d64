"""Frontend stage: a `.tflite` file (int8 or float, schema version 3) -> the IR, in pure Python.

Reading happens in two steps. `_parse` walks the flatbuffer with the `tflite` schema package into plain records,
checking every index (buffer, tensor, opcode) and wrapping any flatbuffers/numpy failure into a one-line
`ModelFileError` naming the file, so a truncated or corrupt file never shows a traceback. `_build` then turns the
records into a `Graph`: constant shape arithmetic (SHAPE, PACK, int32 STRIDED_SLICE, ...) is evaluated into constant
tensors first (`tflite_fold`); per-op conversion lives in `tflite_ops`; SAME/VALID become explicit padding; tensors
keep their names from the file; constant weights and biases keep their `QParams`; attribute tensors (PAD paddings,
MEAN axes, RESHAPE shape, ...) are consumed into node attrs.

Round-trip rule: the `.tflite` writer (`kilobyte.export.tflite`) adds a PAD/PADV2 named `<out>.pad` before a
window op whose padding TFLite cannot express; the reader folds exactly those back (a PAD before CONV_2D /
DEPTHWISE_CONV_2D, a PADV2 with the dtype minimum before MAX_POOL_2D, padding H and W only, read by that op alone),
and takes node names from the `kilobyte.node_names` metadata when the writer left it, so IR -> `.tflite` -> IR gives
an equal graph. PADs of other files stay PAD nodes (folding those is the `fold_pad` transform's job).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tflite

from ..errors import KilobyteError, ModelFileError, UnsupportedOpError
from ..formats import tflite_schema as S
from ..ir import Graph, GraphError, Node, QParams, Tensor
from ..ops import opdef
from .tflite_fold import fold_constants
from .tflite_ops import convert_op, find_folds

_NP_TYPES = {S.T.FLOAT32: "<f4", S.T.INT8: "i1", S.T.INT32: "<i4", S.T.INT64: "<i8", S.T.UINT8: "u1",
             S.T.INT16: "<i2", S.T.FLOAT16: "<f2", S.T.BOOL: "?"}


@dataclass
class FileTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    type: int
    data: np.ndarray | None
    quant: tuple[np.ndarray, np.ndarray, int] | None  # (scale, zero_point, quantized_dimension)


@dataclass
class FileOp:
    index: int
    code: int
    inputs: tuple[int, ...]  # -1 = optional input left out
    outputs: tuple[int, ...]
    options: object  # flatbuffers Table of the builtin options, or None
    options_type: int


@dataclass
class FileModel:
    src: str
    name: str
    tensors: list[FileTensor]
    ops: list[FileOp]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    node_names: list[str] | None


def from_tflite(model: str | os.PathLike | bytes) -> Graph:
    """Read a `.tflite` file (path) or its bytes into a verified `Graph`.

    Raises `ModelFileError` (truncated, not TFL3, index out of range, ...) or `UnsupportedOpError` with one line
    naming the file and the reason.
    """
    if isinstance(model, (bytes, bytearray, memoryview)):
        src, data = "<tflite bytes>", bytes(model)
    else:
        src = str(model)
        try:
            data = Path(model).read_bytes()
        except OSError as e:
            raise ModelFileError(f"{src}: cannot read file ({e.strerror or e})") from None
    if len(data) < 8:
        raise ModelFileError(f"{src}: truncated file ({len(data)} bytes), not a .tflite model")
    if data[4:8] != S.FILE_IDENTIFIER:
        raise ModelFileError(f"{src}: file identifier is {data[4:8]!r}, not {S.FILE_IDENTIFIER!r}: not a .tflite model")
    try:
        return _build(_parse_model(src, data))
    except KilobyteError:
        raise
    except (struct.error, IndexError, KeyError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as e:
        # The flatbuffers accessors do no bounds checks of their own: a cut or damaged file fails in them.
        raise ModelFileError(f"{src}: truncated or corrupt flatbuffer ({type(e).__name__}: {e})") from None


# -- parsing ----------------------------------------------------------------------------------------------------


def _check_index(src: str, what: str, i: int, n: int) -> int:
    if not 0 <= i < n:
        raise ModelFileError(f"{src}: {what} index {i} out of range (the file has {n})")
    return i


def _parse_model(src: str, data: bytes) -> FileModel:
    root = struct.unpack_from("<I", data, 0)[0]
    if root + 4 > len(data):
        raise ModelFileError(f"{src}: truncated file (root table at {root}, file has {len(data)} bytes)")
    m = tflite.Model.GetRootAs(data, 0)
    if m.Version() != S.SCHEMA_VERSION:
        raise ModelFileError(f"{src}: schema version {m.Version()}, expected {S.SCHEMA_VERSION}")
    if m.SubgraphsLength() < 1:
        raise ModelFileError(f"{src}: the model has no subgraph")
    buffers = [_buffer_bytes(src, data, m.Buffers(i), i) for i in range(m.BuffersLength())]
    codes = [_builtin_code(m.OperatorCodes(i)) for i in range(m.OperatorCodesLength())]
    sg = m.Subgraphs(0)
    n_tensors = sg.TensorsLength()
    tensors = [_parse_tensor(src, sg.Tensors(i), i, buffers) for i in range(n_tensors)]
    ops = [_parse_op(src, sg.Operators(i), i, codes, n_tensors) for i in range(sg.OperatorsLength())]
    inputs = tuple(_check_index(src, "subgraph input tensor", int(i), n_tensors) for i in _ints(sg.InputsAsNumpy()))
    outputs = tuple(_check_index(src, "subgraph output tensor", int(i), n_tensors)
                    for i in _ints(sg.OutputsAsNumpy()))
    name = (sg.Name() or b"").decode() or Path(src).stem
    return FileModel(src, name, _unique_names(tensors), ops, inputs, outputs, _node_names(src, m, buffers))


def _ints(v) -> np.ndarray:
    """Generated `...AsNumpy()` accessors return 0 for an absent vector."""
    return np.zeros(0, np.int32) if isinstance(v, int) else v


def _buffer_bytes(src: str, data: bytes, buf, i: int) -> bytes:
    offset, size = buf.Offset(), buf.Size()
    if offset > 1:  # data stored after the flatbuffer (models over 2 GB)
        if offset + size > len(data):
            raise ModelFileError(f"{src}: truncated file (buffer {i} ends at {offset + size}, file has {len(data)})")
        return data[offset:offset + size]
    raw = buf.DataAsNumpy()
    return b"" if isinstance(raw, int) else raw.tobytes()


def _builtin_code(opcode) -> int:
    # Old files set only deprecated_builtin_code, new ones builtin_code; the schema says take the larger.
    return max(opcode.BuiltinCode(), opcode.DeprecatedBuiltinCode())


def _parse_tensor(src: str, t, i: int, buffers: list[bytes]) -> FileTensor:
    name = (t.Name() or b"").decode()
    shape = tuple(int(d) for d in _ints(t.ShapeAsNumpy()))
    raw = buffers[_check_index(src, f"buffer (of tensor {i} '{name}')", t.Buffer(), len(buffers))]
    data = None
    if raw:
        np_type = _NP_TYPES.get(t.Type())
        if np_type is not None:
            want = int(np.prod(shape, dtype=np.int64)) * np.dtype(np_type).itemsize
            if len(raw) != want:
                raise ModelFileError(f"{src}: tensor {i} '{name}' {shape} needs {want} bytes, its buffer "
                                     f"{t.Buffer()} holds {len(raw)}")
            data = np.frombuffer(raw, np_type).astype(np.dtype(np_type).newbyteorder("="))
            data = data.reshape(shape)
            data.setflags(write=False)
    return FileTensor(i, name, shape, t.Type(), data, _parse_quant(src, t.Quantization(), name))


def _parse_quant(src: str, q, name: str):
    if q is None or q.ScaleLength() == 0:
        return None
    if q.ZeroPointLength() != q.ScaleLength():
        raise ModelFileError(f"{src}: tensor '{name}' has {q.ScaleLength()} scales but {q.ZeroPointLength()} "
                             f"zero points")
    scale = np.asarray(q.ScaleAsNumpy(), np.float32)
    zero_point = np.asarray(q.ZeroPointAsNumpy(), np.int64)
    return scale, zero_point, q.QuantizedDimension()


def _parse_op(src: str, op, i: int, codes: list[int], n_tensors: int) -> FileOp:
    code = codes[_check_index(src, f"opcode (of operator {i})", op.OpcodeIndex(), len(codes))]
    inputs = tuple(int(t) for t in _ints(op.InputsAsNumpy()))
    outputs = tuple(int(t) for t in _ints(op.OutputsAsNumpy()))
    for t in inputs:
        if t != -1:
            _check_index(src, f"input tensor (of operator {i})", t, n_tensors)
    for t in outputs:
        _check_index(src, f"output tensor (of operator {i})", t, n_tensors)
    return FileOp(i, code, inputs, outputs, op.BuiltinOptions(), op.BuiltinOptionsType())


def _unique_names(tensors: list[FileTensor]) -> list[FileTensor]:
    for t, name in zip(tensors, S.unique_tensor_names([t.name for t in tensors])):
        t.name = name
    return tensors


def _node_names(src: str, m, buffers: list[bytes]) -> list[str] | None:
    for i in range(m.MetadataLength()):
        md = m.Metadata(i)
        if (md.Name() or b"").decode() == S.NODE_NAMES_METADATA:
            raw = buffers[_check_index(src, "metadata buffer", md.Buffer(), len(buffers))]
            return raw.decode().split("\n") if raw else []
    return None


# -- building the graph -----------------------------------------------------------------------------------------
def _build(fm: FileModel) -> Graph:
    if not fm.inputs or not fm.outputs or not fm.ops:
        raise ModelFileError(f"{fm.src}: the model has {len(fm.inputs)} inputs, {len(fm.outputs)} outputs and "
                             f"{len(fm.ops)} operators; it needs at least one of each")
    constant = fold_constants(fm)  # shape arithmetic -> constant tensors, before anything reads them
    folds = find_folds(fm)
    folds.skipped |= constant
    nodes: list[Node] = []
    extra: dict[str, Tensor] = {}
    for op in fm.ops:
        if op.index not in folds.skipped:
            nodes += convert_op(fm, op, folds, extra)
    if fm.node_names is not None and len(fm.node_names) == len(nodes):
        nodes = [Node(name, n.op, n.inputs, n.outputs, n.attrs, n.origin) for name, n in zip(fm.node_names, nodes)]
    tensors = _positive_weight_scales(fm.src, _ir_tensors(fm, nodes, extra), nodes)
    graph = Graph(tensors, tuple(nodes), tuple(fm.tensors[i].name for i in fm.inputs),
                  tuple(fm.tensors[i].name for i in fm.outputs), fm.name)
    try:
        return graph.verify()
    except GraphError as e:
        raise ModelFileError(f"{fm.src}: {e}") from None


def _positive_weight_scales(src: str, tensors: dict[str, Tensor], nodes: list[Node]) -> dict[str, Tensor]:
    """Weight channels with a negative scale (MCUNet's published files have them; TFLite Micro accepts them) become
    negated weights and bias with the positive scale: w * s = (-w) * (-s), and TFLite's requantisation of
    (acc, -m) equals that of (-acc, m) bit for bit, so every output is unchanged."""
    for n in nodes:
        if not opdef(n.op).params or len(n.inputs) < 2:
            continue
        w = tensors[n.inputs[1]]
        if w.qparams is None or w.data is None or not np.any(w.qparams.scale < 0):
            continue
        flip = w.qparams.scale < 0  # per channel (or the one scale)
        axis = w.qparams.axis if w.qparams.axis is not None else 0
        sign = np.where(flip, -1, 1).reshape([-1 if a == axis else 1 for a in range(w.data.ndim)])
        if w.data.dtype != np.int8 or np.any((w.data == -128) & (sign < 0)):
            raise UnsupportedOpError(f"{src}: node '{n.name}': weights '{w.name}' with a negative scale hold -128, "
                                     "which cannot be negated in int8")
        tensors[w.name] = _with(w, (w.data * sign).astype(np.int8), np.abs(w.qparams.scale))
        if len(n.inputs) > 2 and tensors[n.inputs[2]].data is not None:
            b = tensors[n.inputs[2]]
            data = b.data.astype(np.int64) * np.where(flip, -1, 1)
            if b.data.dtype != np.int32 or np.any(np.abs(data) > 2**31 - 1):
                raise UnsupportedOpError(f"{src}: node '{n.name}': bias '{b.name}' cannot be negated with its "
                                         "weights' negative scale")
            scale = None if b.qparams is None else np.abs(b.qparams.scale)
            tensors[b.name] = _with(b, data.astype(np.int32), scale)
    return tensors


def _with(t: Tensor, data: np.ndarray, scale: np.ndarray | None) -> Tensor:
    q = t.qparams if scale is None else QParams(scale.astype(np.float32), t.qparams.zero_point, t.qparams.axis)
    return Tensor(t.name, t.shape, t.dtype, data, q)


def _ir_tensors(fm: FileModel, nodes: list[Node], extra: dict[str, Tensor]) -> dict[str, Tensor]:
    """IR tensors: those the nodes and graph edges use, plus file tensors no operator touches (kept for fidelity)."""
    used = dict.fromkeys(fm.tensors[i].name for i in fm.inputs)
    for n in nodes:
        used.update(dict.fromkeys(n.inputs + n.outputs))
    used.update(dict.fromkeys(fm.tensors[i].name for i in fm.outputs))
    touched = {t for op in fm.ops for t in op.inputs + op.outputs}
    used.update(dict.fromkeys(t.name for t in fm.tensors if t.index not in touched))
    params = {t for n in nodes if opdef(n.op).params for t in n.inputs[1:]}
    by_name = {t.name: t for t in fm.tensors}
    return {name: extra[name] if name in extra else _ir_tensor(fm.src, by_name[name], name in params)
            for name in used}


def _ir_tensor(src: str, t: FileTensor, is_param: bool) -> Tensor:
    dtype = S.TFL_TO_DTYPE.get(t.type)
    if dtype is None:
        raise UnsupportedOpError(f"{src}: tensor {t.index} '{t.name}' has type "
                                 f"{S.TFL_TYPE_NAMES.get(t.type, t.type)}; Kilobyte supports float32, int8 and int32")
    return Tensor(t.name, t.shape, dtype, t.data, _qparams(t, is_param))


def _qparams(t: FileTensor, is_param: bool) -> QParams | None:
    """Per-channel when there are several scales; a single scale is per-channel only on a weight or bias whose
    quantised dimension has size 1 (a one-channel conv), per-tensor everywhere else."""
    if t.quant is None:
        return None
    scale, zero_point, dim = t.quant
    if len(t.shape) == 1 and not 0 <= dim < 1 and len(scale) == t.shape[0]:
        dim = 0  # older converters give 1-D biases the weights' axis (3 for depthwise); TFLite Micro ignores it
    per_channel = len(scale) > 1 or (is_param and 0 <= dim < len(t.shape) and t.shape[dim] == 1)
    return QParams(scale, zero_point, dim if per_channel else None)
