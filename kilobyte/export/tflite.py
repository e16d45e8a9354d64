"""Export stage: write an IR graph as a `.tflite` flatbuffer (schema version 3), in pure Python.

The file is what TensorFlow Lite Micro runs as the bit-exactness oracle, so it follows the schema to the letter:
`TFL3` identifier, version 3, an empty `buffers[0]`, one buffer per constant tensor with its data 16-byte aligned
(the schema's `force_align: 16`), one zero point per scale, operator codes deduplicated with
`deprecated_builtin_code` filled, and the description "kilobyte". Tensors keep their IR names; the tensors the
lowering adds (`tflite_ops`) are named after the IR output they serve. The IR node names travel in a metadata
buffer (`kilobyte.node_names`) because TFLite operators have no name. Output is deterministic: tensors are ordered by
first use (graph inputs, then each operator's inputs and outputs in node order, then unused tensors), so the same
graph always gives the same bytes, whatever the order of `graph.tensors`.
"""

from __future__ import annotations

from pathlib import Path

import flatbuffers
import numpy as np
import tflite

from ..atomic import write_bytes
from ..errors import KilobyteError
from ..formats import tflite_schema as S
from ..ir import Graph, GraphError, QParams, Tensor
from .tflite_ops import TflOp, lower_graph

_ALIGN = 16  # Buffer.data has force_align: 16 in the schema


def to_tflite(graph: Graph) -> bytes:
    """Serialise `graph` (float or int8, TFLite-expressible ops) as `.tflite` bytes.

    Raises `KilobyteError` naming the node when the graph cannot be expressed (e.g. AVG_POOL_2D with padding that is
    neither SAME nor VALID, or a training-only op).
    """
    try:
        graph.verify()
    except GraphError as e:
        raise KilobyteError(f"graph '{graph.name}' cannot be exported: {e}") from None
    ops, extra = lower_graph(graph)
    tensors = _tensor_order(graph, ops, extra)
    return _Writer(graph, tensors, ops).serialise()


def save_tflite(graph: Graph, path) -> Path:
    """Write `to_tflite(graph)` to `path` atomically (`kilobyte.atomic.write_bytes`)."""
    return write_bytes(path, to_tflite(graph))  # to_tflite fails before anything touches the disk


def _tensor_order(graph: Graph, ops: list[TflOp], extra: list[Tensor]) -> list[Tensor]:
    """Every tensor once, by first use: graph inputs, operator inputs/outputs in order, then unused IR tensors."""
    pool = {**graph.tensors, **{t.name: t for t in extra}}
    names: dict[str, None] = dict.fromkeys(graph.inputs)
    for op in ops:
        names.update(dict.fromkeys(n for n in op.inputs if n is not None))
        names.update(dict.fromkeys(op.outputs))
    names.update(dict.fromkeys(graph.tensors))
    return [pool[n] for n in names]


