"""Runtime stage tests: kb_lut (runtime/c/kb_lut.c), the one C kernel of every int8 unary op, against the reference.

The tables are the reference's (`kilobyte.ops.lut.node_table`) for the parameter sets checked against TFLite Micro
(tests/unary_cases.py); the kernel must reproduce `eval_node_int8` on every int8 value, dense and with pixel strides
(a concat slice on either side), in place, and touch nothing outside its pixels. Buffers sit between guard bytes;
test_build.py reruns this file against an ASan/UBSan build of the kernels.
"""

import ctypes

import numpy as np
import pytest
from unary_cases import ALL_INT8, CASES, case_id, unary_graph

from kilobyte.interp.int8_ref import eval_node_int8
from kilobyte.ops.lut import node_table as unary_node_table

GUARD, SENTINEL = 32, 0x5A
I8P = ctypes.POINTER(ctypes.c_int8)


def _ptr(a: np.ndarray, offset: int = 0):
    return ctypes.cast(a.ctypes.data + offset, I8P)


def run_lut(lib, table: np.ndarray, x: np.ndarray, in_cstride: int, out_cstride: int, in_place: bool = False):
    """kb_lut over x (pixels, c) laid out with the given pixel strides between guard bytes; returns (pixels, c) and
    the two raw buffers."""
    pixels, c = x.shape
    src = np.full(pixels * in_cstride + 2 * GUARD, SENTINEL, np.int8)
    src[GUARD:GUARD + pixels * in_cstride].reshape(pixels, in_cstride)[:, :c] = x
    dst = src if in_place else np.full(pixels * out_cstride + 2 * GUARD, SENTINEL, np.int8)
    tab = np.ascontiguousarray(table, np.int8)
    lib.kb_lut(pixels, c, _ptr(tab), _ptr(src, GUARD), in_cstride, _ptr(dst, GUARD), out_cstride)
    out = dst[GUARD:GUARD + pixels * out_cstride].reshape(pixels, out_cstride)[:, :c]
    return out, src, dst


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_int8_value_equals_the_reference(kb_lib, case):
    op, q_in, q_out, alpha = case
    graph = unary_graph(op, q_in, q_out, alpha)
    want = eval_node_int8(graph, graph.nodes[0], [ALL_INT8]).reshape(-1, 1)
    got, _, _ = run_lut(kb_lib, unary_node_table(graph, graph.nodes[0]), ALL_INT8.reshape(-1, 1), 1, 1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("in_cstride,out_cstride,in_place", [(5, 5, False), (9, 5, False), (5, 12, False),
                                                             (5, 5, True), (7, 7, True)])
def test_strides_and_in_place(kb_lib, in_cstride, out_cstride, in_place):
    """A random table over random (pixels, 5) data: the channels land where the strides say, the bytes between
    pixels and the guards stay untouched."""
    rng = np.random.default_rng(in_cstride * 31 + out_cstride)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    x = rng.integers(-128, 128, (37, 5)).astype(np.int8)
    got, src, dst = run_lut(kb_lib, table, x, in_cstride, out_cstride, in_place)
    np.testing.assert_array_equal(got, table[x.astype(np.int64) + 128])
    gaps = dst[GUARD:GUARD + 37 * out_cstride].reshape(37, out_cstride)[:, 5:]
    assert np.all(gaps == SENTINEL) and np.all(dst[:GUARD] == SENTINEL) and np.all(dst[-GUARD:] == SENTINEL)
    if not in_place:
        np.testing.assert_array_equal(src[GUARD:GUARD + 37 * in_cstride].reshape(37, in_cstride)[:, :5], x)


def test_zero_pixels_writes_nothing(kb_lib):
    got, _, dst = run_lut(kb_lib, np.zeros(256, np.int8), np.zeros((0, 4), np.int8), 4, 4)
    assert got.size == 0 and np.all(dst == SENTINEL)
