"""Runtime stage tests: kb_softmax / kb_log_softmax (runtime/c/kb_softmax.c) against the numpy reference, bit for bit.

The cases are those the reference is checked on against TFLite Micro (tests/softmax_cases.py): every input scale,
beta and depth of the grid with edge and random rows, the leading shapes, and random scales and rows. Rows TFLite
Micro cannot run (a SOFTMAX row whose exps sum to 512 or more, a LOG_SOFTMAX row whose sum overflows) are compared
with the reference's `tflm_checks=False` arithmetic, which is what the kernel documents. Parameters come from
`softmax_params`, as the code generator's do. Buffers sit between guard bytes; test_build.py reruns this file
against an ASan/UBSan build of the kernels.
"""

import ctypes
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from softmax_cases import BETAS, DEPTHS, SCALES, SHAPES, case_rows, softmax_graph

import kilobyte.runtime as rt
from kilobyte.interp.int8_ref import eval_node_int8
from kilobyte.ir import Op
from kilobyte.ops.softmax import SoftmaxParams, log_softmax_int8, softmax_int8
from kilobyte.ops.softmax import kernel_fields as softmax_params

SANITIZE = os.environ.get("KB_RUNTIME_SANITIZE") == "1"  # set by test_build.py's sanitizer run
EXAMPLES = settings(max_examples=10 if SANITIZE else 60, deadline=None)
N_RANDOM = 6 if SANITIZE else 60
GUARD, SENTINEL = 32, 0x5A
KERNEL = {Op.SOFTMAX: "kb_softmax", Op.LOG_SOFTMAX: "kb_log_softmax"}


def call_kernel(lib, op: Op, fields: dict, x: np.ndarray, in_place: bool = False) -> np.ndarray:
    """Run the C kernel on `x` (rows x depth values) between guard bytes; in place or into a separate buffer."""
    n = x.size
    src = np.full(n + 2 * GUARD, SENTINEL, np.int8)
    src[GUARD:GUARD + n] = x.reshape(-1)
    dst = src if in_place else np.full(n + 2 * GUARD, SENTINEL, np.int8)
    ptr = [ctypes.cast(a.ctypes.data + GUARD, ctypes.POINTER(ctypes.c_int8)) for a in (src, dst)]
    getattr(lib, KERNEL[op])(ctypes.byref(rt.SoftmaxParams(**fields)), ptr[0], ptr[1])
    for a in (src, dst):
        assert (a[:GUARD] == SENTINEL).all() and (a[GUARD + n:] == SENTINEL).all(), "kernel wrote outside its buffer"
    if not in_place:
        assert np.array_equal(src[GUARD:GUARD + n], x.reshape(-1)), "kernel changed its input"
    return dst[GUARD:GUARD + n].reshape(x.shape).copy()


def reference(op: Op, x: np.ndarray, fields: dict) -> np.ndarray:
    """The reference on every row, TFLite Micro's limits lifted as the kernel documents."""
    p = SoftmaxParams(fields["input_multiplier"], fields["input_left_shift"], fields["diff_min"],
                      fields["reverse_scaling_divisor"], fields["reverse_scaling_right_shift"])
    kernel = softmax_int8 if op is Op.SOFTMAX else log_softmax_int8
    return kernel(x, p, tflm_checks=False)


def check_case(lib, op: Op, x: np.ndarray, scale: float, beta: float, zero_point: int = 0) -> None:
    graph = softmax_graph(op, x.shape, scale, beta, zero_point)
    fields = softmax_params(graph, graph.nodes[0])
    assert fields["rows"] * fields["depth"] == x.size
    got = call_kernel(lib, op, fields, x)
    want = reference(op, x, fields)
    differ = np.flatnonzero(got != want)
    assert differ.size == 0, f"{differ.size} of {x.size} differ, first at {differ[0]}: C {got.flat[differ[0]]}, " \
                             f"reference {want.flat[differ[0]]}"


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("scale", SCALES)
def test_softmax_grid(kb_lib, scale, beta, depth):
    check_case(kb_lib, Op.SOFTMAX, case_rows(depth, np.random.default_rng(depth), N_RANDOM), scale, beta)


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("scale", SCALES)
def test_log_softmax_grid(kb_lib, scale, depth):
    check_case(kb_lib, Op.LOG_SOFTMAX, case_rows(depth, np.random.default_rng(depth + 1), N_RANDOM), scale, 1.0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", [Op.SOFTMAX, Op.LOG_SOFTMAX])
def test_leading_shapes_against_eval_node(kb_lib, op, shape):
    """Through the graph: softmax_params' rows x depth cover the tensor, and the result is eval_node_int8's."""
    x = np.random.default_rng(len(shape)).integers(-128, 128, shape).astype(np.int8)
    graph = softmax_graph(op, shape, 0.05, 0.8 if op is Op.SOFTMAX else 1.0)
    got = call_kernel(kb_lib, op, softmax_params(graph, graph.nodes[0]), x)
    assert np.array_equal(got, eval_node_int8(graph, graph.nodes[0], [x]))


@pytest.mark.parametrize("op", [Op.SOFTMAX, Op.LOG_SOFTMAX])
def test_in_place(kb_lib, op):
    x = case_rows(37, np.random.default_rng(5), 20)
    graph = softmax_graph(op, x.shape, 0.07)
    fields = softmax_params(graph, graph.nodes[0])
    assert np.array_equal(call_kernel(kb_lib, op, fields, x, in_place=True), reference(op, x, fields))


def test_rows_beyond_tflm():
    """What the kernel writes where TFLite Micro gives no answer: -128 for a SOFTMAX row summing to 512 or more, and
    log(4096) subtracted (the saturated Q12.19 sum) for a LOG_SOFTMAX row that overflows it."""
    x = np.zeros((1, 600), np.int8)
    graph = softmax_graph(Op.SOFTMAX, x.shape, 1e-3)
    assert (reference(Op.SOFTMAX, x, softmax_params(graph, graph.nodes[0])) == -128).all()
    x = np.zeros((1, 5000), np.int8)
    graph = softmax_graph(Op.LOG_SOFTMAX, x.shape, 1e-3)
    want = round(-np.log(4096) / (16 / 256)) + 127
    assert (reference(Op.LOG_SOFTMAX, x, softmax_params(graph, graph.nodes[0])) == want).all()


@pytest.mark.parametrize("op,depth", [(Op.SOFTMAX, 600), (Op.LOG_SOFTMAX, 5000)])
def test_kernel_beyond_tflm(kb_lib, op, depth):
    x = np.zeros((2, depth), np.int8)
    x[1, ::2] = -3
    check_case(kb_lib, op, x, 1e-3, 1.0)


@EXAMPLES
@given(st.sampled_from([Op.SOFTMAX, Op.LOG_SOFTMAX]), st.floats(-10, 1), st.floats(0.1, 3.0), st.integers(1, 300),
       st.integers(0, 2**32 - 1))
def test_random_scales_and_rows(kb_lib, op, log2_scale, beta, depth, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (int(rng.integers(1, 12)), depth))
    x = np.clip(x.max() - rng.geometric(rng.uniform(0.05, 0.9), x.shape) + 1, -128, 127).astype(np.int8)
    check_case(kb_lib, op, x, 2.0 ** log2_scale, beta if op is Op.SOFTMAX else 1.0, int(rng.integers(-128, 128)))