class _Writer:
    """One flatbuffer build. Raw data goes in first so that it sits at the end of the file, behind the tables."""

    def __init__(self, graph: Graph, tensors: list[Tensor], ops: list[TflOp]):
        self.graph, self.tensors, self.ops = graph, tensors, ops
        self.index = {t.name: i for i, t in enumerate(tensors)}
        self.codes = list(dict.fromkeys(op.code for op in ops))  # deduplicated, first-use order
        const_bytes = sum(t.nbytes for t in tensors if t.is_const)
        self.b = flatbuffers.Builder(const_bytes + 16 * 1024)

    def serialise(self) -> bytes:
        b = self.b
        consts = [t for t in self.tensors if t.is_const]
        data = [self._aligned(_le_bytes(t.data)) for t in consts]
        node_names = self._aligned("\n".join(n.name for n in self.graph.nodes).encode())
        buffers = [self._buffer(None)] + [self._buffer(d) for d in data] + [self._buffer(node_names)]
        buffer_of = {t.name: i + 1 for i, t in enumerate(consts)}
        tensors = [self._tensor(t, buffer_of.get(t.name, 0)) for t in self.tensors]
        operators = [self._operator(op) for op in self.ops]
        codes = [self._opcode(c) for c in self.codes]
        subgraph = self._subgraph(tensors, operators)
        metadata = self._metadata(S.NODE_NAMES_METADATA, len(buffers) - 1)
        vectors = {"OperatorCodes": self._offsets(codes), "Subgraphs": self._offsets([subgraph]),
                   "Buffers": self._offsets(buffers), "Metadata": self._offsets([metadata])}
        description = b.CreateString(S.DESCRIPTION)
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, S.SCHEMA_VERSION)
        tflite.ModelAddOperatorCodes(b, vectors["OperatorCodes"])
        tflite.ModelAddSubgraphs(b, vectors["Subgraphs"])
        tflite.ModelAddDescription(b, description)
        tflite.ModelAddBuffers(b, vectors["Buffers"])
        tflite.ModelAddMetadata(b, vectors["Metadata"])
        b.Finish(tflite.ModelEnd(b), file_identifier=S.FILE_IDENTIFIER)
        return bytes(b.Output())

    # -- vectors ---------------------------------------------------------------------------------------------------
    def _aligned(self, payload: bytes) -> int:
        """A [ubyte] vector whose first byte is 16-byte aligned (offsets count from the end, and Finish pads the
        front to the largest alignment used, so the alignment holds from the start of the file too)."""
        b = self.b
        b.StartVector(1, len(payload), _ALIGN)
        b.head -= len(payload)
        b.Bytes[b.head:b.head + len(payload)] = payload
        return b.EndVector()

    def _offsets(self, offsets: list[int]) -> int:
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def _ints(self, values) -> int:
        return self.b.CreateNumpyVector(np.asarray(values, np.int32).reshape(-1))

    # -- tables ----------------------------------------------------------------------------------------------------
    def _buffer(self, data: int | None) -> int:
        tflite.BufferStart(self.b)
        if data is not None:
            tflite.BufferAddData(self.b, data)
        return tflite.BufferEnd(self.b)

    def _quantization(self, q: QParams) -> int:
        b = self.b
        scale = b.CreateNumpyVector(np.asarray(q.scale, "<f4"))
        zero_point = b.CreateNumpyVector(np.asarray(q.zero_point, "<i8"))
        tflite.QuantizationParametersStart(b)
        tflite.QuantizationParametersAddScale(b, scale)
        tflite.QuantizationParametersAddZeroPoint(b, zero_point)
        tflite.QuantizationParametersAddQuantizedDimension(b, q.axis or 0)
        return tflite.QuantizationParametersEnd(b)

    def _tensor(self, t: Tensor, buffer: int) -> int:
        b = self.b
        name = b.CreateString(t.name)
        shape = self._ints(t.shape)
        quant = self._quantization(t.qparams) if t.qparams is not None else None
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, S.DTYPE_TO_TFL[t.dtype])
        tflite.TensorAddBuffer(b, buffer)
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        return tflite.TensorEnd(b)

    def _options(self, op: TflOp) -> tuple[int, int | None]:
        """(BuiltinOptions union tag, table offset) built from the field dict with the generated functions."""
        kind = S.BUILTIN_OPTIONS.get(op.code)
        if kind is None:
            return 0, None
        values = {k: self._ints(v) if isinstance(v, tuple) else v for k, v in op.options.items()}
        getattr(tflite, f"{kind}Start")(self.b)
        for field, value in values.items():
            getattr(tflite, f"{kind}Add{field}")(self.b, value)
        return getattr(tflite.BuiltinOptions, kind), getattr(tflite, f"{kind}End")(self.b)

    def _operator(self, op: TflOp) -> int:
        b = self.b
        inputs = self._ints([-1 if n is None else self.index[n] for n in op.inputs])
        outputs = self._ints([self.index[n] for n in op.outputs])
        options_type, options = self._options(op)
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, self.codes.index(op.code))
        tflite.OperatorAddInputs(b, inputs)
        tflite.OperatorAddOutputs(b, outputs)
        if options is not None:
            tflite.OperatorAddBuiltinOptionsType(b, options_type)
            tflite.OperatorAddBuiltinOptions(b, options)
        return tflite.OperatorEnd(b)

    def _opcode(self, code: int) -> int:
        tflite.OperatorCodeStart(self.b)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(self.b, S.deprecated_builtin_code(code))
        tflite.OperatorCodeAddVersion(self.b, 1)
        tflite.OperatorCodeAddBuiltinCode(self.b, code)
        return tflite.OperatorCodeEnd(self.b)

    def _subgraph(self, tensors: list[int], operators: list[int]) -> int:
        b = self.b
        vectors = (self._offsets(tensors), self._ints([self.index[n] for n in self.graph.inputs]),
                   self._ints([self.index[n] for n in self.graph.outputs]), self._offsets(operators))
        name = b.CreateString(self.graph.name)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, vectors[0])
        tflite.SubGraphAddInputs(b, vectors[1])
        tflite.SubGraphAddOutputs(b, vectors[2])
        tflite.SubGraphAddOperators(b, vectors[3])
        tflite.SubGraphAddName(b, name)
        return tflite.SubGraphEnd(b)

    def _metadata(self, name: str, buffer: int) -> int:
        name_off = self.b.CreateString(name)
        tflite.MetadataStart(self.b)
        tflite.MetadataAddName(self.b, name_off)
        tflite.MetadataAddBuffer(self.b, buffer)
        return tflite.MetadataEnd(self.b)


def _le_bytes(data: np.ndarray) -> bytes:
    """Little-endian, C-order raw bytes (the schema's byte order)."""
    return np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes()
