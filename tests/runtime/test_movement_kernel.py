"""Runtime stage tests: kb_strided_copy and kb_reduce_max (runtime/c/kb_movement.c) against numpy.

Each case is a random numpy view of a random int8 array — transposed, sliced with steps of either sign, possibly
repeated (a stride-0 axis, as TILE's repeats are) — whose shape, byte strides and offset are exactly the kernels'
loop axes: kb_strided_copy must write the view's values, kb_reduce_max their maximum over a random set of axes (output
step 0). The output sits between guard bytes that must stay untouched; test_build.py reruns this file against an
ASan/UBSan build of the kernels.
"""

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.runtime import StridesParams

GUARD, SENTINEL = 32, 0x5A
I8P = ctypes.POINTER(ctypes.c_int8)


def _ptr(a: np.ndarray, offset: int = 0):
    return ctypes.cast(a.ctypes.data + offset, I8P)


def random_view(data, x: np.ndarray) -> np.ndarray:
    """x transposed, sliced (steps -2..2) and with one axis repeated by broadcasting (stride 0)."""
    v = x.transpose(data.draw(st.permutations(range(4))))
    index = []
    for d in v.shape:
        step = data.draw(st.sampled_from([-2, -1, 1, 2]))
        start = data.draw(st.integers(0, d - 1))
        index.append(slice(start, None, step))
    v = v[tuple(index)]
    k = data.draw(st.integers(0, 4))
    if k < 4 and v.shape[k] == 1:
        v = np.broadcast_to(v, v.shape[:k] + (3,) + v.shape[k + 1:])
    return v


def params(view: np.ndarray, base: np.ndarray, out_step) -> StridesParams:
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    p = StridesParams()
    p.dims[:], p.in_step[:], p.out_step[:] = view.shape, view.strides, out_step
    p.in_start = offset
    return p


def dense_steps(shape) -> list[int]:
    steps = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        steps[k] = steps[k + 1] * shape[k + 1]
    return steps


@settings(max_examples=200, deadline=None)
@given(shape=st.tuples(*[st.integers(1, 5)] * 4), data=st.data())
def test_strided_copy_writes_the_view(kb_lib, shape, data):
    x = np.random.default_rng(sum(shape)).integers(-128, 128, shape).astype(np.int8)
    view = random_view(data, x)
    out = np.full(view.size + 2 * GUARD, SENTINEL, np.int8)
    kb_lib.kb_strided_copy(ctypes.byref(params(view, x, dense_steps(view.shape))), _ptr(x), _ptr(out, GUARD))
    assert np.array_equal(out[GUARD:GUARD + view.size].reshape(view.shape), view)
    assert np.all(out[:GUARD] == SENTINEL) and np.all(out[GUARD + view.size:] == SENTINEL)


@settings(max_examples=200, deadline=None)
@given(shape=st.tuples(*[st.integers(1, 5)] * 4), data=st.data())
def test_reduce_max_takes_the_maximum(kb_lib, shape, data):
    x = np.random.default_rng(sum(shape) + 1).integers(-128, 128, shape).astype(np.int8)
    view = random_view(data, x)
    reduced = data.draw(st.sets(st.integers(0, 3)))
    want = view.max(axis=tuple(sorted(reduced)), keepdims=True) if reduced else view
    steps = [0 if k in reduced else s for k, s in enumerate(dense_steps(want.shape))]
    out = np.full(want.size + 2 * GUARD, SENTINEL, np.int8)
    kb_lib.kb_reduce_max(ctypes.byref(params(view, x, steps)), _ptr(x), _ptr(out, GUARD))
    assert np.array_equal(out[GUARD:GUARD + want.size].reshape(want.shape), want)
    assert np.all(out[:GUARD] == SENTINEL) and np.all(out[GUARD + want.size:] == SENTINEL)


@pytest.mark.parametrize("value", [-128, 127])
def test_reduce_max_at_the_extremes(kb_lib, value):
    """A plane all at -128 (the kernel starts from the first value, not from a sentinel) or all at 127."""
    x = np.full((1, 3, 4, 2), value, np.int8)
    out = np.zeros(2, np.int8)
    p = params(x, x, [0, 0, 0, 1])
    kb_lib.kb_reduce_max(ctypes.byref(p), _ptr(x), _ptr(out))
    assert out.tolist() == [value, value]
