"""Structure-aware mutation of `.tflite` files, for the fuzz tests of the whole compile path.

Flipping random bytes of a flatbuffer mostly breaks its offsets, so almost every mutant dies in the reader. To reach
the code after loading, `mutants` also rewrites the fields a real file can get wrong while staying well-formed:
tensor shapes, types and buffer indices; quantisation scales, zero points and axes; operator opcode indices,
inputs and outputs; every scalar of an operator's options table; weight bytes. Values are drawn from edge cases
(0, -1, NaN, inf, huge, off-by-one indices). Deterministic for a seed.
"""

from __future__ import annotations

import struct

import numpy as np
import tflite

INTS = (0, -1, 1, 2, 3, 7, 64, 1000, 2**31 - 1, -(2**31))
FLOATS = (0.0, -1.0, float("nan"), float("inf"), 1e-30, 1e30, 1.0, 2.5e-3)
BYTES = (0, 1, 2, 3, 4, 5, 6, 9, 16, 17, 127, 128, 255)


def _vector(tab, slot: int) -> tuple[int, int]:
    """(first element's position, length) of a vector field, or (0, 0)."""
    o = tab.Offset(slot)
    return (tab.Vector(o), tab.VectorLen(o)) if o else (0, 0)


def _field(tab, slot: int) -> int:
    o = tab.Offset(slot)
    return tab.Pos + o if o else 0


def fields(data: bytes) -> list[tuple[int, str, tuple]]:
    """Every (position, struct format, candidate values) worth mutating in a TFLite model."""
    model = tflite.Model.GetRootAs(data, 0)
    out: list[tuple[int, str, tuple]] = []
    sg = model.Subgraphs(0)
    n_tensors, n_buffers, n_codes = sg.TensorsLength(), model.BuffersLength(), model.OperatorCodesLength()
    indices = (-1, 0, n_tensors - 1, n_tensors, 2**31 - 1)
    for i in range(n_tensors):
        t = sg.Tensors(i)
        pos, n = _vector(t._tab, 4)
        out += [(pos + 4 * k, "<i", INTS) for k in range(n)]
        if _field(t._tab, 6):
            out.append((_field(t._tab, 6), "<b", tuple(range(18))))
        if _field(t._tab, 8):
            out.append((_field(t._tab, 8), "<I", (0, 1, n_buffers - 1, n_buffers, 2**32 - 1)))
        q = t.Quantization()
        if q is not None:
            pos, n = _vector(q._tab, 8)
            out += [(pos + 4 * k, "<f", FLOATS) for k in range(n)]
            pos, n = _vector(q._tab, 10)
            out += [(pos + 8 * k, "<q", (-129, 128, 300, -1, 0, 2**40)) for k in range(n)]
            if _field(q._tab, 16):
                out.append((_field(q._tab, 16), "<i", (0, 1, 3, 4, -1, 99)))
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        if _field(op._tab, 4):
            out.append((_field(op._tab, 4), "<I", (0, 1, n_codes - 1, n_codes)))
        for slot in (6, 8):
            pos, n = _vector(op._tab, slot)
            out += [(pos + 4 * k, "<i", indices) for k in range(n)]
        options = op.BuiltinOptions()
        if options is not None:
            out += _table_scalars(data, options)
    for i in range(n_buffers):
        pos, n = _vector(model.Buffers(i)._tab, 4)
        out += [(pos + k, "<B", (0, 1, 127, 128, 255)) for k in range(0, n, max(1, n // 8))]
    return out


def _table_scalars(data: bytes, table) -> list[tuple[int, str, tuple]]:
    """The first byte of every field present in an options table (their scalars are 1- or 4-byte little-endian)."""
    vtable = table.Pos - struct.unpack_from("<i", data, table.Pos)[0]
    size = struct.unpack_from("<H", data, vtable)[0]
    out = []
    for slot in range(4, size, 2):
        pos = _field(table, slot)
        if pos:
            out.append((pos, "<B", BYTES))
    return out


def mutants(seeds: list[bytes], n: int, seed: int = 0):
    """`n` mutated copies of the `seeds`: mostly 1-3 field rewrites, some byte flips and truncations."""
    rng = np.random.default_rng(seed)
    targets = [fields(s) for s in seeds]
    for i in range(n):
        k = i % len(seeds)
        data = bytearray(seeds[k])
        kind = rng.random()
        if kind < 0.1:
            yield bytes(data[: rng.integers(0, len(data))])
            continue
        if kind < 0.2:
            for _ in range(rng.integers(1, 9)):
                data[rng.integers(8, len(data))] = rng.integers(0, 256)
            yield bytes(data)
            continue
        for _ in range(rng.integers(1, 4)):
            pos, fmt, values = targets[k][rng.integers(len(targets[k]))]
            value = values[rng.integers(len(values))]
            try:
                struct.pack_into(fmt, data, pos, value)
            except struct.error:
                struct.pack_into(fmt, data, pos, 0)
        yield bytes(data)
